"""Table 13: the twin's predictions against published and measured figures.

Rows: every published figure in ``sparkbench/data/published_figures.json`` (fitted: a fit used
it; held-out: none did) with the twin's prediction (``sparkbench.predict``) and its error; then,
where present, the measured rows kept in ``perf/results/prediction_measured.json`` (written by
hand runs outside ``make perf``: real vLLM on the CPU calibrated on one configuration and
predicting another, the bandwidth probe on a real GPU) with their errors.

Error = predicted / reference − 1. The shipped interval ``sparkbench predict`` prints without a
unit's history is the largest held-out error (one stream and several streams apart).
"""
from __future__ import annotations

import json
import statistics

from perf.common import RESULTS, Section
from sparkbench.predict.published import fit_rows, shipped_interval

MEASURED = RESULTS / "prediction_measured.json"


def _published_table(rows: list[dict]) -> str:
    lines = ["| figure | role | published tok/s | predicted tok/s | error | source |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | {r['role']} | {r['tok_s']:.2f} | {r['predicted']:.2f} | "
                     f"{r['error'] * 100:+.1f} % | {r['source']} |")
    return "\n".join(lines)


def _probe_table(doc: dict) -> str:
    lines = [f"The bandwidth probe on real hardware ({doc.get('how', '')}):", "",
             "| probe | device | method | GB/s (min–max) | data sheet | % of data sheet |", "|---|---|---|---|---|---|"]
    for p in doc.get("probes", []):
        sheet = p.get("data_sheet_gbps")
        share = f"{p['gbps'] / sheet * 100:.1f} %" if sheet else "–"
        lines.append(f"| {p['what']} | {p['device']} | `{p['method']}` | {p['gbps']:,.1f} ({p['spread'][0]:,.1f}–"
                     f"{p['spread'][1]:,.1f}) | {f'{sheet:,} GB/s' if sheet else '–'} | {share} |")
    return "\n".join(lines)


def _measured_table(doc: dict) -> str:
    lines = [f"Predictions checked against measured runs ({doc.get('rows_how', '')}):", "",
             "| what | role | reference | predicted | error | note |", "|---|---|---|---|---|---|"]
    for r in doc.get("rows", []):
        err = (f"{(r['predicted'] / r['reference'] - 1) * 100:+.1f} %" if r.get("predicted") and r.get("reference")
               else "–")
        lines.append(f"| {r['what']} | {r['role']} | {r.get('reference', '–')} {r.get('unit', '')} | "
                     f"{r.get('predicted', '–')} {r.get('unit', '') if r.get('predicted') else ''} | {err} | "
                     f"{r.get('note', '')} |")
    return "\n".join(lines)


def run(quick: bool = False) -> Section:
    rows = fit_rows()
    fitted = [abs(r["error"]) for r in rows if r["role"] == "fitted"]
    held = [abs(r["error"]) for r in rows if r["role"] == "held-out"]
    body = [
        "**How:** `perf/prediction.py`: the twin (`sparkbench/twin/pacing.py`, the simulator's engine model) "
        "for each published figure's model, flags, vLLM version and concurrency on the `dgx-spark` profile, "
        "no unit calibration; error = predicted / published − 1. No server runs: the figures are the twin's "
        "arithmetic, so they do not depend on this machine's load.", "",
        _published_table(rows), "",
        f"Fitted rows: median |error| {statistics.median(fitted) * 100:.1f} %, largest {max(fitted) * 100:.1f} %. "
        f"Held-out rows: median |error| {statistics.median(held) * 100:.1f} %, largest {max(held) * 100:.1f} % — "
        f"the shipped interval `sparkbench predict` prints without history: ±{shipped_interval(rows, 1) * 100:.1f} % "
        f"at one stream, ±{shipped_interval(rows, 8) * 100:.1f} % at several.",
    ]
    measured: dict = {}
    if MEASURED.exists():
        measured = json.loads(MEASURED.read_text(encoding="utf-8"))
        if measured.get("probes"):
            body += ["", _probe_table(measured)]
        if measured.get("rows"):
            body += ["", _measured_table(measured)]
    goal = max(fitted) < 0.04
    body += ["", f"**Goal** (fitted rows within 4 %, held-out errors stated): {'met' if goal else 'NOT met'}."]
    # The summary (BENCHMARKS.md's section): fitted and held-out errors, the interval, the measured rows.
    worst_held = max((r for r in rows if r["role"] == "held-out"), key=lambda r: abs(r["error"]))
    figure = (f"Fitted rows: median |error| {statistics.median(fitted) * 100:.1f} %, largest {max(fitted) * 100:.1f} %. "
              f"Held-out rows: median {statistics.median(held) * 100:.1f} %, largest {max(held) * 100:.1f} % "
              f"({worst_held['what']}). These give the interval `predict` prints without history: "
              f"±{shipped_interval(rows, 1) * 100:.1f} % at one stream, ±{shipped_interval(rows, 8) * 100:.1f} % at "
              "several.")
    checked = [("parallel" in r["what"], (r["predicted"] / r["reference"] - 1) * 100)
               for r in measured.get("rows", [])
               if r.get("predicted") and r.get("reference") and r.get("role") == "held-out"]
    one = [e for par, e in checked if not par]
    several = [e for par, e in checked if par]
    parts = ([f"single stream {', '.join(f'{e:+.1f} %' for e in one)}"] if one else []) + (
        [f"parallel {min(several):+.1f} to {max(several):+.1f} %"] if several else [])
    if parts:
        figure += (" Against measured runs (held out, `perf/results/prediction_measured.json`): "
                   + "; ".join(parts) + " (the full table says why).")
    load = ("Each published figure's model, flags, vLLM version and concurrency on the `dgx-spark` profile; no "
            "server runs, so the figures do not depend on this machine's load.")
    probe = next((p for p in measured.get("probes", []) if p.get("data_sheet_gbps")), None)
    if probe:
        load += (f" The bandwidth probe, run by hand on {probe['device']}: {probe['gbps']:,.1f} GB/s "
                 f"(`{probe['method']}`, {probe['gbps'] / probe['data_sheet_gbps'] * 100:.1f} % of the data sheet).")
    today = f"fitted ≤ {max(fitted) * 100:.1f} %, held out ≤ {max(held) * 100:.1f} %: {'met' if goal else 'missed'}"
    return Section("prediction", "Prediction", "\n".join(body), goal_met=goal,
                   data={"rows": rows, "shipped_single": shipped_interval(rows, 1)},
                   figure=figure, load=load, today=today)
