"""One bandwidth reading from the probe container's registered result (roles/spark_host, tasks_from:
bandwidth, ``community.docker.docker_container`` with its output logs).

``reading(run, spec, cost_s)`` → ``{gbps, method, spread, when, device, simulated, reason, image,
cost_s, …}``: the probe's JSON object (the last line of its output that is one), with the image it
ran in and what the whole step cost on the controller's clock (``cost_s``: container start, imports,
measurement). A probe that gave no figure — the container did not start, the unit did not answer,
no torch, no GPU — has ``gbps: null`` and says why in ``reason``: it never fails the variant.

``between(reading)``: whether the probe is cheap enough to run again between variants (a figure
in under ``BETWEEN_MAX_S`` seconds); else the host is probed only before its first variant and
after its last.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from ..measure.bandwidth import parse_output

if TYPE_CHECKING:
    from ..measure.bandwidth import BandwidthReading
    from .probe_container import ProbeSpec

#: A probe that costs less than this many seconds also runs between variants.
BETWEEN_MAX_S = 10.0
#: The keys of the probe's object a reading keeps (anything else the program prints is dropped).
KEPT = ("gbps", "method", "spread", "when", "device", "simulated", "reason", "gemv", "seconds", "torch",
        "buffer_bytes", "l2_bytes", "hardware_profile", "efficiency")
#: How much of the container's output a reason quotes.
TAIL_CHARS = 300


class ContainerState(TypedDict, total=False):
    """The probe container's state in its task's result: what it printed (``Output``, with output logs)."""

    Output: str


class ProbeRun(TypedDict, total=False):
    """The registered result of the probe's container task (roles/spark_host, tasks_from: bandwidth;
    ``community.docker.docker_container``), the keys ``reading`` reads."""

    container: ContainerState
    status: int
    msg: str
    unreachable: bool
    skipped: bool


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tail(text: Any) -> str:
    text = " ".join(str(text or "").split())
    return text[-TAIL_CHARS:]


def why_not(run: ProbeRun) -> str:
    """Why the container task gave no reading: the unit's silence, Docker's message, or the exit
    status with the end of the output."""
    output = (run.get("container") or {}).get("Output") if isinstance(run.get("container"), Mapping) else None
    if run.get("unreachable"):
        return f"the unit did not answer during the bandwidth probe: {_tail(run.get('msg')) or 'unreachable'}"
    if run.get("skipped"):
        return "the bandwidth probe did not run (skipped)"
    status = run.get("status")
    if output is None and run.get("msg"):
        return f"the bandwidth probe's container did not run: {_tail(run.get('msg'))}"
    said = _tail(output) or _tail(run.get("msg")) or "no output"
    return f"the bandwidth probe printed no reading (exit status {status if status is not None else '?'}): {said}"


def reading(run: ProbeRun, spec: ProbeSpec, cost_s: float) -> BandwidthReading:
    """The reading of one probe run (see the module docstring). ``spec``: the plan's ``probe``
    (``sparkbench.bandwidth.probe_container``); ``cost_s``: seconds the step took."""
    run = run or {}
    out = parse_output((run.get("container") or {}).get("Output") if isinstance(run.get("container"), Mapping)
                       else None)
    base: BandwidthReading = {"gbps": None, "method": str(spec.get("method") or "unknown"), "spread": None,
                            "when": _utc_now(), "device": None, "simulated": spec.get("kind") == "simulated",
                            "reason": None}
    if out is None:
        base["reason"] = why_not(run)
    else:
        base.update({k: out[k] for k in KEPT if k in out})
        if not isinstance(base.get("gbps"), (int, float)) or base["gbps"] <= 0:
            base["gbps"] = None
            base["reason"] = str(base.get("reason") or "the probe gave no positive figure")
    base.update(image=str(spec.get("image") or ""), cost_s=round(max(float(cost_s), 0.0), 2))
    return base


def between(r: BandwidthReading | None) -> bool:
    """Whether to probe again between variants: the reading has a figure and cost under
    ``BETWEEN_MAX_S`` seconds."""
    return bool(r) and r.get("gbps") is not None and float(r.get("cost_s") or 0.0) < BETWEEN_MAX_S
