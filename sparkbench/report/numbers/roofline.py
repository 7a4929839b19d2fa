"""The roofline (the one formula of the reports, see :mod:`sparkbench.report.numbers`) and what
served a result's figures (pure, no I/O)."""

from __future__ import annotations

from statistics import median
from typing import Any

from . import accessors as n

#: Bits per weight when the model profile names a quantization but no ``weight_bits``:
#: NVFP4 = 4-bit values + one FP8 scale per 16 weights = 4 + 8/16 = 4.5 bits; MXFP4 = 4 + 8/32.
QUANT_BITS: dict[str, float] = {"nvfp4": 4.5, "mxfp4": 4.25, "fp8": 8.0, "int8": 8.0, "bf16": 16.0,
                                "fp16": 16.0, "int4": 4.0}
#: KV-cache element size in bits by ``--kv-cache-dtype``.
KV_DTYPE_BITS: dict[str, float] = {"fp8": 8.0, "fp8_e4m3": 8.0, "fp8_e5m2": 8.0, "auto": 16.0,
                                   "bfloat16": 16.0, "float16": 16.0}


def weight_bits(model_profile: dict) -> float | None:
    """Bits per weight: ``weight_bits`` (or ``bits_per_weight``), else from ``quantization`` (NVFP4 = 4.5)."""
    bits = n.num(model_profile.get("weight_bits"))
    if bits is None:
        bits = n.num(model_profile.get("bits_per_weight"))
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
    direct = n.num(model_profile.get("kv_bytes_per_token"))
    if direct is not None:
        return direct
    att = model_profile.get("attention") if isinstance(model_profile.get("attention"), dict) else {}
    layers = n.num(att.get("full_attention_layers") or model_profile.get("kv_layers")
                 or model_profile.get("attention_layers") or model_profile.get("num_kv_layers"))
    heads = n.num(att.get("num_kv_heads") or model_profile.get("kv_heads") or model_profile.get("num_kv_heads"))
    head_dim = n.num(att.get("head_dim") or model_profile.get("head_dim"))
    if layers is None or heads is None or head_dim is None:
        return None
    bits = KV_DTYPE_BITS.get(str(kv_dtype or "auto").lower(), 16.0)
    return 2.0 * layers * heads * head_dim * bits / 8.0


def backend_of(result: dict) -> str | None:
    """What served the figures: ``manifest.backend`` (``simulator``, ``vllm``, ``vllm-cpu``), else
    ``simulator`` for simulated results; None when the result does not say."""
    backend = n.dig(result, "manifest", "backend")
    if backend:
        return str(backend)
    return "simulator" if n.is_simulated(result) else None


def measured_on_cpu(result: dict) -> bool:
    """True when the figures come from a CPU (backend ``vllm-cpu``, or the manifest's GPU is ``none …``)."""
    gpu = str(n.dig(result, "manifest", "gpu") or "")
    return backend_of(result) == "vllm-cpu" or gpu.lower().startswith("none")


def roofline_skip_reason(result: dict) -> str | None:
    """Why this result gets no roofline (None when it gets one, see :func:`roofline`)."""
    hw = n.dig(result, "profile", "hardware") or {}
    name = hw.get("name") or "?"
    if hw.get("roofline") is False or str(hw.get("device") or "").lower() == "cpu":
        return (f"no Spark roofline: the figures come from a CPU (hardware profile {name}, "
                f"backend {backend_of(result) or '?'}), not from a DGX Spark; a CPU's decode speed is not "
                "bounded by the Spark's memory bandwidth")
    if measured_on_cpu(result):
        return (f"no Spark roofline: the figures were measured on a CPU "
                f"({n.dig(result, 'manifest', 'gpu') or backend_of(result)}), not on the {name} the hardware "
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
    (:func:`~sparkbench.report.numbers.parallel_sizes`): tok_s = TP × bandwidth × 1e9 /
    bytes_per_token (each node reads 1/TP of the bytes per token at its own bandwidth; the
    all-reduce over the link is not in the bound), basis "…, TP=2: 2 nodes read 1/2 each";
    pipeline parallel stages run one after another for one stream, so PP alone keeps one node's
    bound."""
    hw = n.dig(result, "profile", "hardware") or {}
    mp = n.dig(result, "profile", "model") or {}
    skipped = roofline_skip_reason(result)
    out: dict[str, Any] = {"bandwidth_gbs": None, "weight_bytes": None, "kv_bytes": None,
                           "bytes_per_token": None, "tok_s": None, "basis": None, "skipped": skipped}
    if skipped:
        return out
    bandwidth = n.num(hw.get("bandwidth_gbs"))
    if bandwidth is None:  # the name profiles/hardware/*.json use
        bandwidth = n.num(hw.get("memory_bandwidth_gbps"))
    params_b = n.num(mp.get("active_params_b"))
    bits = weight_bits(mp)
    if bandwidth is None or params_b is None or bits is None or bandwidth <= 0 or params_b <= 0:
        return out
    weight_bytes = params_b * 1e9 * bits / 8.0
    per_ctx = kv_bytes_per_context_token(mp, n.launch_arg(result, "--kv-cache-dtype"))
    kv_bytes = 0.0
    basis = "weights only"
    if per_ctx is not None:
        output_tokens = n.num(n.dig(result, "settings", "output_tokens")) or 0.0
        prompts = [n.num(r.get("prompt_tokens")) for r in n.dig(result, "single", "runs", default=[])
                   if isinstance(r, dict) and n.num(r.get("prompt_tokens")) is not None]
        prompt = median(prompts) if prompts else 0.0
        kv_bytes = per_ctx * (prompt + output_tokens / 2.0)
        basis = "weights + KV"
    total = weight_bytes + kv_bytes
    tp = n.parallel_sizes(result)[0] if n.is_cluster(result) else 1
    if tp > 1:  # tensor parallel: every node reads 1/TP of the bytes at its own bandwidth
        basis += f", TP={tp}: {tp} nodes read 1/{tp} each"
    elif n.is_cluster(result) and n.parallel_sizes(result)[1] > 1:  # pipeline stages take turns for one stream
        basis += f", PP={n.parallel_sizes(result)[1]}: stages in turn, one node's bound"
    out.update(bandwidth_gbs=bandwidth, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
               bytes_per_token=total, tok_s=tp * bandwidth * 1e9 / total, basis=basis)
    return out


def measured_bandwidth(result: dict) -> dict:
    """The unit's measured bandwidth around this result (``protocol.bandwidth``, sparkbench.bandwidth):
    ``{"gbps", "method", "simulated", "after_gbps", "drop"}`` — the probe before the variant (the one
    after it when the one before gave no figure), its method, whether simulated, the probe after,
    and the drop's text (None: no drop, or no probe); all None without a block."""
    block = n.dig(result, "protocol", "bandwidth")
    if not isinstance(block, dict):
        return {"gbps": None, "method": None, "simulated": None, "after_gbps": None, "drop": None}
    after = block.get("after") if isinstance(block.get("after"), dict) else {}
    before = n.num(block.get("gbps"))
    gbps, method = (before, block.get("method")) if before else (n.num(after.get("gbps")), after.get("method"))
    drop = block.get("drop") if isinstance(block.get("drop"), dict) else None
    return {"gbps": gbps, "method": method, "simulated": bool(block.get("simulated")),
            "after_gbps": n.num(after.get("gbps")), "drop": drop.get("text") if drop else None}


def measured_roofline(roof: dict, gbps: float | None) -> float | None:
    """The roofline at the measured bandwidth [tok/s]: the data-sheet roofline (:func:`roofline`)
    × measured GB/s / data-sheet GB/s — the same bytes per token (and TP) at what the unit streamed.
    None without either."""
    if not gbps or not roof.get("tok_s") or not roof.get("bandwidth_gbs"):
        return None
    return roof["tok_s"] * gbps / roof["bandwidth_gbs"]
