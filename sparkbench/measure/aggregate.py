"""Each phase's figures from its records: pure functions over lists of requests, testable without
a server (``pytest -m unit``). A phase sends, records and logs; the arithmetic lives here."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from .common import inf_str
from .figures import COMBINED, PER_STREAM_DECODE, SINGLE_DECODE, TTFT
from .record import RequestRecord
from .shapes import DecodeSource, ParallelEntry, RunEntry, SingleBlock
from .stats import Stat4, count_waves, median, meets_slo, pcts, percentile, request_tpot, stat4

#: the median's bound where a run's decode figure has one (simulated ceilings)
MEDIAN_BOUND = f"{SINGLE_DECODE.field}_bound"
_OPTIONAL_SINGLE = (MEDIAN_BOUND, "decode_reason")


# ---- the serving phases' blocks (their rows and figures built here, the blocks by their phases) ----
class ScheduleError(TypedDict):
    """``rates[].schedule_error_ms``: actual - scheduled send [ms]; ``rate_figures``."""

    p50: float | None
    p99: float | None
    max: float | None


class _RateRowBase(TypedDict):
    id: str
    scheduled_s: float
    sent: float | None
    schedule_error_ms: float | None
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    output_tokens: int | None
    good: bool | None
    error: str | None


class RateRow(_RateRowBase, total=False):
    """``rates[].per_request[]``: one scheduled request; ``rate_row``."""

    end: float
    tpot_reason: str


class RateFigures(TypedDict):
    """An arrival-rate block's figures from its rows; ``rate_figures``."""

    requests: int
    completed: int
    failed: int
    start: float | None
    end: float | None
    duration_s: float | None
    achieved_rate: float | None
    output_tok_s: float | None
    ttft_s: Stat4
    tpot_s: Stat4
    e2e_s: Stat4
    schedule_error_ms: ScheduleError
    slo: dict[str, float] | None
    goodput: float | None
    slo_met_share: float | None


class _RateEntryBase(RateFigures):
    rate: float | str
    burstiness: float | str | None
    seed: int | None
    search: bool
    max_concurrency: int | None
    output_tokens: int | None
    per_request: list[RateRow]


class RateEntry(_RateEntryBase, total=False):
    """``rates[]``: one arrival rate (or the replay, or a level of the search); ``phases.rates.block``.
    ``output_tokens`` here is the length asked of every request (None for a replay)."""

    replay: str
    stopped: str
    duration_reason: str
    failed_reason: str


class PrefixRow(TypedDict):
    """``prefix_cache.per_request[]``: one request of the prefix-cache phase; ``phases.prefix_cache``."""

    i: int
    prompt_tokens: int | None
    ttft_s: float | None
    e2e_s: float | None
    cached_tokens: int | None
    error: str | None


class PrefixFigures(TypedDict):
    """The prefix-cache phase's TTFTs and prefill rate; ``prefix_figures``."""

    cold_ttft_s: float | None
    ttft_s: Stat4
    prefill_tok_s: float | None


class PrefixHits(TypedDict):
    """The prefix-cache hit rate from the counters' deltas; ``prefix_hits``."""

    hit_rate: float | None
    hit_tokens: int | None
    query_tokens: int | None
    reason: str | None


class PrefixCacheBlock(PrefixFigures, PrefixHits):
    """``prefix_cache``: the prefix-cache phase; ``phases.prefix_cache``."""

    prefix_tokens: int
    suffix_tokens: int
    output_tokens: int
    requests: int
    completed: int
    failed: int
    per_request: list[PrefixRow]


class _TurnRowBase(TypedDict):
    conversation: int
    turn: int
    prompt_tokens: int | None
    ttft_s: float | None
    decode_tok_s: float | None
    decode_source: DecodeSource | None
    cached_tokens: int | None
    error: str | None


class TurnRow(_TurnRowBase, total=False):
    """``multi_turn.per_request[]``: one turn of one conversation; ``phases.multi_turn``."""

    decode_reason: str


class TurnFigures(TypedDict):
    """``multi_turn.per_turn[]``: medians over one turn's completed requests; ``multi_turn_per_turn``."""

    turn: int
    requests: int
    context_tokens: float | None
    ttft_s: float | None
    decode_tok_s: float | None
    prefill_tok_s: float | None


class _MultiTurnBase(TypedDict):
    conversations: int
    turns: int
    turn_tokens: int
    output_tokens: int
    completed: int
    failed: int
    per_turn: list[TurnFigures]
    per_request: list[TurnRow]


class MultiTurnBlock(_MultiTurnBase, total=False):
    """``multi_turn``: the multi-turn phase; ``phases.multi_turn`` (``reason``: why no turn was sent)."""

    reason: str


def summarise_single(s: SingleBlock, warmup_prompt_tokens: int | None) -> None:
    """The ``single`` block's figures from its ``runs`` (updated in place after every run):
    median/min/max decode over valid runs, median TTFT, counts, decode sources, the median's bound
    when a run has one, the prompt length when every run had one, why no run gave a figure."""
    valid = [r for r in s["runs"] if r["decode_tok_s"] is not None]
    decs = [r["decode_tok_s"] for r in valid]
    ttfts = [r["ttft_s"] for r in s["runs"] if r["ttft_s"] is not None]
    s[SINGLE_DECODE.field] = median(decs)
    s[SINGLE_DECODE.low] = min(decs) if decs else None
    s[SINGLE_DECODE.high] = max(decs) if decs else None
    s[TTFT.field] = median(ttfts)
    s["ttft_n"] = len(ttfts)
    s["attempted_runs"] = len(s["runs"])
    s["valid_runs"] = s["n"] = len(valid)
    s["decode_sources"] = sorted({r["decode_source"] for r in valid if r.get("decode_source")})
    if any("decode_bound" in r for r in valid):
        lows = [r.get("decode_bound", {}).get("low", r["decode_tok_s"]) for r in valid]
        highs = [r.get("decode_bound", {}).get("high", r["decode_tok_s"]) for r in valid]
        s[MEDIAN_BOUND] = {"low": median(lows), "high": median(highs)}
    else:
        s.pop(MEDIAN_BOUND, None)
    prompts = {r["prompt_tokens"] for r in s["runs"] if r.get("prompt_tokens") is not None}
    if warmup_prompt_tokens is not None and prompts:
        prompts.add(warmup_prompt_tokens)
    s["prompt_tokens"] = next(iter(prompts)) if len(prompts) == 1 else None
    s["prompt_tokens_uniform"] = (len(prompts) == 1) if prompts else None
    if not decs and s["runs"]:
        reasons = {r.get("decode_reason") or r.get("error") for r in s["runs"]}
        s["decode_reason"] = "; ".join(sorted(x for x in reasons if x))
    else:
        s.pop("decode_reason", None)


def _itl(ok: list[RequestRecord]) -> tuple[list[float], int, list[str]]:
    """Pooled per-token gaps of the completed streams, how many streams gave some, why the others did not."""
    itl: list[float] = []
    streams = 0
    missing: list[str] = []
    for r in ok:
        if not r.itl:
            missing.append(r.itl_why if r.itl is None else "fewer than two token arrivals")
        else:
            itl.extend(r.itl)
            streams += 1
    return itl, streams, missing


def parallel_entry(n: int, records: list[RequestRecord], streams: list[RunEntry], output_tokens: int,
                   forced: bool, server_slots: int | None) -> ParallelEntry:
    """One ``parallel[]`` entry: combined tok/s = sum of completion tokens / (last token - first
    send), per-stream decode, TTFT and pooled ITL percentiles, the waves the server ran."""
    ok = [r for r in records if not r.error]
    per_stream = [s["decode_tok_s"] for s in streams if s["decode_tok_s"] is not None]
    itl, itl_streams, itl_missing = _itl(ok)
    tokens = [r.completion_tokens for r in ok]
    prompts = {s["prompt_tokens"] for s in streams if s["prompt_tokens"] is not None}
    entry: ParallelEntry = {
        "concurrency": n, "requests": n, "completed": len(ok), "errors": n - len(ok),
        COMBINED.field: None, "per_stream_decode_tok_s": per_stream,
        PER_STREAM_DECODE.field: median(per_stream), "per_stream_n": len(per_stream),
        "per_stream": streams, "ttft_s": pcts([r.ttft for r in ok if r.ttft is not None]), "itl_s": pcts(itl),
        "itl_streams": itl_streams, "forced_length": forced,
        "length_ok": all(t == output_tokens for t in tokens) if ok and None not in tokens else None,
        "prompt_tokens_uniform": (len(prompts) == 1) if prompts else None, "server_slots": server_slots,
    }
    if itl_missing:
        why = "; ".join(sorted(set(itl_missing)))
        entry["itl_reason"] = (f"{len(itl_missing)} of {len(ok)} completed streams have no per-token "
                               f"gaps ({why})" + ("" if itl_streams else ": no ITL figure"))
    elif not ok:
        entry["itl_reason"] = "no request completed"
    spans = [(r.t_first, r.t_last) for r in ok if r.t_first is not None and r.t_last is not None]
    waves, queued = count_waves(spans)
    entry["waves_observed"] = waves if spans else None
    entry["queued_requests"] = queued
    lasts = [r.t_last for r in ok if r.t_last is not None]
    if ok and None not in tokens and lasts:
        span = max(lasts) - min(r.t_start for r in records)
        total = sum(t for t in tokens if t is not None)
        entry["completion_tokens"] = total
        entry["wall_s"] = span
        entry[COMBINED.field] = total / span if span > 0 else None
    else:
        entry["combined_reason"] = "no request completed" if not ok else "server sent no usage: token counts unknown"
    return entry


def prefix_figures(rows: list[PrefixRow]) -> PrefixFigures:
    """The prefix-cache phase's TTFTs from its ``per_request`` rows: the first (cold) request's,
    the warm ones' p50/p90/p99/mean, and the warm prefill rate = prompt tokens / TTFT (median)."""
    ok = [r for r in rows if not r["error"]]
    cold = next((r["ttft_s"] for r in ok if r["i"] == 0), None)
    warm = [r for r in ok if r["i"] > 0]
    return {"cold_ttft_s": cold, "ttft_s": stat4([r["ttft_s"] for r in warm]),
            "prefill_tok_s": median([r["prompt_tokens"] / r["ttft_s"] for r in warm
                                     if r["prompt_tokens"] and r["ttft_s"]])}


def prefix_hits(before: tuple[float, float] | None, after: tuple[float, float] | None,
                why: str | None) -> PrefixHits:
    """Hit rate = Δ hits / Δ queries of vLLM's prefix-cache counters (tokens) over the phase."""
    out: PrefixHits = {"hit_rate": None, "hit_tokens": None, "query_tokens": None, "reason": None}
    if before is None or after is None:
        out["reason"] = why
        return out
    dq, dh = after[0] - before[0], after[1] - before[1]
    out["query_tokens"], out["hit_tokens"] = int(dq), int(dh)
    if dq > 0:
        out["hit_rate"] = dh / dq
    else:
        out["reason"] = ("the server counted no prefix-cache queries during the phase "
                         "(prefix caching off, e.g. --no-enable-prefix-caching)")
    return out


def multi_turn_per_turn(rows: list[TurnRow], turns: int) -> list[TurnFigures]:
    """Per turn (completed requests only): median context, TTFT, decode and prefill rate."""
    out = []
    for turn in range(1, turns + 1):
        ok = [p for p in rows if p["turn"] == turn and not p["error"]]
        out.append({
            "turn": turn, "requests": len(ok),
            "context_tokens": median([p["prompt_tokens"] for p in ok if p["prompt_tokens"] is not None]),
            "ttft_s": median([p["ttft_s"] for p in ok if p["ttft_s"] is not None]),
            "decode_tok_s": median([p["decode_tok_s"] for p in ok if p["decode_tok_s"] is not None]),
            "prefill_tok_s": median([p["prompt_tokens"] / p["ttft_s"] for p in ok if p["prompt_tokens"] and p["ttft_s"]])})
    return out


def rate_row(rec: RequestRecord, request_id: str, scheduled: float, t0: float, slo: dict[str, float] | None,
             epoch: Callable[[float], float]) -> RateRow:
    """One arrival-rate request: scheduled and actual send, schedule error, TTFT, TPOT, e2e, good."""
    sent = rec.t_start if rec.t_start else None
    row: RateRow = {"id": request_id, "scheduled_s": scheduled, "sent": epoch(sent) if sent else None,
                    "schedule_error_ms": (sent - t0 - scheduled) * 1000.0 if sent else None,
                    "ttft_s": None, "tpot_s": None, "e2e_s": None, "output_tokens": rec.completion_tokens,
                    "good": False if slo else None, "error": None}
    if rec.failure or rec.t_last is None:
        row["error"] = rec.failure or "no chunk carried content or reasoning"
        return row
    assert rec.t_first is not None
    ttft, e2e = rec.t_first - rec.t_start, rec.t_last - rec.t_start
    tpot = request_tpot(e2e, ttft, rec.completion_tokens)
    row.update({"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "end": epoch(rec.t_last)})
    if tpot is None:
        row["tpot_reason"] = "server sent no usage: output tokens unknown"
    row["good"] = meets_slo(slo, ttft, tpot, e2e) if slo else None
    return row


def rate_figures(rows: list[RateRow], records: list[RequestRecord], slo: dict[str, float] | None,
                 epoch: Callable[[float], float]) -> RateFigures:
    """An arrival-rate block's figures from its rows: completed and failed, start and end (epoch s),
    achieved rate, output tok/s, TTFT/TPOT/e2e, schedule error, goodput = good / (last completion -
    first send) and slo_met_share = good / requests."""
    n = len(rows)
    done = [r for r in rows if not r["error"]]
    good = sum(bool(r["good"]) for r in done)
    tokens = sum(r["output_tokens"] or 0 for r in done)
    sends = [r.t_start for r in records if r.t_start]
    ends = [r.t_last for r in records if not r.error and r.t_last is not None]
    start, end = (min(sends) if sends else None), (max(ends) if ends else None)
    duration = (end - start) if start is not None and end is not None and end > start else None
    sched = [r["schedule_error_ms"] for r in rows if r["schedule_error_ms"] is not None]
    return {
        "requests": n, "completed": len(done), "failed": n - len(done),
        "start": epoch(start) if start is not None else None, "end": epoch(end) if end is not None else None,
        "duration_s": duration, "achieved_rate": n / duration if duration else None,
        "output_tok_s": tokens / duration if duration else None,
        "ttft_s": stat4([r["ttft_s"] for r in done]), "tpot_s": stat4([r["tpot_s"] for r in done
                                                                       if r["tpot_s"] is not None]),
        "e2e_s": stat4([r["e2e_s"] for r in done]),
        "schedule_error_ms": {"p50": percentile(sched, 50), "p99": percentile(sched, 99),
                              "max": max(sched) if sched else None},
        "slo": dict(slo) if slo else None,
        "goodput": (good / duration if duration else 0.0) if slo else None,
        "slo_met_share": good / n if slo and n else None,
    }


def nominal_rate(rate: float) -> float | str:
    """The rate as the result records it ("inf" for all at once)."""
    return inf_str(rate)
