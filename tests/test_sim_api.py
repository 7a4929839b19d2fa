"""The simulator's OpenAI-compatible API, checked with the real openai client over HTTP."""
from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
import zlib

import openai
import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.sim

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
FAST = {"VLLM_SIM_RATE": "1500", "VLLM_SIM_SHORT_THINKING": "1"}
QUALITY = json.loads((REPO_ROOT / "sparkbench/data/prompts/quality.json").read_text(encoding="utf-8"))


def http(url: str, body: dict | None = None, headers: dict | None = None, timeout: float = 30):
    """(status, parsed JSON or text) for GET (body None) or POST."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw.decode()


def client(sim, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


def png(rgb: tuple[int, int, int], size: int = 64) -> bytes:
    """A PNG: a solid square of ``rgb`` on white, rows with mixed filter types (0, 1, 2)."""
    rows = []
    prev = None
    for y in range(size):
        line = [(rgb if size // 4 <= x < 3 * size // 4 and size // 4 <= y < 3 * size // 4 else (255, 255, 255))
                for x in range(size)]
        flat = bytes(c for p in line for c in p)
        f = y % 3
        if f == 0 or prev is None:
            enc = b"\x00" + flat
        elif f == 1:
            enc = b"\x01" + bytes((flat[i] - (flat[i - 3] if i >= 3 else 0)) & 0xFF for i in range(len(flat)))
        else:
            enc = b"\x02" + bytes((flat[i] - prev[i]) & 0xFF for i in range(len(flat)))
        prev = flat
        rows.append(enc)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


def test_basic_endpoints(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096", "--max-model-len", "65536"], env=FAST)
    assert http(sim.base_url + "/version") == (200, {"version": "0.25.0", "simulated": True})
    with urllib.request.urlopen(sim.base_url + "/health") as r:
        assert r.status == 200 and r.read() == b""
    status, models = http(sim.base_url + "/v1/models")
    assert status == 200 and models["object"] == "list"
    assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 65536
    assert models["data"][0]["owned_by"] == "vllm"
    status, info = http(sim.base_url + "/sim/info")
    assert info["simulated"] is True and info["max_num_batched_tokens"] == 4096
    log = sim.log()
    assert "Model loading took" in log and f"Starting vLLM server on http://127.0.0.1:{sim.port}" in log


def test_stream_reasoning_usage_and_chunk_shapes(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096", "--reasoning-parser", "qwen3"], env=FAST)
    stream = client(sim).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me about GPUs."}], max_tokens=64, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    first = chunks[0]
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert first.usage.completion_tokens == 0
    token_chunks = [c for c in chunks if c.choices and c.choices[0].delta.role is None]
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning", None) or "" for c in token_chunks)
    content = "".join(c.choices[0].delta.content or "" for c in token_chunks)
    assert reasoning.strip() and content.strip()
    # continuous usage counts grow by exactly the tokens each chunk carries; the last chunk finishes.
    counts = [c.usage.completion_tokens for c in token_chunks]
    assert counts == sorted(counts) and counts[-1] == 64
    assert token_chunks[-1].choices[0].finish_reason == "length"
    final = chunks[-1]
    assert final.choices == [] and final.usage.completion_tokens == 64
    assert final.usage.completion_tokens_details.reasoning_tokens == 12   # short-thinking mode
    assert final.usage.prompt_tokens > 0


def test_enable_thinking_false_and_non_streaming(sim_factory):
    sim = sim_factory(args=["--reasoning-parser", "qwen3", "--max-num-batched-tokens", "4096"], env=FAST)
    c = client(sim)
    r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say something."}],
                                  max_tokens=200, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason == "stop"
    assert getattr(r.choices[0].message, "reasoning", None) is None
    assert r.usage.completion_tokens_details.reasoning_tokens == 0
    assert len(r.choices[0].message.content) > 20
    r2 = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say something."}], max_tokens=200)
    assert r2.usage.completion_tokens_details.reasoning_tokens == 12
    assert r2.choices[0].message.reasoning


def test_forced_lengths(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096"], env=FAST)
    c = client(sim)
    msgs = [{"role": "user", "content": "Hi"}]
    r = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=150, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 150 and r.choices[0].finish_reason == "length"
    r = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=300, extra_body={"min_tokens": 250})
    assert r.usage.completion_tokens == 250 and r.choices[0].finish_reason == "stop"
    r = c.chat.completions.create(model=MODEL, messages=msgs, max_completion_tokens=5)
    assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def test_errors_match_vllm(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096", "--max-model-len", "8192"], env=FAST)
    url = sim.base_url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "Hi"}]
    status, body = http(url, {"model": "nope/model", "messages": msgs})
    assert status == 404
    assert body["error"] == {"message": f"The model `nope/model` does not exist. Valid aliases: {MODEL}.",
                             "type": "NotFoundError", "param": "model", "code": 404}
    status, body = http(url, {"model": MODEL, "messages": msgs, "stream_options": {"include_usage": True}})
    assert status == 400 and body["error"]["message"] == (
        "Stream options can only be defined when `stream=True`. (parameter=stream_options)")
    status, body = http(url, {"model": MODEL, "messages": msgs, "max_tokens": 9000})
    assert status == 400 and body["error"]["message"] == (
        "max_tokens=9000 cannot be greater than max_model_len=8192. Please request fewer output tokens. "
        "(parameter=max_tokens, value=9000)")
    assert body["error"]["type"] == "BadRequestError"
    image_msg = lambda url_: [{"role": "user", "content": [{"type": "text", "text": "x"},
                                                            {"type": "image_url", "image_url": {"url": url_}}]}]
    status, body = http(url, {"model": MODEL, "messages": image_msg("data:image/png,abc")})
    assert status == 400 and body["error"]["message"] == "Only base64 data URLs are supported for now."
    status, body = http(url, {"model": MODEL, "messages": image_msg("data:image/png;base64")})
    assert status == 400 and "missing ',' separator." in body["error"]["message"]


def test_api_key(sim_factory):
    sim = sim_factory(args=["--api-key", "s3cret", "--max-num-batched-tokens", "4096"], env=FAST)
    assert http(sim.base_url + "/v1/models") == (401, {"error": "Unauthorized"})
    assert http(sim.base_url + "/health")[0] == 200          # only /v1... paths need the key
    status, body = http(sim.base_url + "/v1/models", headers={"Authorization": "Bearer s3cret"})
    assert status == 200
    with pytest.raises(openai.AuthenticationError):
        client(sim, "wrong").models.list()
    assert "s3cret" not in json.dumps(http(sim.base_url + "/sim/info")[1])


def test_served_model_name_and_connection_refused_before_load(sim_factory):
    sim = sim_factory(args=["--served-model-name", "qwen-fast", "--max-num-batched-tokens", "4096"],
                      env={**FAST, "VLLM_SIM_LOAD_SECONDS": "2.0"}, wait=False)
    import time
    time.sleep(0.8)
    with pytest.raises(urllib.error.URLError) as exc:
        urllib.request.urlopen(sim.base_url + "/health", timeout=2)
    assert "refused" in str(exc.value).lower()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            urllib.request.urlopen(sim.base_url + "/health", timeout=2)
            break
        except urllib.error.URLError:
            time.sleep(0.1)
    r = client(sim).chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert r.model == "qwen-fast"


def _ask(c, prompt: str, max_tokens: int = 2048) -> tuple[str, str | None, str]:
    r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens)
    return r.choices[0].message.content or "", r.choices[0].finish_reason, getattr(r.choices[0].message, "reasoning", None) or ""


def test_answer_book_correct_by_default(sim_factory):
    sim = sim_factory(args=["--reasoning-parser", "qwen3", "--max-num-batched-tokens", "4096"], env=FAST)
    c = client(sim)
    q = {item["id"]: item for item in QUALITY["questions"]}
    text, fin, reasoning = _ask(c, q["capital_50"]["prompt"])
    assert "東京" in text and len(text) <= 50 and fin == "stop" and reasoning
    text, _, _ = _ask(c, q["arithmetic"]["prompt"])
    assert text.endswith("760円")
    text, _, _ = _ask(c, q["free_text"]["prompt"])
    assert "富士山" in text and sum(ord(ch) > 0x3000 for ch in text) / len(text) > 0.5
    text, _, _ = _ask(c, q["code"]["prompt"])
    code = text.split("```python", 1)[1].split("```", 1)[0]
    ns: dict = {}
    exec(compile(code, "answer", "exec"), ns)            # our own answer book's code, not user input
    for a in q["code"]["check"]["asserts"]:
        exec(a, ns)


def test_answer_book_wrong_and_overthinking_knobs(sim_factory):
    sim = sim_factory(args=["--reasoning-parser", "qwen3", "--max-num-batched-tokens", "4096"],
                      env={**FAST, "VLLM_SIM_WRONG": "arithmetic", "VLLM_SIM_OVERTHINK": "capital_50"})
    c = client(sim)
    q = {item["id"]: item for item in QUALITY["questions"]}
    text, _, _ = _ask(c, q["arithmetic"]["prompt"])
    assert "760" not in text
    text, fin, reasoning = _ask(c, q["capital_50"]["prompt"], max_tokens=300)
    assert text == "" and fin == "length" and reasoning      # truncated: thinking ate the budget
    text, _, _ = _ask(c, q["free_text"]["prompt"])            # other questions unaffected
    assert "富士山" in text


def test_image_answer_comes_from_the_pixels(sim_factory):
    sim = sim_factory(args=["--reasoning-parser", "qwen3", "--max-num-batched-tokens", "4096"], env=FAST)
    c = client(sim)
    answers = {}
    for name in ("red", "blue", "yellow", "purple", "green", "orange"):
        rgb = tuple(QUALITY["image"]["colours"][name])
        url = "data:image/png;base64," + base64.b64encode(png(rgb)).decode()
        r = c.chat.completions.create(model=MODEL, max_tokens=512, messages=[{"role": "user", "content": [
            {"type": "text", "text": QUALITY["image"]["prompt"]}, {"type": "image_url", "image_url": {"url": url}}]}])
        answers[name] = r.choices[0].message.content.strip().lower()
    assert answers == {n: n for n in answers}


def test_completions_endpoint(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096"], env=FAST)
    c = client(sim)
    r = c.completions.create(model=MODEL, prompt="Once upon a time")
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"   # vLLM's default 16
    chunks = list(c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=40, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 40
    assert chunks[-2].choices[0].finish_reason == "length"
    assert "".join(ch.choices[0].text for ch in chunks[:-1]).strip()
