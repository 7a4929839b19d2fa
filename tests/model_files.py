"""Model folders the tests write with the safetensors library (zero-filled data, real headers): a
dense model with the tiny model's shapes and an NVFP4 hybrid MoE with MTP and a vision tower."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors import TensorSpec, serialize_file

#: safetensors' dtype names as the library's writer takes them, by header dtype.
LIB_DTYPE = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "U8": "uint8", "F32": "float32", "F16": "float16"}
SIZE = {"BF16": 2, "F8_E4M3": 1, "U8": 1, "F32": 4, "F16": 2}


def write_shard(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """A safetensors file written by the safetensors library (zero-filled data)."""
    keep, specs = [], {}
    for name, (dtype, shape) in tensors.items():
        n = int(np.prod(shape, dtype=np.int64)) * SIZE[dtype]
        buf = np.zeros(max(n, 1), dtype=np.uint8)
        keep.append(buf)
        specs[name] = TensorSpec(dtype=LIB_DTYPE[dtype], shape=tuple(shape), data_ptr=buf.ctypes.data, data_len=n)
    serialize_file(specs, str(path), metadata={"format": "pt"})


def write_model(folder: Path, config: dict, tensors: dict, shards: int = 1, extra: dict | None = None) -> Path:
    """A model folder: config.json and ``shards`` safetensors files (with an index when more than one)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = "model.safetensors" if shards == 1 else f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_shard(folder / fname, {n: tensors[n] for n in part})
        weight_map.update({n: fname for n in part})
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for fname, doc in (extra or {}).items():
        (folder / fname).write_text(json.dumps(doc))
    return folder


# --- the tiny model's shapes (images/vllm-cpu/make_tiny_model.py): 4,522,624 parameters --------------
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64,
               "vocab_size": 32768, "tie_word_embeddings": True, "max_position_embeddings": 8192,
               "torch_dtype": "bfloat16"}


def tiny_tensors() -> dict:
    t = {"model.embed_tokens.weight": ("BF16", (32768, 128)), "model.norm.weight": ("BF16", (128,))}
    for i in range(2):
        p = f"model.layers.{i}."
        t.update({p + f"self_attn.{x}_proj.weight": ("BF16", (128, 128)) for x in "qkvo"})
        t.update({p + "mlp.gate_proj.weight": ("BF16", (256, 128)), p + "mlp.up_proj.weight": ("BF16", (256, 128)),
                  p + "mlp.down_proj.weight": ("BF16", (128, 256)),
                  p + "input_layernorm.weight": ("BF16", (128,)),
                  p + "post_attention_layernorm.weight": ("BF16", (128,))})
    return t


# --- an NVFP4 hybrid MoE (Qwen3.5-MoE layout): 3 GDN layers + 1 full attention, 8 experts, 2 per token ---
H, V, E, K = 64, 256, 8, 2
MOE_CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "text_config": {"hidden_size": H, "num_hidden_layers": 4, "vocab_size": V, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 4096,
                    "num_experts": E, "num_experts_per_tok": K, "tie_word_embeddings": False,
                    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1},
    "vision_config": {"depth": 1},
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}


def nvfp4(name: str, out_f: int, in_f: int) -> dict:
    """An NVFP4 linear as modelopt writes it: packed U8 weight, an FP8 scale per 16, two F32 scalars."""
    return {name + ".weight": ("U8", (out_f, in_f // 2)), name + ".weight_scale": ("F8_E4M3", (out_f, in_f // 16)),
            name + ".weight_scale_2": ("F32", ()), name + ".input_scale": ("F32", ())}


def moe_tensors() -> tuple[dict, dict[str, str]]:
    """The tensors and the part each belongs to (dense, routed, embedding, lm_head, mtp, vision)."""
    t, part = {}, {}

    def add(kind: str, items: dict) -> None:
        t.update(items)
        part.update({n: kind for n in items})

    add("embedding", {"model.language_model.embed_tokens.weight": ("BF16", (V, H))})
    add("lm_head", {"lm_head.weight": ("BF16", (V, H))})
    add("dense", {"model.language_model.norm.weight": ("BF16", (H,))})
    for i in range(4):
        p = f"model.language_model.layers.{i}."
        if i == 3:
            add("dense", {p + f"self_attn.{x}_proj.weight": ("BF16", s) for x, s in
                          (("q", (128, H)), ("k", (H, H)), ("v", (H, H)), ("o", (H, 128)))})
        else:
            add("dense", {p + "linear_attn.in_proj.weight": ("BF16", (192, H)),
                          p + "linear_attn.out_proj.weight": ("BF16", (H, H))})
        add("dense", {p + "input_layernorm.weight": ("BF16", (H,)), p + "mlp.gate.weight": ("BF16", (E, H)),
                      p + "mlp.shared_expert.gate_proj.weight": ("BF16", (32, H)),
                      p + "mlp.shared_expert.up_proj.weight": ("BF16", (32, H)),
                      p + "mlp.shared_expert.down_proj.weight": ("BF16", (H, 32))})
        for e in range(E):
            q = p + f"mlp.experts.{e}."
            add("routed", {**nvfp4(q + "gate_proj", 32, H), **nvfp4(q + "up_proj", 32, H),
                           **nvfp4(q + "down_proj", H, 32)})
    add("mtp", {"mtp.fc.weight": ("BF16", (H, 2 * H)), "mtp.layers.0.self_attn.q_proj.weight": ("BF16", (128, H)),
                "mtp.norm.weight": ("BF16", (H,))})
    add("vision", {"model.visual.blocks.0.attn.qkv.weight": ("BF16", (192, H)),
                   "model.visual.merger.mlp.0.weight": ("BF16", (H, H))})
    return t, part


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * SIZE[dtype]
