"""The shapes of a host's plan (``sparkbench.plan``) as ``TypedDict`` classes: the host variables as
the plan reads them, the hardware and model profiles it loads (``plan.load_profiles``), a plan entry
and the host's plan. The modules of ``sparkbench.plan`` build each of them.

A class of ``total=False`` holds keys a shape has only sometimes; a shape with both kinds is a
required base and a ``total=False`` subclass. A profile's keys are all optional: a hand-written
profile gives what it knows, and every reader says what it does without a key.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from .interference.variable import InterferenceVariables
from .memory.resident_rows import PresentResident
from .memory.unit import MemoryVariables, UnitMemory

if TYPE_CHECKING:
    from .bandwidth.probe_container import ProbeSpec
    from .cluster.shapes import ClusterSpec
    from .interference.steps import InterferenceBlock
    from .interference.variable import InterferenceSettings
    from .launch import FlagValue, LaunchSpec, Scalar
    from .matrix import BuildEntry, ConfigEntry, ExtraVariantEntry, Variant
    from .memory.unit import MemoryPlan
    from .preflight import Preflight
    from .settings import Settings
    from .unit_home import SimUnitBlock, UnitBlock


# ---------------------------------------------------------------------------------- the variables
class UnitVariables(TypedDict):
    """The host variables of the unit's server and of measure on it that bench.yml and serve.yml both
    read: the server's readiness wait and secrets, the cache folders, a simulated unit's account, the
    GPU probe, measure's python and folder."""

    vllm_server_ready_timeout_s: int | float | str
    vllm_server_api_key: str
    spark_host_hf_token: str
    sparkbench_hf_token: str
    spark_host_hf_cache: str
    spark_host_vllm_cache: str
    spark_host_flashinfer_cache: str
    sparkbench_sim_unit_dir: str
    sparkbench_gpu_less: bool | str
    spark_host_gpu_probe: str
    llm_bench_python: str
    llm_bench_remote_dir: str


class HostVariables(MemoryVariables, InterferenceVariables, UnitVariables):
    """Every host variable a plan reads (``plan.VARIABLES``: their defaults), each as the inventory
    writes it (``-e`` gives text); ``plan.host_variables`` fills the unset ones with their defaults."""

    bench_builds: list[BuildEntry] | None
    bench_configs: list[ConfigEntry]
    bench_common_args: dict[str, FlagValue]
    bench_extra_variants: list[ExtraVariantEntry]
    bench_backend_comparison: bool | str
    bench_backend_variants: list[ExtraVariantEntry]
    bench_select: list[str] | str
    bench_image: str
    bench_vllm_version: str
    bench_hardware_profile_name: str
    bench_profiles_dir: str
    bench_results_dir: str
    bench_run_id: str | None
    bench_force: bool | str
    bench_bracket: bool | str
    bench_bandwidth_probe: bool | str
    bench_cluster: str
    bench_workloads: str | list[str]
    vllm_server_host: str
    vllm_server_port: int | str
    vllm_server_container_prefix: str
    vllm_server_env: dict[str, Scalar]
    vllm_server_preflight_enabled: bool | str
    sparkbench_api_key: str


# ----------------------------------------------------------------------------------- the profiles
class MoeFacts(TypedDict, total=False):
    """A model profile's ``moe``: the experts of a mixture-of-experts model."""

    experts: int
    experts_per_token: int
    shared_experts: int
    expert_params_m: float
    moe_layers: int


class LinearAttentionFacts(TypedDict, total=False):
    """A model profile's ``linear_attention``: a hybrid model's recurrent layers (GDN or Mamba)."""

    type: str
    layers: int
    num_v_heads: int
    num_k_heads: int
    head_k_dim: int
    head_v_dim: int
    head_dim: int
    num_heads: int
    n_groups: int
    state_size: int
    conv_kernel: int
    ssm_state_bytes: int


class AttentionFacts(TypedDict, total=False):
    """A model profile's ``attention``: the attention layers the KV cache is sized from."""

    full_attention_layers: int
    sliding_attention_layers: int
    sliding_window: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int


class MtpFacts(TypedDict, total=False):
    """A model profile's ``mtp``: its multi-token-prediction head and acceptance per position."""

    supported: bool
    n_predict: int
    layer_params_b: float
    acceptance: list[float]


class PacingCalibration(TypedDict, total=False):
    """A model profile's ``pacing_calibration``: the simulator's fitted bandwidth efficiency."""

    _notes: str
    bandwidth_efficiency: float


class MemoryFacts(TypedDict, total=False):
    """A model profile's ``memory``: activations and CUDA graphs inside an engine's share [GB]
    (``sparkbench.memory.engine``; stated allowances where a profile has none)."""

    activations_gb: float
    cuda_graphs_gb: float


class ModelProfile(TypedDict, total=False):
    """``models/<org>__<name>.json``, the user's or the built-in one (``plan.load_profiles``; built by
    ``sparkbench profile``, sparkbench.modelfiles): the model's pinned revision, size, architecture, parsers."""

    id: str
    base_model: str | None
    architecture: str
    family: str
    revision: str
    gated: bool
    in_image: bool
    download_size_gb: float
    checkpoint_format: str | None
    quant_algo: str | None
    activation_quantization: str
    weight_bits: float
    total_params_b: float
    active_params_b: float
    unquantized_active_params_b: float
    lm_head_params_b: float
    hidden_size: int
    vocab_size: int
    layers: int
    moe: MoeFacts | None
    hybrid: bool
    linear_attention: LinearAttentionFacts | None
    attention: AttentionFacts
    mamba_block_size: int | None
    supports_mamba_prefix_caching: bool
    mtp: MtpFacts
    vision: bool
    max_model_len: int
    reasoning_parser: str | None
    tool_call_parser: str | None
    tool_call_format: str | None
    memory: MemoryFacts
    pacing_calibration: PacingCalibration
    _notes: str


class InterconnectFacts(TypedDict, total=False):
    """A hardware profile's ``interconnect``: the link between two units (the simulator's TP/PP pacing)."""

    _notes: str
    link_gbps: float
    efficiency: float
    allreduce_latency_us: float


class ProbeFacts(TypedDict, total=False):
    """A hardware profile's ``probe``: what the simulator's bandwidth probe reads of the bandwidth."""

    _notes: str
    stream_read_share: float


class GpuTelemetryFacts(TypedDict, total=False):
    """A hardware profile's ``gpu_telemetry``: what the simulator's nvidia-smi stand-in answers."""

    _notes: str
    clock_max_mhz: int
    clock_idle_mhz: int
    clock_load_mhz: int
    power_idle_w: float
    power_load_w: float
    temperature_idle_c: int
    temperature_load_c: int
    utilization_idle_pct: int
    utilization_load_pct: int


class EngineFacts(TypedDict, total=False):
    """A hardware profile's ``engine``: the simulator's roofline engine model (vllm_sim/README.md)."""

    _notes: str
    bandwidth_efficiency: float
    layer_launch_us: float | None
    spec_step_overhead_ms: float
    draft_pass_layers_overhead: int
    act_quant_us_per_layer: float
    act_quant_seq_exponent: float
    act_quant_batch_exponent: float
    prefill_tflops: float
    moe_backend_factor: dict[str, float]
    version_efficiency: dict[str, float]
    verify_token_expert_independence: float
    clock_bound_share: float


class HardwareProfile(TypedDict, total=False):
    """``hardware/<name>.json``, the user's or the built-in one (``plan.load_profiles``): the unit's
    memory, bandwidth, GPUs, vLLM's defaults there, and what the simulator needs to stand in for it."""

    name: str
    description: str
    device: str
    spark: bool
    roofline: bool
    gpu_name: str | None
    memory_bandwidth_gbps: float | None
    unified_memory_gb: float | None
    default_max_num_batched_tokens: int
    default_max_num_seqs: int
    default_driver_version: str | None
    cuda_version: str | None
    gpus_per_node: int
    interconnect: InterconnectFacts
    probe: ProbeFacts
    gpu_telemetry: GpuTelemetryFacts
    engine: EngineFacts
    _notes: str


# ---------------------------------------------------------------------------------- a plan entry
class ProbeCommands(TypedDict):
    """measure's ``--nvidia-smi`` / ``--kernel-log`` on a host (``plan.probe_commands``; None: measure's defaults)."""

    nvidia_smi: str | None
    kernel_log: str | None


class ClusterMark(TypedDict):
    """A cluster variant's entry's ``cluster`` (``plan.plan_host`` on the head): the cluster and its TP x PP."""

    name: str
    tensor_parallel_size: int
    pipeline_parallel_size: int


class BracketMark(TypedDict):
    """The bracket entry's ``bracket`` (``plan.bracket_entry``): the variant it measures again, and where."""

    of: str
    position: Literal["end"]


class VariantNeed(TypedDict):
    """A variant the host provisions (its image and model, ``plan.host._provisioning``): a plan entry, or on
    a cluster's worker the head's variant with its model profile."""

    variant: Variant
    model_profile: ModelProfile


class _PlanEntryRequired(VariantNeed):
    name: str
    launch: LaunchSpec
    config_hash: str
    result_path: str
    action: Literal["measure", "skip"]
    preflight: Preflight
    settings: Settings
    hardware_profile: HardwareProfile
    measure_argv: list[str]


class PlanEntry(_PlanEntryRequired, total=False):
    """One variant of a host's plan (``plan.entries.variant_entry``, the package docstring of sparkbench.plan):
    its summary lines and memory plan once planned (``plan_host``), its interference steps (None:
    none; ``with_residents``), ``cluster`` on a cluster variant, ``bracket`` on the bracket entry."""

    summary: list[str]
    memory: MemoryPlan
    interference: InterferenceBlock | None
    cluster: ClusterMark
    bracket: BracketMark


class CoResident(PresentResident):
    """A running resident with what a background load needs (``plan.resident_check._interference_residents``): the
    address it listens on and the model it serves (None where its result does not say)."""

    listen: str | None
    model: str | None


# -------------------------------------------------------------------------------- the host's plan
class PlanMemory(UnitMemory):
    """The plan's ``memory`` (``plan.plan_host``): what every entry's memory plan shares, where the
    controller's results and profiles are, and whether the unit's residents are left out (health.yml)."""

    results_dir: str
    profiles_dir: str
    residents_off: bool


class ProvisionedModel(TypedDict):
    """A model the host provisions (``plan.host._provisioning``): its revision, the image it is used with,
    whether it ships inside the image (nothing to download)."""

    model: str
    revision: str | None
    image: str
    in_image: bool


class Provisioning(TypedDict):
    """What the host provisions (``plan.host._provisioning``): images, models, and the disk check's sizes [GB]."""

    images: list[str]
    models: list[ProvisionedModel]
    model_sizes: dict[str, float]


class HostPlan(Provisioning):
    """A host's plan (``plan.plan_host``, the package docstring of sparkbench.plan; ``with_unit``,
    ``with_residents`` and ``provisioned`` give it back with more filled in)."""

    host: str
    run_id: str
    remote_dir: str
    settings: Settings
    names: list[str]
    variants: list[PlanEntry]
    bracket: PlanEntry | None
    cluster: ClusterSpec | None
    cluster_role: Literal["head", "worker"] | None
    cluster_names: list[str]
    cluster_variants: list[PlanEntry]
    probe: ProbeSpec | None
    host_dir: str
    unit: UnitBlock
    sim_unit: SimUnitBlock | None
    memory: PlanMemory
    interference: InterferenceSettings | None
    hardware: HardwareProfile
    check_mode: bool
