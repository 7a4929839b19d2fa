"""The real-vLLM image sparkbench/vllm-cpu (scripts/build_vllm_cpu_image.sh): one real server.

Uses the session's real-vLLM container (tests/conftest.py `real_vllm`, shared with the
simulator's conformance test), started exactly as a user would, with no other flag or variable
(`docker run -p 127.0.0.1:P:8000 IMAGE sparkbench/tiny-llama --max-model-len 2048`), and checks what it is (vLLM 0.32.0 on torch 2.13.0+cpu, nothing of the simulator) and
what a client sees (/version, /v1/models, a streamed chat completion with per-chunk usage).
Skipped when Docker or the image is missing. Start-up is 1-2.5 minutes on a busy 2-core machine
(torch.compile of the model on first start).
"""
from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from sparkbench.engine_log import parse_engine_log

from conftest import REAL_VLLM_MAX_MODEL_LEN as MAX_MODEL_LEN
from conftest import REAL_VLLM_MODEL as MODEL
from conftest import real_vllm_skip_reason

_REASON = real_vllm_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
pytestmark = [pytestmark, pytest.mark.real]


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read() or b"null")


@pytest.fixture(scope="module")
def server(real_vllm):
    """The session's real-vLLM container, started with the plain command (tests/conftest.py)."""
    return real_vllm


def test_image_contents(server):
    """Versions of the wheel's vLLM and torch, the `vllm` command, nothing of the simulator."""
    script = (
        "python3 -c 'import vllm, torch; print(vllm.__version__, torch.__version__)' 2>/dev/null; "
        "command -v vllm; "
        "ls /opt/sparkbench; "
        "python3 -c 'import importlib.util as u; print(\"vllm_sim:\", u.find_spec(\"vllm_sim\"))'; "
        "printf 'env: %s %s %s\\n' \"$HF_HUB_CACHE\" \"$HF_HUB_OFFLINE\" \"$TRANSFORMERS_OFFLINE\"; "
        "cat \"$HF_HUB_CACHE/models--sparkbench--tiny-llama/refs/main\"; echo"
    )
    out = subprocess.run(["docker", "exec", server.name, "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "0.32.0 2.13.0+cpu", out.stdout + out.stderr
    assert lines[1] == "/opt/venv/bin/vllm"
    assert "vllm_sim: None" in lines
    assert not any("vllm_sim" in ln or ln == "scripts" for ln in lines if not ln.startswith("vllm_sim:"))
    env = next(ln for ln in lines if ln.startswith("env: "))
    hub_cache, offline, tf_offline = env.split()[1:]
    assert not hub_cache.startswith("/root/.cache/huggingface"), "the role's cache mount would hide the model"
    assert (offline, tf_offline) == ("1", "1")
    assert len(lines[-1]) == 40  # refs/main holds the snapshot revision


def test_plain_run_needs_no_shm_flag(server):
    """Served without --ipc host/--shm-size: the entrypoint avoids vLLM's /dev/shm rings."""
    logs = server.logs(2000)
    assert "Insufficient space in /dev/shm" not in logs
    assert "Starting vLLM server" in logs or "Application startup complete" in logs
    # the kernels vLLM chose, read off the live log (sparkbench.engine_log; fixture: tests/fixtures/engine_log)
    kernels = parse_engine_log(logs)
    assert (kernels["kv_cache_tokens"] and kernels["max_concurrency"] and kernels["kv_cache_gib"]
            and kernels["engine_init_s"] is not None and kernels["cuda_graphs"] is False), kernels


def test_version_is_real(server):
    status, body = _get(server.base_url + "/version")
    assert status == 200
    assert body == {"version": "0.32.0"} or (body.get("version") == "0.32.0" and "simulated" not in body)
    assert "simulated" not in body


def test_models_lists_tiny_llama(server):
    status, body = _get(server.base_url + "/v1/models")
    assert status == 200
    ids = [m["id"] for m in body["data"]]
    assert ids == [MODEL]
    assert body["data"][0]["max_model_len"] == MAX_MODEL_LEN


def test_stream_with_continuous_usage(server):
    n = 24
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something about Sparks."}],
        "max_tokens": n, "min_tokens": n, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    req = urllib.request.Request(server.base_url + "/v1/chat/completions", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    data_lines = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200
        assert resp.headers.get("Content-Type", "").startswith("text/event-stream")
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                data_lines.append(line[len("data: "):])
    assert data_lines[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data_lines[:-1]]
    assert chunks, "no chunks before [DONE]"
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    for c in chunks:
        assert c["model"] == MODEL
        assert c.get("usage") is not None, f"chunk without usage: {c}"
        assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(c["usage"])
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts), "completion_tokens must not decrease along the stream"
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == n
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert finishes == ["length"]
