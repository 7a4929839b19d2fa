"""The tune's section (``results/<run>/tune.json``, written by ``sparkbench tune``): every point of
the space with its status (measured, pruned with the preflight's reason, failed with the launch's or
the measurement's), its figure and its prediction, then the answer in the Trust contract's words."""

from __future__ import annotations

import json
from pathlib import Path

from ...tune import TUNE_FILE
from ..table import Section, Table, f


def tune_doc(run_path: str | Path) -> dict | None:
    """The run's tune.json, None when the run is not a tune (or the file cannot be read)."""
    try:
        doc = json.loads((Path(run_path) / TUNE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("trials"), list) else None


def _row(trial: dict, objectives: list[str], winner: str | None) -> list[str]:
    point = ", ".join(f"{k}={v}" for k, v in (trial.get("point") or {}).items())
    figures = [f(trial.get("figures", {}).get(o)) for o in objectives]
    mark = " ◀ winner" if trial.get("name") == winner else ""
    return [str(trial.get("name")) + mark, point, str(trial.get("status")), *figures,
            f(trial.get("predicted_tok_s")), str(trial.get("reason") or "")]


def tune(run_path: str | Path) -> Section:
    """"Tune": one row per point, the answer as the summary line; empty (and out of results.json)
    when the run is not a tune."""
    doc = tune_doc(run_path)
    if doc is None:
        return Section("tune", "Tune", in_doc=False)
    objectives = [str(o) for o in doc.get("objectives") or ["single"]]
    won = doc.get("winner") or {}
    rows = [_row(t, objectives, won.get("name")) for t in doc["trials"]]
    budget = doc.get("budget") or {}
    notes = [f"base {doc.get('base')}; budget {budget.get('trials')} trials"
             + (f", {budget.get('minutes'):g} minutes of racing" if budget.get("minutes") else "")
             + f"; {doc.get('races', 0)} race(s) of the two leaders; pruned points were never launched; "
               "predicted = the twin's figure for the point before it was measured (sparkbench predict)"]
    table = Table("tune", f"Tune: {doc.get('base')} ({', '.join(objectives)})",
                  ["point", "values", "status", *(f"{o} tok/s" for o in objectives), "predicted tok/s", "why"],
                  rows, notes)
    line = f"tune: {won['words']}" if won.get("words") else "tune: no point could be measured"
    return Section("tune", "Tune", doc, [table], [line])
