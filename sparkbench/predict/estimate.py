"""One prediction: the twin's rates for a model and flags on a unit, scaled by the unit's probed
bandwidth and calibration, each with its interval, and the memory check."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

from ..engine_config import TwinConfig, build_twin, decode_rate
from ..memory.fit import memory_fit
from .published import MIN_INTERVAL, shipped_interval

if TYPE_CHECKING:
    from ..plan_types import HardwareProfile, ModelProfile
    from .shapes import Band, Calibration, FitRow, LaunchFit, LaunchFitRecord, MtpBand, Prediction, TwinConfigFields

PARALLEL = (2, 4, 8)
MTP_K = (2, 3)


def half_width(fit_rows: list[FitRow], calibration: Calibration | None, model_id: str,
               parallel: int) -> tuple[float, str]:
    """The interval's relative half-width and what it comes from."""
    shipped = shipped_interval(fit_rows, parallel)
    if not calibration:
        return shipped, f"the shipped fit (largest held-out error {shipped * 100:.1f} %)"
    spread = max(float(calibration["spread"]), MIN_INTERVAL)
    if model_id in calibration["models"]:
        return spread, f"the unit's {calibration['n']} measured result(s) of this model (spread {spread * 100:.1f} %)"
    return (max(spread, shipped),
            f"the unit's {calibration['n']} measured result(s) of other models and the shipped fit's held-out error")


def _band(value: float, half: float) -> Band:
    return {"tok_s": value, "lo": value * (1.0 - half), "hi": value * (1.0 + half)}


def _fit_record(launch: LaunchFit) -> LaunchFitRecord:
    """The per-layer cost fit as the prediction shows it: all but its ``config``."""
    return {"variant": launch["variant"], "run_id": launch["run_id"], "measured": launch["measured"],
            "bandwidth_gbps": launch["bandwidth_gbps"], "spread": launch["spread"],
            "layer_launch_us": launch["layer_launch_us"]}


def predict(model: ModelProfile, hardware: HardwareProfile, config: TwinConfig, fit_rows: list[FitRow],
            version: str = "0.25.0", bandwidth_scale: float = 1.0, calibration: Calibration | None = None,
            acceptance: list[float] | None = None, launch: LaunchFit | None = None) -> Prediction:
    """The prediction document ``sparkbench predict`` prints (``--json`` writes it as is).
    ``launch``: a per-layer cost fitted on the unit (:func:`sparkbench.predict.calibration.launch_fit`,
    a CPU host): the twin runs at its probed bandwidth with that cost, and the interval is the fitted
    result's own run-to-run spread."""
    factor = float(calibration["factor"]) if calibration else 1.0
    unit = {"bandwidth_gbps": launch["bandwidth_gbps"], "layer_launch_us": launch["layer_launch_us"]} if launch else {}
    twin = build_twin(model, hardware, config, version, bandwidth_scale, **unit)
    acc = acceptance if acceptance is not None else list((model.get("mtp") or {}).get("acceptance") or [])
    model_id = str(model.get("id"))

    def interval(parallel: int) -> tuple[float, str]:
        if launch:
            return (float(launch["spread"]), f"the run-to-run spread of {launch['variant']} (run {launch['run_id']}), "
                    "the result the per-layer cost was fitted on")
        return half_width(fit_rows, calibration, model_id, parallel)

    def rate(parallel: int, k: int | None = None) -> Band:
        t = twin if k is None else build_twin(model, hardware, replace(config, spec_k=k), version, bandwidth_scale,
                                              **unit)
        return _band(decode_rate(t, parallel, acceptance=acc or None) * factor, interval(parallel)[0])

    _, basis = interval(1)
    mtp: list[MtpBand] = []
    if config.spec_k == 0 and (model.get("mtp") or {}).get("supported") and acc:
        mtp = [{"k": k, "acceptance": acc[:k], **rate(1, k)} for k in MTP_K if k <= len(acc)]
    return {"model": model_id, "hardware": hardware.get("name"), "vllm_version": version,
            "config": cast("TwinConfigFields", config.__dict__),  # the dataclass's fields, by name
            "single": rate(1), "parallel": {str(n): rate(n) for n in PARALLEL},
            "mtp": mtp, "acceptance": acc[:config.spec_k] if config.spec_k else None,
            "bandwidth_scale": bandwidth_scale, "calibration": calibration.copy() if calibration else None,
            "interval_basis": basis, "memory": memory_fit(model, hardware, config),
            "launch_fit": _fit_record(launch) if launch else None,
            "bytes_per_token": twin.dense_bytes + twin.expert_bytes_slot * twin.experts_touched(1)}
