"""Fault modes (VLLM_SIM_FAULT_*): each one observable from outside, as a client would see it."""
from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import SIM_DIR, free_port

pytestmark = pytest.mark.sim

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
ARGS = ["--max-num-batched-tokens", "4096"]


def stream_tokens(sim, max_tokens: int, read_timeout: float = 10.0) -> tuple[int, str]:
    """Stream one forced generation with raw http.client; returns (tokens received, how it ended)."""
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=read_timeout)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Go"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    resp = conn.getresponse()
    got = 0
    try:
        while True:
            line = resp.readline()
            if not line:
                return got, "eof"
            if line.startswith(b"data: [DONE]"):
                return got, "done"
            if line.startswith(b"data: "):
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    got = chunk["usage"]["completion_tokens"]
    except (TimeoutError, OSError) as e:
        return got, "timeout" if "timed out" in str(e) else "broken"
    except http.client.IncompleteRead:
        return got, "broken"
    finally:
        conn.close()


def test_crash_at_start():
    env = {"VLLM_SIM_LOAD_SECONDS": "0.1", "VLLM_SIM_FAULT_CRASH_AT_START": "1"}
    import os
    p = subprocess.run([sys.executable, str(SIM_DIR), "serve", MODEL, "--port", str(free_port()), *ARGS],
                       capture_output=True, text=True, env={**os.environ, **env}, timeout=30)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == ("RuntimeError: Engine core initialization failed. See root cause "
                                                 "above. Failed core proc(s): {}")
    assert "Traceback" not in p.stderr and "Starting vLLM server" not in p.stdout


def test_crash_after_n_tokens_kills_the_process_mid_stream(sim_factory):
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_RATE": "300", "VLLM_SIM_FAULT_CRASH_AFTER_TOKENS": "40"})
    got, how = stream_tokens(sim, 200)
    assert how in ("eof", "broken") and 1 <= got <= 40
    sim.proc.wait(timeout=10)
    assert sim.proc.returncode == -signal.SIGKILL
    assert "died unexpectedly" in sim.log()


def test_stall_after_n_tokens_keeps_the_connection_open(sim_factory):
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_RATE": "300", "VLLM_SIM_FAULT_STALL_AFTER_TOKENS": "30"})
    got, how = stream_tokens(sim, 200, read_timeout=1.5)
    assert how == "timeout" and 20 <= got <= 30
    assert sim.proc.poll() is None          # alive, just not producing


def test_http_500_fraction(sim_factory):
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_RATE": "2000", "VLLM_SIM_FAULT_HTTP500_FRACTION": "0.5",
                                      "VLLM_SIM_SEED": "3"})
    codes = []
    for _ in range(40):
        req = urllib.request.Request(sim.base_url + "/v1/chat/completions", data=json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}).encode(),
            headers={"content-type": "application/json"})
        try:
            codes.append(urllib.request.urlopen(req, timeout=10).status)
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            assert body["error"]["type"] == "InternalServerError" and body["error"]["code"] == 500
            codes.append(e.code)
    assert set(codes) == {200, 500} and 8 <= codes.count(500) <= 32


def test_slow_load_refuses_connections_until_loaded(sim_factory):
    t0 = time.monotonic()
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_LOAD_SECONDS": "0.2", "VLLM_SIM_FAULT_SLOW_LOAD_SECONDS": "2.5"},
                      wait=False)
    time.sleep(1.0)
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(sim.base_url + "/health", timeout=2)
    while True:
        try:
            urllib.request.urlopen(sim.base_url + "/health", timeout=2)
            break
        except urllib.error.URLError:
            assert time.monotonic() - t0 < 180, "the simulator never answered /health"
            time.sleep(0.1)
    assert time.monotonic() - t0 >= 2.6
    assert "Model loading took" in sim.log()


def test_slow_health(sim_factory):
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_FAULT_SLOW_HEALTH_SECONDS": "1.0"})
    t0 = time.monotonic()
    with urllib.request.urlopen(sim.base_url + "/health", timeout=10) as r:
        assert r.status == 200
    assert time.monotonic() - t0 >= 1.0
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        urllib.request.urlopen(sim.base_url + "/health", timeout=0.3)
