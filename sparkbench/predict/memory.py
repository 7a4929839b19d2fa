"""Does the model fit the unit's memory at the requested context? Weights + KV cache for one
sequence at ``--max-model-len`` (what vLLM needs at least) against the share vLLM takes
(``--gpu-memory-utilization`` of the unit's memory). Activations and CUDA graphs are not counted."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..twin.pacing import PacingModel
from .config import TwinConfig

GB = 1e9


def weight_bytes(model: Mapping[str, Any]) -> tuple[float, str]:
    """The checkpoint's bytes and where the figure comes from."""
    if model.get("checkpoint_bytes"):
        return float(model["checkpoint_bytes"]), "the safetensors headers"
    if model.get("download_size_gb"):
        return float(model["download_size_gb"]) * GB, "the profile's download size"
    return float(model["total_params_b"]) * GB * float(model["weight_bits"]) / 8.0, "parameters x weight bits"


def memory_fit(model: Mapping[str, Any], hardware: Mapping[str, Any], config: TwinConfig,
               twin: PacingModel) -> dict[str, Any]:
    """{fits, weights_gb, kv_gb, context, budget_gb, max_context, ...} per unit of the cluster
    (tensor and pipeline parallel split weights and KV cache over the units)."""
    total_gb = hardware.get("unified_memory_gb")
    limit = int(model.get("max_model_len") or 0) or None
    context = int(config.max_model_len or limit or 0)
    world = max(config.tensor_parallel_size * config.pipeline_parallel_size, 1)
    weights, source = weight_bytes(model)
    per_token = twin.kv_bytes_per_token
    state = twin.state_bytes / 2.0
    kv = (per_token * context + state) / world
    out: dict[str, Any] = {"context": context, "kv_cache_dtype": config.kv_cache_dtype, "units": world,
                           "weights_gb": weights / world / GB, "weights_source": source, "kv_gb": kv / GB,
                           "kv_bytes_per_token": per_token, "gpu_memory_utilization": config.gpu_memory_utilization}
    out["model_context"] = limit
    if limit and context > limit:
        return {**out, "fits": False, "budget_gb": None, "max_context": limit,
                "reason": f"--max-model-len {context:,} is beyond the model's context ({limit:,} tokens): "
                          "vLLM refuses to start; use a value at or below it"}
    if not total_gb:
        return {**out, "fits": None, "budget_gb": None, "max_context": None,
                "reason": f"hardware profile {hardware.get('name')!r} gives no memory size"}
    budget = float(total_gb) * GB * config.gpu_memory_utilization
    room = budget - weights / world - state / world
    max_context = int(room * world / per_token) if per_token and room > 0 else (None if room > 0 else 0)
    if max_context is not None and limit:
        max_context = min(max_context, limit)
    fits = weights / world + kv <= budget
    return {**out, "budget_gb": budget / GB, "fits": fits, "max_context": max_context,
            "reason": None if fits else _why_not(room)}


def _why_not(room: float) -> str:
    if room <= 0:
        return ("the weights alone exceed vLLM's share of the memory: raise --gpu-memory-utilization or split the "
                "model over units (--tensor-parallel-size 2)")
    return ("weights and one sequence's KV cache exceed vLLM's share of the memory: lower --max-model-len, use an "
            "fp8 KV cache (--kv-cache-dtype fp8) or raise --gpu-memory-utilization")
