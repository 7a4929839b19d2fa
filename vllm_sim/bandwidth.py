"""``vllm bandwidth-probe``: the simulator image's stand-in for sparkbench's bandwidth probe.

On a simulated host the bandwidth probe's container (``sparkbench.bandwidth.spec``) runs this
instead of the torch probe (``sparkbench/bandwidth/probe.py``) and it answers in the same shape,
one JSON object on stdout, with the bandwidth the simulated unit streams (SIMULATED)::

    gbps = bandwidth x stream_read_share x VLLM_SIM_EFFICIENCY x clock factor

* bandwidth: ``VLLM_SIM_BANDWIDTH_GBPS``, else the hardware profile's ``memory_bandwidth_gbps``;
* stream_read_share: the hardware profile's ``probe.stream_read_share`` (what a streaming read
  reaches of the data sheet; 1 when the profile has none);
* VLLM_SIM_EFFICIENCY: the unit's efficiency knob (inventory: spark-sim03 0.89 reads lower);
* clock factor: with ``VLLM_SIM_CLOCK_CAP_MHZ`` below the profile's load clock, ``1 - s + s x
  cap / load`` (``s`` = ``engine.clock_bound_share``), the share by which the engine model slows
  a capped unit's steps (sparkbench/twin/pacing.py); 1 otherwise.

``REPEATS`` figures carry ``VLLM_SIM_JITTER`` relative noise drawn from ``VLLM_SIM_SEED`` (the same
answer on every call with the same knobs); ``gbps`` is their median, ``spread`` their min, max and
quartiles, as the torch probe reports them. ``method`` is ``simulated``.
"""
from __future__ import annotations

import json
import random
import sys
from datetime import datetime, timezone
from statistics import median, quantiles

from . import profiles
from .knobs import KnobError, Knobs

REPEATS = 10


def clock_factor(knobs: Knobs, hw: dict) -> float:
    """How much a capped graphics clock slows the simulated unit's memory-bound work (1 uncapped)."""
    load = float((hw.get("gpu_telemetry") or {}).get("clock_load_mhz", 2450))
    if not knobs.clock_cap_mhz or knobs.clock_cap_mhz >= load:
        return 1.0
    share = float((hw.get("engine") or {}).get("clock_bound_share", 0.85))
    return 1.0 - share + share * knobs.clock_cap_mhz / load


def simulated_gbps(knobs: Knobs, hw: dict) -> float:
    """The streaming-read bandwidth of the simulated unit [GB/s] (formula in the module docstring)."""
    bandwidth = knobs.bandwidth_gbps or float(hw["memory_bandwidth_gbps"])
    share = float((hw.get("probe") or {}).get("stream_read_share", 1.0))
    return bandwidth * share * knobs.efficiency * clock_factor(knobs, hw)


def samples(knobs: Knobs, hw: dict, repeats: int = REPEATS) -> list[float]:
    """``repeats`` figures around :func:`simulated_gbps` with the jitter knob's relative noise."""
    rng = random.Random(f"bandwidth-probe/{knobs.seed}")
    centre = simulated_gbps(knobs, hw)
    return [centre * (1.0 + knobs.jitter * rng.gauss(0.0, 1.0)) for _ in range(repeats)]


def reading(knobs: Knobs, hw: dict) -> dict:
    """The probe's JSON object for the simulated unit."""
    figures = samples(knobs, hw)
    q1, _, q3 = quantiles(figures, n=4, method="inclusive")
    return {"gbps": round(median(figures), 2), "method": "simulated",
            "spread": {"min": round(min(figures), 2), "max": round(max(figures), 2), "p25": round(q1, 2),
                       "p75": round(q3, 2), "iqr": round(q3 - q1, 2), "repeats": len(figures)},
            "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "device": f"{hw.get('gpu_name') or hw.get('name')} (simulated)", "simulated": True, "reason": None,
            "hardware_profile": hw.get("name"), "efficiency": knobs.efficiency, "gemv": None}


def main(argv: list[str]) -> int:
    """``vllm bandwidth-probe``: print the reading; exit 2 on a bad knob or profile (the reason on stderr)."""
    if argv and argv[0] in ("-h", "--help"):
        print("usage: vllm bandwidth-probe   (sparkbench simulator: the simulated unit's memory bandwidth as JSON)")
        return 0
    try:
        knobs = Knobs.from_env()
        hw = profiles.load_hardware(knobs.hardware, knobs.profiles_dir)
    except (KnobError, profiles.ProfileError) as exc:
        sys.stderr.write(f"bandwidth-probe: {exc}\n")
        return 2
    print(json.dumps(reading(knobs, hw)))
    return 0
