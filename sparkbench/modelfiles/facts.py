"""A model's architecture facts and decode traffic, from its ``config.json`` and its safetensors
headers (names, dtypes, shapes), never its weights.

Bytes read per decode token (one sequence, one step, batch of one)::

    dense weights of the language model (attention, shared experts, norms, dense MLPs)
  + routed experts x experts_per_token / experts            (each MoE layer reads its chosen experts)
  + one embedding row                                        (the token's row of embed_tokens)
  + lm_head                                                  (all of it; the embedding again when tied)
  + 2 x recurrent state                                      (linear attention / Mamba: read and written)

Not counted: the vision tower (prefill of an image only), the MTP layers (a draft pass, counted
apart as ``mtp.layer_params_b``) and the KV cache, which grows with the context and is given per
token for each KV-cache dtype (``2 x full-attention layers x kv heads x head dim x dtype bytes``).
Quantised weights count their scales: an NVFP4 weight is packed two 4-bit values per byte (U8)
with one FP8 scale per 16 values, 4.5 bits a parameter.
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..twin.pacing import KV_DTYPE_BYTES, recurrent_state_bytes
from .safetensors_header import Tensor

#: The KV-cache dtypes (vLLM's ``--kv-cache-dtype``; "auto" = the model's bf16) a profile lists
#: its KV bytes per token for; the bytes per element are the twin's.
PROFILE_KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")

#: Tensor name parts of a vision tower or its projector.
VISION_PARTS = ("visual.", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector")
#: Suffixes of quantisation side tensors: bytes read, not parameters.
SCALE_SUFFIXES = ("weight_scale", "weight_scale_2", "input_scale", "k_scale", "v_scale", "weight_scale_inv")

_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_LAYER = re.compile(r"layers\.(\d+)\.")


def text_config(config: dict) -> dict:
    """The language model's part of a config (multimodal configs nest it as ``text_config``)."""
    inner = config.get("text_config") or config.get("language_config") or {}
    return {**config, **inner}


def _first(cfg: dict, *keys: str, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _is_scale(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in SCALE_SUFFIXES


def _params(t: Tensor, names: set[str]) -> int:
    """Parameters a tensor holds: a U8 weight beside an FP8/E8M0 ``weight_scale`` is packed FP4 (two per byte)."""
    if _is_scale(t.name):
        return 0
    if t.dtype == "U8" and t.name.endswith(".weight") and t.name[:-len("weight")] + "weight_scale" in names:
        return 2 * t.numel
    return t.numel


def _kind(t: Tensor, layers: int, experts: int) -> str:
    """Where a tensor belongs: vision, mtp, embedding, lm_head, routed (experts) or dense."""
    n = t.name
    if any(p in n for p in VISION_PARTS):
        return "vision"
    layer = _LAYER.search(n)
    if n.startswith("mtp.") or ".mtp." in n or (layer and int(layer.group(1)) >= layers):
        return "mtp"
    if n.endswith("embed_tokens.weight") or n.endswith("wte.weight"):
        return "embedding"
    if n.startswith("lm_head.") or ".lm_head." in n:
        return "lm_head"
    if "shared_expert" in n:
        return "dense"
    if experts and (_EXPERT.search(n) or (".experts." in n and t.shape and t.shape[0] == experts)):
        return "routed"
    return "dense"


def linear_attention(cfg: dict) -> dict | None:
    """The recurrent (linear-attention) layers' dimensions: Gated DeltaNet or Mamba-2, else None."""
    types = cfg.get("layer_types") or []
    if "linear_attention" in types:
        return {"type": "gdn", "layers": types.count("linear_attention"),
                "num_v_heads": cfg["linear_num_value_heads"], "num_k_heads": cfg["linear_num_key_heads"],
                "head_k_dim": cfg["linear_key_head_dim"], "head_v_dim": cfg["linear_value_head_dim"],
                "conv_kernel": cfg.get("linear_conv_kernel_dim", 4), "ssm_state_bytes": 4}
    pattern = cfg.get("hybrid_override_pattern")
    if pattern and "M" in pattern:
        return {"type": "mamba2", "layers": pattern.count("M"), "num_heads": cfg["mamba_num_heads"],
                "head_dim": cfg["mamba_head_dim"], "state_size": cfg["ssm_state_size"],
                "n_groups": cfg.get("n_groups", 1), "conv_kernel": cfg.get("conv_kernel", 4), "ssm_state_bytes": 4}
    return None


def attention(cfg: dict, layers: int, la: dict | None) -> dict:
    """Full-attention layers and their KV geometry."""
    heads = int(_first(cfg, "num_attention_heads", "n_head", default=1))
    types = cfg.get("layer_types") or []
    pattern = cfg.get("hybrid_override_pattern")
    if "full_attention" in types:
        full = types.count("full_attention")
    elif pattern:
        full = pattern.count("*")
    else:
        full = layers - (la["layers"] if la else 0)
    return {"full_attention_layers": full,
            "num_kv_heads": int(_first(cfg, "num_key_value_heads", default=heads)),
            "head_dim": int(_first(cfg, "head_dim", default=int(cfg["hidden_size"]) // heads))}


def quantization(config: dict, hf_quant: dict | None) -> tuple[str | None, str | None]:
    """(checkpoint_format, quant_algo) from config.json's quantization_config or hf_quant_config.json."""
    q = config.get("quantization_config") or {}
    algo = q.get("quant_algo") or ((hf_quant or {}).get("quantization") or {}).get("quant_algo")
    fmt = q.get("quant_method") or ("modelopt" if hf_quant else None)
    return fmt, (algo.upper() if isinstance(algo, str) else algo)


def model_facts(config: dict, tensors: list[Tensor], hf_quant: dict | None = None) -> dict:
    """The profile fields the files determine, plus ``decode_bytes_per_token`` and ``kv_bytes_per_token``."""
    cfg = text_config(config)
    layers = int(_first(cfg, "num_hidden_layers", "n_layer"))
    experts = int(_first(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0)
    per_token = int(_first(cfg, "num_experts_per_tok", "moe_topk", default=0) or 0)
    names = {t.name for t in tensors}
    params: dict[str, int] = defaultdict(int)
    nbytes: dict[str, int] = defaultdict(int)
    routed_by_layer: dict[int, int] = defaultdict(int)
    quant_params = quant_bytes = 0
    embed_rows = lm_head = None
    for t in tensors:
        kind = _kind(t, layers, experts)
        p = _params(t, names)
        params[kind] += p
        nbytes[kind] += t.nbytes
        if kind == "routed":
            layer = _LAYER.search(t.name)
            routed_by_layer[int(layer.group(1)) if layer else -1] += p
        if kind == "embedding":
            embed_rows = t.shape[0]
        if kind == "lm_head" and t.name.endswith(".weight"):
            lm_head = p
        if t.dtype in ("U8", "F4") or _is_scale(t.name) or p == 2 * t.numel:
            quant_bytes += t.nbytes
            quant_params += p
    tied = bool(_first(cfg, "tie_word_embeddings", default=False)) and not params["lm_head"]
    if tied:
        params["lm_head"], nbytes["lm_head"], lm_head = params["embedding"], nbytes["embedding"], params["embedding"]
    la = linear_attention(cfg)
    att = attention(cfg, layers, la)
    routed_active = nbytes["routed"] * per_token / experts if experts else 0.0
    embed_row = nbytes["embedding"] / embed_rows if embed_rows else 0.0
    state = 2.0 * recurrent_state_bytes(la)
    decode = {"dense": nbytes["dense"], "routed_experts": routed_active, "embedding_row": embed_row,
              "lm_head": nbytes["lm_head"], "recurrent_state": state}
    decode["total"] = sum(decode.values())
    language = params["dense"] + params["routed"] + params["embedding"] + (0 if tied else params["lm_head"])
    active = language - params["routed"] + (params["routed"] * per_token / experts if experts else 0)
    moe_layers = len([k for k in routed_by_layer if k >= 0]) or (1 if routed_by_layer else 0)
    fmt, algo = quantization(config, hf_quant)
    mtp_layers = int(_first(cfg, "mtp_num_hidden_layers", "num_nextn_predict_layers", default=0) or 0)
    kv_elems = 2 * att["full_attention_layers"] * att["num_kv_heads"] * att["head_dim"]
    return {
        "architecture": (config.get("architectures") or [None])[0],
        "checkpoint_format": fmt,
        "quant_algo": algo,
        "weight_bits": round(quant_bytes * 8 / quant_params, 3) if quant_params else _dense_bits(tensors),
        "total_params_b": sum(params.values()) / 1e9 - (params["lm_head"] / 1e9 if tied else 0),
        "language_params_b": language / 1e9,
        "active_params_b": active / 1e9,
        "lm_head_params_b": (lm_head or 0) / 1e9,
        "hidden_size": int(cfg["hidden_size"]),
        "vocab_size": int(_first(cfg, "vocab_size", default=embed_rows or 0)),
        "layers": layers,
        "moe": ({"experts": experts, "experts_per_token": per_token,
                 "shared_experts": int(_first(cfg, "n_shared_experts", default=1 if params["dense"] and any(
                     "shared_expert" in n for n in names) else 0)),
                 "expert_params_m": round(params["routed"] / experts / max(moe_layers, 1) / 1e6, 3),
                 "moe_layers": moe_layers} if experts else None),
        "hybrid": la is not None,
        "linear_attention": la,
        "attention": att,
        "mtp": {"supported": bool(params["mtp"] or mtp_layers), "n_predict": mtp_layers or (1 if params["mtp"] else 0),
                "layer_params_b": params["mtp"] / 1e9},
        "vision": bool(params["vision"] or config.get("vision_config")),
        "vision_params_b": params["vision"] / 1e9,
        "max_model_len": int(_first(cfg, "max_position_embeddings", "n_positions", default=0)),
        "decode_bytes_per_token": {k: round(v) for k, v in decode.items()},
        "kv_bytes_per_token": {dtype: kv_elems * KV_DTYPE_BYTES[dtype] for dtype in PROFILE_KV_DTYPES},
        "checkpoint_bytes": sum(t.nbytes for t in tensors),
    }


def _dense_bits(tensors: list[Tensor]) -> float:
    """Bits per parameter of an unquantised checkpoint (its weights' dtype)."""
    total = sum(t.numel for t in tensors) or 1
    return round(sum(t.nbytes for t in tensors) * 8 / total, 3)
