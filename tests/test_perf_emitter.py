"""Unit tests of perf/sse_emitter.py (the load source of the client-capacity benchmark).

The openai client is the oracle for the chunk format: it parses what the emitter streams over
real HTTP on loopback. No timing assertions (speed goals are checked by `make perf`).
"""

from __future__ import annotations

import json
import threading

import openai
import pytest

from perf import sse_emitter


def _events(frames: list[bytes]) -> list[str]:
    """Decode HTTP chunked frames back into SSE data payloads."""
    out = []
    for fr in frames:
        rest = fr
        while rest:
            size_hex, rest = rest.split(b"\r\n", 1)
            size = int(size_hex, 16)
            if size == 0:
                break
            data, rest = rest[:size], rest[size + 2:]
            assert data.startswith(b"data: ") and data.endswith(b"\n\n")
            out.append(data[6:-2].decode())
    return out


@pytest.mark.unit
@pytest.mark.parametrize("n,k", [(1, 1), (10, 1), (10, 3), (256, 4)])
def test_render_stream_counts_and_usage(n: int, k: int) -> None:
    events = _events(sse_emitter.render_stream("m", n, k, prompt_tokens=7, request_id="abc"))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    role, tokens, usage_only = chunks[0], chunks[1:-1], chunks[-1]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(tokens) == -(-n // k)  # ceil
    done = [c["usage"]["completion_tokens"] for c in tokens]
    assert done == sorted(done) and done[-1] == n
    # Each chunk's text holds exactly the tokens its usage delta says it holds.
    prev = 0
    for c, d in zip(tokens, done):
        assert c["choices"][0]["delta"]["content"].count(sse_emitter.WORD) == d - prev
        assert c["usage"]["total_tokens"] == 7 + d
        prev = d
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens[:-1])
    assert usage_only["choices"] == [] and usage_only["usage"]["completion_tokens"] == n
    assert all(c["id"] == "chatcmpl-abc" and c["object"] == "chat.completion.chunk" for c in chunks)


@pytest.mark.unit
def test_render_stream_rejects_bad_shape() -> None:
    with pytest.raises(ValueError):
        sse_emitter.render_stream("m", 0, 1, 1)
    with pytest.raises(ValueError):
        sse_emitter.render_stream("m", 5, 0, 1)


@pytest.fixture()
def emitter():
    em = sse_emitter.Emitter("emitter-model", sse_emitter.Pacing(rate=0, tokens_per_chunk=3))
    srv = sse_emitter.EmitterServer(("127.0.0.1", 0), em)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    yield srv, em
    srv.shutdown()
    srv.server_close()
    th.join(5)


@pytest.mark.sim
@pytest.mark.parametrize("rate", [0, 20_000])
def test_openai_client_parses_stream_and_log_records_sends(emitter, rate: int) -> None:
    srv, em = emitter
    em.pacing.rate = rate
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    client = openai.OpenAI(base_url=url + "/v1", api_key="x")
    text, last_usage, n_chunks = "", None, 0
    for chunk in client.chat.completions.create(
            model="emitter-model", messages=[{"role": "user", "content": "hi"}], max_tokens=100,
            stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}):
        n_chunks += 1
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        last_usage = chunk.usage
    assert last_usage is not None and last_usage.completion_tokens == 100
    assert text.count(sse_emitter.WORD) == 100
    assert n_chunks == 1 + 34 + 1  # role + ceil(100/3) token chunks + usage-only
    log = json.loads(__import__("urllib.request").request.urlopen(url + "/emitter/requests").read())
    assert len(log) == 1 and log[0]["chunks"] == 34 and log[0]["completion_tokens"] == 100
    assert log[0]["t_last"] >= log[0]["t_first"] > 0
    if rate:
        # Paced: one send timestamp per token chunk, never before its deadline.
        full = json.loads(__import__("urllib.request").request.urlopen(
            url + "/emitter/requests?full=1").read())
        sends = full[0]["sends"]
        assert len(sends) == 34 and sends == sorted(sends)
        assert log[0]["rate"] == rate and log[0]["send_rate"] > 0


@pytest.mark.sim
def test_non_stream_and_unknown_path(emitter) -> None:
    srv, _ = emitter
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", api_key="x")
    resp = client.chat.completions.create(model="emitter-model", max_tokens=5,
                                          messages=[{"role": "user", "content": "hi"}])
    assert resp.usage.completion_tokens == 5
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="emitter-model", input="x")
