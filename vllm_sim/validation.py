"""vLLM's configuration checks of ``vllm serve``'s flags for the emulated version: each error exits 1
with the exception line vLLM prints."""
from __future__ import annotations

from .knobs import Knobs
from .serve_flags import (
    DISTRIBUTED_BACKENDS,
    KV_DTYPES,
    MTP_METHODS,
    QUANT_METHODS,
    REASONING_PARSERS,
    SPEC_METHODS,
)
from .vlog import fatal


def validate(args, knobs: Knobs, hw: dict, model: dict) -> tuple[int, int, int, int]:
    """vLLM's configuration checks for the emulated version; returns (spec_k, max_model_len,
    max_num_seqs, max_num_batched_tokens). Errors exit 1 with vLLM's exception line."""
    ver = knobs.version_tuple
    check_quantization(args, model)
    check_parsers(args)
    spec_k = speculative_tokens(args, model)
    # --linear-backend flashinfer_b12x: raises in <= 0.26 unless a community build ships the kernel.
    if args.linear_backend in ("flashinfer_b12x", "b12x") and ver <= (0, 26) and knobs.flavor != "community":
        fatal(f"ValueError: --linear-backend={args.linear_backend} was requested but no '{args.linear_backend}' "
              "kernel exists for this layer type.")
    check_parallel(args, knobs, hw)
    mml, max_seqs, max_batched = scheduler_limits(args, hw, model)
    # Mamba cache align mode (hybrid GDN models, prefix caching on, vLLM <= 0.26).
    prefix = args.enable_prefix_caching if args.enable_prefix_caching is not None else True
    bs = model.get("mamba_block_size")
    if (model.get("hybrid") and prefix and not model.get("supports_mamba_prefix_caching") and ver <= (0, 26)
            and bs and bs > max_batched):
        fatal(f"AssertionError: In Mamba cache align mode, block_size ({bs}) must be <= max_num_batched_tokens "
              f"({max_batched}).")
    return spec_k, mml, max_seqs, max_batched


def check_quantization(args, model: dict) -> None:
    """``--quantization`` against the method list and the checkpoint's own method, and
    ``--kv-cache-dtype`` against the cache dtypes."""
    fmt = model.get("checkpoint_format")
    resolved = {"modelopt": "modelopt_fp4" if (model.get("quant_algo") or "").upper() in ("NVFP4", "FP4") else "modelopt"}.get(fmt, fmt)
    if args.quantization:
        q = args.quantization
        if q not in QUANT_METHODS:
            fatal(f"ValueError: Unknown quantization method: {q}. Must be one of {QUANT_METHODS}.")
        q_res = "modelopt_fp4" if q in ("modelopt", "modelopt_fp4") and resolved == "modelopt_fp4" else q
        if fmt is not None and q_res != resolved:
            fatal(f"ValueError: Quantization method specified in the model config ({resolved}) does not match the "
                  f"quantization method specified in the `quantization` argument ({q}).")
    if args.kv_cache_dtype not in KV_DTYPES and not args.kv_cache_dtype.startswith(("turboquant_", "octave_")):
        fatal(f"ValueError: Invalid kv_cache_dtype: '{args.kv_cache_dtype}'. Valid values are: {KV_DTYPES}")


def check_parsers(args) -> None:
    """``--enable-auto-tool-choice`` / ``--tool-call-parser`` (vLLM 0.32's texts) and
    ``--reasoning-parser``."""
    if args.enable_auto_tool_choice:
        from .toolcalls import TOOL_PARSERS
        if not args.tool_call_parser:
            fatal("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser")
        if args.tool_call_parser not in TOOL_PARSERS:
            fatal(f"TypeError: Error: --enable-auto-tool-choice requires tool_parser:'{args.tool_call_parser}' "
                  "which has not been registered")
    if args.reasoning_parser not in (None, "", "none") and args.reasoning_parser not in REASONING_PARSERS:
        fatal(f"KeyError: 'invalid reasoning parser: {args.reasoning_parser} (chose from {{ {','.join(REASONING_PARSERS)} }})'")


def speculative_tokens(args, model: dict) -> int:
    """``--speculative-config``: the number of MTP tokens per step (0 without speculation)."""
    sc = args.speculative_config
    if sc is None:
        return 0
    if not isinstance(sc, dict):
        fatal("ValueError: --speculative-config must be a JSON object, e.g. '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'")
    method = sc.get("method")
    if method is None and sc.get("model"):
        method = "draft_model"
    if method not in SPEC_METHODS:
        fatal(f"ValueError: Unsupported speculative method: '{method}'")
    if method not in MTP_METHODS:
        fatal(f"NotImplementedError: vllm_sim: speculative method '{method}' is not simulated; use method 'mtp' "
              "with a model whose profile has mtp.supported = true")
    if not (model.get("mtp") or {}).get("supported"):
        fatal(f"ValueError: MTP speculative decoding requested but {model['id']} has no MTP layers "
              "(num_nextn_predict_layers = 0); drop --speculative-config")
    k = sc.get("num_speculative_tokens")
    n_predict = int(model["mtp"].get("n_predict", 1))
    if k is None:
        k = n_predict
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        fatal(f"ValueError: num_speculative_tokens must be a positive integer, got {k!r}")
    if k > n_predict and k % n_predict != 0:
        fatal(f"ValueError: num_speculative_tokens:{k} must be divisible by n_predict={n_predict}")
    return k


def check_parallel(args, knobs: Knobs, hw: dict) -> None:
    """The parallel config (vllm/config/parallel.py): world = TP x PP; more than this node's GPUs
    needs Ray."""
    backend = args.distributed_executor_backend
    if backend is not None and backend not in DISTRIBUTED_BACKENDS:
        fatal(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
              f"distributed_executor_backend\n  Input should be 'ray', 'mp', 'uni' or 'external_launcher' "
              f"[type=literal_error, input_value={backend!r}, input_type=str]")
    tp, pp = int(args.tensor_parallel_size or 1), int(args.pipeline_parallel_size or 1)
    if tp < 1 or pp < 1:
        fatal(f"ValueError: tensor_parallel_size ({tp}) and pipeline_parallel_size ({pp}) must be >= 1")
    gpus = knobs.gpus_per_node if knobs.gpus_per_node is not None else int(hw.get("gpus_per_node", 1))
    if tp * pp > gpus and args.distributed_executor_backend in (None, "mp", "uni"):
        fatal(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
              f"  Value error, World size ({tp * pp}) is larger than the number of available GPUs ({gpus}) in this "
              "node. If this is intentional and you are using:\n"
              "- ray, set '--distributed-executor-backend ray'.\n"
              "- multiprocessing, set '--nnodes' appropriately.")


def scheduler_limits(args, hw: dict, model: dict) -> tuple[int, int, int]:
    """(max_model_len, max_num_seqs, max_num_batched_tokens) from the flags and the profiles'
    defaults, and ``--gpu-memory-utilization``'s range."""
    mml = args.max_model_len if args.max_model_len not in (None, -1) else int(model["max_model_len"])
    if mml <= 0 and mml != -1:
        fatal(f"ValueError: max_model_len must be a positive integer, got {mml}")
    if mml > int(model["max_model_len"]):
        fatal(f"ValueError: User-specified max_model_len ({mml}) is greater than the derived max_model_len "
              f"(max_position_embeddings={model['max_model_len']} in model's config.json). To allow overriding this "
              "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    max_seqs = args.max_num_seqs or int(hw.get("default_max_num_seqs", 256))
    max_batched = args.max_num_batched_tokens or int(hw["default_max_num_batched_tokens"])
    if args.max_num_batched_tokens is None:
        max_batched = min(max_batched, max_seqs * mml)
    if not 0 < args.gpu_memory_utilization <= 1:
        fatal(f"ValueError: gpu_memory_utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    return mml, max_seqs, max_batched
