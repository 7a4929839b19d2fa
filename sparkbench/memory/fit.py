"""Does the model fit its memory share at the requested context? The one implementation of an
engine's memory arithmetic, for ``sparkbench predict`` (:func:`memory_fit`) and the unit's memory
plan (``sparkbench.memory``): the weights (:func:`weight_bytes`), the KV cache of one sequence at
``--max-model-len`` for the KV-cache dtype (:func:`kv_bytes`, per token from the twin's
``kv_bytes_per_token``, plus a hybrid model's recurrent state), the context check against the
model's own context (:func:`context_reason`), and what fits in a share (:func:`share_fit`).
Tensor and pipeline parallel split weights and KV cache over the units; figures are per unit."""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..engine_config import TwinConfig
from ..twin.pacing import kv_bytes_per_token, recurrent_state_bytes

if TYPE_CHECKING:
    from ..plan_types import HardwareProfile, ModelProfile
    from ..predict.shapes import MemoryBase, MemoryFit, ProfileFromFiles, ShareFit

GB = 1e9


def weight_bytes(model: ModelProfile) -> tuple[float, str]:
    """The checkpoint's bytes and where the figure comes from."""
    files = cast("ProfileFromFiles", model)  # a profile written from the model's files has checkpoint_bytes
    if files.get("checkpoint_bytes"):
        return float(files["checkpoint_bytes"]), "the safetensors headers"
    if model.get("download_size_gb"):
        return float(model["download_size_gb"]) * GB, "the profile's download size"
    return float(model["total_params_b"]) * GB * float(model["weight_bits"]) / 8.0, "parameters x weight bits"


def kv_bytes(model: ModelProfile, kv_cache_dtype: str, context: int) -> float:
    """One sequence's KV cache at ``context`` tokens plus its recurrent state (all units together)."""
    return kv_bytes_per_token(dict(model), kv_cache_dtype) * context + _state_bytes(model)


def _state_bytes(model: ModelProfile) -> float:
    """A hybrid model's recurrent state of one sequence (all units together), 0 without one."""
    la = model.get("linear_attention")
    return recurrent_state_bytes(dict(la) if la else None)


def model_context(model: ModelProfile) -> int | None:
    """The model's own context (the profile's ``max_model_len``), None when it gives none."""
    return int(model.get("max_model_len") or 0) or None


def context_reason(context: int, limit: int) -> str:
    """Why a ``--max-model-len`` beyond the model's context cannot start."""
    return (f"--max-model-len {context:,} is beyond the model's context ({limit:,} tokens): vLLM refuses to start; "
            "use a value at or below it")


def share_fit(model: ModelProfile, config: TwinConfig, context: int, share_bytes: float,
              overhead_bytes: float = 0.0) -> ShareFit:
    """Weights, ``overhead_bytes`` (activations, CUDA graphs) and one sequence's KV cache at
    ``context`` against one unit's ``share_bytes``: ``{weights, kv, per_token, room, max_context,
    fits, problem}`` in bytes per unit; ``problem``: None, ``weights`` (nothing is left for the KV
    cache) or ``kv`` (the KV cache of one sequence does not fit: ``max_context`` tokens would)."""
    world = max(config.tensor_parallel_size * config.pipeline_parallel_size, 1)
    weights, source = weight_bytes(model)
    per_token = kv_bytes_per_token(dict(model), config.kv_cache_dtype)
    state = _state_bytes(model)
    kv = kv_bytes(model, config.kv_cache_dtype, context) / world
    room = share_bytes - weights / world - overhead_bytes - state / world
    max_context = int(room * world / per_token) if per_token and room > 0 else (None if room > 0 else 0)
    limit = model_context(model)
    if max_context is not None and limit:
        max_context = min(max_context, limit)
    fits = weights / world + overhead_bytes + kv <= share_bytes
    return {"weights": weights / world, "weights_source": source, "kv": kv, "per_token": per_token, "units": world,
            "room": room, "max_context": max_context, "fits": fits,
            "problem": None if fits else ("weights" if room <= 0 else "kv")}


def memory_fit(model: ModelProfile, hardware: HardwareProfile, config: TwinConfig) -> MemoryFit:
    """{fits, weights_gb, kv_gb, context, budget_gb, max_context, ...} per unit of the cluster:
    weights + KV cache for one sequence at ``--max-model-len`` (what vLLM needs at least) against
    the share vLLM takes (``--gpu-memory-utilization`` of the unit's memory). Activations and
    CUDA graphs are not counted here (the unit's memory plan, ``sparkbench.memory``, adds them)."""
    total_gb = hardware.get("unified_memory_gb")
    limit = model_context(model)
    context = int(config.max_model_len or limit or 0)
    budget = float(total_gb or 0) * GB * config.gpu_memory_utilization
    fit = share_fit(model, config, context, budget)
    out: MemoryBase = {"context": context, "kv_cache_dtype": config.kv_cache_dtype, "units": fit["units"],
                 "weights_gb": fit["weights"] / GB, "weights_source": fit["weights_source"],
                 "kv_gb": fit["kv"] / GB, "kv_bytes_per_token": fit["per_token"],
                 "gpu_memory_utilization": config.gpu_memory_utilization, "model_context": limit}
    if limit and context > limit:
        return {**out, "fits": False, "budget_gb": None, "max_context": limit, "reason": context_reason(context, limit)}
    if not total_gb:
        return {**out, "fits": None, "budget_gb": None, "max_context": None,
                "reason": f"hardware profile {hardware.get('name')!r} gives no memory size"}
    return {**out, "budget_gb": budget / GB, "fits": fit["fits"], "max_context": fit["max_context"],
            "reason": None if fit["fits"] else _why_not(fit["problem"])}


def _why_not(problem: str | None) -> str:
    if problem == "weights":
        return ("the weights alone exceed vLLM's share of the memory: raise --gpu-memory-utilization or split the "
                "model over units (--tensor-parallel-size 2)")
    return ("weights and one sequence's KV cache exceed vLLM's share of the memory: lower --max-model-len, use an "
            "fp8 KV cache (--kv-cache-dtype fp8) or raise --gpu-memory-utilization")
