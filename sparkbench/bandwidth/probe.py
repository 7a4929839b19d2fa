#!/usr/bin/env python3
"""The bandwidth probe: measure the memory bandwidth of the device it runs on, print one JSON object.

    python3 bandwidth_probe.py --device cuda     (a Spark: inside the vLLM image, GPU passed in)
    python3 bandwidth_probe.py --device cpu      (a CPU host: inside the real-vLLM CPU image)

Standard library, and torch where the image has it; no import of the rest of sparkbench, so the
file runs alone: roles/spark_host copies it to the unit's work directory and mounts it into a
throw-away container of the variant's image (``sparkbench.bandwidth.probe_container``). A simulated host
never runs it: the simulator image's stand-in answers there (``vllm bandwidth-probe``,
vllm_sim/bandwidth.py) in the same shape.

Methods (``method``; ``gbps`` is always the streaming read):

* ``torch-cuda-stream-read``: ``sum()`` over a bf16 buffer of ``--buffer-mib`` (at least 16 x the
  GPU's L2 cache, so the reads come from DRAM), repeated; each repeat is as many passes as take
  about ``TARGET_S``, timed between two synchronisations.
* ``torch-cuda-gemv`` (in ``gemv``): the matrix x vector products decode does, layer after layer:
  bf16 matrices of ``GEMV_SHAPE`` (an MLP projection of a model 5120 wide, 262 MB each), as many as
  fill the buffer's size, each times a bf16 vector in turn (``torch.nn.functional.linear``, as
  vLLM's unquantised layers); GB/s counts the matrices, the vectors and the outputs.
* ``torch-cpu-stream-read``: the same read on the CPU over a float32 buffer (torch's CPU reduction
  is vectorised and threaded for float32).

Every repeat gives one GB/s figure; ``gbps`` is their median and ``spread`` their min, max and
quartiles. A probe that cannot measure (no torch, no GPU visible) prints ``gbps: null`` with the
reason and exits 0: a probe never fails the variant.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from statistics import median, quantiles

#: Seconds one timed repeat should last (enough passes over the buffer to make timer noise small).
TARGET_S = 0.05
#: One GEMV matrix [rows, hidden]: an MLP projection of a model 5120 wide (bf16: 262 MB).
GEMV_SHAPE = (25600, 5120)
#: The buffer is at least this many times the GPU's L2 cache.
L2_MULTIPLE = 16
METHODS = {"cuda": "torch-cuda-stream-read", "cpu": "torch-cpu-stream-read"}


# --------------------------------------------------------------------------- arithmetic
def gbps(nbytes: float, seconds: float) -> float:
    """Bytes moved per second, in GB/s (10^9 bytes, as data sheets count)."""
    if seconds <= 0:
        raise ValueError(f"a timed pass took {seconds} s: the timer cannot resolve it")
    return nbytes / seconds / 1e9


def spread(samples: list[float]) -> dict:
    """``{min, max, p25, p75, iqr, repeats}`` of the per-repeat GB/s figures (quartiles: the
    inclusive method, so a single sample is its own quartiles)."""
    if not samples:
        raise ValueError("no sample")
    q1, _, q3 = quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else (samples[0],) * 3
    return {"min": round(min(samples), 2), "max": round(max(samples), 2), "p25": round(q1, 2),
            "p75": round(q3, 2), "iqr": round(q3 - q1, 2), "repeats": len(samples)}


def passes_for(one_pass_s: float, target_s: float = TARGET_S) -> int:
    """How many passes over the buffer make one timed repeat of about ``target_s``."""
    return max(1, math.ceil(target_s / max(one_pass_s, 1e-6)))


def gemv_count(buffer_bytes: int, shape: tuple[int, int] = GEMV_SHAPE, elem_bytes: int = 2) -> int:
    """How many matrices of ``shape`` make at least ``buffer_bytes``."""
    return max(1, math.ceil(buffer_bytes / (shape[0] * shape[1] * elem_bytes)))


def gemv_bytes(count: int, shape: tuple[int, int] = GEMV_SHAPE, elem_bytes: int = 2) -> int:
    """Bytes one pass of ``count`` GEMVs moves: each matrix, its input vector and its output."""
    rows, k = shape
    return count * (rows * k + k + rows) * elem_bytes


def utc_now() -> str:
    """The current UTC time as ``YYYY-mm-ddTHH:MM:SSZ``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- measuring
def timed(op, nbytes: int, repeats: int, sync) -> list[float]:
    """GB/s of ``op`` (one pass reading ``nbytes``) per repeat, after one warm-up pass."""
    op()
    sync()
    t0 = time.perf_counter()
    op()
    sync()
    passes = passes_for(time.perf_counter() - t0)
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(passes):
            op()
        sync()
        out.append(gbps(nbytes * passes, time.perf_counter() - t0))
    return out


def figure(samples: list[float]) -> dict:
    """The median GB/s and the spread of one method's samples."""
    return {"gbps": round(median(samples), 2), "spread": spread(samples)}


def cuda_probe(torch, buffer_mib: int, repeats: int) -> dict:
    """The streaming read and the GEMV on the first CUDA device."""
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    nbytes = max(buffer_mib << 20, L2_MULTIPLE * l2)
    sync = torch.cuda.synchronize
    buf = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    stream = figure(timed(buf.sum, nbytes, repeats, sync))
    del buf
    count = gemv_count(nbytes)
    ws = [torch.ones(*GEMV_SHAPE, dtype=torch.bfloat16, device="cuda") for _ in range(count)]
    x = torch.ones(1, GEMV_SHAPE[1], dtype=torch.bfloat16, device="cuda")

    def layers():
        for w in ws:
            torch.nn.functional.linear(x, w)
    gemv = {"method": "torch-cuda-gemv", "shape": list(GEMV_SHAPE), "matrices": count, "dtype": "bfloat16",
            **figure(timed(layers, gemv_bytes(count), repeats, sync))}
    return {**stream, "device": str(props.name), "buffer_bytes": nbytes, "l2_bytes": l2 or None, "gemv": gemv}


def cpu_probe(torch, buffer_mib: int, repeats: int) -> dict:
    """The streaming read on the CPU, with torch's threads."""
    nbytes = buffer_mib << 20
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    stream = figure(timed(buf.sum, nbytes, repeats, lambda: None))
    return {**stream, "device": f"{cpu_name()}, {torch.get_num_threads()} threads", "buffer_bytes": nbytes,
            "l2_bytes": None, "gemv": None}


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else the machine type."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown CPU"


def measure(device: str, buffer_mib: int, repeats: int) -> dict:
    """The probe's JSON object for ``device`` (``cuda`` or ``cpu``)."""
    started = time.monotonic()
    out = {"gbps": None, "method": METHODS[device], "spread": None, "when": utc_now(), "device": None,
           "simulated": False, "reason": None}
    try:
        import torch
    except ImportError as exc:
        return {**out, "reason": f"torch is not importable in this image ({exc}): no bandwidth figure"}
    out["torch"] = str(torch.__version__)
    if device == "cuda" and not torch.cuda.is_available():
        return {**out, "reason": "torch sees no CUDA device in the probe's container (is the GPU passed in?)"}
    probe = cuda_probe if device == "cuda" else cpu_probe
    out.update(probe(torch, buffer_mib, repeats))
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure the memory bandwidth; print one JSON object.")
    ap.add_argument("--device", choices=sorted(METHODS), required=True)
    ap.add_argument("--buffer-mib", type=int, default=1024, help="buffer size in MiB (default 1024)")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats (default 10)")
    args = ap.parse_args(argv)
    try:
        out = measure(args.device, args.buffer_mib, max(1, args.repeats))
    except Exception as exc:  # any failure becomes the reading's reason, never a traceback alone
        out = {"gbps": None, "method": METHODS[args.device], "spread": None, "when": utc_now(), "device": None,
               "simulated": False, "reason": f"the probe failed: {type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
