"""The serving phases' blocks: the arrival-rate phase (``rates``, one ``rate_entry`` per rate), the
rate search (``rate_search``), the prefix-cache phase (``prefix_cache``) and the multi-turn phase
(``multi_turn``)."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field

from .base import (
    Above0,
    Block,
    Closed,
    Count,
    DecodeSource,
    Fraction,
    Int,
    NonNegative,
    Positive,
    Rate,
    Seconds,
    bounded,
)
from .figures import Stat4

#: "inf": every request at once (--rate inf, or a burstiness of inf)
Infinite = Literal["inf"]
#: the share of requests meeting the SLO a rate search looks for
TargetShare = bounded(gt=0, le=1)


# ------------------------------------------------------------------------------------- arrival rate
class ScheduleError(Block):
    p50: Optional[float]
    p99: Optional[float]
    max: Optional[float]


class Slo(Closed):
    ttft: NonNegative = None
    tpot: NonNegative = None
    e2e: NonNegative = None


class ScheduledRequest(Block):
    id: str
    scheduled_s: NonNegative
    sent: Optional[float]
    end: Optional[float] = None
    schedule_error_ms: Optional[float]
    ttft_s: Seconds
    tpot_s: Seconds
    e2e_s: Seconds
    output_tokens: Optional[Int]
    good: Optional[bool]
    error: Optional[str]
    tpot_reason: str = None


class RateEntry(Block):
    ("One arrival-rate block (measure.py --rate / --replay): requests sent on a schedule, per-request TTFT/TPOT/E2E, "
     "goodput against --slo (vllm bench serve's definitions; docs/MEASUREMENT.md).")
    rate: Union[Above0, Infinite] = Field(
        description="requests per second as asked (a replay: requests / last offset)")
    burstiness: Optional[Union[Above0, Infinite]]
    seed: Optional[Count]
    requests: Positive
    completed: Count
    failed: Count
    start: Optional[float] = Field(description="epoch s of the first send")
    end: Optional[float] = Field(description="epoch s of the last completion")
    duration_s: Seconds
    duration_reason: str = None
    achieved_rate: Optional[NonNegative] = Field(description="requests / duration_s")
    output_tok_s: Optional[NonNegative]
    ttft_s: Stat4
    tpot_s: Stat4
    e2e_s: Stat4
    schedule_error_ms: ScheduleError
    slo: Optional[Slo]
    goodput: Optional[NonNegative] = Field(description="good requests / duration_s [req/s]")
    slo_met_share: Fraction
    search: bool
    replay: str = None
    max_concurrency: Optional[Positive] = None
    output_tokens: Optional[Positive] = None
    failed_reason: str = None
    per_request: list[ScheduledRequest] = None


class RateSearch(Block):
    ("--rate-search: the highest rate (or, --search-by concurrency, in-flight level) tried whose slo_met_share >= "
     "target_share")
    target_share: TargetShare
    best_rate: Optional[Above0]
    tried: list[float]
    extra_rates: list[float] = None
    max_steps: Int = None
    by: Literal["rate", "concurrency"] = Field(
        None, description="--search-by: rate (tried = rates, req/s) or concurrency (tried = requests in flight, "
                          "closed loop)")
    best_concurrency: Optional[Positive] = Field(
        None, description="--search-by concurrency: the most requests in flight whose slo_met_share >= target_share "
                          "(null: none, or a rate search)")


# ------------------------------------------------------------------------------------- prefix cache
class PrefixRequest(Block):
    i: Count
    prompt_tokens: Optional[Count]
    ttft_s: Seconds
    e2e_s: Seconds
    cached_tokens: Optional[Count] = Field(
        description="usage.prompt_tokens_details.cached_tokens when the server sent it (vLLM: "
                    "--enable-prompt-tokens-details)")
    error: Optional[str] = None


class PrefixCache(Block):
    ("measure.py --prefix-tokens: requests sharing one system prompt (a document new each run) with a unique user "
     "suffix each, sent one at a time; request 0 is cold, 1..n-1 warm; hit rate from the deltas of vLLM's "
     "prefix-cache counters (docs/MEASUREMENT.md \"Prefix caching\").")
    prefix_tokens: Positive = Field(
        description="--prefix-tokens (asked; the prompt's real count is per_request[].prompt_tokens)")
    suffix_tokens: Positive
    output_tokens: Positive = None
    requests: Positive
    completed: Count
    failed: Count
    cold_ttft_s: Seconds = Field(description="TTFT of request 0 (nothing cached yet)")
    ttft_s: Stat4 = Field(description="TTFT of requests 1..n-1 (warm)")
    prefill_tok_s: Rate = Field(description="median of prompt_tokens / ttft_s over requests 1..n-1")
    hit_rate: Fraction = Field(
        description="delta vllm:prefix_cache_hits / delta vllm:prefix_cache_queries over the phase (tokens); null "
                    "with reason")
    hit_tokens: Optional[Count]
    query_tokens: Optional[Count]
    reason: Optional[str] = Field(description="why hit_rate (or the whole phase) has no figure")
    per_request: list[PrefixRequest]


# --------------------------------------------------------------------------------------- multi-turn
class TurnFigures(Block):
    turn: Positive
    requests: Count
    context_tokens: Optional[NonNegative] = Field(
        description="median usage.prompt_tokens of the turn's completed requests")
    ttft_s: Seconds
    decode_tok_s: Rate
    prefill_tok_s: Rate


class TurnRequest(Block):
    conversation: Count
    turn: Positive
    prompt_tokens: Optional[Count]
    ttft_s: Seconds
    decode_tok_s: Rate
    cached_tokens: Optional[Count] = None
    error: Optional[str] = None
    decode_source: Optional[DecodeSource] = Field(
        None, description="how decode_tok_s was obtained (null without a figure); server_metrics: the engine's own "
                          "decode time for this request")
    decode_reason: str = Field(None, description="why decode_tok_s is null for a completed request")


class MultiTurn(Block):
    ("measure.py --turns: conversations whose every turn re-sends the whole history (the assistant's real answers) "
     "plus new user text, interleaved round robin, one request at a time (docs/MEASUREMENT.md \"Multi-turn\").")
    conversations: Positive
    turns: Positive
    turn_tokens: Positive
    output_tokens: Positive
    completed: Count
    failed: Count
    reason: str = Field(None, description="why no turn was sent")
    per_turn: list[TurnFigures]
    per_request: list[TurnRequest]
