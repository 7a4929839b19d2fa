"""Predicted vs measured: the twin's single-stream rate for each measured variant (its model,
flags, vLLM version and hardware, at the bandwidth the unit's probe read; not calibrated on this
run) against the measured median, and the twin's accuracy over the run."""

from __future__ import annotations

import statistics

from ...predict.twin_rate import twin_single
from .. import numbers as n
from ..table import Section, Table, f, pct, sim


def prediction(results: list[dict]) -> Section:
    """"Predicted vs measured": rows host × variant, the summary line with the median |error|."""
    rows, errors, data = [], [], []
    for r in n.sort_results(results):
        measured = n.single_stats(r)[0] if r.get("status") == "complete" else None
        predicted = twin_single(r) if measured else None
        if not predicted:
            continue
        error = (predicted / measured - 1.0) * 100.0
        errors.append(error)
        data.append({"host": n.host_of(r), "variant": n.variant_name(r), "measured": measured,
                     "predicted": predicted, "error_pct": error, "simulated": n.is_simulated(r)})
        rows.append([n.host_of(r), n.variant_name(r), f(measured), f(predicted), pct(error)])
    if not rows:
        return Section("prediction", "Predicted vs measured", {"rows": [], "median_abs_error_pct": None})
    simulated = all(d["simulated"] for d in data)
    med = statistics.median(abs(e) for e in errors)
    table = Table("prediction", sim("Predicted vs measured (single stream)", simulated),
                  ["host", "variant", "measured tok/s", "predicted tok/s", "error"], rows,
                  ["predicted = the twin (sparkbench/twin, the simulator's engine model) for the variant's model, "
                   "flags and vLLM version at the unit's probed bandwidth, not calibrated on this run; "
                   "error = predicted / measured − 1; `sparkbench predict MODEL --host HOST` calibrates on the "
                   "unit's history"])
    line = sim(f"the twin predicted the single-stream rate within {med:.1f} % (median |error|) over "
               f"{len(rows)} variant(s)", simulated)
    return Section("prediction", "Predicted vs measured", {"rows": data, "median_abs_error_pct": med},
                   [table], [line])
