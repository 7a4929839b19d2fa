"""The speed figures measure.py writes: one request (``run``), the single-stream phase, each
parallel level, each context depth, speculative decoding (``spec``) and the percentile shapes
(``percentiles``, ``stat4``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field

from .base import (
    Above0,
    Block,
    Count,
    DecodeSource,
    Fraction,
    Int,
    NonNegative,
    Positive,
    Rate,
    Seconds,
    Share,
    bounded,
)

#: a mean acceptance length: the token every step makes, and the accepted drafts
AtLeast1 = bounded(ge=1)


class SingleMedian(BaseModel):
    """A single-stream median decode rate [tok/s] under the key ``sparkbench.measure.figures``
    declares (``SINGLE_DECODE.field``): mixed into the blocks that carry one beside ``single``
    (a co-residence condition, a deployment record's source and canary)."""

    decode_tok_s_median: Optional[NonNegative]


class Percentiles(Block):
    p50: Seconds
    p90: Seconds
    p99: Seconds


class Stat4(Block):
    p50: Seconds
    p90: Seconds
    p99: Seconds
    mean: Seconds


class DecodeBound(Block):
    ("chunk_count_bounded: decode tok/s for a first chunk of k + 1 (low) and of 1 token (high)")
    low: Rate
    high: Rate
    missing_chunks: Positive


class ServerTimings(Block):
    ("the server's own per-request timing (llama.cpp timings, or vLLM's decode-time metric)")
    predicted_n: Int = None
    predicted_ms: float = None
    predicted_per_second: Optional[float] = None
    origin: Literal["vllm:request_decode_time_seconds"] = Field(
        None, description="read from vLLM's metrics around a single-stream request (absent: llama.cpp timings)")


class Run(Block):
    ttft_s: Seconds
    decode_tok_s: Rate
    completion_tokens: Optional[Count]
    prompt_tokens: Optional[Count] = None
    requested_tokens: Positive
    first_chunk_tokens: Optional[Count]
    finish_reason: Optional[str]
    forced_length: bool
    length_ok: Optional[bool]
    continuous_usage: bool = None
    done_marker: bool = None
    decode_reason: str = None
    error: Optional[str]
    valid: bool = Field(None, description="the run has a decode figure")
    itl_ms: Optional[list[NonNegative]] = Field(
        None, description="per-token gaps of this request [ms, 3 decimals]: a gap before a chunk of k tokens is k "
                          "gaps of gap/k; null with itl_reason when the stream has none (failed, one read, no "
                          "per-chunk token counts)")
    itl_reason: str = Field(None, description="why itl_ms is null")
    attempt: Count = Field(None, description="single.runs[]: index among all attempted runs")
    request: Count = Field(None, description="parallel[].per_stream[]: index of the request in the wave")
    decode_source: Optional[DecodeSource] = Field(
        None, description="how decode_tok_s was obtained (null without a figure)")
    first_chunk_tokens_inferred: bool = Field(
        None, description="first_chunk_tokens was not read from a per-chunk count")
    first_chunk_tokens_max: Positive = Field(
        None, description="k more tokens than content chunks: the first chunk held at most k + 1")
    content_chunks: Count = None
    decode_bound: DecodeBound = None
    server_timings: ServerTimings = None
    server_decode_tok_s: Rate = Field(
        None, description="(predicted_n - 1) / (predicted_ms / 1000) from server_timings")
    chunk_note: str = Field(None, description="what was observed about tokens and chunks")


class MedianBound(Block):
    low: Rate
    high: Rate


class Precision(Block):
    target_pct: Above0 = Field(
        description="asked-for half-width of the 95 % bootstrap interval of the median, % of the median")
    achieved_pct: Optional[NonNegative] = Field(
        description="the half-width reached, % of the median; null with fewer than 2 valid runs")
    runs_used: Count = Field(description="single-stream runs attempted in all")
    reached: bool
    max_runs: Positive = None
    resamples: Positive = None
    seed: Int = None


class Single(Block):
    decode_tok_s_median: Rate
    decode_tok_s_min: Rate
    decode_tok_s_max: Rate
    ttft_s_median: Seconds
    decode_reason: str = None
    runs: list[Run]
    requested_runs: Positive = None
    attempted_runs: Count = None
    valid_runs: Count = None
    n: Count = Field(None, description="runs behind decode_tok_s_median/min/max (= valid_runs)")
    ttft_n: Count = None
    decode_sources: list[DecodeSource] = None
    decode_tok_s_median_bound: MedianBound = None
    prompt_tokens: Optional[Count] = None
    prompt_tokens_uniform: Optional[bool] = None
    warmup_prompt_tokens: Optional[Count] = None
    precision: Optional[Precision] = Field(
        None, description="--target-precision: how well the median decode rate is known; null when not asked for")


class Parallel(Block):
    concurrency: Positive
    requests: Positive = None
    completed: Count = None
    errors: Count
    combined_tok_s: Rate
    combined_reason: str = None
    completion_tokens: Count = None
    wall_s: NonNegative = None
    per_stream_decode_tok_s: list[NonNegative]
    per_stream_decode_tok_s_median: Rate
    ttft_s: Percentiles
    itl_s: Percentiles
    itl_reason: str = None
    forced_length: bool = None
    length_ok: Optional[bool] = None
    per_stream: list[Run] = Field(None, description="every request of the wave: a decode figure or decode_reason")
    per_stream_n: Count = None
    itl_streams: Count = Field(None, description="streams whose per-token gaps are in itl_s")
    prompt_tokens_uniform: Optional[bool] = None
    server_slots: Optional[Positive] = None
    waves_observed: Optional[Count] = Field(
        None, description="longest chain of requests each getting its first token after the previous finished "
                          "(1 = all at once)")
    queued_requests: Count = None


class Context(Block):
    depth: Positive
    prompt_tokens: Optional[Count]
    prefill_tok_s: Rate
    ttft_s: Seconds
    prefill_reason: str = None
    error: Optional[str] = None


class Spec(Block):
    acceptance_per_position: Optional[list[Share]]
    mean_acceptance_length: Optional[AtLeast1]
    draft_acceptance_rate: Fraction
    num_drafts: Optional[Count]
    num_draft_tokens: Optional[Count] = None
    num_accepted_tokens: Optional[Count] = None
    reason: str = None


class SpecDecode(Spec):
    phases_included: list[str] = None
    by_phase: dict[str, Spec]

