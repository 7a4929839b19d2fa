"""What the controller adds to measure.py's block (``sparkbench.result``): the variant, its launch,
the manifest, the kernels vLLM chose, the server's startup, the profiles and the bracket mark."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field

from .base import Block, Closed, Int

#: every figure the kernels block reads off the server's startup log (sparkbench.engine_log), in its order
KernelField = Literal[
    "attention_backend", "attention_candidates", "moe_backend", "moe_quant", "moe_candidates", "linear_kernel",
    "marlin_fp4_weight_only", "default_moe_config", "gdn_prefill_backend", "cuda_graphs", "cuda_graph_s",
    "cuda_graph_gib", "kv_cache_tokens", "max_concurrency", "max_concurrency_tokens", "kv_cache_gib",
    "model_load_gib", "model_load_s", "weights_load_s", "torch_compile_s", "engine_init_s"]


class Bracket(Block):
    ("Only in <variant>.bracket.json: the reference variant measured again at the end of the host's sequence "
     "(single stream only) to detect drift; the main <variant>.json is untouched")
    of: str = Field(description="the bracketed variant's name")
    position: Literal["end"]


class Variant(Block):
    ("the expanded variant (sparkbench.matrix): args is the flag mapping after merging common, build, config and "
     "extra layers")
    name: Annotated[str, Field(pattern=r"^[a-z0-9._-]+$")]
    build: Optional[str] = None
    config: Optional[str] = None
    model: str
    revision: Optional[str] = None
    image: str = None
    vllm_version: Optional[str] = None
    env: dict[str, str] = None
    args: dict[str, Any] = Field(None, description="flag name (no dashes) → value; true = --flag, false = --no-flag")
    preflight: bool = None
    kind: Literal["matrix", "extra"] = None
    index: Int = None


class Launch(Block):
    ("the launch spec (sparkbench.launch): argv after the image and the equivalent docker run line, secrets redacted")
    argv: list[str]
    command: str
    env: dict[str, str] = None
    secret_env: list[str] = Field(
        None, description="names of secret variables the container gets (values never stored)")


class Manifest(Block):
    ("what is needed to reproduce the figures")
    image: str
    image_id: Optional[str] = None
    image_digest: Optional[str] = None
    vllm_version: Optional[str] = None
    model: str
    model_revision: Optional[str] = None
    launch_command: str = None
    driver: Optional[str] = None
    cuda: Optional[str] = None
    gpu: Optional[str] = None
    os: Optional[str] = None
    kernel: Optional[str] = None
    hostname: Optional[str] = None
    docker: Optional[str] = None
    sparkbench_version: Optional[str] = None
    sparkbench_commit: Optional[str] = None
    settings: dict[str, Any] = None
    simulated: Optional[bool]
    backend: Optional[str] = None


class Kernels(Closed):
    ("The kernels vLLM chose, parsed on the controller from the server's startup log (sparkbench.engine_log; "
     "secrets redacted): every key present, null when the log does not say; lines maps each field to the log line "
     "it came from.")
    source: Literal["server log"]
    attention_backend: Optional[str]
    attention_candidates: Optional[list[str]]
    moe_backend: Optional[str]
    moe_quant: Optional[str]
    moe_candidates: Optional[list[str]]
    linear_kernel: Optional[str]
    marlin_fp4_weight_only: Optional[bool]
    default_moe_config: Optional[bool]
    gdn_prefill_backend: Optional[str]
    cuda_graphs: Optional[bool]
    cuda_graph_s: Optional[float]
    cuda_graph_gib: Optional[float]
    kv_cache_tokens: Optional[Int]
    max_concurrency: Optional[float]
    max_concurrency_tokens: Optional[Int]
    kv_cache_gib: Optional[float]
    model_load_gib: Optional[float]
    model_load_s: Optional[float]
    weights_load_s: Optional[float]
    torch_compile_s: Optional[float]
    engine_init_s: Optional[float]
    lines: dict[KernelField, str]


class ServerStartup(Block):
    time_to_ready_s: Optional[float] = None
    model_memory_gib: Optional[float] = None


class Profile(Block):
    hardware: Optional[dict[str, Any]] = None
    model: Optional[dict[str, Any]] = None
    hardware_file: Optional[str] = Field(None, description="measure.py --hardware: the profile file used")
    model_file: Optional[str] = Field(
        None, description="measure.py --hardware: the model profile found for the served model, if any")
