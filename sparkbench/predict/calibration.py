"""A unit's calibration: how fast it measured against what the twin said, from its history.

For every complete result of the unit in the history index (``sparkbench.history``) whose pace is
the unit's own (a simulator run with a rate override or a compressed clock is not), the ratio
measured single-stream median / the twin's single-stream rate for that result's model, flags,
vLLM version and hardware, at the bandwidth the unit's probe read then. The unit's factor is the
median ratio; its spread the largest distance of a ratio from it.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import history
from ..measure.figures import SINGLE_DECODE
from .config import PredictInputError, TwinConfig, build_twin, decode_rate

if TYPE_CHECKING:
    from ..matrix import Variant
    from ..measure.bandwidth import BandwidthProbes
    from ..plan_types import HardwareProfile, ModelProfile
    from ..result_shapes import StoredResult
    from .shapes import Calibration, CalibrationRow, LaunchFit

#: simulator knobs that set the pace outright (the run says nothing of the unit's speed)
PACE_OVERRIDES = ("VLLM_SIM_RATE", "VLLM_SIM_SPEEDUP")


def _bandwidth(doc: StoredResult) -> BandwidthProbes | None:
    """The result's ``protocol.bandwidth`` as it lies (None where there is none)."""
    protocol = doc.get("protocol")
    return protocol.get("bandwidth") if protocol else None


def _variant(doc: StoredResult) -> Variant | None:
    """The result's ``variant``, None where it has none."""
    return doc.get("variant") or None


def probe_gbps(doc: StoredResult) -> float | None:
    """The bandwidth probe's reading in a result (``protocol.bandwidth``), GB/s, or None."""
    bw = _bandwidth(doc)
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
    variant = _variant(doc)
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
    bw = _bandwidth(doc)
    scale = bandwidth_scale(probe_gbps(doc), hardware, bw.get("method") if isinstance(bw, Mapping) else None)
    variant, server = _variant(doc), doc.get("server")
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


def calibration_rows(results_dir: str | Path, host: str) -> list[CalibrationRow]:
    """The host's comparable results, oldest first: run, variant, model, measured, ratio."""
    out: list[CalibrationRow] = []
    for row in history.rows(results_dir, host=host, persist=False):
        if row["status"] != "complete":
            continue
        try:
            doc: StoredResult = json.loads(Path(row["path"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        r = ratio(doc)
        if r is not None:
            variant, bw = _variant(doc), _bandwidth(doc)
            out.append({"run_id": row["run_id"], "variant": row["variant"],
                        "model": variant.get("model") if variant else None,
                        "measured": row["single_median"], "ratio": r, "bandwidth_gbps": probe_gbps(doc),
                        "bandwidth_method": bw.get("method") if bw else None,
                        "simulated": bool(doc.get("simulated"))})
    return out


def calibrate(rows: Sequence[CalibrationRow]) -> Calibration | None:
    """{factor, spread, n, models} from calibration rows (None when there are none)."""
    ratios = [float(r["ratio"]) for r in rows]
    if not ratios:
        return None
    factor = statistics.median(ratios)
    return {"factor": factor, "spread": max(abs(x / factor - 1.0) for x in ratios), "n": len(ratios),
            "models": sorted({str(r["model"]) for r in rows if r.get("model")}),
            "simulated": all(r.get("simulated") for r in rows)}


def fit_launch_us(model: ModelProfile, hardware: HardwareProfile, config: TwinConfig, measured: float,
                  bandwidth_gbps: float, version: str = "0.25.0") -> float:
    """The per-layer cost (µs) that makes the twin decode ``measured`` tok/s for one bare stream at
    ``bandwidth_gbps``: (1 / measured − the bytes' time) / layers. For a unit whose engine has no
    shipped per-layer cost (a CPU host, where per-step overhead dominates): fitted on one
    configuration, then held against the others."""
    if config.spec_k:
        raise PredictInputError("the per-layer cost is fitted on a bare (no speculative decoding) result")
    bytes_only = build_twin(model, hardware, config, version, bandwidth_gbps=bandwidth_gbps, layer_launch_us=0.0)
    overhead = 1.0 / measured - 1.0 / decode_rate(bytes_only)
    if overhead <= 0:
        raise PredictInputError(f"{measured:.1f} tok/s is faster than the probed {bandwidth_gbps:.1f} GB/s allows for "
                                "this model: the probe or the measured figure is wrong")
    return overhead / float(model["layers"]) * 1e6


def launch_fit(results_dir: str | Path, host: str, model_id: str, hardware: HardwareProfile,
               variant: str | None = None) -> LaunchFit:
    """{variant, run_id, measured, bandwidth_gbps, spread, layer_launch_us}: the per-layer cost fitted on
    the host's newest complete result of ``model_id`` (or of ``variant``) with a bandwidth probe."""
    for row in reversed(history.rows(results_dir, host=host, persist=False)):
        if row["status"] != "complete" or (variant and row["variant"] != variant) or not row["single_median"]:
            continue
        doc: StoredResult = json.loads(Path(row["path"]).read_text(encoding="utf-8"))
        gbps = probe_gbps(doc)
        variant_block = _variant(doc)
        if (variant_block.get("model") if variant_block else None) != model_id or not gbps:
            continue
        config = TwinConfig.from_args(variant_block.get("args") if variant_block else None)
        _, lo, hi = SINGLE_DECODE.spread(doc)
        spread = (float(hi) - float(lo)) / 2.0 / float(row["single_median"]) if lo and hi else 0.0
        return {"variant": row["variant"], "run_id": row["run_id"], "measured": float(row["single_median"]),
                "bandwidth_gbps": gbps, "config": config, "spread": max(spread, 0.01),
                "layer_launch_us": fit_launch_us((doc.get("profile") or {}).get("model") or {}, hardware, config,
                                                 float(row["single_median"]), gbps)}
    raise PredictInputError(f"--host {host}: no complete result of {model_id}{' (' + variant + ')' if variant else ''} "
                            "with a bandwidth probe in the history to fit the per-layer cost on; run bench.yml "
                            "on the host first")
