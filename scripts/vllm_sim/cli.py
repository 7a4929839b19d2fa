"""``vllm serve`` command line: flags, vLLM's validation (per emulated version), start-up sequence."""
from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import signal
import sys
import threading
import time

from sparkbench.twin.pacing import PacingModel

from . import answers, profiles
from .engine import Engine
from .faults import Faults
from .gpustate import GpuState
from .knobs import KnobError, Knobs
from .metrics import Metrics
from .prefix_cache import PrefixCache
from .server import SimHTTPServer, read_messages
from .startup_log import StartupLog
from .vlog import access_log, fatal, log

QUANT_METHODS = ["awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
                 "modelopt_mixed", "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors",
                 "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8",
                 "online", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only",
                 "nvfp4_per_token", "mxfp8"]
MOE_BACKENDS = ["auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming", "triton_unfused", "aiter", "emulation"]
LINEAR_BACKENDS = ["auto", "cutlass", "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm", "flashinfer_cudnn",
                   "flashinfer_b12x", "b12x", "marlin", "humming", "triton", "deep_gemm", "torch", "aiter", "machete",
                   "fbgemm", "conch", "exllama", "emulation"]
REASONING_PARSERS = ["deepseek_r1", "deepseek_v3", "deepseek_v4", "ernie45", "glm45", "gemma4", "granite",
                     "hunyuan_a13b", "kimi_k2", "minimax_m2", "mistral", "nemotron_v3", "olmo3", "openai_gptoss",
                     "qwen3", "seed_oss", "step3"]
MTP_METHODS = {"mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "glm4_moe_mtp", "ernie_mtp", "nemotron_h_mtp",
               "mimo_mtp", "longcat_flash_mtp"}
SPEC_METHODS = {"ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "extract_hidden_states", "dflash",
                "ngram_gpu", "dspark"} | MTP_METHODS
DISTRIBUTED_BACKENDS = ["mp", "ray", "uni", "external_launcher"]
KV_DTYPES = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "nvfp4"]


def _norm(s: str) -> str:
    return s.lower().replace("-", "_")


def human_int(value: str) -> int:
    """vLLM's human-readable ints: ``4096``, ``4k`` (=4000), ``4K`` (=4096), ``25.6k``."""
    v = value.strip()
    mult = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if v and v[-1] in mult:
        return int(float(v[:-1]) * mult[v[-1]])
    return int(v)


def human_int_or_auto(value: str) -> int:
    """``--max-model-len``: a human-readable int, or ``-1``/``auto``."""
    if value.strip().lower() == "auto":
        return -1
    return human_int(value)


def build_parser() -> argparse.ArgumentParser:
    """The ``vllm serve`` flags the simulator accepts (unknown flags get argparse's error)."""
    p = argparse.ArgumentParser(prog="vllm serve", description="Start the vLLM OpenAI Compatible API server (simulated).")
    p.add_argument("model_tag", nargs="?", help="model name or path")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--quantization", "-q", type=str.lower, default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--max-model-len", type=human_int_or_auto, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=human_int, default=None)
    p.add_argument("--gpu-memory-utilization", "--device-memory-utilization", type=float, default=0.92)
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--speculative-config", "-sc", type=json.loads, default=None)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--num-gpu-blocks-override", type=int, default=None)
    p.add_argument("--enable-prompt-tokens-details", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--moe-backend", type=_norm, choices=MOE_BACKENDS, default="auto")
    p.add_argument("--linear-backend", type=_norm, choices=LINEAR_BACKENDS, default="auto")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--distributed-executor-backend", default=None)  # free text in vLLM (a class path too)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--revision", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--download-dir", default=None)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--default-chat-template-kwargs", type=json.loads, default=None)
    p.add_argument("--limit-mm-per-prompt", type=json.loads, default=None)
    p.add_argument("--allowed-local-media-path", default=None)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--tool-call-parser", default=None)
    return p


def system_fingerprint(version: str, args, model: dict) -> str:
    """``vllm-<version>-<8 hex>`` as vLLM 0.32 prints it: the version and a hash of the configuration."""
    import hashlib
    flags = {k: v for k, v in sorted(vars(args).items()) if k not in ("api_key", "host", "port")}
    # flags added for cluster mode leave a single unit's fingerprint as it was
    if flags.get("pipeline_parallel_size") == 1:
        flags.pop("pipeline_parallel_size")
    if flags.get("distributed_executor_backend") is None:
        flags.pop("distributed_executor_backend", None)
    for name in ("block_size", "num_gpu_blocks_override", "enable_prompt_tokens_details"):  # prefix-cache flags
        if not flags.get(name):
            flags.pop(name, None)
    digest = hashlib.sha256(json.dumps([model.get("id"), flags], sort_keys=True, default=str).encode()).hexdigest()
    return f"vllm-{version}-{digest[:8]}"


class App:
    """Everything the HTTP handlers need; built after validation."""

    def __init__(self, args, knobs: Knobs, hw: dict, model: dict, spec_k: int, pacing: PacingModel,
                 max_model_len: int, max_num_seqs: int, max_batched: int) -> None:
        self.args, self.knobs, self.hw, self.model = args, knobs, hw, model
        self.spec_k, self.pacing = spec_k, pacing
        self.max_model_len, self.max_num_seqs, self.max_batched = max_model_len, max_num_seqs, max_batched
        self.model_path = args.model_tag
        self.served_names = args.served_model_name or [args.model_tag]
        self.reasoning_parser = args.reasoning_parser if args.reasoning_parser not in (None, "", "none") else None
        # vLLM 0.32 loads a tool parser only with --enable-auto-tool-choice (parser/parser_manager.py)
        self.tool_parser = args.tool_call_parser if args.enable_auto_tool_choice else None
        self.tool_format = model.get("tool_call_format")   # the model's native call format (toolcalls.py)
        self.model_thinks = bool(model.get("reasoning_parser"))
        self.api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None
        weights = float(model.get("download_size_gb", 0)) * 1e9
        world = int(args.tensor_parallel_size or 1) * int(args.pipeline_parallel_size or 1)
        # TP x PP units each hold 1/world of the weights and of every token's KV entries
        budget = args.gpu_memory_utilization * float(hw["unified_memory_gb"]) * 1e9 * world - weights
        self.kv_capacity_tokens = max(budget, 1e9) / max(pacing.kv_bytes_per_token, 1.0)
        prefix = args.enable_prefix_caching if args.enable_prefix_caching is not None else True
        block = cache_block_size(args, model, prefix)
        num_blocks = args.num_gpu_blocks_override or int(self.kv_capacity_tokens // block)
        if args.num_gpu_blocks_override:
            self.kv_capacity_tokens = float(num_blocks * block)
        self.prefix_cache = PrefixCache(block, num_blocks, enabled=prefix)
        self.prompt_tokens_details = bool(args.enable_prompt_tokens_details)
        cache_info = {"block_size": block, "cache_dtype": args.kv_cache_dtype, "enable_prefix_caching": prefix,
                      "gpu_memory_utilization": args.gpu_memory_utilization,
                      "kv_cache_size_tokens": int(self.kv_capacity_tokens),
                      "num_gpu_blocks": num_blocks, "num_cpu_blocks": None,
                      "prefix_caching_hash_algo": "sha256", "sliding_window": None}
        self.metrics = Metrics(self.served_names[0], max_model_len, spec_k, cache_info=cache_info)
        self.faults = Faults(knobs)
        root = profiles.profiles_dir(knobs.profiles_dir)
        self.answers = answers.AnswerBook(root / "quality.json", knobs)
        self._seeds = itertools.count(knobs.seed * 1_000_003 + 17)
        self._seed_lock = threading.Lock()
        self.system_fingerprint = system_fingerprint(knobs.version, args, model)
        world = int(args.tensor_parallel_size or 1) * int(args.pipeline_parallel_size or 1)
        self.cluster_mode = world > 1 and args.distributed_executor_backend == "ray"
        self.workers = None  # cluster.RayWorkers in cluster mode
        self.unit_account = None  # unit_account.UnitAccount with VLLM_SIM_UNIT_DIR (join_unit)
        acc = (model.get("mtp") or {}).get("acceptance", []) if spec_k else []
        self.engine = Engine(pacing, self.metrics, self.faults, spec_k=spec_k, acceptance=acc,
                             max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched,
                             jitter=knobs.jitter, seed=knobs.seed, kv_capacity_tokens=self.kv_capacity_tokens,
                             request_noise=knobs.request_noise, gpu_state=GpuState(knobs.gpu_state_file),
                             prefix_cache=self.prefix_cache)

    def next_seed(self) -> int:
        with self._seed_lock:
            return next(self._seeds)

    def read_messages(self, msgs):
        return read_messages(msgs, bool(self.model.get("vision")))

    def access(self, handler, code: int) -> None:
        from http import HTTPStatus
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        host, port = handler.client_address[:2]
        access_log(f'{host}:{port} - "{handler.command} {handler.path} HTTP/1.1" {code} {phrase}')

    def models_body(self) -> dict:
        now = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": self.model_path,
             "parent": None, "max_model_len": self.max_model_len,
             "permission": [{"id": "modelperm-" + os.urandom(8).hex(), "object": "model_permission", "created": now,
                             "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                             "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                             "organization": "*", "group": None, "is_blocking": False}]}
            for name in self.served_names]}

    def info(self) -> dict:
        pm = self.pacing
        return {"simulated": True, "version": self.knobs.version, "flavor": self.knobs.flavor,
                "model": self.model["id"], "served_model_names": self.served_names,
                "hardware": self.hw.get("name"), "knobs": self.knobs.as_dict(),
                "flags": {k: v for k, v in vars(self.args).items() if k != "api_key"},
                "spec_k": self.spec_k, "acceptance": (self.model.get("mtp") or {}).get("acceptance", [])[:self.spec_k],
                "max_model_len": self.max_model_len, "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_batched,
                "cluster": self.workers.info() if self.workers is not None else None,
                "unit": self.engine.unit.info(time.time()) if self.engine.unit is not None else None,
                "prefix_cache": {"enabled": self.prefix_cache.enabled, "block_size": self.prefix_cache.block_size,
                                 "num_blocks": self.prefix_cache.num_blocks,
                                 "cached_blocks": len(self.prefix_cache.blocks),
                                 "evictions": self.prefix_cache.evictions},
                "pacing": {"time_scale": pm.time_scale, "bandwidth_bytes_s": pm.bw_bytes_s,
                           "dense_bytes": pm.dense_bytes, "expert_bytes_per_slot": pm.expert_bytes_slot,
                           "state_bytes": pm.state_bytes, "kv_bytes_per_token": pm.kv_bytes_per_token,
                           "predicted_bare_tok_s": 1.0 / pm.step(1, 0, 0.0),
                           "predicted_tok_s_1": pm.expected_rate(1), "predicted_tok_s_8": pm.expected_rate(8),
                           "tensor_parallel_size": pm.tp, "pipeline_parallel_size": pm.pp,
                           "link_bytes_s": pm.link_bytes_s, "allreduce_latency_s": pm.link_latency_s}}


def cache_block_size(args, model: dict, prefix: bool) -> int:
    """KV block size in tokens: --block-size, else 16; a hybrid (GDN/Mamba) model with prefix
    caching gets its profile's mamba_block_size (vLLM raises the attention block so one page
    holds one recurrent-state page, and caches in those blocks)."""
    if model.get("hybrid") and prefix and model.get("mamba_block_size"):
        return int(model["mamba_block_size"])
    return int(args.block_size or 16)


def _hit_rate_part(app: App) -> str:
    """``, Prefix cache hit rate: X%`` over the most recent 1000 requests (vLLM's CachingMetrics);
    empty with prefix caching off or before any request was scheduled (vLLM omits it then)."""
    rate = app.prefix_cache.hit_rate_pct()
    return "" if rate is None else f", Prefix cache hit rate: {rate:.1f}%"


def _stats_logger(app: App, interval: float) -> None:
    eng, m = app.engine, app.metrics
    last_t, last_p, last_g = time.time(), 0, 0
    last_spec = dict(m.spec)
    last_pos = list(m.per_pos)
    while True:
        time.sleep(interval)
        now = time.time()
        dt = max(now - last_t, 1e-9)
        p, g = eng.total_prompt, eng.total_generated
        idle = p == last_p and g == last_g and not eng.running and not eng.waiting
        if not idle:
            log(f"Engine 000: Avg prompt throughput: {(p - last_p) / dt:.1f} tokens/s, "
                f"Avg generation throughput: {(g - last_g) / dt:.1f} tokens/s, Running: {len(eng.running)} reqs, "
                f"Waiting: {len(eng.waiting)} reqs, GPU KV cache usage: {100 * m.gauges['vllm:kv_cache_usage_perc']:.1f}%"
                + _hit_rate_part(app), where="loggers.py:259")
            drafts = m.spec["drafts"] - last_spec["drafts"]
            if app.spec_k and drafts > 0:
                acc = m.spec["accepted"] - last_spec["accepted"]
                drafted = m.spec["draft_tokens"] - last_spec["draft_tokens"]
                rates = ", ".join(f"{(a - b) / drafts:.3f}" for a, b in zip(m.per_pos, last_pos))
                log(f"SpecDecoding metrics: Mean acceptance length: {1 + acc / drafts:.2f}, "
                    f"Accepted throughput: {acc / dt:.2f} tokens/s, Drafted throughput: {drafted / dt:.2f} tokens/s, "
                    f"Accepted: {int(acc)} tokens, Drafted: {int(drafted)} tokens, Per-position acceptance rate: {rates}, "
                    f"Avg Draft acceptance rate: {100 * acc / drafted:.1f}%", where="metrics.py:100")
        last_t, last_p, last_g = now, p, g
        last_spec, last_pos = dict(m.spec), list(m.per_pos)


def validate(args, knobs: Knobs, hw: dict, model: dict) -> tuple[int, int, int, int]:
    """vLLM's configuration checks for the emulated version; returns (spec_k, max_model_len,
    max_num_seqs, max_num_batched_tokens). Errors exit 1 with vLLM's exception line."""
    ver = knobs.version_tuple
    # --quantization
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
    # --enable-auto-tool-choice / --tool-call-parser (vLLM 0.32's texts)
    if args.enable_auto_tool_choice:
        from .toolcalls import TOOL_PARSERS
        if not args.tool_call_parser:
            fatal("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser")
        if args.tool_call_parser not in TOOL_PARSERS:
            fatal(f"TypeError: Error: --enable-auto-tool-choice requires tool_parser:'{args.tool_call_parser}' "
                  "which has not been registered")
    # --reasoning-parser
    if args.reasoning_parser not in (None, "", "none") and args.reasoning_parser not in REASONING_PARSERS:
        fatal(f"KeyError: 'invalid reasoning parser: {args.reasoning_parser} (chose from {{ {','.join(REASONING_PARSERS)} }})'")
    # --speculative-config
    spec_k = 0
    sc = args.speculative_config
    if sc is not None:
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
        spec_k = k
    # --linear-backend flashinfer_b12x: raises in <= 0.26 unless a community build ships the kernel.
    if args.linear_backend in ("flashinfer_b12x", "b12x") and ver <= (0, 26) and knobs.flavor != "community":
        fatal(f"ValueError: --linear-backend={args.linear_backend} was requested but no '{args.linear_backend}' "
              "kernel exists for this layer type.")
    # parallel config (vllm/config/parallel.py): world = TP x PP; more than this node's GPUs needs Ray
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
    # Mamba cache align mode (hybrid GDN models, prefix caching on, vLLM <= 0.26).
    prefix = args.enable_prefix_caching if args.enable_prefix_caching is not None else True
    bs = model.get("mamba_block_size")
    if (model.get("hybrid") and prefix and not model.get("supports_mamba_prefix_caching") and ver <= (0, 26)
            and bs and bs > max_batched):
        fatal(f"AssertionError: In Mamba cache align mode, block_size ({bs}) must be <= max_num_batched_tokens "
              f"({max_batched}).")
    return spec_k, mml, max_seqs, max_batched


def join_unit(app: App) -> None:
    """Take this engine's share of the simulated unit's memory (``VLLM_SIM_UNIT_DIR``) and share its
    bus, or fail at start as vLLM's worker does when the share does not fit (``request_memory``)."""
    knobs = app.knobs
    if not knobs.unit_dir:
        return
    from .unit_account import MemoryShortage, UnitAccount
    from .unit_traffic import UnitTraffic
    total = (knobs.unit_memory_gb or float(app.hw["unified_memory_gb"])) * 1e9
    about = {"model": app.model["id"], "served_model_name": app.served_names[0], "port": app.args.port}
    try:
        account = UnitAccount(knobs.unit_dir, total, knobs.unit_lease_s)
        account.register(app.args.gpu_memory_utilization, about)
    except MemoryShortage as e:
        log("EngineCore failed to start.", level="ERROR", where="core.py:708", proc="EngineCore")
        log(f"ValueError: {e}", level="ERROR", where="core.py:708", proc="EngineCore")
        sys.stderr.write(f"ValueError: {e}\n")
        fatal("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    except OSError as e:
        fatal(f"ValueError: VLLM_SIM_UNIT_DIR={knobs.unit_dir!r} is not a usable directory: {e}")
    atexit.register(account.release)
    app.unit_account = account
    app.engine.unit = UnitTraffic(account, app.pacing.bw_bytes_s, knobs.speedup)
    app.engine.unit.start()


def serve(argv: list[str]) -> int:
    """``vllm serve MODEL [flags]``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model_tag is None:
        args.model_tag = args.model_flag
    if args.model_tag is None:
        parser.error("the following arguments are required: model_tag (or --model)")
    try:
        knobs = Knobs.from_env()
    except KnobError as e:
        fatal(f"ValueError: {e}")
    log(f"vLLM API server version {knobs.version} (sparkbench simulator)", where="api_server.py:1906")
    log(f"non-default args: {{'model_tag': {args.model_tag!r}, 'model': {args.model_tag!r}}}", where="utils.py:253")
    try:
        hw = profiles.load_hardware(knobs.hardware, knobs.profiles_dir)
        model = profiles.find_model(args.model_tag, knobs.profiles_dir)
    except profiles.ProfileError as e:
        fatal(f"ValueError: vllm_sim: {e}")
    spec_k, mml, max_seqs, max_batched = validate(args, knobs, hw, model)
    if model.get("gated"):
        from . import hf
        cached = (hf.hub_cache(args.download_dir) / ("models--" + model["id"].replace("/", "--")) / "snapshots")
        if not hf._token(None) and not any(cached.glob("*/config.json")) and not os.path.isdir(args.model_tag):
            fatal(f"huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo "
                  f"{model['id']}: the model is not in the Hugging Face cache and no HF_TOKEN is set; "
                  "download it with a token first or pass HF_TOKEN.")
    kernels = StartupLog(args, knobs, hw, model)  # the kernel choices; an impossible one exits 1
    kernels.config()
    pacing = PacingModel(hw, model, version=knobs.version, kv_cache_dtype=args.kv_cache_dtype,
                         moe_backend=args.moe_backend, host_efficiency=knobs.efficiency,
                         bandwidth_gbps=knobs.bandwidth_gbps, spec_k=spec_k, clock_cap_mhz=knobs.clock_cap_mhz,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size)
    if knobs.rate:
        pacing.set_rate_override(knobs.rate)
    pacing.time_scale /= knobs.speedup
    app = App(args, knobs, hw, model, spec_k, pacing, mml, max_seqs, max_batched)

    def _on_term(signum, frame):  # PID 1 in a container ignores SIGTERM without a handler
        if app.unit_account is not None:  # os._exit skips atexit: give the unit's memory back here
            app.unit_account.release()
        log("Shutting down FastAPI HTTP server.", where="launcher.py:101")
        sys.stdout.flush()
        os._exit(0)
    signal.signal(signal.SIGTERM, _on_term)
    host = args.host if args.host is not None else "0.0.0.0"
    try:
        httpd = SimHTTPServer((host, args.port), app)
    except OSError as e:
        fatal(f"OSError: [Errno {e.errno}] {e.strerror}")
    join_unit(app)
    if model.get("hybrid") and (args.enable_prefix_caching is not False):
        mode = "all" if model.get("supports_mamba_prefix_caching") else "align"
        log(f"Mamba cache mode is set to '{mode}' for {model.get('architecture')} by default when prefix caching is enabled",
            level="INFO", where="config.py:310")
    if app.cluster_mode:
        from .cluster import RayWorkers  # the only place Ray is imported (lazily, in cluster mode)
        gpus = knobs.gpus_per_node if knobs.gpus_per_node is not None else int(hw.get("gpus_per_node", 1))
        app.workers = RayWorkers(args.tensor_parallel_size, args.pipeline_parallel_size, knobs.pg_timeout_s, gpus)
        app.workers.start()
        app.engine.workers = app.workers
    kernels.model_init()
    if spec_k:
        log(f"Resolved speculative method mtp with num_speculative_tokens={spec_k}", where="speculative.py:412")
    load = knobs.load_seconds + knobs.slow_load_seconds
    time.sleep(load)
    gib = float(model.get("download_size_gb", 0)) * 1e9 / 2 ** 30
    kernels.weights_loaded(load, gib)
    kernels.kv_cache(app.kv_capacity_tokens, app.kv_capacity_tokens * pacing.kv_bytes_per_token / 2 ** 30, mml)
    if knobs.crash_at_start:
        log("EngineCore failed to start.", level="ERROR", where="core.py:708", proc="EngineCore")
        fatal("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    kernels.warmed_up()
    app.engine.start()
    if not args.disable_log_stats:
        threading.Thread(target=_stats_logger, args=(app, knobs.log_interval), daemon=True, name="stats").start()
    httpd.server_activate()
    shown = f"[{host}]" if ":" in host else host
    log(f"Starting vLLM server on http://{shown}:{httpd.server_address[1]}", where="api_server.py:1951")
    log("Application startup complete.", where="on.py:62")
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        log("Shutting down FastAPI HTTP server.", where="launcher.py:101")
    return 0


def args_schema() -> dict:
    """The ``vllm serve`` flags this simulator accepts, as data in the format of
    ``sparkbench/data/vllm_args/*.json`` (``python3 scripts/vllm_sim args-schema``): a partial
    schema of the emulated version (the simulator knows the flags the article and the tests use)."""
    options = []
    for a in build_parser()._actions:
        if not a.option_strings or a.dest == "help":
            continue
        boolean = isinstance(a, (argparse.BooleanOptionalAction, argparse._StoreTrueAction))
        tname = getattr(a.type, "__name__", None) if a.type else None
        kind = ("bool" if boolean else "choice" if a.choices else "json" if tname == "loads"
                else "int" if tname in ("int", "human_int", "human_int_or_auto") else "float" if tname == "float" else "str")
        options.append({"flags": list(a.option_strings), "name": a.option_strings[0], "dest": a.dest, "kind": kind,
                        "boolean": boolean, "action": type(a).__name__,
                        "choices": sorted(a.choices) if a.choices else None})
    return {"vllm_version": Knobs.from_env().version, "partial": True,
            "source": {"extracted_from": "the sparkbench simulator's `vllm serve` parser (scripts/vllm_sim/cli.py "
                                         "build_parser), written from vLLM's flags and validation of the emulated "
                                         "version; partial: flags it does not know are checked against the nearest "
                                         "full schema",
                       "command": "python3 scripts/vllm_sim args-schema > sparkbench/data/vllm_args/0.25.0.json"},
            "options": sorted(options, key=lambda o: o["name"])}


def main(argv: list[str]) -> int:
    """Dispatch: ``serve``, ``--version``, and the image's stand-ins (``hf``, ``nvidia-smi``,
    ``dmesg``, ``bandwidth-probe``)."""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm {serve,--version} ... (sparkbench simulator)")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in ("--version", "-v", "version"):
        try:
            print(Knobs.from_env().version)
        except KnobError as e:
            fatal(f"ValueError: {e}")
        return 0
    if cmd == "serve":
        return serve(rest)
    if cmd in ("hf", "huggingface-cli"):
        from . import hf
        return hf.main(rest)
    if cmd == "nvidia-smi":
        from . import nvsmi
        return nvsmi.main(rest)
    if cmd == "dmesg":
        from . import nvsmi
        return nvsmi.dmesg_main(rest)
    if cmd == "bandwidth-probe":  # sparkbench's bandwidth probe on a simulated host
        from . import bandwidth
        return bandwidth.main(rest)
    if cmd == "args-schema":
        print(json.dumps(args_schema(), indent=1, sort_keys=True))
        return 0
    sys.stderr.write(f"vllm: error: argument subparser: invalid choice: '{cmd}' (choose from 'serve')\n")
    return 2
