"""The answer section, the report's first table: per host and model, the fastest variant single
stream and at 8 parallel (a row each), its lead over the runner-up and the verdict
(:func:`sparkbench.report.compare.answer`); one summary line per host × model."""

from __future__ import annotations

from .. import compare
from ..compare import AT_8
from ..table import DASH, Section, Table, f, pct, sim
from .verdicts import drift_notes, missing_notes, unit_mark, verdict_cell

#: (metric, its name in the table and the summary lines)
_LEVELS = (("single", "single stream"), (AT_8, "8 parallel"))


def _lead(w: dict) -> str:
    """``+10.3 % over nvidia-mtp2``, or "only variant" without a runner-up."""
    if w["runner_up"] is None:
        return "only variant"
    return f"{pct(w['pct_diff'])} over {w['runner_up_label']}"


def _cells(w: dict | None) -> list[str]:
    """fastest, tok/s, lead, verdict of one winner entry (no variant has the figure: "not measured")."""
    if w is None:
        return [DASH, DASH, "not measured", DASH]
    return [w["label"], f(w["value"]), _lead(w), verdict_cell(w["verdict"])]


def answer_line(row: dict) -> str:
    """One summary line, e.g. "spark-sim01 · Qwen3.6-35B-A3B-NVFP4 — single stream: nvidia-mtp3
    107.0 tok/s, +10.3 % over nvidia-mtp2: differs by +10.3 % [+9.1, +11.4]; 8 parallel:
    nvidia-mtp3 490.0 tok/s, +0.8 % over unsloth-mtp3: no difference detectable above 2.2 %"."""
    parts = []
    for metric, said in _LEVELS:
        w = row[metric]
        if w is None:
            continue
        part = f"{said}: {w['label']} {f(w['value'])} tok/s, {_lead(w)}"
        parts.append(part + (f": {w['verdict']['text']}" if w["verdict"] else ""))
    line = f"{row['host']} · {row['model_key']} — " + "; ".join(parts)
    if row["unreliable"]:
        line += f" (unreliable: drift — {row['unreliable']})"
    return sim(line, row["simulated"])


def answer(results: list[dict], drift: dict | None = None) -> Section:
    """"Answer": the numbers, a summary line per host × model, and the table (none without a
    measured variant)."""
    data = compare.answer(results, drift=drift)
    if not data["rows"]:
        return Section("answer", "Answer", data)
    rows = [[unit_mark(r["host"], r["unreliable"]), r["model_key"], said] + _cells(r[metric])
            for r in data["rows"] for metric, said in _LEVELS]
    notes = ["fastest = the variant of the model with the highest median on the host (8 parallel: combined tok/s); "
             "lead = (fastest − runner-up) / runner-up, the runner-up being the next fastest; verdict: the "
             "fastest variant's requests against the runner-up's (8 parallel: the 8 per-stream decode rates; "
             "docs/REPORTS.md, \"How to read a verdict\")"]
    notes += missing_notes((f"{said} verdict", [(r[metric] or {}).get("verdict") for r in data["rows"]])
                           for metric, said in _LEVELS)
    notes += drift_notes(r["unreliable"] for r in data["rows"])
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("answer", sim("Answer: the fastest variant per model", simulated),
                  ["host", "model", "at", "fastest", "tok/s", "lead", "verdict"], rows, notes)
    return Section("answer", "Answer", data, [table], [answer_line(r) for r in data["rows"]])
