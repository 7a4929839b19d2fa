"""``sparkbench upgrade -l HOST IMAGE [--variant V] [--run-id ID]``: the rounds of
``playbooks/upgrade.yml`` until every resident's gate is decided, then the decisions.

Exit codes: 0 every resident passed and runs its candidate; 1 an upgrade was refused (that
resident serves as before) or its deploy rolled back; 3 a round's playbook failed before deciding;
4 bad input (no image, no resident, the image it already runs), before any container starts; 130
on Ctrl-C (the same command with the same --run-id goes on).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from ..report.upgrade import lines as decision_lines
from ..upgrade.document import read_all
from .api import EXIT_OK, EXIT_PLAYBOOK_ERROR, EXIT_USAGE, EXIT_VARIANT_FAILED, new_run_id, output_tail, run_bench

UPGRADE_PLAYBOOK = "playbooks/upgrade.yml"
PLAN_TASK = "Upgrade | plan"


def run_upgrade(image: str | None, *, inventory=None, limit: str, variant: str | None = None,
                revision: str | None = None, run_id: str | None = None, results_dir: str | None = None,
                extravars: dict | None = None, out: TextIO, max_rounds: int = 4) -> int:
    """The upgrade's rounds until decided; returns the exit code."""
    run_id = run_id or f"upgrade-{new_run_id()}"
    ev = dict(extravars or {})
    ev.update({k: v for k, v in (("upgrade_image", image), ("upgrade_variant", variant),
                                 ("upgrade_model_revision", revision)) if v})
    result = None
    for n in range(1, max_rounds + 1):
        started = time.time()
        result = run_bench(inventory=inventory, limit=limit, extravars=ev, run_id=run_id, playbook=UPGRADE_PLAYBOOK,
                           results_dir=results_dir, report=False)
        decided = [d for d in read_all(Path(result.run_dir)) if _written_since(Path(result.run_dir), d, started)]
        reasons = sorted(set(result.failed_hosts.values()))
        tail = "; ".join(reasons) if reasons else output_tail(result.artifacts_dir)
        if decided:
            for line in decision_lines(decided):
                print(line, file=out)
            print(f"upgrade report: {Path(result.run_dir) / 'upgrade.md'}", file=out)
            refused = any(d["state"] == "refused" for d in decided)
            return EXIT_VARIANT_FAILED if refused or result.rc != 0 else EXIT_OK
        if _measured_since(Path(result.run_dir), started) and n < max_rounds:
            print(f"round {n}: the gate cannot tell within the tolerance yet; measuring both again", file=out)
            continue
        print(f"sparkbench upgrade: round {n} decided nothing: {tail}", file=out)
        return EXIT_USAGE if PLAN_TASK in tail else EXIT_PLAYBOOK_ERROR
    return EXIT_PLAYBOOK_ERROR


def _measured_since(run_dir: Path, since: float) -> bool:
    """Whether the round wrote a result (it measured, and its gate wants both measured again)."""
    return any(p.stat().st_mtime >= since for p in run_dir.glob("*/*.json") if not p.name.endswith(".upgrade.json"))


def _written_since(run_dir: Path, doc: dict, since: float) -> bool:
    path = run_dir / doc["host"] / f"{doc['variant']}.upgrade.json"
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False
