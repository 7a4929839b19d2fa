"""Arrival rates (--rate, --replay, --rate-search): requests sent on a schedule from one thread
(``client.stream_scheduled``), TTFT/TPOT/e2e per request from the client's reads, goodput against
--slo, vllm bench serve's definitions."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..aggregate import RateEntry, rate_figures, rate_row
from ..client import stream_scheduled
from ..common import Interrupted, inf_str, log
from ..prompts import context_prompt, make_nonce
from ..record import RequestRecord
from ..shapes import ChatMessage
from ..sse import parse_sse
from ..stats import rate_schedule
from . import rate_search

if TYPE_CHECKING:
    from ..session import Session


@dataclass
class Schedule:
    """What one arrival-rate block sends: messages, output lengths and send offsets [s]."""

    label: str
    phase: str
    nominal: float | str  # the rate the result records ("inf": all at once)
    messages: list[list[ChatMessage]]
    outputs: list[int]
    offsets: list[float]


def run(s: Session) -> None:
    """--rate LIST (each in order), --replay, then --rate-search."""
    a = s.args
    tried: list[tuple[float, float]] = []  # (rate, slo_met_share)
    for rate in a.rate or []:
        e = block(s, rate_schedule_for(s, rate))
        if e["slo_met_share"] is not None and not math.isinf(rate):
            tried.append((rate, e["slo_met_share"]))
    if a.replay:
        block(s, replay_schedule(s))
    if a.rate_search is not None and a.search_by == "concurrency":
        rate_search.by_concurrency(s, a.rate_search, lambda n: block(s, rate_schedule_for(s, math.inf, n), True, n))
    elif a.rate_search is not None:
        rate_search.by_rate(s, a.rate_search, tried, lambda r: block(s, rate_schedule_for(s, r), True))


def rate_schedule_for(s: Session, rate: float, concurrency: int | None = None) -> Schedule:
    """round(rate x --rate-duration) speed requests (or --rate-requests; a closed-loop level of the
    concurrency search sends --rate-requests or max(8, 4 N)) on vllm bench serve's schedule."""
    a = s.args
    if concurrency is not None:
        n = a.rate_requests or max(8, 4 * concurrency)
    else:  # an inf rate always comes with --rate-requests (cli.check_args)
        n = a.rate_requests or max(1, round(rate * a.rate_duration))
    label, phase = f"rate {rate:g} req/s", f"rate_{rate:g}"
    if concurrency is not None:
        label, phase = f"rate {rate:g} req/s, {concurrency} in flight", f"rate_{rate:g}_c{concurrency}"
    return Schedule(label, phase, "inf" if math.isinf(rate) else rate, [s.speed_messages() for _ in range(n)],
                    [a.output_tokens] * n, rate_schedule(n, rate, a.burstiness, a.rate_seed))


def replay_schedule(s: Session) -> Schedule:
    """The --replay workload: each line's prompt (or prose of its prompt_tokens) at its offset."""
    rows = s.replay_data or []
    cpt = s.prompt_chars_per_token()
    offsets = [r["offset_s"] for r in rows]
    msgs: list[list[ChatMessage]] = [
        [{"role": "user", "content": r["prompt"] or context_prompt(int(r["prompt_tokens"] * cpt), s.rng)}]
        for r in rows]
    span = max(offsets)
    return Schedule(f"replay {s.args.replay}", "rate_replay", len(rows) / span if span > 0 else "inf", msgs,
                    [r["output_tokens"] or s.args.output_tokens for r in rows], offsets)


def block(s: Session, sch: Schedule, search: bool = False, concurrency: int | None = None) -> RateEntry:
    """One ``rates[]`` entry: the schedule sent, every request recorded, the figures."""
    a = s.args
    replay = sch.phase == "rate_replay"
    n = len(sch.offsets)
    tag = make_nonce(s.rng)
    ids = [f"sb-{tag}-{i}" for i in range(n)]
    bodies = s.bodies(sch.messages, sch.outputs, True)
    log(f"{sch.label}: {n} requests over {max(sch.offsets) if sch.offsets else 0:.2f} s")
    with s.phase(sch.phase) as span:
        s.in_flight(True)
        anchor_perf, anchor_epoch = time.perf_counter(), time.time()
        sent, stopped = list(range(n)), None
        try:
            raws, t0 = stream_scheduled(s.ep, bodies, sch.offsets, a.request_timeout, a.stall_timeout,
                                        concurrency or a.rate_max_concurrency, ids)
        except Interrupted as exc:  # stopped by a signal: the requests sent before it are recorded
            if not getattr(exc, "partial", None):
                raise
            sent, raws, t0 = exc.partial
            stopped = exc
        finally:
            s.in_flight(False)

        def epoch(t: float) -> float:
            return anchor_epoch + (t - anchor_perf)

        results = [parse_sse(raws[i]) for i in sent]
        s.note_fingerprint(results)
        records = [RequestRecord.from_stream(r, True) for r in results]
        rows = [rate_row(rec, ids[i], sch.offsets[i], t0, a.slo, epoch) for i, rec in zip(sent, records)]
        for i, row in enumerate(rows):
            if row["error"]:
                s.error(sch.phase, i, row["error"])
        entry: RateEntry = {"rate": sch.nominal, "burstiness": None if replay else inf_str(a.burstiness),
                            "seed": None if replay else a.rate_seed, **rate_figures(rows, records, a.slo, epoch),
                            "search": search, "max_concurrency": concurrency or a.rate_max_concurrency,
                            "output_tokens": None if replay else a.output_tokens, "per_request": rows}
        if replay:
            entry["replay"] = a.replay
        if stopped is not None:
            entry["stopped"] = f"interrupted by {stopped} after {len(sent)} of {n} scheduled requests were sent"
        if entry["duration_s"] is None:
            entry["duration_reason"] = ("no request completed" if not entry["completed"]
                                        else "no time between first send and last completion")
        if entry["failed"]:
            reasons = sorted({p["error"] for p in rows if p["error"]})
            entry["failed_reason"] = f"{entry['failed']} of {len(sent)} requests failed: " + "; ".join(reasons)[:500]
            s.incomplete.append(f"{entry['failed']} arrival-rate request(s) failed (see rates[].failed_reason)")
        span.tokens = sum(r["output_tokens"] or 0 for r in rows if not r["error"])
    if stopped is None and any(r.lost for r in records):
        s.check_alive(sch.phase)
    s.doc["rates"] = (s.doc["rates"] or []) + [entry]
    if stopped is not None:
        raise stopped
    gp = entry["goodput"]
    log(f"{sch.label}: {entry['completed']}/{n} completed, achieved {entry['achieved_rate'] or 0:.3f} req/s, "
        f"schedule error p99 {entry['schedule_error_ms']['p99'] or 0:.3f} ms"
        + (f", goodput {gp:.3f} req/s, SLO met by {entry['slo_met_share']:.3f}" if gp is not None else ""))
    return entry
