"""The ``vllm serve`` flags the simulator accepts (argparse) and the same flags as data
(``args-schema``), with the value lists vLLM checks them against."""
from __future__ import annotations

import argparse
import json

from .knobs import Knobs

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
            "source": {"extracted_from": "the sparkbench simulator's `vllm serve` parser (vllm_sim/serve_flags.py "
                                         "build_parser), written from vLLM's flags and validation of the emulated "
                                         "version; partial: flags it does not know are checked against the nearest "
                                         "full schema",
                       "command": "python3 scripts/vllm_sim args-schema > sparkbench/data/vllm_args/0.25.0.json"},
            "options": sorted(options, key=lambda o: o["name"])}
