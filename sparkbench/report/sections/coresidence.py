""""Co-residence" (bench_interference): what sharing a unit with its residents costs each variant.

One row per variant × co-resident condition (its residents present and idle; under the background
load), from each result's ``coresidence`` block (``sparkbench.interference.coresidence.rows``): the
single-stream median beside them, the median alone (the variant's own figure, the residents
stopped) and the verdict against alone, in the verdict's words alone."""

from __future__ import annotations

from ...interference import coresidence as coresidence_mod
from ..numbers import is_simulated
from ..table import Section, Table, f, sim, text


def coresidence(results: list[dict]) -> Section:
    """The section: its rows as numbers, one table (none without a ``coresidence`` block) and a
    summary line per row."""
    found = [(r, doc) for doc in results for r in coresidence_mod.rows(doc)]
    if not found:
        return Section("coresidence", "Co-residence", [], in_doc=False)
    simulated = any(is_simulated(doc) for _, doc in found)
    rows = [[text(r["host"]), text(r["variant"]), text(r["label"]), f(r["median"], 2), f(r["alone"], 2),
             text(r["text"])] for r, _ in found]
    table = Table("coresidence", sim("Co-residence", simulated),
                  ["host", "variant", "beside the residents", "tok/s", "alone tok/s", "verdict vs alone"], rows,
                  ["single stream; alone = the variant's own result, measured with the unit's residents stopped; "
                   "the load = a steady request rate against each resident's port for the whole measurement "
                   "(bench_interference)"])
    lines = [sim(f"{r['host']} {r['variant']} {r['label']}: {r['text']}", is_simulated(doc)) for r, doc in found]
    return Section("coresidence", "Co-residence", [r for r, _ in found], [table], lines, in_doc=False)
