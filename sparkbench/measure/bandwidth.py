"""The bandwidth probe around a hand run (``--hardware`` or ``--bandwidth-probe CMD``), and the
arithmetic every probe reading shares (the playbooks' probe step reads them through
:mod:`sparkbench.bandwidth`).

A hand run has no playbook to probe the unit between variants, so measure runs the probe itself:
once before its first request and once after its last, while the server idles, and writes
``protocol.bandwidth`` in the playbooks' shape (the reading before, ``after``, ``drop``). The
command prints the probe's JSON object (``sparkbench/bandwidth/probe.py``); by default, in the
checkout with ``--hardware``, ``python3 sparkbench/bandwidth/probe.py --device cuda`` (``cpu`` for
a hardware profile whose ``device`` is cpu). A probe that gives no figure records why.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TypedDict

from .shapes import JSON, JSONObject

#: A probe after the variant below this share of the probe before it marks the variant's figures.
DROP_SHARE = 0.9
#: Seconds a probe command may take.
PROBE_TIMEOUT_S = 300
#: The probe program in the checkout, beside the measure package.
CHECKOUT_PROGRAM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bandwidth", "probe.py")


class Spread(TypedDict, total=False):
    """A bandwidth probe's repeats: min, max, quartiles [GB/s] (the probe's output)."""

    min: float
    max: float
    p25: float
    p75: float
    iqr: float
    repeats: int


class Gemv(TypedDict, total=False):
    """A GEMV of decode's shape timed by the probe on a GPU (the probe's output)."""

    method: str
    gbps: float
    shape: list[int]
    matrices: int
    dtype: str
    spread: Spread


class _ReadingBase(TypedDict):
    gbps: float | None
    method: str
    spread: Spread | None
    when: str
    device: str | None
    simulated: bool
    reason: str | None


class BandwidthReading(_ReadingBase, total=False):
    """One bandwidth probe's reading: ``run_probe`` on a hand run (with ``command``),
    ``sparkbench.bandwidth.reading`` in the playbooks (with ``image``)."""

    command: str
    image: str
    cost_s: float
    gemv: Gemv | None
    torch: str
    seconds: float | None


class BandwidthDrop(TypedDict):
    """``protocol.bandwidth.drop``: the probe after below ``DROP_SHARE`` of the one before; ``block``."""

    share: float
    before_gbps: float
    after_gbps: float
    cause: str | None
    text: str


class BandwidthProbes(BandwidthReading):
    """``protocol.bandwidth``: the reading before (its keys), the one ``after`` and the ``drop``;
    ``block``."""

    after: BandwidthReading | None
    drop: BandwidthDrop | None


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_output(text: object) -> JSONObject | None:
    """The last line of ``text`` that is a JSON object with a ``gbps`` key, or None."""
    for line in reversed(str(text or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "gbps" in obj:
            return obj
    return None


def _quartile(reading: BandwidthReading, key: str) -> float | None:
    spread = reading.get("spread")
    value = spread.get(key) if isinstance(spread, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


def drop_of(before: BandwidthReading, after: BandwidthReading) -> float | None:
    """``after / before`` (the readings' ``gbps``) when it is below ``DROP_SHARE`` and the
    quartiles, where both readings have them, do not overlap (``after.p75 < before.p25``); else
    None (no drop, or a figure missing)."""
    b, a = before.get("gbps"), after.get("gbps")
    if not isinstance(b, (int, float)) or not isinstance(a, (int, float)) or b <= 0:
        return None
    share = a / b
    upper, lower = _quartile(after, "p75"), _quartile(before, "p25")
    if upper is not None and lower is not None and upper >= lower:
        return None
    return share if share < DROP_SHARE else None


def drop_text(share: float, before_gbps: float, after_gbps: float, why: str | None) -> str:
    """The flag's reason: the two figures, the share, and the cause (or that none is named)."""
    text = (f"bandwidth fell from {before_gbps:.0f} to {after_gbps:.0f} GB/s ({share * 100:.0f} % of the probe "
            "before) between the probes around this variant: its figures may come from a slow state")
    return text + (f"; cause: {why}" if why else "; no telemetry of this run names a cause")


def default_command(hardware: Mapping[str, JSON] | None) -> str | None:
    """The checkout's probe program for a hand run with ``--hardware`` (None: no hardware, or no
    program beside the measure package, as in measure.pyz)."""
    if not hardware or not os.path.isfile(CHECKOUT_PROGRAM):
        return None
    device = "cpu" if str(hardware.get("device") or "").lower() == "cpu" else "cuda"
    return shlex.join([sys.executable or "python3", "-I", CHECKOUT_PROGRAM, "--device", device])


def run_probe(command: str, timeout: float = PROBE_TIMEOUT_S) -> BandwidthReading:
    """One reading: the command's JSON object, or ``gbps: null`` with the reason."""
    t0 = time.monotonic()
    base: BandwidthReading = {"gbps": None, "method": "unknown", "spread": None, "when": utc_now(), "device": None,
                              "simulated": False, "reason": None, "command": command}
    try:
        proc = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {**base, "reason": f"the bandwidth probe did not run: {exc}", "cost_s": round(time.monotonic() - t0, 2)}
    out = parse_output(proc.stdout)
    cost = round(time.monotonic() - t0, 2)
    if out is None:
        said = " ".join((proc.stderr or proc.stdout or "no output").split())[-300:]
        return {**base, "reason": f"the bandwidth probe printed no reading (exit status {proc.returncode}): {said}",
                "cost_s": cost}
    reading = {**base, **{k: v for k, v in out.items() if k in base or k in ("gemv", "torch", "seconds")}}
    if not isinstance(reading.get("gbps"), (int, float)) or reading["gbps"] <= 0:
        reading.update(gbps=None, reason=str(out.get("reason") or "the probe gave no positive figure"))
    return {**reading, "cost_s": cost}


def block(before: BandwidthReading, after: BandwidthReading | None) -> BandwidthProbes:
    """``protocol.bandwidth`` of a hand run: the reading before, ``after`` and the ``drop``."""
    share = drop_of(before, after) if after else None
    drop = None
    if share is not None:
        drop = {"share": round(share, 4), "before_gbps": before["gbps"], "after_gbps": after["gbps"], "cause": None,
                "text": drop_text(share, float(before["gbps"]), float(after["gbps"]), None)}
    return {**dict(before), "after": dict(after) if after else None, "drop": drop}
