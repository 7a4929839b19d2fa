"""The shapes ``sparkbench predict`` reads and writes, as ``TypedDict`` classes: a published figure and
its fit row (:mod:`.published`), a unit's calibration rows, calibration and per-layer-cost fit
(:mod:`.calibration`), the memory check (``sparkbench.memory.fit``) and the prediction document
(:mod:`.estimate`, printed by :mod:`.command`). The model and hardware profiles it reads are
``sparkbench.plan_types.ModelProfile`` and ``HardwareProfile``; a stored result is
``sparkbench.result_shapes.StoredResult``.

A class of ``total=False`` holds keys a shape has only sometimes; a shape with both kinds is a
required base and a ``total=False`` subclass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from ..plan_types import ModelProfile

if TYPE_CHECKING:
    from ..engine_config import TwinConfig
    from ..launch import FlagValues


# ------------------------------------------------------------------------ a profile from the files
class DecodeBytes(TypedDict):
    """A profile's ``decode_bytes_per_token`` (``modelfiles.facts.model_facts``): the bytes one decoded
    token reads, from the safetensors headers."""

    dense: int
    routed_experts: int
    embedding_row: int
    lm_head: int
    recurrent_state: int
    total: int


class ProfileFromFiles(ModelProfile, total=False):
    """A model profile written from the model's files (``sparkbench profile``: config.json and the
    safetensors headers, ``modelfiles.facts.model_facts``): the profile's keys and what the headers
    add (the checkpoint's bytes, the bytes a decoded token reads, KV bytes per token per dtype)."""

    language_params_b: float
    vision_params_b: float
    decode_bytes_per_token: DecodeBytes
    kv_bytes_per_token: dict[str, int]
    checkpoint_bytes: int


# ------------------------------------------------------------------------------ published figures
class _FigureRequired(TypedDict):
    what: str
    model: str
    tok_s: float
    role: Literal["fitted", "held-out"]
    source: str


class PublishedFigure(_FigureRequired, total=False):
    """One entry of ``sparkbench/data/published_figures.json``'s ``figures``: a published decode rate
    of a model with its flags (``args``), streams (``parallel``, default 1), vLLM version and context."""

    args: FlagValues
    parallel: int
    vllm_version: str
    context_tokens: int


class FitRow(PublishedFigure):
    """A published figure with the twin's rate for it and its error (``published.fit_rows``)."""

    predicted: float
    error: float


# -------------------------------------------------------------------------------- the calibration
class CalibrationRow(TypedDict):
    """One comparable result of a unit (``calibration.calibration_rows``): measured single-stream
    median against the twin's rate, and the bandwidth its probe read."""

    run_id: str
    variant: str
    model: str | None
    measured: float | None
    ratio: float
    bandwidth_gbps: float | None
    bandwidth_method: str | None
    simulated: bool


class Calibration(TypedDict):
    """A unit's calibration (``calibration.calibrate``): median ratio, its spread, results, models."""

    factor: float
    spread: float
    n: int
    models: list[str]
    simulated: bool


class LaunchFitRecord(TypedDict):
    """The per-layer cost fitted on a unit's result, as the prediction shows it (``launch_fit``)."""

    variant: str
    run_id: str
    measured: float
    bandwidth_gbps: float
    spread: float
    layer_launch_us: float


class LaunchFit(LaunchFitRecord):
    """``calibration.launch_fit``: the fit with the twin's configuration read from the fitted result."""

    config: TwinConfig


# ------------------------------------------------------------------------------- the memory check
class ShareFit(TypedDict):
    """``memory.share_fit``: weights, KV cache and room in one unit's share, bytes per unit."""

    weights: float
    weights_source: str
    kv: float
    per_token: float
    units: int
    room: float
    max_context: int | None
    fits: bool
    problem: Literal["weights", "kv"] | None


class MemoryBase(TypedDict):
    """What every memory check holds (``memory.memory_fit``), before the verdict."""

    context: int
    kv_cache_dtype: str
    units: int
    weights_gb: float
    weights_source: str
    kv_gb: float
    kv_bytes_per_token: float
    gpu_memory_utilization: float
    model_context: int | None


class MemoryFit(MemoryBase):
    """The prediction's ``memory`` (``memory.memory_fit``): the verdict (None: not checked), the
    share vLLM takes [GB], the context that fits and why not."""

    fits: bool | None
    budget_gb: float | None
    max_context: int | None
    reason: str | None


# -------------------------------------------------------------------------------- the prediction
class TwinConfigFields(TypedDict):
    """The prediction's ``config``: the fields of ``config.TwinConfig``."""

    kv_cache_dtype: str
    spec_k: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    moe_backend: str
    max_model_len: int | None
    max_num_seqs: int | None
    gpu_memory_utilization: float
    dtype: str


class Band(TypedDict):
    """A predicted per-stream decode rate with its interval, tok/s (``estimate._band``)."""

    tok_s: float
    lo: float
    hi: float


class MtpBand(Band):
    """One entry of the prediction's ``mtp``: the rate with ``k`` speculative tokens."""

    k: int
    acceptance: list[float]


class _PredictionRequired(TypedDict):
    model: str
    hardware: str | None
    vllm_version: str
    config: TwinConfigFields
    single: Band
    parallel: dict[str, Band]
    mtp: list[MtpBand]
    acceptance: list[float] | None
    bandwidth_scale: float
    calibration: Calibration | None
    interval_basis: str
    memory: MemoryFit
    launch_fit: LaunchFitRecord | None
    bytes_per_token: float


class Prediction(_PredictionRequired, total=False):
    """The document ``sparkbench predict`` prints (``estimate.predict``; ``--json`` writes it as is);
    ``profile_source``: where the model profile came from (``command.predict_command``)."""

    profile_source: str
