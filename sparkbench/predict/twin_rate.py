"""The twin's single-stream rate for a stored result (its model, flags, vLLM version and hardware,
at the bandwidth its probe read), and the measured median against it (``ratio``). The history
index (``sparkbench.history``) keeps the rate per result; the calibration (:mod:`.calibration`)
fits a unit's factor from the ratios."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..engine_config import PredictInputError, TwinConfig, build_twin, decode_rate
from ..measure.figures import SINGLE_DECODE

if TYPE_CHECKING:
    from ..matrix import Variant
    from ..measure.bandwidth import BandwidthProbes
    from ..plan_types import HardwareProfile
    from ..result_shapes import StoredResult

#: simulator knobs that set the pace outright (the run says nothing of the unit's speed)
PACE_OVERRIDES = ("VLLM_SIM_RATE", "VLLM_SIM_SPEEDUP")


def bandwidth_of(doc: StoredResult) -> BandwidthProbes | None:
    """The result's ``protocol.bandwidth`` as it lies (None where there is none)."""
    protocol = doc.get("protocol")
    return protocol.get("bandwidth") if protocol else None


def variant_of(doc: StoredResult) -> Variant | None:
    """The result's ``variant``, None where it has none."""
    return doc.get("variant") or None


def probe_gbps(doc: StoredResult) -> float | None:
    """The bandwidth probe's reading in a result (``protocol.bandwidth``), GB/s, or None."""
    bw = bandwidth_of(doc)
    value = bw.get("gbps") if isinstance(bw, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def bandwidth_scale(gbps: float | None, hardware: HardwareProfile, method: str | None = None) -> float:
    """A probe's reading against what a sound unit of this hardware reads: the data-sheet bandwidth
    x the hardware profile's ``probe.stream_read_share`` (a Spark streams about 85 % of its 273 GB/s
    with a simple read; the simulator's stand-in answers the same share). 1 without a reading, a
    data-sheet bandwidth or that share."""
    share = (hardware.get("probe") or {}).get("stream_read_share") if isinstance(hardware.get("probe"), Mapping) else None
    sheet = hardware.get("memory_bandwidth_gbps")
    if not gbps or not share or not sheet:
        return 1.0
    return float(gbps) / (float(sheet) * float(share))


def _skip_reason(doc: StoredResult) -> str | None:
    if doc.get("status") != "complete":
        return f"status {doc.get('status')}"
    variant = variant_of(doc)
    env = {**((variant.get("env") if variant else None) or {}), **((doc.get("launch") or {}).get("env") or {})}
    forced = [k for k in PACE_OVERRIDES if k in env]
    if forced:
        return f"simulator pace set by {', '.join(forced)}"
    if not ((doc.get("profile") or {}).get("model") and (doc.get("profile") or {}).get("hardware")):
        return "no model or hardware profile in the result"
    return None


def twin_single(doc: StoredResult) -> float | None:
    """The twin's single-stream tok/s for a result (its model, flags, vLLM version and hardware, at
    the bandwidth its probe read), without a unit's calibration; None when not comparable."""
    if _skip_reason(doc):
        return None
    prof = doc["profile"]
    model, hardware = prof["model"], prof["hardware"]
    if not (model and hardware):  # _skip_reason has seen to both
        return None
    bw = bandwidth_of(doc)
    scale = bandwidth_scale(probe_gbps(doc), hardware, bw.get("method") if isinstance(bw, Mapping) else None)
    variant, server = variant_of(doc), doc.get("server")
    try:
        twin = build_twin(model, hardware, TwinConfig.from_args(variant.get("args") if variant else None),
                          str((server.get("version") if server else None) or "0.25.0"), scale)
        return decode_rate(twin)
    except (PredictInputError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def ratio(doc: StoredResult) -> float | None:
    """measured single-stream median / the twin's rate for this result (None: not comparable)."""
    measured = SINGLE_DECODE.read(doc)
    predicted = twin_single(doc)
    if predicted is None or not isinstance(measured, (int, float)) or measured <= 0:
        return None
    return float(measured) / predicted
