"""A variant's vLLM flags as the engine's parameters (the twin's inputs, and the memory plan's), and the twin
built from them."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .launch import normalize_args
from .measure.common import json_object
from .twin.pacing import PacingModel

if TYPE_CHECKING:
    from .launch import FlagValue, FlagValues
    from .plan_types import HardwareProfile, ModelProfile

#: bytes per weight of an unquantised model served with ``--dtype`` (auto: the checkpoint's bf16)
DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0}
#: vLLM's ``--gpu-memory-utilization`` when unset: ``Field(default=0.92, gt=0, le=1)`` in
#: ``vllm/config/cache.py`` (0.25 to 0.33: shared/reference/vllm.md; the 0.32.0 argument schema in
#: sparkbench/data/vllm_args says 0.92); older releases used 0.9.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


class PredictInputError(ValueError):
    """Bad input to a prediction: the message names the field and the fix."""


def json_mapping(value: Any, what: str, example: str) -> Mapping[str, Any]:
    """``value`` (a mapping, or its JSON text) as a mapping; ``PredictInputError`` naming ``what`` and
    an ``example`` of the right shape when it is not JSON or not an object."""
    if isinstance(value, str):
        try:
            return json_object(value)
        except ValueError as exc:
            raise PredictInputError(f"{what} is {exc}; write e.g. {example}") from exc
    if not isinstance(value, Mapping):
        raise PredictInputError(f"{what} must be a JSON object (a mapping), e.g. {example}")
    return value


def _spec_k(value: Any) -> int:
    """``--speculative-config`` (a mapping or its JSON text) → num_speculative_tokens (0: none)."""
    if value in (None, "", {}):
        return 0
    spec = json_mapping(value, "speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    return int(spec.get("num_speculative_tokens") or 0)


def _as_mapping(args: Mapping[str, FlagValue] | Sequence[str] | None) -> Mapping[str, FlagValue]:
    """Flags as a mapping; an argv list (``["--kv-cache-dtype", "fp8", "--enforce-eager"]``) too."""
    if not isinstance(args, (list, tuple)):
        # a mapping, or what normalize_args then refuses with its message (not a list or tuple)
        return cast("Mapping[str, FlagValue]", args or {})
    out: FlagValues = {}
    items = [str(a) for a in args]
    for i, item in enumerate(items):
        if item.startswith("--"):
            nxt = items[i + 1] if i + 1 < len(items) else None
            out[item[2:]] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


@dataclass(frozen=True)
class TwinConfig:
    """What of a variant's flags the twin reads (defaults: vLLM's)."""

    kv_cache_dtype: str = "auto"
    spec_k: int = 0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    moe_backend: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    dtype: str = "auto"

    @classmethod
    def from_args(cls, args: Mapping[str, FlagValue] | Sequence[str] | None) -> TwinConfig:
        a = normalize_args(_as_mapping(args))
        try:
            return cls(kv_cache_dtype=str(a.get("kv-cache-dtype") or "auto"),
                       spec_k=_spec_k(a.get("speculative-config")),
                       tensor_parallel_size=int(a.get("tensor-parallel-size") or 1),
                       pipeline_parallel_size=int(a.get("pipeline-parallel-size") or 1),
                       moe_backend=str(a.get("moe-backend") or "auto"),
                       max_model_len=int(a["max-model-len"]) if a.get("max-model-len") else None,
                       max_num_seqs=int(a["max-num-seqs"]) if a.get("max-num-seqs") else None,
                       gpu_memory_utilization=float(a.get("gpu-memory-utilization") or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION),
                       dtype=str(a.get("dtype") or "auto"))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, PredictInputError):
                raise
            raise PredictInputError(f"a flag in the args is not a number where vLLM wants one ({exc}); "
                                    "write e.g. {\"max-model-len\": 65536, \"tensor-parallel-size\": 2}") from exc


def build_twin(model: ModelProfile, hardware: HardwareProfile, config: TwinConfig,
               version: str = "0.25.0", bandwidth_scale: float = 1.0, bandwidth_gbps: float | None = None,
               layer_launch_us: float | None = None) -> PacingModel:
    """The twin for one model on one hardware profile. ``bandwidth_scale`` multiplies the data-sheet
    bandwidth (a unit's probe against the hardware's reference reading); a hardware profile without
    a data-sheet bandwidth (a CPU host) takes the unit's probed ``bandwidth_gbps`` instead, and an
    engine whose ``layer_launch_us`` is fitted on the unit takes ``layer_launch_us``
    (:func:`sparkbench.predict.calibration.fit_launch_us`)."""
    engine = dict(hardware.get("engine") or {})
    sheet = hardware.get("memory_bandwidth_gbps")
    bw = float(sheet) * bandwidth_scale if sheet else bandwidth_gbps
    if not engine or not bw:
        raise PredictInputError(f"hardware profile {hardware.get('name')!r} has no engine model or no bandwidth: "
                                "predictions are made for a Spark (--hardware dgx-spark), or for a unit whose "
                                "bandwidth probe and measured history give them (--host)")
    if layer_launch_us is not None:
        engine["layer_launch_us"] = layer_launch_us
    if engine.get("layer_launch_us") is None:
        raise PredictInputError(f"hardware profile {hardware.get('name')!r}: the per-layer cost is fitted on the "
                                "unit; pass --host with a measured single-stream result of this hardware")
    served = dict(model)  # the profile with the dtype the unquantised weights are served in
    if config.dtype in DTYPE_BYTES and not served.get("checkpoint_format"):
        served["unquantized_dtype_bytes"] = DTYPE_BYTES[config.dtype]
    return PacingModel({**hardware, "engine": engine, "memory_bandwidth_gbps": bw}, served, version=version,
                       kv_cache_dtype=config.kv_cache_dtype, moe_backend=config.moe_backend, bandwidth_gbps=bw,
                       spec_k=config.spec_k, tensor_parallel_size=config.tensor_parallel_size,
                       pipeline_parallel_size=config.pipeline_parallel_size)


def decode_rate(twin: PacingModel, parallel: int = 1, context_tokens: float = 0.0,
                acceptance: list[float] | None = None) -> float:
    """The twin's per-stream decode tok/s at ``parallel`` streams (its spec_k and the model's
    acceptance per position, unless ``acceptance`` is given)."""
    return twin.expected_rate(parallel, acceptance=acceptance, context_tokens=context_tokens)
