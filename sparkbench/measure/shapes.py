"""The shapes of what measure sends and writes, as ``TypedDict`` classes (standard library only):
``JSON``, the chat requests, the run's own blocks and the speed figures of the result document
measure writes, and the document itself (``MeasuredDocument``). A block built by one helper module
is declared there, beside the code that builds it (``telemetry``, ``conditions``, ``bandwidth``,
``quality``, ``sandbox``, ``tool_judge``, ``metrics``, ``stats``; the serving phases' blocks in
``aggregate``, ``rate_search``'s in its phase).

They mirror the result's pydantic models (``sparkbench.documents``), which measure may not import
(it runs on a bare unit): the models validate the document, these name its keys for the code that
builds it. A class of ``total=False`` holds the keys a block has only sometimes; a block with both
kinds is a required base and a ``total=False`` subclass. ``JSON`` is a value as ``json.loads``
gives it, for what measure carries without reading all of it (a server's answer, a profile file).
Figures keep the names ``figures.py`` declares (``decode_tok_s_median``, ``combined_tok_s``, ...):
the code reads and writes them through the declarations (``SINGLE_DECODE.field``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict, Union

if TYPE_CHECKING:
    from .aggregate import MultiTurnBlock, PrefixCacheBlock, RateEntry
    from .conditions import ProtocolBlock
    from .metrics import SpecDecodeBlock
    from .phases.rate_search import RateSearchBlock
    from .quality import ImageEntry, QualityEntry
    from .stats import Percentiles
    from .telemetry import TelemetryBlock
    from .tool_judge import ToolsBlock

#: a JSON value: what ``json.loads`` returns
JSON = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
#: a JSON object
JSONObject = dict[str, JSON]
#: how a request's decode rate was obtained (``decode_rate.DecodeRate.source``)
DecodeSource = Literal["usage", "timings_per_token", "chunk_count", "server_timings", "server_metrics",
                       "chunk_count_bounded"]


# ------------------------------------------------------------------------------------ chat requests
class ImageURL(TypedDict):
    """An image by URL (a ``data:`` URL) in a chat message; built by ``phases.image``."""

    url: str


class ContentPart(TypedDict, total=False):
    """One part of a multimodal message: ``text`` or ``image_url``; built by ``phases.image``."""

    type: Literal["text", "image_url"]
    text: str
    image_url: ImageURL


class ChatMessage(TypedDict):
    """One message of a chat completion request; built by the phases (and read from the tools file)."""

    role: Literal["system", "user", "assistant"]
    content: str | list[ContentPart]


class FunctionSpec(TypedDict, total=False):
    """A tool's function: its name and its ``parameters`` JSON schema (the tools file)."""

    name: str
    description: str
    parameters: JSONObject


class ToolSpec(TypedDict):
    """One tool offered to the model (``{"type": "function", "function": ...}``; the tools file)."""

    type: str
    function: FunctionSpec


class FunctionName(TypedDict):
    """The function a named ``tool_choice`` forces."""

    name: str


class NamedToolChoice(TypedDict):
    """``tool_choice`` naming one function; built by ``tool_judge.tool_choice_body``."""

    type: str
    function: FunctionName


class StreamOptions(TypedDict, total=False):
    """``stream_options`` of a streamed request (vLLM's ``continuous_usage_stats`` at COMPAT_FULL)."""

    include_usage: bool
    continuous_usage_stats: bool


class ChatRequest(TypedDict, total=False):
    """A ``/v1/chat/completions`` request body: streamed (``prompts.chat_body``) or the tool-call
    check's non-streaming one (``phases.tools.ask``); vLLM's and llama.cpp's extensions only where
    the compatibility level allows them."""

    model: str
    messages: list[ChatMessage]
    stream: bool
    max_tokens: int
    max_completion_tokens: int
    stream_options: StreamOptions
    min_tokens: int
    ignore_eos: bool
    timings_per_token: bool
    tools: list[ToolSpec]
    tool_choice: str | NamedToolChoice
    temperature: float


# ------------------------------------------------------------------------------------ the run block
class _ServerBase(TypedDict):
    version: str | None
    model: str | None
    max_model_len: int | None
    base_url: str
    simulated: bool


class ServerBlock(_ServerBase, total=False):
    """``server``: what the server is; ``document.new_document``, filled by ``probe`` (the sources,
    the slots) and ``Session.note_fingerprint``."""

    version_source: Literal["/version", "/props build_info", "system_fingerprint"]
    system_fingerprint: str
    max_model_len_source: Literal["/v1/models max_model_len", "/v1/models meta.n_ctx", "/props n_ctx"]
    slots: int
    slots_source: Literal["/props total_slots", "/slots"]


class ClientBlock(TypedDict):
    """``client``: the host measure ran on; ``document.new_document``."""

    host: str
    python: str
    script_version: str


class SharedSettings(TypedDict):
    """The settings the controller passes to measure (``sparkbench.settings.Settings``) that the
    run's ``settings`` block records under the same name and type (``SettingsBlock``): the rows of
    ``options.OPTIONS`` with a ``setting`` whose key is their result key, in the table's order."""

    output_tokens: int
    runs: int
    warmup: int
    concurrency: list[int]
    context: list[int]
    quality: bool
    quality_max_tokens: int
    image: bool
    telemetry: Literal["auto", "off"]
    target_precision_pct: float | None
    max_runs: int | None
    rate_duration_s: float
    rate_requests: int | None
    rate_seed: int
    rate_max_concurrency: int | None
    rate_search: float | None
    search_by: Literal["rate", "concurrency"]
    prefix_tokens: int
    prefix_requests: int
    prefix_suffix_tokens: int
    prefix_output_tokens: int
    turns: int
    conversations: int
    turn_tokens: int
    turn_output_tokens: int
    tools: bool
    tool_choice: Literal["auto", "required", "named"]
    tools_max_tokens: int


class SettingsBlock(SharedSettings):
    """``settings``: every option of ``options.OPTIONS`` as the run used it (its ``result_key`` or
    dest; the API key only as ``api_key_set``); ``document.settings_block``. The settings shared
    with the controller's are ``SharedSettings``; the rest are measure's own options and the ones
    it records in its own form (``request_timeout``, ``rate``, ``burstiness``, ``slo``)."""

    base_url: str
    model: str | None
    api_key_set: bool
    quality_file: str | None
    sandbox_image: str | None
    nvidia_smi: str | None
    kernel_log: str | None
    request_timeout: float
    stall_timeout: float
    out: str
    hardware: str | None
    bandwidth_probe: str | None
    profiles_dir: str | None
    rate: list[float | str] | None
    burstiness: float | str
    slo: dict[str, float] | None
    replay: str | None
    tools_file: str | None
    tools_skip: str | None


class ErrorEntry(TypedDict):
    """``errors[]``: one request's (or the run's) error; ``Session.error`` and ``cli``."""

    phase: str
    request: int | None
    message: str


class _WarningBase(TypedDict):
    code: str
    message: str


class WarningEntry(_WarningBase, total=False):
    """``warnings[]``: a problem with the whole result, with its counts; ``Session.warn``."""

    requests: int
    valid: int
    attempted: int
    requested: int
    concurrency: int
    waves: int
    server_slots: int | None


class ProfileBlock(TypedDict):
    """``profile``: the --hardware profile and the served model's, as their files hold them
    (carried whole, so JSON); ``probe``."""

    hardware: JSONObject
    model: JSONObject | None
    hardware_file: str
    model_file: str | None


# ----------------------------------------------------------------------------------- speed figures
class DecodeBound(TypedDict):
    """``chunk_count_bounded``: the decode rate for a first chunk of k + 1 (low) and of 1 token
    (high); ``decode_rate.decode_rate``."""

    low: float
    high: float
    missing_chunks: int


class _ServerTimingBase(TypedDict):
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float | None


class RunServerTimings(_ServerTimingBase, total=False):
    """``runs[].server_timings``: the server's own timing of one request (llama.cpp ``timings``,
    or vLLM's decode-time metric with ``origin``); ``RequestRecord.run_fields``."""

    origin: str


class ServerTiming(RunServerTimings):
    """One request's timing as the server or the engine gave it, with its decode rate;
    ``StreamResult.server_timing`` (llama.cpp) and ``metrics.engine_timing`` (vLLM, ``origin``)."""

    decode_tok_s: float | None


class _RunBase(TypedDict):
    ttft_s: float | None
    decode_tok_s: float | None
    valid: bool
    decode_source: DecodeSource | None
    completion_tokens: int | None
    prompt_tokens: int | None
    requested_tokens: int
    first_chunk_tokens: int | None
    first_chunk_tokens_inferred: bool
    content_chunks: int
    finish_reason: str | None
    forced_length: bool
    length_ok: bool | None
    continuous_usage: bool
    done_marker: bool
    error: str | None
    itl_ms: list[float] | None


class RunEntry(_RunBase, total=False):
    """``single.runs[]`` / ``parallel[].per_stream[]``: one speed request; ``RequestRecord.run_fields``
    (``attempt`` by ``phases.single``, ``request`` by ``phases.parallel``)."""

    first_chunk_tokens_max: int
    decode_bound: DecodeBound
    server_timings: RunServerTimings
    server_decode_tok_s: float | None
    chunk_note: str
    itl_reason: str
    decode_reason: str
    attempt: int
    request: int


class MedianBound(TypedDict):
    """``single.decode_tok_s_median_bound``: the median of the runs' bounds; ``aggregate.summarise_single``."""

    low: float | None
    high: float | None


class Precision(TypedDict):
    """``single.precision``: how well the median decode rate is known (--target-precision);
    ``phases.single.precision``."""

    target_pct: float
    achieved_pct: float | None
    runs_used: int
    reached: bool
    max_runs: int
    resamples: int
    seed: int


class SingleMedian(TypedDict):
    """A single-stream median decode rate [tok/s] under the key ``figures.SINGLE_DECODE.field``: the
    ``single`` block's, and every block that carries one (the co-residence conditions)."""

    decode_tok_s_median: float | None


class _SingleBase(SingleMedian):
    decode_tok_s_min: float | None
    decode_tok_s_max: float | None
    ttft_s_median: float | None
    requested_runs: int
    attempted_runs: int
    valid_runs: int
    n: int
    warmup_prompt_tokens: int | None
    runs: list[RunEntry]


class SingleBlock(_SingleBase, total=False):
    """``single``: the single-stream phase; ``phases.single`` (its figures from
    ``aggregate.summarise_single`` after every run)."""

    ttft_n: int
    decode_sources: list[DecodeSource]
    decode_tok_s_median_bound: MedianBound
    prompt_tokens: int | None
    prompt_tokens_uniform: bool | None
    decode_reason: str
    precision: Precision | None


class _ParallelBase(TypedDict):
    concurrency: int
    requests: int
    completed: int
    errors: int
    combined_tok_s: float | None
    per_stream_decode_tok_s: list[float]
    per_stream_decode_tok_s_median: float | None
    per_stream_n: int
    per_stream: list[RunEntry]
    ttft_s: Percentiles
    itl_s: Percentiles
    itl_streams: int
    forced_length: bool
    length_ok: bool | None
    prompt_tokens_uniform: bool | None
    server_slots: int | None
    waves_observed: int | None
    queued_requests: int


class ParallelEntry(_ParallelBase, total=False):
    """``parallel[]``: one concurrency level; ``aggregate.parallel_entry``."""

    itl_reason: str
    completion_tokens: int
    wall_s: float
    combined_reason: str


class _ContextBase(TypedDict):
    depth: int
    prompt_tokens: int | None
    prefill_tok_s: float | None
    ttft_s: float | None
    error: str | None


class ContextEntry(_ContextBase, total=False):
    """``context[]``: one context depth; ``phases.context``."""

    prefill_reason: str


# ---------------------------------------------------------------------------------- the document
class _DocumentBase(TypedDict):
    schema_version: str
    status: Literal["complete", "incomplete", "failed"]
    simulated: bool
    server: ServerBlock
    client: ClientBlock
    settings: SettingsBlock
    started_at: str
    finished_at: str | None
    warnings: list[WarningEntry]
    single: SingleBlock | None
    parallel: list[ParallelEntry]
    context: list[ContextEntry]
    spec_decode: SpecDecodeBlock | None
    spec_decode_reason: str | None
    quality: list[QualityEntry]
    image: ImageEntry | None
    telemetry: TelemetryBlock | None
    telemetry_reason: str | None
    rates: list[RateEntry] | None
    rate_search: RateSearchBlock | None
    prefix_cache: PrefixCacheBlock | None
    multi_turn: MultiTurnBlock | None
    tools: ToolsBlock | None
    errors: list[ErrorEntry]


class MeasuredDocument(_DocumentBase, total=False):
    """The document measure writes (the measured block of a result): ``document.new_document``,
    filled by the probe and the phases, finished by ``document.finish`` (``protocol``) and the probe
    (``profile``, with --hardware). ``sparkbench.result`` completes it on the controller."""

    protocol: ProtocolBlock
    profile: ProfileBlock
