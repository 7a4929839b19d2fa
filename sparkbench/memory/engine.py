"""One vLLM engine's share of a unit's memory, what lies inside it, and what vLLM would refuse.

The share, as vLLM takes it:

* a GPU unit (GB10: one memory for CPU and GPU): ``--gpu-memory-utilization`` (vLLM's default
  ``VLLM_DEFAULT_GPU_MEMORY_UTILIZATION``) × the unit's total memory: vLLM sizes itself from a
  share of the *total*, not of what is free (the total is the hardware profile's
  ``unified_memory_gb``, ``sparkbench.memory.unit``);
* a CPU host (hardware profile with ``"device": "cpu"``): ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV
  cache (default ``CPU_KV_DEFAULT_GIB``) plus the weights plus ``CPU_RUNTIME_GB`` for the runtime.

Inside it (per unit of a tensor / pipeline parallel cluster): the weights, one sequence's KV cache
at ``--max-model-len`` for the KV-cache dtype (``sparkbench.memory.fit``, the same arithmetic
``sparkbench predict`` uses), activations and CUDA graphs (the model profile's ``memory`` block,
``activations_gb`` / ``cuda_graphs_gb``, where it has one; otherwise the stated allowances below,
none of them measured), and what is left for more sequences. ``--enforce-eager`` captures no
CUDA graphs.

Checks, each with vLLM's own message and its source so a user who has seen it recognises it: a
``--max-model-len`` beyond the model's context (unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``), the
weights alone beyond the share, one sequence's KV cache beyond what the share leaves.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from ..engine_config import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, PredictInputError, TwinConfig, _as_mapping
from ..errors import InputError
from ..launch import normalize_args
from .fit import GB, context_reason, model_context, share_fit

if TYPE_CHECKING:
    from ..launch import EnvValues, FlagValue
    from ..plan_types import HardwareProfile, ModelProfile
    from ..predict.shapes import ShareFit

GIB = 1024 ** 3
#: Stated allowances (GB), used where the model profile gives no ``memory`` block. vLLM profiles
#: activations with a dummy batch of --max-num-batched-tokens and captures CUDA graphs into a pool
#: it logs ("Graph capturing finished in %.0f secs, took %.2f GiB"); neither is measured here.
ACTIVATIONS_GB = 2.0
CUDA_GRAPHS_GB = 1.0
#: A CPU host: Python, torch and activations beside VLLM_CPU_KVCACHE_SPACE (GB, stated).
CPU_RUNTIME_GB = 2.0
#: VLLM_CPU_KVCACHE_SPACE when unset (GiB), as sparkbench.serve.deploy_plan reckons a CPU unit's need.
CPU_KV_DEFAULT_GIB = 4.0
#: vLLM's texts, with where they come from.
VLLM_CONTEXT = ("Value error, User-specified max_model_len ({context}) is greater than the derived max_model_len "
                "(max_position_embeddings={limit} or model_max_length=None in model's config.json). To allow "
                "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
                "vllm/config/model.py, ModelConfig's max_model_len check at start")
VLLM_KV = ("ValueError: To serve at least one request with the model's max seq len ({context}), ({need:.2f} GiB KV "
           "cache is needed, which is larger than the available KV cache memory ({room:.2f} GiB). Based on the "
           "available memory, the estimated maximum model length is {estimate}. Try increasing "
           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
           "vllm/v1/core/kv_cache_utils.py, check_enough_kv_cache_memory")
VLLM_NO_ROOM = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.", "vllm/v1/core/kv_cache_utils.py, check_enough_kv_cache_memory")


class MemoryProblem(TypedDict):
    """What vLLM would refuse of a unit's memory plan (``engine_row``'s checks, the plan's
    overcommit in ``sparkbench.memory.unit``): reason, remedy, vLLM's own message and its source."""

    id: str
    reason: str
    remedy: str
    vllm: str
    source: str


class Allowances(TypedDict):
    """Activations and CUDA graphs inside an engine's share (GB, ``allowances``) and where the figures come from."""

    activations_gb: float
    cuda_graphs_gb: float
    basis: str


class EngineContents(Allowances):
    """What lies inside an engine's share (``engine_row``): weights, one sequence's KV cache at
    ``--max-model-len``, the allowances, and what is left for more sequences (None: the total is unknown)."""

    weights_gb: float
    weights_source: str
    kv_gb: float
    kv_cache_dtype: str
    kv_bytes_per_token: float
    left_gb: float | None


class _RowRequired(TypedDict):
    kind: Literal["reserve", "tenant", "resident", "engine"]
    name: str
    gb: float | None
    share: str
    share_short: str


class MemoryRow(_RowRequired, total=False):
    """One row of a unit's memory plan: the system's reserve and a declared tenant
    (``sparkbench.memory.unit``), an engine (``engine_row``: the engine's keys) or a resident
    (``sparkbench.memory.resident_rows.rows``: an engine's keys, or its share unknown, and where it runs)."""

    model: str
    utilization: float | None
    contents: EngineContents
    context: int
    units: int
    max_context: int | None
    problems: list[MemoryProblem]
    variant: str | None
    run: str | None
    port: int | str | None


def is_cpu(hardware: HardwareProfile) -> bool:
    """A host whose vLLM runs on the CPU (its hardware profile says ``"device": "cpu"``)."""
    return str(hardware.get("device") or "") == "cpu"


def context_flag(value: Any, where: str) -> int | None:
    """``--max-model-len`` as vLLM reads it (``1k`` = 1000, ``1K`` = 1024, ``m``/``M``, ``g``/``G``);
    None when unset or ``auto`` / ``-1`` (vLLM takes the largest length that fits)."""
    if value is None or str(value).strip().lower() in ("", "auto", "-1"):
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", str(value))
    if not m:
        raise InputError(f"{where}: max-model-len {value!r} is not a length; write a number of tokens "
                         "(65536, 64k, 64K) or auto")
    unit = m.group(2)
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}[unit]
    return int(float(m.group(1)) * scale)


def _config(flags: Mapping[str, FlagValue], where: str) -> TwinConfig:
    """The flags the arithmetic reads (KV-cache dtype, tensor / pipeline parallel, share)."""
    try:
        return TwinConfig.from_args({k: v for k, v in flags.items() if k != "max-model-len"})
    except PredictInputError as exc:
        raise InputError(f"{where}: {exc}") from None


def allowances(model: ModelProfile, hardware: HardwareProfile, flags: Mapping[str, FlagValue]) -> Allowances:
    """Activations and CUDA graphs (GB) and where the figures come from."""
    given = model.get("memory") or {}
    eager = flags.get("enforce-eager") not in (None, False, "false", "False")
    if is_cpu(hardware):
        return {"activations_gb": float(given.get("activations_gb", CPU_RUNTIME_GB)), "cuda_graphs_gb": 0.0,
                "basis": "the model profile's memory block" if "activations_gb" in given
                else "a stated allowance for the runtime and activations, not measured"}
    graphs = 0.0 if eager else float(given.get("cuda_graphs_gb", CUDA_GRAPHS_GB))
    basis = "the model profile's memory block" if given else "stated allowances, not measured"
    return {"activations_gb": float(given.get("activations_gb", ACTIVATIONS_GB)), "cuda_graphs_gb": graphs,
            "basis": basis + ("; --enforce-eager: no CUDA graphs" if eager else "")}


def _share(hardware: HardwareProfile, flags: Mapping[str, FlagValue], env: EnvValues, total_gb: float | None,
           weights_gb: float, overhead_gb: float, where: str) -> tuple[float | None, float | None, str, str]:
    """``(share GB or None when the total is unknown, utilization or None, how it is reckoned, the
    same for the table's share column)``."""
    if is_cpu(hardware):
        try:
            kv_gib = float(env.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_DEFAULT_GIB)
        except (TypeError, ValueError):
            raise InputError(f"{where}: VLLM_CPU_KVCACHE_SPACE is {env.get('VLLM_CPU_KVCACHE_SPACE')!r}; set a "
                             "number of GiB (vllm_server_env), e.g. \"1\"") from None
        share = weights_gb + kv_gib * GIB / GB + overhead_gb
        return (share, None, f"VLLM_CPU_KVCACHE_SPACE {kv_gib:g} GiB + weights + {overhead_gb:g} GB",
                f"KV {kv_gib:g} GiB + weights")
    util = float(flags.get("gpu-memory-utilization") or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)
    default = not flags.get("gpu-memory-utilization")
    how = f"--gpu-memory-utilization {util:g}" + (" (vLLM's default)" if default else "")
    if not total_gb:
        return None, util, how + " of an unknown total", f"{util:g} x ?"
    return util * total_gb, util, f"{how} x {total_gb:g} GB", f"{util:g} x {total_gb:g} GB" + (" dflt" if default else "")


def engine_row(kind: Literal["resident", "engine"], name: str, model: ModelProfile, hardware: HardwareProfile,
               args: Mapping[str, FlagValue] | Sequence[str] | None, env: EnvValues | None,
               total_gb: float | None) -> MemoryRow:
    """One engine's row of the unit's plan: ``{kind, name, model, gb, utilization, share, contents,
    context, max_context, problems}`` (``kind``: ``engine`` — the one about to start — or
    ``resident``; ``gb`` None when the unit's total is unknown)."""
    where = f"{kind} {name}"
    flags = normalize_args(_as_mapping(args))
    env = {str(k): v for k, v in (env or {}).items()}
    config = _config(flags, where)
    limit = model_context(model)
    asked = context_flag(flags.get("max-model-len"), where)
    context = asked or limit or 0
    extra = allowances(model, hardware, flags)
    overhead_gb = extra["activations_gb"] + extra["cuda_graphs_gb"]
    fit = share_fit(model, config, context, 0.0, 0.0)
    share_gb, util, how, short = _share(hardware, flags, env, total_gb, fit["weights"] / GB, overhead_gb, where)
    if share_gb is not None:
        fit = share_fit(model, config, context, share_gb * GB, overhead_gb * GB)
    contents: EngineContents = {
        "weights_gb": fit["weights"] / GB, "weights_source": fit["weights_source"], "kv_gb": fit["kv"] / GB,
        "kv_cache_dtype": config.kv_cache_dtype, "kv_bytes_per_token": fit["per_token"], **extra,
        "left_gb": None if share_gb is None else max(share_gb - overhead_gb - (fit["weights"] + fit["kv"]) / GB, 0.0)}
    row: MemoryRow = {
        "kind": kind, "name": name, "model": str(model.get("id") or ""), "gb": share_gb, "utilization": util,
        "share": how, "share_short": short, "contents": contents, "context": context, "units": fit["units"],
        "max_context": fit["max_context"] if share_gb is not None else None}
    row["problems"] = _problems(row, fit, asked, limit, env, share_gb)
    return row


def _problems(row: MemoryRow, fit: ShareFit, asked: int | None, limit: int | None,
              env: EnvValues, share_gb: float | None) -> list[MemoryProblem]:
    """What vLLM would refuse of this engine alone (each with vLLM's own message and its source)."""
    long_ok = str(env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") or "").strip().lower() in ("1", "true")
    if asked and limit and asked > limit and not long_ok:
        text, src = VLLM_CONTEXT
        return [{"id": "max_model_len_beyond_model", "vllm": text.format(context=asked, limit=limit), "source": src,
                 "reason": f"{row['name']}: {context_reason(asked, limit)}",
                 "remedy": f"set max-model-len: {limit} or less (bench_common_args or the variant's args)"}]
    if share_gb is None or fit["problem"] is None:
        return []
    c = row["contents"]
    inside = (f"weights {c['weights_gb']:.1f} GB + activations {c['activations_gb']:g} GB + CUDA graphs "
              f"{c['cuda_graphs_gb']:g} GB")
    if fit["problem"] == "weights":
        text, src = VLLM_NO_ROOM
        return [{"id": "weights_beyond_share", "vllm": text, "source": src,
                 "reason": f"{row['name']}: {inside} leave nothing of its {share_gb:.1f} GB share ({row['share']}) "
                           "for the KV cache",
                 "remedy": "raise --gpu-memory-utilization (VLLM_CPU_KVCACHE_SPACE on a CPU host), or split the "
                           "model over two units (--tensor-parallel-size 2 across a cluster)"}]
    text, src = VLLM_KV
    room = max(fit["room"], 0.0)
    # vLLM's estimate is what the room holds; the model's context caps it unless overridden
    estimate = int(room * fit["units"] / fit["per_token"]) if long_ok and fit["per_token"] else fit["max_context"] or 0
    return [{"id": "kv_cache_beyond_share", "source": src,
             "vllm": text.format(context=row["context"], need=fit["kv"] / GIB, room=room / GIB, estimate=estimate),
             "reason": (f"{row['name']}: --max-model-len {row['context']:,} needs {fit['kv'] / GB:.2f} GB of KV cache "
                        f"for one sequence ({c['kv_cache_dtype']}, {c['kv_bytes_per_token']:,.0f} B a token); its "
                        f"{share_gb:.1f} GB share ({row['share']}) less {inside} leaves {room / GB:.2f} GB: at most "
                        f"{estimate:,} tokens fit"),
             "remedy": (f"lower max-model-len to {estimate} or less, use an fp8 KV cache (kv-cache-dtype: fp8), or "
                        "raise --gpu-memory-utilization (VLLM_CPU_KVCACHE_SPACE, vllm_server_env, on a CPU host)")}]
