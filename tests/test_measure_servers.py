"""measure.py against small scripted servers: what real servers taught it (issue 11, item 5).

Each case is a local server that sends exactly the bytes a real server sent (or its documented
format), at chosen times: a stream that arrives in one burst, a server that ignores the
length-forcing fields, llama.cpp's llama-server (usage only at the end, a token with an
incomplete UTF-8 sequence held back and sent with the next one, `timings`, slots, no /version).
The llama.cpp streams are synthetic fixtures (tests/fixtures/measure/README.md says from which
documented format). Every document is validated against schema/result.schema.json.
"""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest

from sparkbench import measure as M

from helpers import REPO

MEASURE = REPO / "scripts" / "measure.py"
FIX = REPO / "tests" / "fixtures" / "measure"
VALIDATOR = jsonschema.Draft202012Validator(json.loads((REPO / "schema" / "result.schema.json").read_text()))

Pieces = list[tuple[float, bytes]]  # (seconds after the request was taken up, body bytes)


class FakeServer:
    """An HTTP/1.1 server on a raw socket, one thread per connection.

    ``gets`` maps a path to (status, JSON object); ``stream(index, body)`` returns the response
    body pieces of the index-th POST, sent at their times (pieces with the same time go out in
    one sendall, so the client reads them at once). ``slots`` requests stream at the same time;
    the others wait for a free slot, as llama.cpp's slots do.
    """

    def __init__(self, gets: dict[str, tuple[int, Any]], stream: Callable[[int, dict], Pieces],
                 slots: int | None = None, chunked: bool = True) -> None:
        self.gets, self.stream, self.chunked = gets, stream, chunked
        self.slots = threading.Semaphore(slots) if slots else None
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, _, body = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split()[:2]
            length = 0
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            while len(body) < length:
                body += conn.recv(65536)
            if method == "GET":
                status, obj = self.gets.get(path, (404, {"error": {"code": 404, "message": "File Not Found"}}))
                data = json.dumps(obj).encode()
                conn.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: "
                             f"{len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
                return
            req = json.loads(body)
            with self.lock:
                index = len(self.bodies)
                self.bodies.append(req)
            if self.slots:
                self.slots.acquire()
            try:
                self._send_stream(conn, self.stream(index, req))
            except OSError:
                pass
            finally:
                if self.slots:
                    self.slots.release()

    def _send_stream(self, conn: socket.socket, pieces: Pieces) -> None:
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        head += "Transfer-Encoding: chunked\r\n" if self.chunked else ""
        conn.sendall((head + "Connection: close\r\n\r\n").encode())
        t0 = time.perf_counter()
        groups: list[tuple[float, bytes]] = []
        for t, b in pieces:
            if groups and groups[-1][0] == t:
                groups[-1] = (t, groups[-1][1] + self._frame(b))
            else:
                groups.append((t, self._frame(b)))
        for t, data in groups:
            delay = t0 + t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            conn.sendall(data)
        if self.chunked:
            conn.sendall(b"0\r\n\r\n")

    def _frame(self, b: bytes) -> bytes:
        return b"%x\r\n" % len(b) + b + b"\r\n" if self.chunked else b

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


@pytest.fixture
def fake_server():
    servers: list[FakeServer] = []

    def start(*args, **kwargs) -> FakeServer:
        srv = FakeServer(*args, **kwargs)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


def measure(args: list[str], out: Path, timeout: float = 120) -> tuple[int, dict | None, str]:
    """Run measure.py as a process; (exit status, validated document or None, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "SPARKBENCH_API_KEY"}
    p = subprocess.run([sys.executable, str(MEASURE), *args, "--telemetry", "off", "--out", str(out)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    doc = json.loads(out.read_text()) if out.exists() else None
    if doc is not None:
        errors = sorted(VALIDATOR.iter_errors(doc), key=str)
        assert not errors, "schema: " + "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])
    return p.returncode, doc, p.stderr


# ---- vLLM-shaped streams ---------------------------------------------------------------------------

OPENAI_GETS = {"/health": (200, {}), "/v1/models": (200, {"object": "list", "data": [
    {"id": "fake-model", "object": "model", "max_model_len": 4096}]})}


def _event(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def vllm_pieces(tokens: int, ttft: float = 0.03, step: float = 0.004, burst: bool = False,
                finish: str = "length", prompt_tokens: int = 20) -> Pieces:
    """A vLLM stream with continuous usage stats: role chunk, one token a chunk, usage chunk, [DONE].
    ``burst``: everything after the role chunk in one write at ``ttft`` (what transformers serve did)."""
    def chunk(delta: dict, n: int, fin: str | None = None) -> dict:
        return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": fin}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}}
    out: Pieces = [(0.0, _event(chunk({"role": "assistant", "content": ""}, 0)))]
    for j in range(tokens):
        t = ttft if burst else ttft + j * step
        out.append((t, _event(chunk({"content": f" t{j}"}, j + 1, finish if j == tokens - 1 else None))))
    t_end = out[-1][0]
    out.append((t_end, _event({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model",
                               "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                                                        "total_tokens": prompt_tokens + tokens}})))
    out.append((t_end, b"data: [DONE]\n\n"))
    return out


@pytest.mark.sim
def test_burst_run_is_re_run_and_every_attempt_is_kept(fake_server, tmp_path: Path) -> None:
    """Run 1 arrives in one read (no decode figure): a 4th run is made so 3 are valid. The others
    stream a token every 20 ms (0.5 s a run), so that a loaded machine does not read one in one read."""
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(24, step=0.02, burst=(i == 0)))
    rc, doc, stderr = measure(["--base-url", srv.url, "--runs", "3", "--warmup", "0", "--concurrency", "none",
                               "--output-tokens", "24"], tmp_path / "r.json")
    assert rc == 0, stderr
    s = doc["single"]
    assert (s["requested_runs"], s["attempted_runs"], s["valid_runs"], s["n"]) == (3, 4, 3, 3)
    first = s["runs"][0]
    assert first["decode_tok_s"] is None and first["valid"] is False
    assert "arrived in one read" in first["decode_reason"] and first["ttft_s"] > 0
    assert all(r["valid"] and r["decode_source"] == "usage" for r in s["runs"][1:])
    decs = sorted(r["decode_tok_s"] for r in s["runs"][1:])
    assert s["decode_tok_s_median"] == decs[1] and s["decode_tok_s_min"] == decs[0] and s["decode_tok_s_max"] == decs[2]
    assert "decode_reason" not in s  # a later run gave a figure: no stale reason
    assert [r["attempt"] for r in s["runs"]] == [0, 1, 2, 3]
    assert "re-running until 3 are valid" in stderr and "single re-run 1" in stderr
    assert doc["warnings"] == []


@pytest.mark.sim
def test_every_run_a_burst_stops_at_twice_the_runs_with_a_reason(fake_server, tmp_path: Path) -> None:
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(24, burst=True))
    rc, doc, stderr = measure(["--base-url", srv.url, "--runs", "2", "--warmup", "0", "--concurrency", "none",
                               "--output-tokens", "24"], tmp_path / "r.json")
    assert rc == 0, stderr
    s = doc["single"]
    assert (s["attempted_runs"], s["valid_runs"], s["n"]) == (4, 0, 0) and len(srv.bodies) == 4
    assert s["decode_tok_s_median"] is None and "arrived in one read" in s["decode_reason"]
    w = [x for x in doc["warnings"] if x["code"] == "single_runs_short"]
    assert len(w) == 1 and (w[0]["valid"], w[0]["attempted"], w[0]["requested"]) == (0, 4, 2)
    assert stderr.count("WARNING: single stream: 0 valid of 4") == 1


@pytest.mark.sim
def test_every_request_of_a_wave_gets_a_figure_or_a_reason(fake_server, tmp_path: Path) -> None:
    """One request of a wave of 4 arrives in one read: a reason for it, a figure for each of the others
    (a token every 20 ms), ITL from the streams with gaps. A loaded machine can still read another
    stream in one read (c22 read one of 92 ms so): that one then says so, and the counts follow."""
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(24, step=0.02, burst=(i == 3)))  # 0: single, 1-4: wave
    rc, doc, stderr = measure(["--base-url", srv.url, "--runs", "1", "--warmup", "0", "--concurrency", "4",
                               "--output-tokens", "24"], tmp_path / "r.json")
    assert rc == 0, stderr
    p = doc["parallel"][0]
    assert len(p["per_stream"]) == 4 and [x["request"] for x in p["per_stream"]] == [0, 1, 2, 3]
    for x in p["per_stream"]:
        assert (x["decode_tok_s"] is not None) != ("decode_reason" in x)
        assert x["decode_tok_s"] is not None or "arrived in one read" in x["decode_reason"]
    # the burst (the server's fourth request, whichever stream that is) never has a figure
    n = sum(x["decode_tok_s"] is not None for x in p["per_stream"])
    assert 1 <= n <= 3
    assert p["per_stream_n"] == n and len(p["per_stream_decode_tok_s"]) == n
    assert p["itl_streams"] == n and p["itl_s"]["p50"] is not None
    assert f"{4 - n} of 4 completed streams" in p["itl_reason"]
    assert p["waves_observed"] == 1 and p["queued_requests"] == 0 and p["combined_tok_s"] > 0
    assert f"{4 - n} of 4 streams have no decode figure" in stderr


@pytest.mark.sim
def test_server_ignoring_the_forcing_fields_is_said_once_and_short_streams_are_errors(fake_server,
                                                                                      tmp_path: Path) -> None:
    """The server accepts min_tokens/ignore_eos but stops after 10 tokens (finish_reason stop)."""
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(10, finish="stop"))
    rc, doc, stderr = measure(["--base-url", srv.url, "--runs", "2", "--warmup", "1", "--concurrency", "3",
                               "--output-tokens", "20"], tmp_path / "r.json")
    assert rc == 0, stderr
    assert srv.bodies[0]["min_tokens"] == 20 and srv.bodies[0]["ignore_eos"] is True
    short = [e for e in doc["errors"] if "length not forced" in e["message"]]
    assert [(e["phase"], e["request"]) for e in short] == [("single", 0), ("single", 1), ("parallel_3", 0),
                                                           ("parallel_3", 1), ("parallel_3", 2)]
    assert all("asked for 20 tokens, server generated 10" in e["message"] for e in short)
    w = [x for x in doc["warnings"] if x["code"] == "length_not_forced"]
    assert len(w) == 1 and w[0]["requests"] == 5 and "ignored the length-forcing fields" in w[0]["message"]
    assert stderr.count("WARNING: the server accepted but ignored") == 1
    assert doc["parallel"][0]["length_ok"] is False and doc["single"]["valid_runs"] == 2


@pytest.mark.sim
def test_speed_prompts_have_one_length_and_the_warmup_is_at_it(fake_server, tmp_path: Path) -> None:
    """The prompts differ (unique tag) but have the same form; the server's prompt_tokens is
    reported per run and checked against the warm-up's."""
    lengths = iter([31, 31, 31, 33])

    def stream(i: int, body: dict) -> Pieces:
        return vllm_pieces(8, prompt_tokens=next(lengths))
    srv = fake_server(OPENAI_GETS, stream)
    rc, doc, _ = measure(["--base-url", srv.url, "--runs", "3", "--warmup", "1", "--concurrency", "none",
                          "--output-tokens", "8"], tmp_path / "r.json")
    assert rc == 0
    prompts = [b["messages"][0]["content"] for b in srv.bodies]
    assert len(set(prompts)) == 4 and len({len(p) for p in prompts}) == 1
    assert len({p.split(".")[1:][0] for p in prompts}) == 1  # the same instruction after the tag
    s = doc["single"]
    assert s["warmup_prompt_tokens"] == 31 and [r["prompt_tokens"] for r in s["runs"]] == [31, 31, 33]
    assert s["prompt_tokens_uniform"] is False and s["prompt_tokens"] is None
    assert [w["code"] for w in doc["warnings"]] == ["prompt_lengths_differ"]


@pytest.mark.unit
def test_speed_prompt_tags_are_unique_digit_units() -> None:
    rng = random.Random(5)
    a, b = M.speed_prompt(rng), M.speed_prompt(rng)
    assert a != b and len(a) == len(b)
    tag = a.split(".")[0].removeprefix("Request ")
    assert len(tag.split(" ")) == M.SPEED_TAG_DIGITS and all(len(d) == 1 and d.isdigit() for d in tag.split(" "))


@pytest.mark.unit
def test_token_counted_after_the_last_content_chunk_is_said_as_observed() -> None:
    pieces = vllm_pieces(6)
    # the server counts one more token in the final usage than the last content chunk delivered
    pieces[-2] = (pieces[-2][0], _event({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 7,
                                                                   "total_tokens": 27}}))
    raw = M.RawStream(t_start=0.0, status=200, clean_end=True, headers={})
    for t, b in pieces:
        raw.pieces.append(b)
        raw.times.append(1.0 + t)
    d = M.decode_rate(M.parse_sse(raw))
    assert d.source == "usage" and d.first_chunk_tokens == 1 and not d.first_inferred
    assert d.note == "the server counted 1 token(s) after the last content chunk that produced no content"
    assert d.tok_s == pytest.approx(5 / (5 * 0.004))


@pytest.mark.unit
@pytest.mark.parametrize("spans,waves,queued", [
    ([], (0), 0),
    ([(0.1, 1.0), (0.1, 1.1), (0.2, 1.0)], 1, 0),
    ([(0.1, 1.0), (0.1, 1.0), (1.05, 2.0), (1.1, 2.1)], 2, 2),
    ([(0.03, 0.03), (0.031, 0.2), (0.032, 0.21)], 1, 0),  # a burst that ended early frees no slot
    ([(0.1, 0.105), (0.11, 1.0), (0.12, 1.0), (0.1, 1.0)], 1, 0),  # nor does a short stream
    ([(0.1, 1.0), (1.1, 2.0), (2.1, 3.0), (0.1, 3.0)], 3, 2),
])
def test_count_waves(spans, waves, queued) -> None:
    assert M.count_waves(spans) == (waves, queued)


# ---- result file mode, hardware profile ------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_result_file_respects_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        M.write_out(str(tmp_path / "r.json"), {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == mode
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


@pytest.mark.sim
def test_bad_hardware_name_is_a_clear_error(tmp_path: Path) -> None:
    rc, doc, stderr = measure(["--base-url", "http://127.0.0.1:9", "--hardware", "dgx-sprak"], tmp_path / "r.json")
    last = stderr.strip().splitlines()[-1]
    assert rc == 2 and doc is None
    assert "argument --hardware" in last and "'dgx-sprak'" in last and "available: dgx-spark" in last


@pytest.mark.sim
def test_hardware_file_that_is_not_a_profile_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "hw.json"
    bad.write_text('{"name": "x"}')
    rc, _, stderr = measure(["--base-url", "http://127.0.0.1:9", "--hardware", str(bad)], tmp_path / "r.json")
    assert rc == 2 and "argument --hardware" in stderr and "memory_bandwidth_gbps" in stderr
    rc, _, stderr = measure(["--base-url", "http://127.0.0.1:9", "--hardware", "x", "--profiles-dir",
                             str(tmp_path / "nope")], tmp_path / "r.json")
    assert rc == 2 and "argument --profiles-dir" in stderr


@pytest.mark.sim
def test_hand_run_carries_the_hardware_profile(fake_server, tmp_path: Path) -> None:
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(8))
    args = ["--base-url", srv.url, "--runs", "1", "--warmup", "0", "--concurrency", "none", "--output-tokens", "8"]
    rc, doc, _ = measure([*args, "--hardware", "dgx-spark"], tmp_path / "a.json")
    assert rc == 0
    # the checkout's bandwidth probe ran before and after the run; without torch it says why
    bw = doc["protocol"]["bandwidth"]
    assert bw["command"].endswith("sparkbench/bandwidth/probe.py --device cuda") and bw["after"] is not None
    assert bw["gbps"] is not None or "torch" in bw["reason"], bw
    spark = json.loads((REPO / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    assert doc["profile"]["hardware"] == spark and doc["profile"]["model"] is None
    assert doc["profile"]["hardware_file"] == str(REPO / "sparkbench/data/profiles/hardware/dgx-spark.json")
    assert doc["settings"]["hardware"] == "dgx-spark" and doc["settings"]["profiles_dir"] == str(
        REPO / "sparkbench/data/profiles")
    assert [w["code"] for w in doc["warnings"]] == ["no_model_profile"]
    # a profiles dir of one's own, with a model profile for the served model: roofline inputs complete
    (tmp_path / "p" / "hardware").mkdir(parents=True)
    (tmp_path / "p" / "models").mkdir()
    (tmp_path / "p" / "hardware" / "box.json").write_text('{"name": "box", "memory_bandwidth_gbps": 100}')
    (tmp_path / "p" / "models" / "fake-model.json").write_text('{"active_params_b": 1.0, "bits_per_weight": 8}')
    rc, doc, _ = measure([*args, "--hardware", "box", "--profiles-dir", str(tmp_path / "p")], tmp_path / "b.json")
    assert rc == 0 and doc["warnings"] == []
    assert doc["profile"]["hardware"]["memory_bandwidth_gbps"] == 100
    assert doc["profile"]["model"] == {"active_params_b": 1.0, "bits_per_weight": 8}
    # and a file path
    rc, doc, _ = measure([*args, "--hardware", str(tmp_path / "p" / "hardware" / "box.json")], tmp_path / "c.json")
    assert rc == 0 and doc["profile"]["hardware"]["name"] == "box"


@pytest.mark.sim
def test_a_hand_run_probes_the_bandwidth_before_and_after_with_the_command_given(fake_server, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """--bandwidth-probe CMD: here the simulator's stand-in (a unit at efficiency 0.89 reads 0.89 x
    273 x 0.85 GB/s), in protocol.bandwidth with the probe after it; 'off' runs none."""
    srv = fake_server(OPENAI_GETS, lambda i, body: vllm_pieces(8))
    args = ["--base-url", srv.url, "--runs", "1", "--warmup", "0", "--concurrency", "none", "--output-tokens", "8"]
    monkeypatch.setenv("VLLM_SIM_EFFICIENCY", "0.89")
    monkeypatch.setenv("VLLM_SIM_PROFILES_DIR", str(REPO / "profiles"))
    stand_in = f"{sys.executable} {REPO / 'scripts' / 'vllm_sim'} bandwidth-probe"
    rc, doc, stderr = measure([*args, "--bandwidth-probe", stand_in], tmp_path / "a.json")
    assert rc == 0, stderr
    bw = doc["protocol"]["bandwidth"]
    assert bw["method"] == "simulated" and bw["gbps"] == pytest.approx(0.89 * 273 * 0.85, rel=0.05), bw
    assert bw["after"]["gbps"] == pytest.approx(bw["gbps"], rel=0.05) and bw["drop"] is None
    assert "bandwidth probe (before the run)" in stderr and "bandwidth probe (after the run)" in stderr
    rc, doc, _ = measure([*args, "--bandwidth-probe", "off", "--hardware", "dgx-spark"], tmp_path / "b.json")
    assert rc == 0 and "bandwidth" not in doc["protocol"]
    rc, doc, _ = measure([*args, "--bandwidth-probe", "/no/such/probe"], tmp_path / "c.json")
    assert rc == 0 and doc["protocol"]["bandwidth"]["gbps"] is None
    assert "did not run" in doc["protocol"]["bandwidth"]["reason"]


# ---- llama.cpp (synthetic streams in its documented format) ----------------------------------------


def _fixture(name: str) -> Pieces:
    data = json.loads((FIX / name).read_text(encoding="utf-8"))
    assert data["synthetic"] is True
    return [(p["t"], p["bytes"].encode("utf-8")) for p in data["pieces"]]


FINAL = "llamacpp_stream_final_timings.json"
PER_TOKEN = "llamacpp_stream_timings_per_token.json"


def _raw_from(pieces: Pieces) -> "M.RawStream":
    raw = M.RawStream(t_start=10.0, status=200, clean_end=True, headers={"content-type": "text/event-stream"})
    for t, b in pieces:
        raw.pieces.append(b)
        raw.times.append(10.0 + t)
    return raw


@pytest.mark.unit
def test_llamacpp_final_timings_are_used_and_said() -> None:
    r = M.parse_sse(_raw_from(_fixture(FINAL)))
    assert r.completion_tokens == 256 and r.carrying == 254 and r.system_fingerprint == "b6123-abcdef"
    assert "🙂" in r.content and "é" in r.content and r.error is None and r.done
    d = M.decode_rate(r)
    assert d.source == "server_timings" and d.tok_s == pytest.approx(255 / 1.275)  # (predicted_n - 1) / predicted_ms
    assert d.first_chunk_tokens == 1 and d.first_inferred and d.first_max == 3
    assert "256 tokens in 254 content chunks" in d.note
    assert d.server["predicted_per_second"] == pytest.approx(200.784314)
    assert M.itl_samples(r) is None and "256 tokens came in 254 content chunks" in M.itl_reason(r)


@pytest.mark.unit
def test_llamacpp_without_timings_gives_the_bounded_figure() -> None:
    pieces = []
    for t, b in _fixture(FINAL):
        if b.startswith(b"data: {"):
            obj = json.loads(b[6:])
            obj.pop("timings", None)
            b = _event(obj)
        pieces.append((t, b))
    d = M.decode_rate(M.parse_sse(_raw_from(pieces)))
    span = 255 * 0.005
    assert d.source == "chunk_count_bounded" and d.server is None
    assert d.bound == {"low": pytest.approx(253 / span), "high": pytest.approx(255 / span), "missing_chunks": 2}
    assert d.tok_s == pytest.approx(255 / span) and d.first_max == 3


@pytest.mark.unit
def test_llamacpp_timings_per_token_give_exact_counts() -> None:
    r = M.parse_sse(_raw_from(_fixture(PER_TOKEN)))
    d = M.decode_rate(r)
    assert d.source == "timings_per_token" and d.first_chunk_tokens == 1 and not d.first_inferred
    assert d.tok_s == pytest.approx(255 / (255 * 0.005)) and d.bound is None
    assert d.server["decode_tok_s"] == pytest.approx(200.0)
    itl = M.itl_samples(r)
    assert len(itl) == 255 and max(itl) == pytest.approx(0.005)  # the held token's gap is shared by 2 tokens


def llamacpp_gets(props: bool) -> dict[str, tuple[int, Any]]:
    gets: dict[str, tuple[int, Any]] = {
        "/health": (200, {"status": "ok"}),
        "/v1/models": (200, {"object": "list", "data": [{
            "id": "tiny-llama.gguf", "object": "model", "created": 1764547200, "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": 32768, "n_ctx_train": 4096, "n_ctx": 4096, "n_embd": 128,
                     "n_params": 4500000, "size": 9000000}}]}),
        "/metrics": (501, {"error": {"code": 501, "message": "This server does not support metrics endpoint.",
                                     "type": "not_supported_error"}}),
    }
    if props:
        gets["/props"] = (200, {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4,
                                "model_path": "/models/tiny-llama.gguf"})
    else:
        gets["/slots"] = (200, [{"id": i, "n_ctx": 4096, "is_processing": False} for i in range(4)])
    return gets


@pytest.mark.sim
@pytest.mark.parametrize("props,per_token", [(True, True), (False, False)],
                         ids=["props-timings-per-token", "slots-final-timings"])
def test_llamacpp_server_end_to_end(fake_server, tmp_path: Path, props: bool, per_token: bool) -> None:
    """4 slots, 8 parallel requests: the slots read from the server and the waves in the result;
    version from system_fingerprint, context length from meta.n_ctx; a figure for every run and stream.

    The warning follows from the slots (8 requests > 4 slots). The wave and queue counts are read
    from the client's timestamps, which a loaded machine can shift (a request sent late starts
    after another finished; a stream read late looks longer), so the test holds the counts to each
    other (every wave after the first starts with a queued request; the first request is never
    queued) and to the warning's words; stats.count_waves' own tests pin the counting."""
    final, per_tok = _fixture(FINAL), _fixture(PER_TOKEN)
    srv = fake_server(llamacpp_gets(props),
                      lambda i, body: per_tok if (per_token and body.get("timings_per_token")) else final, slots=4)
    rc, doc, stderr = measure(["--base-url", srv.url + "/v1", "--runs", "3", "--warmup", "1", "--concurrency", "8",
                               "--output-tokens", "256"], tmp_path / "r.json")
    assert rc == 0, stderr
    srvdoc = doc["server"]
    assert srvdoc["version"] == "b6123-abcdef" and srvdoc["version_source"] == "system_fingerprint"
    assert srvdoc["max_model_len"] == 4096 and srvdoc["max_model_len_source"] == "/v1/models meta.n_ctx"
    assert srvdoc["slots"] == 4 and srvdoc["slots_source"] == ("/props total_slots" if props else "/slots")
    assert all(b.get("timings_per_token") is True for b in srv.bodies)
    s = doc["single"]
    assert (s["attempted_runs"], s["valid_runs"]) == (3, 3) and doc["status"] == "complete"
    for r in s["runs"]:
        assert r["server_decode_tok_s"] == pytest.approx(200.0) and r["content_chunks"] == 254
        if per_token:
            assert r["decode_source"] == "timings_per_token" and r["first_chunk_tokens_inferred"] is False
            assert r["decode_tok_s"] == pytest.approx(200.0, rel=0.15)  # client clock, server sleeps
        else:
            assert r["decode_source"] == "server_timings" and r["decode_tok_s"] == pytest.approx(200.0)
            assert r["first_chunk_tokens_inferred"] is True and r["first_chunk_tokens_max"] == 3
            assert "256 tokens in 254 content chunks" in r["chunk_note"]
    assert s["decode_sources"] == (["timings_per_token"] if per_token else ["server_timings"])
    p = doc["parallel"][0]
    assert p["completed"] == 8 and p["per_stream_n"] == 8 and len(p["per_stream"]) == 8
    waves, queued = p["waves_observed"], p["queued_requests"]
    assert p["server_slots"] == 4 and waves >= 1 and waves - 1 <= queued <= 7
    if per_token:
        assert p["itl_streams"] == 8 and p["itl_s"]["p50"] is not None and "itl_reason" not in p
    else:
        assert p["itl_streams"] == 0 and p["itl_s"]["p50"] is None and "8 of 8 completed streams" in p["itl_reason"]
    warned = [w for w in doc["warnings"] if w["code"] == "parallel_waves"]
    assert len(warned) == 1 and warned[0]["waves"] == waves and "4 slots" in warned[0]["message"]
    assert f"ran as {waves} waves ({queued} of 8 requests got their first token after another" in warned[0]["message"]
    assert doc["errors"] == [] and doc["spec_decode"] is None and "501" in doc["spec_decode_reason"]


class _CountingGets(dict):
    """GET answers that count how often each path was asked for."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.asked: dict[str, int] = {}

    def get(self, path, default=None):
        self.asked[path] = self.asked.get(path, 0) + 1
        return super().get(path, default)


@pytest.mark.sim
def test_metrics_without_decode_counters_are_not_scraped_around_every_run(fake_server, tmp_path: Path) -> None:
    """A server whose /metrics has no vllm:request_decode_time_seconds (llama.cpp, another server)
    is asked for it once, not before and after every single-stream run: the /metrics reads do
    not grow with --runs."""
    asked = []
    for runs in ("2", "6"):
        gets = _CountingGets(OPENAI_GETS)
        gets["/metrics"] = (200, "llamacpp:tokens_predicted_total 10")
        srv = fake_server(gets, lambda i, body: vllm_pieces(24))
        rc, doc, stderr = measure(["--base-url", srv.url, "--runs", runs, "--warmup", "0", "--concurrency", "none",
                                   "--output-tokens", "24"], tmp_path / f"r{runs}.json")
        assert rc == 0, stderr
        assert doc["single"]["valid_runs"] == int(runs)
        assert all("server_timings" not in r for r in doc["single"]["runs"])
        asked.append(gets.asked.get("/metrics", 0))
    assert asked[0] == asked[1] and asked[0] >= 1, asked
