"""The report's numbers per result: accessors, the roofline, the per-host rows (pure, no I/O).

One result document = ``results/<run-id>/<host>/<variant>.json`` (``schema/result.schema.json``).
Every function takes already-loaded documents and returns plain lists/dicts of numbers; the text
is made in :mod:`sparkbench.report.sections` and :mod:`sparkbench.report.terminal`. A missing
figure is ``None`` (shown as "–"), never an invented number. Every other part of the report (the
comparisons, the charts, the manifest, the terminal table) reads results through these accessors.

Formulas (units in the names):

- single-stream decode tok/s: ``single.decode_tok_s_median`` with ``_min`` / ``_max`` (median of
  the runs; decode excludes TTFT, as measured by measure.py).
- speedup vs bare (×) = single median of the variant / single median of the same host's variant
  with the same ``build`` and ``model`` whose ``config`` is ``bare``.
- combined tok/s at N = ``parallel[concurrency == N].combined_tok_s``.
- mean acceptance length (tokens per verify step) = ``spec_decode.mean_acceptance_length``, else
  1 + Σ acceptance per position.
- roofline (the one formula): bytes per token = active params × bits per weight / 8 + KV-cache
  bytes read at the measured context (KV bytes per context token × (prompt tokens + output
  tokens / 2); 0 and "weights only" when the model profile has no KV geometry); roofline tok/s =
  bandwidth (GB/s × 1e9) / bytes per token. Bare runs report measured / roofline × 100 (%); MTP
  runs report tokens per step instead, since several tokens per weight pass can exceed the
  one-token roofline. No roofline (``skipped`` says why) when the hardware profile is a CPU host
  (``"roofline": false`` or ``"device": "cpu"``, e.g. ``x86-cpu``) or when the figures were
  measured on a CPU (``manifest.backend`` ``vllm-cpu``, or a ``manifest.gpu`` of ``none …``) but
  the profile describes a GPU: a Spark's bandwidth bound says nothing about them.
- a cluster variant (a result with a top-level ``cluster`` block, written under the head host):
  one unit, ``unit_of`` = ``"<cluster name> (<head> + <worker>)"``, its layout ``TP=2`` / ``PP=2``
  from ``cluster.tensor_parallel_size`` / ``pipeline_parallel_size`` (else the launch flags); its
  rows carry ``unit``, ``cluster``, ``members``, ``parallel`` (one-unit rows keep their keys). Its
  roofline with TP > 1 is TP × one node's (each node reads 1/TP of the bytes per token).
- matrix order (report order, and the reference build = the first build listed): by
  ``variant.index`` (the matrix position the variant expansion records), else by ``started_at``
  (a host measures its variants in matrix order), then by name.
"""

from __future__ import annotations

from statistics import median
from typing import Any, Iterable

CONCURRENCIES: tuple[int, ...] = (2, 4, 8)
QUALITY_IDS: tuple[str, ...] = ("capital_50", "free_text", "code", "arithmetic")
#: Bits per weight when the model profile names a quantization but no ``weight_bits``:
#: NVFP4 = 4-bit values + one FP8 scale per 16 weights = 4 + 8/16 = 4.5 bits; MXFP4 = 4 + 8/32.
QUANT_BITS: dict[str, float] = {"nvfp4": 4.5, "mxfp4": 4.25, "fp8": 8.0, "int8": 8.0, "bf16": 16.0,
                                "fp16": 16.0, "int4": 4.0}
#: KV-cache element size in bits by ``--kv-cache-dtype``.
KV_DTYPE_BITS: dict[str, float] = {"fp8": 8.0, "fp8_e4m3": 8.0, "fp8_e5m2": 8.0, "auto": 16.0,
                                   "bfloat16": 16.0, "float16": 16.0}


# --------------------------------------------------------------------------- accessors

def dig(doc: Any, *path: Any, default: Any = None) -> Any:
    """``doc[path[0]][path[1]]...`` or ``default`` when any step is missing or null."""
    cur = doc
    for key in path:
        if isinstance(cur, dict):
            cur = cur.get(key)
        elif isinstance(cur, list) and isinstance(key, int) and -len(cur) <= key < len(cur):
            cur = cur[key]
        else:
            return default
        if cur is None:
            return default
    return cur


def num(value: Any) -> float | None:
    """``value`` as a float when it is a real number (bools and strings are not), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value:  # NaN
        return None
    return float(value)


def host_of(result: dict) -> str:
    """The host name of a result (``host`` key; ``"?"`` when absent)."""
    return str(result.get("host") or "?")


def variant_of(result: dict) -> dict:
    """The ``variant`` object of a result (a bare string is taken as the name)."""
    v = result.get("variant")
    if isinstance(v, str):
        return {"name": v}
    return v if isinstance(v, dict) else {}


def variant_name(result: dict) -> str:
    """The variant name (``variant.name``; ``"?"`` when absent)."""
    return str(variant_of(result).get("name") or "?")


def build_of(result: dict) -> str | None:
    """The variant's build (e.g. ``nvidia``), None when absent."""
    return variant_of(result).get("build")


def config_of(result: dict) -> str | None:
    """The variant's configuration (e.g. ``bare``, ``mtp2``), None when absent."""
    return variant_of(result).get("config")


def model_of(result: dict) -> str | None:
    """The served model id: ``variant.model``, else ``server.model``, else ``manifest.model``."""
    return variant_of(result).get("model") or dig(result, "server", "model") or dig(result, "manifest", "model")


def model_key(result: dict) -> str | None:
    """The model without its organisation (``nvidia/Qwen3.6-35B-A3B-NVFP4`` → ``Qwen3.6-35B-A3B-NVFP4``):
    builds of the same model from different publishers share it, so head-to-head pairs them."""
    model = model_of(result)
    return model.rsplit("/", 1)[-1] if model else None


def is_simulated(result: dict) -> bool:
    """True when the figures come from the simulator (top-level or manifest ``simulated``)."""
    return bool(result.get("simulated") or dig(result, "manifest", "simulated"))


def is_measured(result: dict) -> bool:
    """True when the result has figures (status complete or incomplete, not failed)."""
    return result.get("status") in ("complete", "incomplete")


def is_bare(result: dict) -> bool:
    """True for a configuration without speculative decoding (``config == "bare"``)."""
    return config_of(result) == "bare"


def is_speculative(result: dict) -> bool:
    """True when the variant drafts tokens: spec-decode figures recorded, a ``--speculative-config``
    launch flag, or a configuration named ``mtp…``/``spec…``/``eagle…``/``draft…``."""
    if acceptance(result) or num(dig(result, "spec_decode", "mean_acceptance_length")) is not None:
        return True
    if launch_arg(result, "--speculative-config") is not None:
        return True
    cfg = (config_of(result) or "").lower()
    return cfg.startswith(("mtp", "spec", "eagle", "draft"))


def cluster_of(result: dict) -> dict | None:
    """The result's ``cluster`` block (a variant served across several hosts, Ray;
    ``sparkbench.cluster.cluster_block``), None for a one-unit result."""
    c = result.get("cluster") if isinstance(result, dict) else None
    return c if isinstance(c, dict) else None


def is_cluster(result: dict) -> bool:
    """True when the result was measured on a cluster (it has a ``cluster`` block): one unit made
    of several hosts, written under the head host; never a peer of a one-Spark host."""
    return cluster_of(result) is not None


def cluster_members(result: dict) -> list[str]:
    """The cluster's hosts, head first: ``cluster.members``, else the nodes' hosts, else the head."""
    c = cluster_of(result) or {}
    members = c.get("members")
    if isinstance(members, list) and members:
        return [str(m) for m in members]
    nodes = [str(x.get("host")) for x in c.get("nodes") or [] if isinstance(x, dict) and x.get("host")]
    return nodes or [str(c.get("head") or host_of(result))]


def unit_of(result: dict) -> str:
    """The unit that produced the figures, as the tables show it: the host, or for a cluster
    ``"<name> (<head> + <worker>)"``, e.g. ``sim_pair (spark-sim11 + spark-sim12)``."""
    c = cluster_of(result)
    if c is None:
        return host_of(result)
    return f"{c.get('name') or 'cluster'} ({' + '.join(cluster_members(result))})"


def unit_fields(result: dict) -> dict:
    """``{"unit": unit_of(result)}`` for a cluster result, {} otherwise (rows of one-unit results
    keep exactly their keys)."""
    return {"unit": unit_of(result)} if is_cluster(result) else {}


def _int_arg(result: dict, *flags: str) -> int | None:
    """The first of ``flags`` given at launch, as an integer (None when absent or not a number)."""
    for flag in flags:
        value = launch_arg(result, flag)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return None
    return None


def parallel_sizes(result: dict) -> tuple[int, int]:
    """(tensor parallel size, pipeline parallel size): the ``cluster`` block's
    ``tensor_parallel_size`` / ``pipeline_parallel_size``, else the launch flags
    ``--tensor-parallel-size`` / ``-tp`` and ``--pipeline-parallel-size`` / ``-pp``; 1 when unset."""
    c = cluster_of(result) or {}
    tp = num(c.get("tensor_parallel_size"))
    pp = num(c.get("pipeline_parallel_size"))
    tp_i = int(tp) if tp is not None else _int_arg(result, "--tensor-parallel-size", "-tp")
    pp_i = int(pp) if pp is not None else _int_arg(result, "--pipeline-parallel-size", "-pp")
    return (tp_i or 1, pp_i or 1)


def parallel_label(result: dict) -> str | None:
    """``TP=2``, ``PP=2``, ``TP=2 × PP=2``; None when neither is above 1."""
    tp, pp = parallel_sizes(result)
    parts = ([f"TP={tp}"] if tp > 1 else []) + ([f"PP={pp}"] if pp > 1 else [])
    return " × ".join(parts) or None


def matrix_position(result: dict) -> tuple[float, str, str]:
    """Sort key of the matrix order: ``variant.index``, else ``started_at``, then the name."""
    index = num(variant_of(result).get("index"))
    return (index if index is not None else float("inf"), str(result.get("started_at") or "~"),
            variant_name(result))


def sort_results(results: Iterable[dict]) -> list[dict]:
    """Results in report order: by host, then in matrix order (:func:`matrix_position`)."""
    return sorted(results, key=lambda r: (host_of(r), matrix_position(r)))


def build_order(results: Iterable[dict]) -> list[str]:
    """Builds in the order the matrix lists them (the earliest :func:`matrix_position` of any of
    their results, then the name); the first one is the reference build of every comparison."""
    first: dict[str, tuple] = {}
    for r in results:
        b = build_of(r)
        if b is None:
            continue
        pos = matrix_position(r)[:2]
        if b not in first or pos < first[b]:
            first[b] = pos
    return sorted(first, key=lambda b: (first[b], b))


def single_stats(result: dict) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) single-stream decode tok/s; Nones when not measured."""
    s = result.get("single") if is_measured(result) else None
    return (num(dig(s, "decode_tok_s_median")), num(dig(s, "decode_tok_s_min")),
            num(dig(s, "decode_tok_s_max")))


def combined_at(result: dict, concurrency: int) -> float | None:
    """Combined tok/s (all streams' completion tokens / wall time) at ``concurrency`` parallel."""
    if not is_measured(result):
        return None
    for entry in result.get("parallel") or []:
        if isinstance(entry, dict) and entry.get("concurrency") == concurrency:
            return num(entry.get("combined_tok_s"))
    return None


def acceptance(result: dict) -> list[float]:
    """MTP acceptance rate per draft position (unconditional rates, position 1 first); [] for bare."""
    rates = dig(result, "spec_decode", "acceptance_per_position") or []
    return [float(x) for x in rates if num(x) is not None]


def mean_acceptance_length(result: dict) -> float | None:
    """Tokens per verify step = ``spec_decode.mean_acceptance_length``, else 1 + Σ per-position rates."""
    value = num(dig(result, "spec_decode", "mean_acceptance_length"))
    if value is not None:
        return value
    rates = acceptance(result)
    return 1.0 + sum(rates) if rates else None


def _argv(result: dict) -> list[str]:
    """The launch argv as recorded: ``launch.argv``, else ``variant.args`` as a list, else the
    ``launch_command`` split on spaces."""
    for value in (dig(result, "launch", "argv"), variant_of(result).get("args")):
        if isinstance(value, list):
            return [str(a) for a in value]
    cmd = result.get("launch_command")
    return cmd.split() if isinstance(cmd, str) else []


def launch_arg(result: dict, flag: str) -> str | None:
    """The value of launch flag ``flag`` (``--kv-cache-dtype``): from ``variant.args`` as a mapping
    (flag name without dashes → value), else from the recorded argv or command line."""
    args = variant_of(result).get("args")
    if isinstance(args, dict):
        wanted = flag.lstrip("-").replace("_", "-")
        for key, value in args.items():
            if str(key).lstrip("-").replace("_", "-") == wanted and value is not None and value is not False:
                return value if isinstance(value, str) else str(value)
    tokens = _argv(result)
    for i, tok in enumerate(tokens):
        if tok == flag and i + 1 < len(tokens):
            return tokens[i + 1]
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


# --------------------------------------------------------------------------- roofline

def weight_bits(model_profile: dict) -> float | None:
    """Bits per weight: ``weight_bits`` (or ``bits_per_weight``), else from ``quantization`` (NVFP4 = 4.5)."""
    bits = num(model_profile.get("weight_bits"))
    if bits is None:
        bits = num(model_profile.get("bits_per_weight"))
    if bits is not None:
        return bits
    quant = str(model_profile.get("quantization") or "").lower()
    return QUANT_BITS.get(quant)


def kv_bytes_per_context_token(model_profile: dict, kv_dtype: str | None) -> float | None:
    """KV-cache bytes one decode step reads per token of context, from the model profile:
    ``kv_bytes_per_token`` when given, else 2 (K and V) × attention layers × KV heads × head dim ×
    KV element bits / 8 (geometry from ``attention.{full_attention_layers, num_kv_heads, head_dim}``
    as in ``profiles/models/*.json``, or flat ``kv_layers``/``kv_heads``/``head_dim``; the
    linear-attention state of hybrid models is constant per step and left out; element bits from
    ``--kv-cache-dtype``, 16 when unset). None when the profile has no KV geometry."""
    direct = num(model_profile.get("kv_bytes_per_token"))
    if direct is not None:
        return direct
    att = model_profile.get("attention") if isinstance(model_profile.get("attention"), dict) else {}
    layers = num(att.get("full_attention_layers") or model_profile.get("kv_layers")
                 or model_profile.get("attention_layers") or model_profile.get("num_kv_layers"))
    heads = num(att.get("num_kv_heads") or model_profile.get("kv_heads") or model_profile.get("num_kv_heads"))
    head_dim = num(att.get("head_dim") or model_profile.get("head_dim"))
    if layers is None or heads is None or head_dim is None:
        return None
    bits = KV_DTYPE_BITS.get(str(kv_dtype or "auto").lower(), 16.0)
    return 2.0 * layers * heads * head_dim * bits / 8.0


def backend_of(result: dict) -> str | None:
    """What served the figures: ``manifest.backend`` (``simulator``, ``vllm``, ``vllm-cpu``), else
    ``simulator`` for simulated results; None when the result does not say."""
    backend = dig(result, "manifest", "backend")
    if backend:
        return str(backend)
    return "simulator" if is_simulated(result) else None


def measured_on_cpu(result: dict) -> bool:
    """True when the figures come from a CPU (backend ``vllm-cpu``, or the manifest's GPU is ``none …``)."""
    gpu = str(dig(result, "manifest", "gpu") or "")
    return backend_of(result) == "vllm-cpu" or gpu.lower().startswith("none")


def roofline_skip_reason(result: dict) -> str | None:
    """Why this result gets no roofline (None when it gets one, see :func:`roofline`)."""
    hw = dig(result, "profile", "hardware") or {}
    name = hw.get("name") or "?"
    if hw.get("roofline") is False or str(hw.get("device") or "").lower() == "cpu":
        return (f"no Spark roofline: the figures come from a CPU (hardware profile {name}, "
                f"backend {backend_of(result) or '?'}), not from a DGX Spark; a CPU's decode speed is not "
                "bounded by the Spark's memory bandwidth")
    if measured_on_cpu(result):
        return (f"no Spark roofline: the figures were measured on a CPU "
                f"({dig(result, 'manifest', 'gpu') or backend_of(result)}), not on the {name} the hardware "
                "profile describes")
    return None


def roofline(result: dict) -> dict:
    """Roofline of one result (the one formula of the reports).

    Returns ``{"bandwidth_gbs", "weight_bytes", "kv_bytes", "bytes_per_token", "tok_s", "basis"}``
    where weight_bytes = active params (``profile.model.active_params_b`` × 1e9) × bits / 8,
    bandwidth = ``profile.hardware.bandwidth_gbs`` (or ``memory_bandwidth_gbps``, the hardware
    profile's own name) in GB/s, kv_bytes = KV bytes per context token × mean context of the
    single-stream runs (prompt tokens + output tokens / 2), bytes_per_token = weight_bytes +
    kv_bytes, tok_s = bandwidth_gbs × 1e9 / bytes_per_token. ``basis`` says "weights + KV" or
    "weights only" (no KV geometry in the profile); all None when the profile lacks bandwidth,
    active params or bits. ``skipped``: why there is no roofline for a CPU result
    (:func:`roofline_skip_reason`), else None. A cluster result with tensor parallel size TP > 1
    (:func:`parallel_sizes`): tok_s = TP × bandwidth × 1e9 / bytes_per_token (each node reads
    1/TP of the bytes per token at its own bandwidth; the all-reduce over the link is not in the
    bound), basis "…, TP=2: 2 nodes read 1/2 each"; pipeline parallel stages run one after
    another for one stream, so PP alone keeps one node's bound."""
    hw = dig(result, "profile", "hardware") or {}
    mp = dig(result, "profile", "model") or {}
    skipped = roofline_skip_reason(result)
    out: dict[str, Any] = {"bandwidth_gbs": None, "weight_bytes": None, "kv_bytes": None,
                           "bytes_per_token": None, "tok_s": None, "basis": None, "skipped": skipped}
    if skipped:
        return out
    bandwidth = num(hw.get("bandwidth_gbs"))
    if bandwidth is None:  # the name profiles/hardware/*.json use
        bandwidth = num(hw.get("memory_bandwidth_gbps"))
    params_b = num(mp.get("active_params_b"))
    bits = weight_bits(mp)
    if bandwidth is None or params_b is None or bits is None or bandwidth <= 0 or params_b <= 0:
        return out
    weight_bytes = params_b * 1e9 * bits / 8.0
    per_ctx = kv_bytes_per_context_token(mp, launch_arg(result, "--kv-cache-dtype"))
    kv_bytes = 0.0
    basis = "weights only"
    if per_ctx is not None:
        output_tokens = num(dig(result, "settings", "output_tokens")) or 0.0
        prompts = [num(r.get("prompt_tokens")) for r in dig(result, "single", "runs", default=[])
                   if isinstance(r, dict) and num(r.get("prompt_tokens")) is not None]
        prompt = median(prompts) if prompts else 0.0
        kv_bytes = per_ctx * (prompt + output_tokens / 2.0)
        basis = "weights + KV"
    total = weight_bytes + kv_bytes
    tp = parallel_sizes(result)[0] if is_cluster(result) else 1
    if tp > 1:  # tensor parallel: every node reads 1/TP of the bytes at its own bandwidth
        basis += f", TP={tp}: {tp} nodes read 1/{tp} each"
    elif is_cluster(result) and parallel_sizes(result)[1] > 1:  # pipeline stages take turns for one stream
        basis += f", PP={parallel_sizes(result)[1]}: stages in turn, one node's bound"
    out.update(bandwidth_gbs=bandwidth, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
               bytes_per_token=total, tok_s=tp * bandwidth * 1e9 / total, basis=basis)
    return out


# --------------------------------------------------------------------------- per-host rows

def _bare_median(results: list[dict], result: dict) -> float | None:
    """Single-stream median of the same host's bare variant of the same build and model."""
    for other in results:
        if (host_of(other) == host_of(result) and is_bare(other)
                and build_of(other) == build_of(result) and model_of(other) == model_of(result)):
            return single_stats(other)[0]
    return None


def variant_row(result: dict, results: list[dict]) -> dict:
    """One row of the per-host seed-layout table (numbers, None where not measured)."""
    med, lo, hi = single_stats(result)
    bare = _bare_median(results, result)
    roof = roofline(result)
    mal = mean_acceptance_length(result)
    spec = is_speculative(result)
    row: dict[str, Any] = {
        "host": host_of(result), **unit_fields(result), "variant": variant_name(result), "build": build_of(result),
        "model": model_of(result), "config": config_of(result), "status": result.get("status"),
        "simulated": is_simulated(result), "backend": backend_of(result),
        "single_tok_s": med, "single_min": lo, "single_max": hi,
        "speedup_vs_bare": (med / bare) if (med is not None and bare) else None,
    }
    for n in CONCURRENCIES:
        row[f"combined_{n}"] = combined_at(result, n)
    row.update({
        "acceptance_per_position": acceptance(result),
        "mean_acceptance_length": mal,
        "ttft_p50_s": num(dig(result, "single", "ttft_s_median")) if is_measured(result) else None,
        "roofline_tok_s": roof["tok_s"],
        "roofline_basis": roof["basis"],
        "roofline_skipped": roof["skipped"],
        "pct_of_roofline": (med / roof["tok_s"] * 100.0) if (med is not None and roof["tok_s"]
                                                              and not spec) else None,
        "tokens_per_step": mal if spec else None,
        "time_to_ready_s": num(dig(result, "server_startup", "time_to_ready_s")),
        "model_memory_gib": num(dig(result, "server_startup", "model_memory_gib")),
        "protocol_flags": "; ".join(f"{f.get('code')}: {f.get('reason')}" for f in protocol_flags(result)) or None,
    })
    # the kernels vLLM chose, read off the server log (sparkbench.engine_log): None when not recorded
    row.update({"attention_backend": dig(result, "kernels", "attention_backend"),
                "moe_backend": dig(result, "kernels", "moe_backend")})
    row.update(serving_fields(result))  # the second wave's phases: None where they did not run
    if is_cluster(result):  # a cluster variant: its parallel layout and members (one-unit rows keep their keys)
        tp, pp = parallel_sizes(result)
        row.update({"cluster": (cluster_of(result) or {}).get("name"), "members": cluster_members(result),
                    "parallel": parallel_label(result), "tensor_parallel_size": tp, "pipeline_parallel_size": pp})
    return row


def quality_rows(results: list[dict]) -> list[dict]:
    """Per host × variant: each question's status and reasoning tokens (``q_<id>``, ``rt_<id>``)."""
    rows = []
    for r in sort_results(results):
        if not r.get("quality"):
            continue
        row: dict[str, Any] = {"host": host_of(r), **unit_fields(r), "variant": variant_name(r)}
        by_id = {q.get("id"): q for q in r["quality"] if isinstance(q, dict)}
        for qid in QUALITY_IDS:
            q = by_id.get(qid) or {}
            row[f"q_{qid}"] = q.get("status")
            row[f"rt_{qid}"] = num(q.get("reasoning_tokens"))
        row["passed"] = sum(1 for qid in QUALITY_IDS if row[f"q_{qid}"] == "pass")
        rows.append(row)
    return rows


def image_rows(results: list[dict]) -> list[dict]:
    """Per host × variant: image check status, answer, expected, answer right, spec decode active."""
    rows = []
    for r in sort_results(results):
        img = r.get("image")
        if not isinstance(img, dict):
            continue
        right = None
        if img.get("status") in ("pass", "fail"):
            right = img.get("status") == "pass"
        rows.append({"host": host_of(r), **unit_fields(r), "variant": variant_name(r), "status": img.get("status"),
                     "answer": img.get("answer"), "expected": img.get("expected"), "answer_right": right,
                     "spec_decode_active": img.get("spec_decode_active")})
    return rows


def telemetry_phases(result: dict) -> dict[str, dict]:
    """Per phase: ``power_w_mean``, ``sm_clock_mhz_mean``, ``graphics_clock_mhz_mean``,
    ``temp_c_max``, ``tokens_per_joule`` — from measure.py's ``telemetry.phases.<phase>``
    (``power_w.mean``, ``sm_clock_mhz.mean``, ...), or from the flat ``telemetry.<phase>`` of
    older and synthetic documents."""
    tel = result.get("telemetry")
    if not isinstance(tel, dict):
        return {}
    if isinstance(tel.get("phases"), dict):
        return {ph: {"power_w_mean": num(dig(t, "power_w", "mean")), "sm_clock_mhz_mean": num(dig(t, "sm_clock_mhz", "mean")),
                     "graphics_clock_mhz_mean": num(dig(t, "graphics_clock_mhz", "mean")),
                     "temp_c_max": num(dig(t, "temperature_c", "max")), "tokens_per_joule": num(t.get("tokens_per_joule"))}
                for ph, t in tel["phases"].items() if isinstance(t, dict)}
    return {ph: {"power_w_mean": num(t.get("power_w_mean")), "sm_clock_mhz_mean": num(t.get("sm_clock_mhz_mean")),
                 "graphics_clock_mhz_mean": num(t.get("graphics_clock_mhz_mean")),
                 "temp_c_max": num(t.get("temp_c_max")), "tokens_per_joule": num(t.get("tokens_per_joule"))}
            for ph, t in tel.items() if isinstance(t, dict)}


def telemetry_rows(results: list[dict]) -> list[dict]:
    """Per host × variant × phase where telemetry was recorded: power (W), SM clock (MHz),
    max temperature (°C), tokens per joule."""
    rows = []
    for r in sort_results(results):
        for phase, t in telemetry_phases(r).items():
            rows.append({"host": host_of(r), **unit_fields(r), "variant": variant_name(r), "phase": phase, **t})
    return rows


def protocol_flags(result: dict) -> list[dict]:
    """The run-protocol flags of a result (``protocol.flags``: ``{code, reason}``)."""
    flags = dig(result, "protocol", "flags")
    return [f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else []


def protocol_rows(results: list[dict]) -> list[dict]:
    """Per host × variant with a ``protocol`` block: the clock under load and its maximum [MHz],
    MemAvailable and page cache before/after [GiB], swap pages moved, new kernel-log lines (or why
    none were read), the page-cache drop, and the flags."""
    rows = []
    for r in sort_results(results):
        p = r.get("protocol")
        if not isinstance(p, dict):
            continue

        def gib(which: str, key: str) -> float | None:
            v = num(dig(p, which, key))
            return v / 1024.0 if v is not None else None

        kl = p.get("kernel_log") if isinstance(p.get("kernel_log"), dict) else None
        rows.append({"host": host_of(r), **unit_fields(r), "variant": variant_name(r), "simulated": is_simulated(r),
                     "clock_under_load_mhz": num(dig(p, "clock", "under_load_mhz")),
                     "clock_max_mhz": num(dig(p, "clock", "max_mhz")),
                     "clock_samples": num(dig(p, "clock", "samples_under_load")),
                     "clock_reason": dig(p, "clock", "reason"),
                     "mem_available_before_gib": gib("memory_before", "mem_available_mib"),
                     "mem_available_after_gib": gib("memory_after", "mem_available_mib"),
                     "cached_before_gib": gib("memory_before", "cached_mib"),
                     "cached_after_gib": gib("memory_after", "cached_mib"),
                     "swap_pages": (num(dig(p, "swap", "pswpin")) or 0) + (num(dig(p, "swap", "pswpout")) or 0)
                     if isinstance(p.get("swap"), dict) else None,
                     "kernel_new_lines": len(kl.get("new_lines") or []) if kl else None,
                     "kernel_reason": p.get("kernel_log_reason"),
                     "drop_caches": p.get("drop_caches") if isinstance(p.get("drop_caches"), dict) else None,
                     "flags": protocol_flags(r)})
    return rows


def failure_rows(results: list[dict]) -> list[dict]:
    """Failed variants (stage, reason, remedy) and incomplete ones (their recorded errors)."""
    rows = []
    for r in sort_results(results):
        status = r.get("status")
        if status == "failed":
            f = r.get("failure") if isinstance(r.get("failure"), dict) else {}
            rows.append({"host": host_of(r), **unit_fields(r), "variant": variant_name(r), "status": status,
                         "stage": f.get("stage"), "reason": f.get("reason"), "remedy": f.get("remedy")})
        elif status == "incomplete":
            errs = [str(e.get("message") if isinstance(e, dict) else e) for e in r.get("errors") or []]
            rows.append({"host": host_of(r), **unit_fields(r), "variant": variant_name(r), "status": status,
                         "stage": "measure", "reason": "; ".join(errs) or "measurement incomplete",
                         "remedy": "re-run the variant (same run id, bench_force=true)"})
    return rows


def report_tables(results: list[dict]) -> dict:
    """All per-host numbers: ``{"hosts": {host: [variant_row...]}, "quality", "image",
    "telemetry", "failures", "simulated", "backends"}`` (``simulated`` true when any figure is
    simulated; ``backends`` the sorted set of what served the figures, e.g. ``["vllm-cpu"]``)."""
    ordered = sort_results(r for r in results if isinstance(r, dict))
    hosts: dict[str, list[dict]] = {}
    for r in ordered:
        hosts.setdefault(host_of(r), []).append(variant_row(r, ordered))
    return {"hosts": hosts, "quality": quality_rows(ordered), "image": image_rows(ordered),
            "telemetry": telemetry_rows(ordered), "failures": failure_rows(ordered),
            "protocol": protocol_rows(ordered),
            "simulated": any(is_simulated(r) for r in ordered),
            "backends": sorted({b for b in (backend_of(r) for r in ordered) if b})}


#: The share of a rate's requests that must meet every SLO for the rate to count as served
#: (``rate_search.target_share`` of the run when measure.py searched, else this).
SLO_TARGET_SHARE = 0.9


def rates_of(result: dict) -> list[dict]:
    """The arrival-rate phase's entries of a result (measure.py ``rates``), [] when it did not run."""
    rates = result.get("rates") if isinstance(result, dict) else None
    return [r for r in rates if isinstance(r, dict)] if isinstance(rates, list) else []


def highest_rate_meeting_slo(result: dict) -> tuple[float | None, float]:
    """(the highest arrival rate [requests/s] whose ``slo_met_share`` reached the target share,
    the target share): measure.py's search result when it searched, else the highest listed rate
    that met ``SLO_TARGET_SHARE``; None when none did."""
    search = result.get("rate_search") if isinstance(result.get("rate_search"), dict) else None
    target = float(search.get("target_share")) if search and search.get("target_share") is not None else SLO_TARGET_SHARE
    if search and search.get("best_rate") is not None:
        return float(search["best_rate"]), target
    met = [float(r["rate"]) for r in rates_of(result)
           if isinstance(r.get("rate"), (int, float)) and r.get("slo_met_share") is not None
           and float(r["slo_met_share"]) >= target]
    return (max(met) if met else None), target


def good_flags(rate_entry: dict) -> list[bool]:
    """The per-request good flags of one arrival rate (``rates[].per_request[].good``: completed
    and within every SLO); a request without a bool ``good`` is left out."""
    rows = rate_entry.get("per_request") if isinstance(rate_entry, dict) else None
    return [x["good"] for x in rows or [] if isinstance(x, dict) and isinstance(x.get("good"), bool)]


# --------------------------------------------------------------------------- prefix caching, multi-turn, tools

#: launch flags that say where a server listens, not how it serves (left out when pairing variants)
_ADDRESS_FLAGS = ("host", "port")


def launch_flags(result: dict) -> dict[str, Any]:
    """The launch flags as ``{name without dashes: value}``: ``variant.args`` when it is a mapping
    (``false`` kept: it is what launches ``--no-<flag>``), else the recorded argv (``--no-x`` → x:
    False, ``--x`` alone → True, ``--x v`` → "v"); the address flags (host, port) left out."""
    args = variant_of(result).get("args")
    out: dict[str, Any] = {}
    if isinstance(args, dict):
        for key, value in args.items():
            out[str(key).lstrip("-").replace("_", "-")] = value
    else:
        tokens = _argv(result)
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith("--"):
                name, eq, val = tok[2:].partition("=")
                if eq:
                    out[name] = val
                elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    out[name] = tokens[i + 1]
                    i += 1
                elif name.startswith("no-"):
                    out[name[3:]] = False
                else:
                    out[name] = True
            i += 1
    for flag in _ADDRESS_FLAGS:
        out.pop(flag, None)
    return out


def prefix_caching_on(result: dict) -> bool:
    """Whether the server cached prefixes: False when it was launched with
    ``--no-enable-prefix-caching`` (``enable-prefix-caching: false``), else True (vLLM's V1 engine
    caches prefixes unless told not to)."""
    value = launch_flags(result).get("enable-prefix-caching")
    return not (value is False or (isinstance(value, str) and value.lower() in ("false", "0", "no")))


def prefix_cache_of(result: dict) -> dict | None:
    """The prefix-cache phase's block (measure.py ``prefix_cache``), None when it did not run."""
    block = result.get("prefix_cache") if isinstance(result, dict) and is_measured(result) else None
    return block if isinstance(block, dict) else None


def warm_ttfts(result: dict) -> list[float]:
    """Per-request TTFT [s] of the prefix phase's warm requests (``prefix_cache.per_request`` in
    order of ``i``, the first — cold — request left out; failed requests have no TTFT)."""
    block = prefix_cache_of(result) or {}
    rows = sorted((x for x in block.get("per_request") or [] if isinstance(x, dict)),
                  key=lambda x: num(x.get("i")) if num(x.get("i")) is not None else float("inf"))
    return [v for v in (num(x.get("ttft_s")) for x in rows[1:]) if v is not None and v > 0]


def prefix_row(result: dict) -> dict | None:
    """One row of the prefix phase: caching on/off, prefix and suffix tokens, requests (completed,
    failed), cold TTFT, warm TTFT p50/p90, prefill tok/s, hit rate (Δ hits / Δ queries of vLLM's
    counters), cached tokens per warm request (median of ``usage`` cached_tokens) and the reason
    when the hit rate is missing. None without a prefix phase."""
    block = prefix_cache_of(result)
    if block is None:
        return None
    rows = [x for x in block.get("per_request") or [] if isinstance(x, dict)]
    cached = [num(x.get("cached_tokens")) for x in rows[1:] if num(x.get("cached_tokens")) is not None]
    return {"host": host_of(result), **unit_fields(result), "variant": variant_name(result),
            "build": build_of(result), "model": model_of(result), "simulated": is_simulated(result),
            "prefix_caching": prefix_caching_on(result),
            "prefix_tokens": num(block.get("prefix_tokens")), "suffix_tokens": num(block.get("suffix_tokens")),
            "requests": num(block.get("requests")), "completed": num(block.get("completed")),
            "failed": num(block.get("failed")), "cold_ttft_s": num(block.get("cold_ttft_s")),
            "warm_ttft_p50_s": num(dig(block, "ttft_s", "p50")), "warm_ttft_p90_s": num(dig(block, "ttft_s", "p90")),
            "prefill_tok_s": num(block.get("prefill_tok_s")), "hit_rate": num(block.get("hit_rate")),
            "hit_tokens": num(block.get("hit_tokens")), "query_tokens": num(block.get("query_tokens")),
            "cached_tokens_median": median(cached) if cached else None, "reason": block.get("reason")}


def multi_turn_of(result: dict) -> dict | None:
    """The multi-turn phase's block (measure.py ``multi_turn``), None when it did not run."""
    block = result.get("multi_turn") if isinstance(result, dict) and is_measured(result) else None
    return block if isinstance(block, dict) else None


def multi_turn_rows(result: dict) -> list[dict]:
    """Per turn of the multi-turn phase (``multi_turn.per_turn``, in turn order): turn, requests,
    context tokens (median prompt tokens), TTFT [s], decode tok/s and prefill tok/s (medians)."""
    block = multi_turn_of(result) or {}
    turns = [t for t in block.get("per_turn") or [] if isinstance(t, dict)]
    return [{"turn": num(t.get("turn")), "requests": num(t.get("requests")),
             "context_tokens": num(t.get("context_tokens")), "ttft_s": num(t.get("ttft_s")),
             "decode_tok_s": num(t.get("decode_tok_s")), "prefill_tok_s": num(t.get("prefill_tok_s"))}
            for t in sorted(turns, key=lambda t: num(t.get("turn")) or 0)]


def multi_turn_change(result: dict) -> dict:
    """First → last turn: ``{"context_first", "context_last", "ttft_first_s", "ttft_last_s",
    "ttft_change_pct", "decode_first_tok_s", "decode_last_tok_s", "decode_change_pct"}`` with
    change = (last − first) / first × 100; None where a turn lacks the figure."""
    rows = multi_turn_rows(result)
    first, last = (rows[0], rows[-1]) if rows else ({}, {})

    def change(a: float | None, b: float | None) -> float | None:
        return (b - a) / a * 100.0 if a and b is not None and len(rows) > 1 else None
    return {"context_first": first.get("context_tokens"), "context_last": last.get("context_tokens"),
            "ttft_first_s": first.get("ttft_s"), "ttft_last_s": last.get("ttft_s"),
            "ttft_change_pct": change(first.get("ttft_s"), last.get("ttft_s")),
            "decode_first_tok_s": first.get("decode_tok_s"), "decode_last_tok_s": last.get("decode_tok_s"),
            "decode_change_pct": change(first.get("decode_tok_s"), last.get("decode_tok_s"))}


def tools_of(result: dict) -> dict | None:
    """The tool-call check's block (measure.py ``tools``), None when it did not run."""
    block = result.get("tools") if isinstance(result, dict) and is_measured(result) else None
    return block if isinstance(block, dict) else None


def tools_summary(result: dict) -> dict | None:
    """``{"passed", "failed", "skipped", "total", "tool_choice", "by_category": {cat: {"passed",
    "total"}}, "by_bucket": {bucket: n}, "reason" (why the whole check was skipped, else None),
    "failures": [{"id", "category", "bucket", "reason"}]}``
    of the tool-call check (counts from the block, else from its prompts); None without one."""
    block = tools_of(result)
    if block is None:
        return None
    prompts = [p for p in block.get("prompts") or [] if isinstance(p, dict)]

    def count(key: str, verdict: str) -> int:
        v = num(block.get(key))
        return int(v) if v is not None else sum(1 for p in prompts if p.get("verdict") == verdict)
    total = num(block.get("total"))
    by_cat = block.get("by_category") if isinstance(block.get("by_category"), dict) else None
    if by_cat is None:  # skipped prompts are not judged: in no category's total (measure.py)
        by_cat = {}
        for p in prompts:
            if p.get("verdict") not in ("pass", "fail"):
                continue
            c = by_cat.setdefault(str(p.get("category")), {"passed": 0, "total": 0})
            c["total"] += 1
            c["passed"] += p.get("verdict") == "pass"
    by_bucket = block.get("by_bucket") if isinstance(block.get("by_bucket"), dict) else {}
    return {"passed": count("passed", "pass"), "failed": count("failed", "fail"),
            "skipped": count("skipped", "skipped"), "total": int(total) if total is not None else len(prompts),
            "tool_choice": block.get("tool_choice"), "by_category": by_cat, "by_bucket": by_bucket,
            "reason": block.get("reason"),
            "failures": [{"id": p.get("id"), "category": p.get("category"), "bucket": p.get("bucket"),
                          "reason": p.get("reason")} for p in prompts if p.get("verdict") == "fail"]}


def serving_fields(result: dict) -> dict:
    """The row figures of the serving phases (``results.csv`` / ``results.json`` rows; None where a
    phase did not run): ``slo_best_rate`` (:func:`highest_rate_meeting_slo`) and
    ``slo_target_share``; ``prefix_caching`` (on/off as launched), ``prefix_warm_ttft_p50_s``,
    ``prefix_prefill_tok_s``, ``prefix_hit_rate``; ``turns``, ``turns_context_first`` /
    ``_last`` (tokens), ``turns_ttft_first_s`` / ``_last_s``, ``turns_decode_first_tok_s`` /
    ``_last_tok_s``; ``tools_passed``, ``tools_total``."""
    rates = rates_of(result) if is_measured(result) else []
    best, target = highest_rate_meeting_slo(result) if rates else (None, None)
    pre = prefix_row(result) or {}
    turns = multi_turn_rows(result)
    mt = multi_turn_change(result) if turns else {}
    tools = tools_summary(result) or {}
    return {"slo_best_rate": best, "slo_target_share": target,
            "prefix_caching": pre.get("prefix_caching"), "prefix_warm_ttft_p50_s": pre.get("warm_ttft_p50_s"),
            "prefix_prefill_tok_s": pre.get("prefill_tok_s"), "prefix_hit_rate": pre.get("hit_rate"),
            "turns": len(turns) or None, "turns_context_first": mt.get("context_first"),
            "turns_context_last": mt.get("context_last"), "turns_ttft_first_s": mt.get("ttft_first_s"),
            "turns_ttft_last_s": mt.get("ttft_last_s"), "turns_decode_first_tok_s": mt.get("decode_first_tok_s"),
            "turns_decode_last_tok_s": mt.get("decode_last_tok_s"),
            "tools_passed": tools.get("passed"), "tools_total": tools.get("total")}
