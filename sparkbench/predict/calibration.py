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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import history
from ..engine_config import PredictInputError, TwinConfig, build_twin, decode_rate
from ..measure.figures import SINGLE_DECODE
from .twin_rate import bandwidth_of, probe_gbps, ratio, variant_of

if TYPE_CHECKING:
    from ..plan_types import HardwareProfile, ModelProfile
    from ..result_shapes import StoredResult
    from .shapes import Calibration, CalibrationRow, LaunchFit


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
            variant, bw = variant_of(doc), bandwidth_of(doc)
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
        variant_block = variant_of(doc)
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
