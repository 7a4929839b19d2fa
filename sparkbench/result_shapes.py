"""The shapes of a stored result document (``results/<run>/<host>/<variant>.json``) as ``TypedDict``
classes, for the code that builds it (``sparkbench.result``) and the code that reads it as it lies
on disk (health, history, predict, serve, interference, the report's accessors).

``StoredResult`` is measure's block (``sparkbench.measure.shapes.MeasuredDocument``) completed with
what the controller adds: host, variant, launch, manifest, kernels, server startup, profiles,
preflight, cluster, bracket, co-residence, and a ``failure`` for a variant that did not complete.
Every key is optional here because a failure record holds only some of them; which keys each kind
of document needs is said once, by the pydantic model that validates it
(``sparkbench.documents.result.ResultDocument``). These classes name the keys for the type checker;
the model validates the values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from .cluster.shapes import ClusterBlock
    from .interference.coresidence import CoresidenceBlock
    from .matrix import Variant
    from .measure.aggregate import MultiTurnBlock, PrefixCacheBlock, RateEntry
    from .measure.conditions import ProtocolBlock
    from .measure.metrics import SpecDecodeBlock
    from .measure.phases.rate_search import RateSearchBlock
    from .measure.quality import ImageEntry, QualityEntry
    from .measure.shapes import (
        ClientBlock,
        ContextEntry,
        ErrorEntry,
        ParallelEntry,
        ServerBlock,
        SettingsBlock,
        SingleBlock,
        WarningEntry,
    )
    from .measure.telemetry import TelemetryBlock
    from .measure.tool_judge import ToolsBlock
    from .plan_types import BracketMark, HardwareProfile, ModelProfile
    from .preflight import Preflight
    from .settings import Settings

Stage = Literal["host", "preflight", "launch", "measure"]


class FailureBlock(TypedDict):
    """``failure``: why a variant has no complete measurement (``sparkbench.result.failure``)."""

    stage: Stage
    reason: str
    remedy: str
    log_excerpt: str
    issues: list[str]


class LaunchRecord(TypedDict, total=False):
    """``launch``: the argv after the image and the equivalent ``docker run`` line, secrets redacted;
    ``secret_env`` names the secret variables the container gets (never their values)."""

    argv: list[str]
    command: str
    env: dict[str, str]
    secret_env: list[str]


class ManifestBlock(TypedDict, total=False):
    """``manifest``: what is needed to reproduce the figures (``sparkbench.result.manifest``)."""

    image: str
    image_id: str | None
    image_digest: str | None
    vllm_version: str | None
    model: str
    model_revision: str | None
    launch_command: str
    driver: str | None
    cuda: str | None
    gpu: str | None
    os: str | None
    kernel: str | None
    hostname: str | None
    docker: str | None
    sparkbench_version: str | None
    sparkbench_commit: str | None
    settings: Settings
    simulated: bool | None
    backend: str | None


class KernelsBlock(TypedDict, total=False):
    """``kernels``: what the server's startup log says it chose (``sparkbench.engine_log``); every
    figure is ``None`` where the log does not say; ``lines`` maps a figure to the line it came from."""

    source: Literal["server log"]
    attention_backend: str | None
    attention_candidates: list[str] | None
    moe_backend: str | None
    moe_quant: str | None
    moe_candidates: list[str] | None
    linear_kernel: str | None
    marlin_fp4_weight_only: bool | None
    default_moe_config: bool | None
    gdn_prefill_backend: str | None
    cuda_graphs: bool | None
    cuda_graph_s: float | None
    cuda_graph_gib: float | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    max_concurrency_tokens: int | None
    kv_cache_gib: float | None
    model_load_gib: float | None
    model_load_s: float | None
    weights_load_s: float | None
    torch_compile_s: float | None
    engine_init_s: float | None
    lines: dict[str, str]


class StartupBlock(TypedDict, total=False):
    """``server_startup``: seconds to ready and the model's memory, from the startup log."""

    time_to_ready_s: float | None
    model_memory_gib: float | None


class ProfileRecord(TypedDict, total=False):
    """``profile``: the hardware and model profiles the variant was planned with."""

    hardware: HardwareProfile | None
    model: ModelProfile | None
    hardware_file: str | None
    model_file: str | None


class StoredResult(TypedDict, total=False):
    """One result file: measure's block, the controller's additions, or a failure record."""

    schema_version: str
    sparkbench_version: str
    sparkbench_commit: str | None
    status: Literal["complete", "incomplete", "failed"]
    simulated: bool | None
    server: ServerBlock
    client: ClientBlock
    settings: SettingsBlock
    started_at: str
    finished_at: str | None
    bracket: BracketMark
    single: SingleBlock | None
    parallel: list[ParallelEntry]
    context: list[ContextEntry]
    spec_decode: SpecDecodeBlock | None
    spec_decode_reason: str | None
    quality: list[QualityEntry]
    image: ImageEntry | None
    telemetry: TelemetryBlock | None
    telemetry_reason: str | None
    protocol: ProtocolBlock
    errors: list[ErrorEntry]
    warnings: list[WarningEntry]
    rates: list[RateEntry] | None
    rate_search: RateSearchBlock | None
    prefix_cache: PrefixCacheBlock | None
    multi_turn: MultiTurnBlock | None
    tools: ToolsBlock | None
    failure: FailureBlock
    host: str
    variant: Variant
    launch: LaunchRecord
    launch_command: str
    config_hash: str
    manifest: ManifestBlock
    kernels: KernelsBlock
    server_startup: StartupBlock
    profile: ProfileRecord
    preflight: Preflight
    cluster: ClusterBlock
    coresidence: CoresidenceBlock
