"""Start-up lines that name the kernels vLLM chose, in vLLM's formats, chosen from the flags and
profiles as vLLM would on the emulated hardware.

Formats (vLLM's format strings, ``../shared/reference/vllm-logs-and-telemetry.md`` §1-§2, read in
the 0.25.0, 0.32.0 and 0.33.0 wheels):

- attention, auto: ``Using FLASHINFER attention backend out of potential backends:
  ['FLASHINFER', 'TRITON_ATTN'].`` (``platforms/cuda.py``; the list holds the backends that passed
  validation on CC 12.x, as GB10 logs show); forced by ``--attention-backend X``:
  ``Using AttentionBackendEnum.X backend.``; an unknown name: vLLM's
  ``ValueError: Unknown attention backend: 'X'. Valid options are: ...``.
- GDN models (Qwen3.5/3.6): ``Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128).``
  — FlashInfer on SM12.x when ``head_k_dim == 128`` and the CUDA runtime is 13 or newer, else
  ``Triton/FLA``.
- NVFP4 checkpoints: ``Using <Class> for NVFP4 GEMM``; auto gives ``MarlinNvFp4LinearKernel`` for a
  weight-only checkpoint (no ``activation_quantization`` in the profile: NVIDIA's modelopt builds,
  for which the article's v0.25.0 log reports MARLIN) and ``FlashInferCutlassNvFp4LinearKernel``
  for a W4A4 one (``activation_quantization``, e.g. compressed-tensors); ``--linear-backend``
  picks its kernel class; a backend with no NVFP4 kernel raises (≤ 0.26, vLLM's ValueError) or
  warns and falls back (later versions).
- NVFP4 MoE: ``Using 'MARLIN' NvFp4 MoE backend out of potential backends: [...]`` — the same
  format and candidate list for auto and for an explicit ``--moe-backend`` (``oracle/nvfp4.py``:
  MARLIN for a weight-only checkpoint, FLASHINFER_CUTLASS for W4A4); a backend without an NVFP4
  MoE kernel: vLLM's ``ValueError: moe_backend='x' is not supported for NvFP4 MoE. Expected one
  of [...]``.
- Marlin FP4 warning (WARNING, ``marlin_utils_fp4.py``) whenever a Marlin FP4 path (MoE or GEMM)
  is prepared, after the weights are loaded.
- ``Loading weights took %.2f seconds``, ``Model loading took %s GiB memory and %.6f seconds``
  (the simulated load: ``VLLM_SIM_LOAD_SECONDS`` + the slow-load fault; GiB = the profile's
  ``download_size_gb`` × 10⁹ / 2³⁰).
- ``Available KV cache memory: %s GiB`` (the KV budget the simulator uses:
  ``gpu_memory_utilization × unified_memory_gb × 10⁹ − weights``, in GiB) and the KV cache size
  in the emulated version's format: ≤ 0.28 two lines (``GPU KV cache size: N tokens`` then
  ``Maximum concurrency for L tokens per request: C.CCx``), ≥ 0.29 one line (``GPU KV cache size:
  N tokens, Maximum concurrency for L tokens per request: C.CCx``), thousands separators, N = the
  simulator's KV capacity in tokens, L = max_model_len, C = N / L.
- CUDA graphs: ``Graph capturing finished in 0 secs, took 0.00 GiB`` (the simulator captures
  nothing and its KV budget reserves no graph pool, so both figures are its own: zero), or with
  ``--enforce-eager`` ``Cudagraph is disabled under eager mode`` (``config/vllm.py``).
- ``init engine (profile, create kv cache, warmup model) took %.2f s``: the simulator's own wall
  time from the end of the load to the engine being ready.

With ``--tensor-parallel-size`` > 1 the per-worker lines come from ``Worker_TP0`` … ``Worker_TPn``
(``Worker_PP0`` … with ``--pipeline-parallel-size`` > 1, ``Worker_PP<p>_TP<t>`` with both; model
memory divided by TP x PP); otherwise from ``EngineCore``.
"""
from __future__ import annotations

import time

from .vlog import fatal, log

ATTENTION_BACKENDS = ["FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "ROCM_ATTN", "ROCM_AITER_MLA",
                      "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA_SPARSE", "TORCH_SDPA", "FLASHINFER",
                      "FLASHINFER_MLA", "FLASHINFER_MLA_SPARSE", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA",
                      "FLASHMLA_SPARSE", "FLASH_ATTN_MLA", "NO_ATTENTION", "FLEX_ATTENTION", "TREE_ATTN",
                      "ROCM_AITER_UNIFIED_ATTN", "CPU_ATTN", "TURBOQUANT", "CUSTOM"]
#: The attention backends that pass validation on CC 12.x (GB10) for the profiles' models, in priority order.
GB10_ATTENTION = ["FLASHINFER", "TRITON_ATTN"]
#: oracle/nvfp4.py AVAILABLE_BACKENDS (0.32/0.33): the candidate list every NvFp4 MoE line prints.
NVFP4_MOE_CANDIDATES = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED", "FLASHINFER_CUTLASS",
                        "VLLM_CUTLASS", "MARLIN", "HUMMING", "EMULATION"]
#: map_nvfp4_backend: --moe-backend value -> NvFp4MoeBackend value.
NVFP4_MOE_MAP = {"b12x": "B12X", "cutlass": "VLLM_CUTLASS", "flashinfer_trtllm": "FLASHINFER_TRTLLM",
                 "flashinfer_cutlass": "FLASHINFER_CUTLASS", "flashinfer_cutedsl": "FLASHINFER_CUTEDSL",
                 "flashinfer_moe_ep_cutedsl": "FLASHINFER_MOE_EP_CUTEDSL", "flashinfer_b12x": "FLASHINFER_B12X",
                 "marlin": "MARLIN", "humming": "HUMMING", "emulation": "EMULATION"}
#: _LINEAR_BACKEND_KERNEL_MAP restricted to NVFP4: --linear-backend value -> kernel class.
NVFP4_GEMM_MAP = {"b12x": "B12xNvFp4LinearKernel", "cutlass": "CutlassNvFp4LinearKernel",
                  "flashinfer_cutlass": "FlashInferCutlassNvFp4LinearKernel",
                  "flashinfer_cutedsl": "FlashInferCuteDslNvFp4LinearKernel",
                  "flashinfer_trtllm": "FlashInferTrtllmNvFp4LinearKernel",
                  "flashinfer_cudnn": "FlashInferCudnnNvFp4LinearKernel",
                  "flashinfer_b12x": "FlashInferB12xNvFp4LinearKernel", "humming": "HummingNvFp4LinearKernel",
                  "marlin": "MarlinNvFp4LinearKernel", "torch": "TorchNvFp4LinearKernel",
                  "fbgemm": "FbgemmNvFp4LinearKernel", "emulation": "EmulationNvFp4LinearKernel"}
MARLIN_FP4_WARNING = ("Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
                      "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade "
                      "performance for compute-heavy workloads.")


class StartupLog:
    """The kernel choices of one ``vllm serve`` and the lines that report them.

    Built after the flags are validated (an impossible choice exits 1 with vLLM's line); then
    :meth:`model_init`, :meth:`weights_loaded`, :meth:`kv_cache` and :meth:`warmed_up` print their
    lines at those points of the start-up sequence.
    """

    def __init__(self, args, knobs, hw: dict, model: dict) -> None:
        self.args, self.knobs, self.hw, self.model = args, knobs, hw, model
        self.version = knobs.version_tuple
        tp = max(int(getattr(args, "tensor_parallel_size", 1) or 1), 1)
        pp = max(int(getattr(args, "pipeline_parallel_size", 1) or 1), 1)
        # vLLM's worker process names: Worker_TP<t>, Worker_PP<p>, Worker_PP<p>_TP<t>
        self.procs = (["EngineCore"] if tp * pp == 1 else
                      [f"Worker{f'_PP{p}' if pp > 1 else ''}{f'_TP{t}' if tp > 1 else ''}"
                       for p in range(pp) for t in range(tp)])
        self.tp = tp * pp  # the share of the model (and KV cache) one worker holds: 1 / (TP x PP)
        nvfp4 = (model.get("quant_algo") or "").upper() in ("NVFP4", "FP4")
        w4a4 = bool(model.get("activation_quantization"))
        self.attention = self._attention()
        self.gdn = self._gdn()
        self.gemm, self.gemm_warning = self._gemm(nvfp4, w4a4)
        self.moe = self._moe(nvfp4, w4a4)
        self.marlin_fp4 = self.moe == "MARLIN" or self.gemm == "MarlinNvFp4LinearKernel"
        self.t_ready0 = time.monotonic()

    # ------------------------------------------------------------------ choices
    def _attention(self) -> tuple[str, list[str] | None]:
        forced = getattr(self.args, "attention_backend", None)
        if forced and forced.upper() != "AUTO":
            name = forced.upper()
            if name not in ATTENTION_BACKENDS:
                fatal(f"ValueError: Unknown attention backend: '{forced}'. "
                      f"Valid options are: {', '.join(ATTENTION_BACKENDS)}")
            return name, None
        return GB10_ATTENTION[0], list(GB10_ATTENTION)

    def _gdn(self) -> str | None:
        la = self.model.get("linear_attention") or {}
        if la.get("type") != "gdn":
            return None
        cuda = str(self.hw.get("cuda_version") or "0").split(".")[0]
        fast = int(la.get("head_k_dim") or 0) == 128 and cuda.isdigit() and int(cuda) >= 13
        return "FlashInfer" if fast else "Triton/FLA"

    def _gemm(self, nvfp4: bool, w4a4: bool) -> tuple[str | None, str | None]:
        if not nvfp4:
            return None, None
        auto = "FlashInferCutlassNvFp4LinearKernel" if w4a4 else "MarlinNvFp4LinearKernel"
        backend = self.args.linear_backend
        if backend == "auto":
            return auto, None
        if backend in NVFP4_GEMM_MAP:
            return NVFP4_GEMM_MAP[backend], None
        if self.version <= (0, 26):
            fatal(f"ValueError: --linear-backend={backend} was requested but no '{backend}' kernel exists for "
                  "this layer type.")
        return auto, (f"--linear-backend={backend} was requested, but no {backend} kernel exists for NVFP4 layers; "
                      "falling back to normal kernel selection for this layer.")

    def _moe(self, nvfp4: bool, w4a4: bool) -> str | None:
        if not (self.model.get("moe") and nvfp4):
            return None
        backend = self.args.moe_backend
        if backend == "auto":
            return "FLASHINFER_CUTLASS" if w4a4 else "MARLIN"
        if backend not in NVFP4_MOE_MAP:
            fatal(f"ValueError: moe_backend='{backend}' is not supported for NvFP4 MoE. "
                  f"Expected one of {list(NVFP4_MOE_MAP)}.")
        return NVFP4_MOE_MAP[backend]

    # ------------------------------------------------------------------ lines
    def config(self) -> None:
        """Engine-config time (APIServer): eager mode."""
        if self.args.enforce_eager:
            log("Cudagraph is disabled under eager mode", where="vllm.py:1929")

    def model_init(self) -> None:
        """Model construction (per worker): attention, GDN, GEMM kernel, MoE backend."""
        for proc in self.procs:
            name, cands = self.attention
            if cands is None:
                log(f"Using AttentionBackendEnum.{name} backend.", where="cuda.py:446", proc=proc)
            else:
                log(f"Using {name} attention backend out of potential backends: {cands}.", where="cuda.py:507",
                    proc=proc)
            if self.gdn:
                head = (self.model.get("linear_attention") or {}).get("head_k_dim")
                log(f"Using {self.gdn} GDN prefill kernel (requested=auto, head_k_dim={head}).",
                    where="qwen_gdn_linear_attn.py:222", proc=proc)
            if self.gemm_warning:
                log(self.gemm_warning, level="WARNING", where="__init__.py:418", proc=proc)
            if self.gemm:
                log(f"Using {self.gemm} for NVFP4 GEMM", where="__init__.py:1240", proc=proc)
            if self.moe:
                log(f"Using '{self.moe}' NvFp4 MoE backend out of potential backends: {NVFP4_MOE_CANDIDATES}.",
                    where="nvfp4.py:244", proc=proc)

    def weights_loaded(self, load_s: float, gib: float) -> None:
        """After the (simulated) load: weights time, the Marlin warning, model memory and time."""
        for proc in self.procs:
            log(f"Loading weights took {load_s:.2f} seconds", where="default_loader.py:501", proc=proc)
            if self.marlin_fp4:
                log(MARLIN_FP4_WARNING, level="WARNING", where="marlin_utils_fp4.py:341", proc=proc)
            log(f"Model loading took {gib / self.tp:.2f} GiB memory and {load_s:.6f} seconds",
                where="gpu_model_runner.py:5150", proc=proc)
        self.t_ready0 = time.monotonic()

    def kv_cache(self, kv_tokens: float, kv_gib: float, max_model_len: int) -> None:
        """KV memory and size in the emulated version's format (≤ 0.28: two lines; later: one)."""
        for proc in self.procs:
            log(f"Available KV cache memory: {kv_gib / self.tp:.2f} GiB", where="gpu_worker.py:760", proc=proc)
        tokens = int(kv_tokens)
        conc = tokens / max(int(max_model_len), 1)
        size = f"GPU KV cache size: {tokens:,} tokens"
        maxc = f"Maximum concurrency for {int(max_model_len):,} tokens per request: {conc:.2f}x"
        if self.version <= (0, 28):
            log(size, where="kv_cache_utils.py:1087", proc="EngineCore")
            log(maxc, where="kv_cache_utils.py:1091", proc="EngineCore")
        else:
            log(f"{size}, {maxc}", where="kv_cache_utils.py:2327", proc="EngineCore")

    def warmed_up(self) -> None:
        """CUDA graph capture (unless eager), then the engine-init time."""
        if not self.args.enforce_eager:
            t0 = time.monotonic()
            for proc in self.procs:
                log(f"Graph capturing finished in {time.monotonic() - t0:.0f} secs, took 0.00 GiB",
                    where="gpu_model_runner.py:6582", proc=proc)
        log(f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - self.t_ready0:.2f} s",
            where="core.py:402", proc="EngineCore")
