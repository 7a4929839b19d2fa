"""Parallel: for each --concurrency level N, N speed requests sent at once."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..aggregate import parallel_entry
from ..common import log
from ..figures import COMBINED

if TYPE_CHECKING:
    from ..session import Session


def run(s: Session) -> None:
    for n in s.args.concurrency:
        level(s, n)


def level(s: Session, n: int) -> None:
    """One ``parallel[]`` entry, with a warning when the server ran the requests in waves."""
    a = s.args
    phase = f"parallel_{n}"
    with s.phase(phase) as span:
        records = s.generate(phase, [s.speed_messages() for _ in range(n)], a.output_tokens, True)
        streams = []
        for i, r in enumerate(records):
            rec = r.run_fields(a.output_tokens)
            rec["request"] = i
            streams.append(rec)
            if r.error:
                s.error(phase, i, r.error)
            s.check_length(phase, i, rec)
        entry = parallel_entry(n, records, streams, a.output_tokens, records[0].forced if records else True,
                               s.server_slots)
        if entry["per_stream_n"] < n:
            log(f"{phase}: {n - entry['per_stream_n']} of {n} streams have no decode figure: "
                + "; ".join(sorted({x.get('decode_reason') or 'unknown' for x in streams
                                    if x['decode_tok_s'] is None})))
        s.doc["parallel"].append(entry)
        span.tokens = sum(r.completion_tokens or 0 for r in records if not r.error)
    waves = entry["waves_observed"] or 0
    if (s.server_slots and n > s.server_slots) or waves > 1:
        slots = f"the server has {s.server_slots} slots" if s.server_slots else "the server queued requests"
        spans = sum(1 for r in records if not r.error and r.t_first is not None and r.t_last is not None)
        s.warn("parallel_waves", f"parallel {n}: {slots}; the wave ran as {waves} waves "
               f"({entry['queued_requests']} of {spans} requests got their first token after another had "
               f"finished), so this is not {n} streams at once", concurrency=n, waves=waves,
               server_slots=s.server_slots)
    comb = entry[COMBINED.field]
    if comb:
        log(f"parallel {n}: combined {comb:.2f} tok/s, {entry['completed']}/{n} completed, "
            f"{entry['per_stream_n']} per-stream figures")
    else:
        log(f"parallel {n}: no combined figure ({entry.get('combined_reason')})")
