#!/usr/bin/env python3
"""Simulator vs every figure the seed article publishes (markdown table on stdout).

Runs the real simulator (``scripts/vllm_sim``) as a process per configuration with jitter 0,
forced 256-token generations (``ignore_eos``), single stream = median of 3, combined throughput
at 8 parallel, and reads the server's own timeline (``/sim/requests``) and spec-decode counters.
``--speedup S`` (default 8) runs the simulated clock S times faster (VLLM_SIM_SPEEDUP) and
rescales the figures, so the whole table takes about a minute; every ratio is unchanged.

Decode tok/s of one request = (completion_tokens - 1) / (t_last_token - t_first_token).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIM = REPO / "scripts" / "vllm_sim"
N35, U35, D27 = "nvidia/Qwen3.6-35B-A3B-NVFP4", "unsloth/Qwen3.6-35B-A3B-NVFP4", "nvidia/Qwen3.6-27B-NVFP4"
NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"
BASE_FLAGS = ["--kv-cache-dtype", "fp8", "--max-model-len", "65536", "--max-num-seqs", "8",
              "--max-num-batched-tokens", "4096", "--gpu-memory-utilization", "0.85", "--reasoning-parser", "qwen3"]
PROMPT = "Explain in detail how memory bandwidth limits LLM decoding speed on a single GPU."


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vllm:spec_decode") and "_total" in line:
                name, val = line.rsplit(" ", 1)
                out[name] = float(val)
    return out


class Run:
    """One simulator process for one configuration."""

    def __init__(self, model: str, flags: list[str], env: dict[str, str], speedup: float) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.speedup = speedup
        self.model = model
        e = {**os.environ, "VLLM_SIM_LOAD_SECONDS": "0.2", "VLLM_SIM_JITTER": "0",
             "VLLM_SIM_SPEEDUP": str(speedup), **env}
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, str(SIM), "serve", model, "--host", "127.0.0.1", "--port",
                                      str(self.port), *flags], env=e, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"simulator failed for {model} {flags}:\n{self.log.read().decode()}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("simulator did not start")

    def chat(self, n_tokens: int = 256) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": n_tokens,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            for _ in r:
                pass

    def decode_rates(self) -> list[float]:
        rows = _get(self.url + "/sim/requests")["requests"]
        return [(q["completion_tokens"] - 1) / (q["last_token"] - q["first_token"]) / self.speedup for q in rows]

    def single(self, runs: int = 3) -> float:
        for _ in range(runs):
            self.chat()
        return statistics.median(self.decode_rates()[-runs:])

    def combined(self, n: int = 8) -> float:
        before = {q["id"] for q in _get(self.url + "/sim/requests")["requests"]}
        t0 = time.time()
        with ThreadPoolExecutor(n) as ex:
            list(ex.map(lambda _: self.chat(), range(n)))
        rows = [q for q in _get(self.url + "/sim/requests")["requests"] if q["id"] not in before]
        start = min(q["arrival"] for q in rows)
        end = max(q["last_token"] for q in rows)
        del t0
        return sum(q["completion_tokens"] for q in rows) / (end - start) / self.speedup

    def acceptance(self) -> list[float]:
        m = _metrics(self.url)
        drafts = sum(v for k, v in m.items() if k.startswith("vllm:spec_decode_num_drafts_total"))
        pos = sorted((k, v) for k, v in m.items() if "per_pos_total" in k)
        return [v / drafts for _, v in pos] if drafts else []

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def spec(k: int) -> list[str]:
    return ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": k})]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speedup", type=float, default=8.0)
    ap.add_argument("--no-parallel", action="store_true", help="skip the 8-parallel rows")
    a = ap.parse_args()
    res: dict[str, float] = {}

    def measure(key, model, flags, env=None, parallel=False, acc=False):
        r = Run(model, flags, env or {}, a.speedup)
        try:
            res[key] = r.single()
            if acc:
                res[key + ":acc"] = r.acceptance()
            if parallel and not a.no_parallel:
                res[key + ":p8"] = r.combined()
        finally:
            r.close()

    q = ["--quantization", "modelopt"]
    measure("n0", N35, BASE_FLAGS + q, parallel=True)
    measure("n2", N35, BASE_FLAGS + q + spec(2), parallel=True, acc=True)
    measure("n3", N35, BASE_FLAGS + q + spec(3), parallel=True, acc=True)
    measure("u0", U35, BASE_FLAGS, parallel=True)
    measure("u2", U35, BASE_FLAGS + spec(2), parallel=True, acc=True)
    measure("u3", U35, BASE_FLAGS + spec(3), parallel=True, acc=True)
    for be in ("marlin", "flashinfer_b12x"):
        measure("be:" + be, N35, BASE_FLAGS + q + ["--moe-backend", be])
    measure("d0", D27, BASE_FLAGS + q)
    measure("d3", D27, BASE_FLAGS + q + spec(3))
    measure("d0v24", D27, BASE_FLAGS + q, env={"VLLM_SIM_VERSION": "0.24.0"})
    measure("d3v24", D27, BASE_FLAGS + q + spec(3), env={"VLLM_SIM_VERSION": "0.24.0"})
    measure("nano", NANO, [f for f in BASE_FLAGS if f not in ("--reasoning-parser", "qwen3")] + q)

    def pct(sim: float, seed: float) -> str:
        return f"{100 * (sim - seed) / seed:+.1f} %"

    print("| figure (seed article) | seed | simulator | difference |")
    print("|---|---|---|---|")
    for label, key, seed in [
        ("nvidia 35B-A3B bare, single (tok/s)", "n0", 76.7), ("nvidia 35B-A3B MTP spec=2, single", "n2", 98.0),
        ("nvidia 35B-A3B MTP spec=3, single", "n3", 108.3), ("unsloth 35B-A3B MTP spec=2, single", "u2", 81.6),
        ("nvidia 27B bare, vLLM 0.25.0 (held out)", "d0", 12.43), ("nvidia 27B MTP (k=3), vLLM 0.25.0", "d3", 28.91),
        ("nvidia 27B bare, vLLM 0.24.0", "d0v24", 12.13), ("nvidia 27B MTP (k=3), vLLM 0.24.0", "d3v24", 29.38),
        ("Nemotron Nano (NVFP4 profile), single", "nano", 61.2)]:
        print(f"| {label} | {seed} | {res[key]:.2f} | {pct(res[key], seed)} |")
    for k, seed in (("n2", [0.87, 0.69]), ("n3", [0.86, 0.67, 0.55]), ("u2", [0.87, 0.69]), ("u3", [0.865, 0.68, 0.545])):
        simacc = " / ".join(f"{x:.2f}" for x in res[k + ":acc"])
        print(f"| acceptance per position, {k[0] == 'n' and 'nvidia' or 'unsloth'} spec={k[1]} | "
              f"{' / '.join(f'{x:.2f}' for x in seed)} | {simacc} | (statistical, 3 x 256 tokens) |")
    for k in ("0", "2", "3"):
        gap = 100 * (res["u" + k] - res["n" + k]) / res["n" + k]
        print(f"| unsloth vs nvidia, {'bare' if k == '0' else 'spec=' + k}, single | -12 ... -17 % | {gap:+.1f} % | "
              f"{'within' if -17.5 <= gap <= -11.5 else 'outside'} |")
        if not a.no_parallel:
            gp = 100 * (res["u" + k + ":p8"] - res["n" + k + ":p8"]) / res["n" + k + ":p8"]
            print(f"| unsloth vs nvidia, {'bare' if k == '0' else 'spec=' + k}, combined at 8 parallel | "
                  f"gap nearly gone | {gp:+.1f} % | nvidia {res['n' + k + ':p8']:.1f} tok/s combined |")
    spread = [res["n0"], res["be:marlin"], res["be:flashinfer_b12x"]]
    print(f"| --moe-backend auto / marlin / flashinfer_b12x spread | 1.5 % | "
          f"{100 * (max(spread) - min(spread)) / min(spread):.1f} % | "
          f"{' / '.join(f'{x:.1f}' for x in spread)} tok/s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
