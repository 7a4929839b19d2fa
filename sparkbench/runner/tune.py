"""``sparkbench tune SPACE.yml -l HOST [--run-id ID]``: the rounds of ``playbooks/tune.yml`` until
the answer, each round's points and figures as they come, then the winner and its verdict.

Exit codes: 0 with a winner (whatever was pruned or failed on the way), 1 when no point could be
measured, 4 for a bad space (named by its field, before any host is touched), 3 when a round's
playbook failed before it decided anything, 130 on Ctrl-C (the same command resumes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TextIO

from ..errors import InputError
from ..report.closing import source_label
from ..tune import TUNE_FILE, WINNER_FILE
from ..tune.space import load_space
from .api import EXIT_PLAYBOOK_ERROR, EXIT_USAGE, BenchResult, new_run_id, output_tail, run_bench

TUNE_PLAYBOOK = "playbooks/tune.yml"
ROUND_TASK = "Tune | choose this round's points"
EXIT_WINNER, EXIT_NOTHING_MEASURED = 0, 1


def _tune_doc(run_dir: Path, since: float) -> dict | None:
    """tune.json as this round wrote it; None when the round did not write it (it failed before)."""
    path = run_dir / TUNE_FILE
    try:
        if path.stat().st_mtime < since:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _why(result: BenchResult) -> str:
    reasons = sorted(set(result.failed_hosts.values()))
    return "; ".join(reasons) if reasons else output_tail(result.artifacts_dir)


def _point_line(trial: dict) -> str:
    figures = ", ".join(f"{k} {v:.2f}" for k, v in trial["figures"].items() if v is not None)
    point = ", ".join(f"{k}={v}" for k, v in trial["point"].items())
    why = f": {trial['reason']}" if trial.get("reason") else ""
    return f"  {trial['name']:<22} {trial['status']:<9} {figures or '—':<22} {point}{why}"


def answer_lines(doc: dict, run_dir: Path) -> list[str]:
    """The closing lines: every point, then the answer and where the winner's entry is."""
    lines = [f"tune {doc['base']} ({', '.join(doc['objectives'])}; budget {doc['budget']['trials']} trials):"]
    if doc.get("simulated") is not None:
        lines.insert(0, source_label(bool(doc["simulated"]), set(doc.get("backends") or [])))
    lines += [_point_line(t) for t in doc["trials"]]
    won = doc.get("winner")
    if won:
        lines.append(f"answer: {won['words']}")
        lines.append(f"winner: {run_dir / WINNER_FILE} (ansible-playbook bench.yml -e @{run_dir / WINNER_FILE}; "
                     f"serve.yml takes it too)")
    else:
        lines.append("answer: no point could be measured")
    return lines


def run_tune(space_path: str, *, inventory=None, limit: str | None = None, run_id: str | None = None,
             results_dir: str | None = None, extravars: dict | None = None, out: TextIO,
             max_rounds: int = 50) -> int:
    """The tune's rounds until it is done; returns the exit code."""
    try:
        space = load_space(space_path)
    except InputError as exc:
        print(f"sparkbench tune: {exc}", file=out)
        return EXIT_USAGE
    run_id = run_id or f"tune-{new_run_id()}"
    ev = {**(extravars or {}), "tune_space": str(Path(space_path).resolve())}
    doc = None
    for n in range(1, max_rounds + 1):
        started = time.time()
        result = run_bench(inventory=inventory, limit=limit, extravars=ev, run_id=run_id, playbook=TUNE_PLAYBOOK,
                           results_dir=results_dir, report=False)
        doc = _tune_doc(result.run_dir, started)
        if doc is None:
            why = _why(result)
            print(f"sparkbench tune: round {n} decided nothing: {why}", file=out)
            # The round's own task fails only on bad input (the space, its base, a flag's value).
            return EXIT_USAGE if ROUND_TASK in why else EXIT_PLAYBOOK_ERROR
        measured = sum(1 for t in doc["trials"] if t["status"] == "measured")
        print(f"round {n}: {doc['state']}; {measured} of {space.budget.trials} trials measured", file=out)
        if doc["state"] == "done":
            break
    for line in answer_lines(doc or {}, Path(result.run_dir)):
        print(line, file=out)
    return EXIT_WINNER if doc and doc.get("winner") else EXIT_NOTHING_MEASURED
