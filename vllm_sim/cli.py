"""``vllm serve``'s start-up sequence and the command's dispatch; the flags are in
:mod:`.serve_flags`, vLLM's checks of them in :mod:`.validation`."""
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
from .serve_flags import args_schema, build_parser
from .server import SimHTTPServer, read_messages
from .startup_log import StartupLog
from .validation import validate
from .vlog import access_log, fatal, log


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
        self.answers = answers.AnswerBook(profiles.quality_prompts(knobs.profiles_dir), knobs)
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
    args, knobs, hw, model = read_configuration(argv)
    spec_k, mml, max_seqs, max_batched = validate(args, knobs, hw, model)
    if model.get("gated"):
        check_gated_access(args, model)
    kernels = StartupLog(args, knobs, hw, model)  # the kernel choices; an impossible one exits 1
    kernels.config()
    app = App(args, knobs, hw, model, spec_k, pacing_model(args, knobs, hw, model, spec_k), mml, max_seqs,
              max_batched)

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
    start_engine(app, kernels)
    httpd.server_activate()
    shown = f"[{host}]" if ":" in host else host
    log(f"Starting vLLM server on http://{shown}:{httpd.server_address[1]}", where="api_server.py:1951")
    log("Application startup complete.", where="on.py:62")
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        log("Shutting down FastAPI HTTP server.", where="launcher.py:101")
    return 0


def read_configuration(argv: list[str]) -> tuple[argparse.Namespace, Knobs, dict, dict]:
    """The flags, the ``VLLM_SIM_*`` knobs and the hardware and model profiles, with vLLM's first
    log lines; a bad knob or a missing profile exits 1."""
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
    return args, knobs, hw, model


def check_gated_access(args, model: dict) -> None:
    """A gated model starts only from the Hugging Face cache, a local folder or with a token."""
    from . import hf
    cached = (hf.hub_cache(args.download_dir) / ("models--" + model["id"].replace("/", "--")) / "snapshots")
    if not hf._token(None) and not any(cached.glob("*/config.json")) and not os.path.isdir(args.model_tag):
        fatal(f"huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo "
              f"{model['id']}: the model is not in the Hugging Face cache and no HF_TOKEN is set; "
              "download it with a token first or pass HF_TOKEN.")


def pacing_model(args, knobs: Knobs, hw: dict, model: dict, spec_k: int) -> PacingModel:
    """The step-time model (sparkbench.twin) for these flags and knobs, on the simulated clock."""
    pacing = PacingModel(hw, model, version=knobs.version, kv_cache_dtype=args.kv_cache_dtype,
                         moe_backend=args.moe_backend, host_efficiency=knobs.efficiency,
                         bandwidth_gbps=knobs.bandwidth_gbps, spec_k=spec_k, clock_cap_mhz=knobs.clock_cap_mhz,
                         tensor_parallel_size=args.tensor_parallel_size,
                         pipeline_parallel_size=args.pipeline_parallel_size)
    if knobs.rate:
        pacing.set_rate_override(knobs.rate)
    pacing.time_scale /= knobs.speedup
    return pacing


def start_engine(app: App, kernels: StartupLog) -> None:
    """From the model's initialisation to the warmed-up engine: the Ray workers in cluster mode,
    the weights' load time, the KV cache, a crash at start when asked, then the engine thread and
    the stats logger."""
    args, knobs, hw, model = app.args, app.knobs, app.hw, app.model
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
    if app.spec_k:
        log(f"Resolved speculative method mtp with num_speculative_tokens={app.spec_k}", where="speculative.py:412")
    load = knobs.load_seconds + knobs.slow_load_seconds
    time.sleep(load)
    gib = float(model.get("download_size_gb", 0)) * 1e9 / 2 ** 30
    kernels.weights_loaded(load, gib)
    kernels.kv_cache(app.kv_capacity_tokens, app.kv_capacity_tokens * app.pacing.kv_bytes_per_token / 2 ** 30,
                     app.max_model_len)
    if knobs.crash_at_start:
        log("EngineCore failed to start.", level="ERROR", where="core.py:708", proc="EngineCore")
        fatal("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    kernels.warmed_up()
    app.engine.start()
    if not args.disable_log_stats:
        threading.Thread(target=_stats_logger, args=(app, knobs.log_interval), daemon=True, name="stats").start()


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
