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


def _upgrade_vars(image: str | None, variant: str | None, revision: str | None) -> dict[str, str]:
    return {k: v for k, v in (("upgrade_image", image), ("upgrade_variant", variant),
                              ("upgrade_model_revision", revision)) if v}


def check_extravars(extravars: dict, image: str | None, variant: str | None, revision: str | None,
                    run_id: str | None, results_dir: str | None) -> dict:
    """The extra vars of ``sparkbench upgrade --check`` (one run of the playbook in check mode)."""
    ev = {**extravars, **_upgrade_vars(image, variant, revision),
          "bench_run_id": run_id or extravars.get("bench_run_id") or f"upgrade-{new_run_id()}"}
    if results_dir:
        ev["bench_results_dir"] = str(Path(results_dir).resolve())
    return ev


def run_upgrade(image: str | None, *, inventory=None, limit: str, variant: str | None = None,
                revision: str | None = None, run_id: str | None = None, results_dir: str | None = None,
                extravars: dict | None = None, out: TextIO, max_rounds: int = 4) -> int:
    """The upgrade's rounds until every unit's gate is decided; returns the exit code. A round after
    the first runs on the units still measuring only (``-l`` narrowed to them)."""
    run_id = run_id or f"upgrade-{new_run_id()}"
    ev = {**(extravars or {}), **_upgrade_vars(image, variant, revision)}
    first, units, failed_rc = time.time(), limit, 0
    for n in range(1, max_rounds + 1):
        started = time.time()
        result = run_bench(inventory=inventory, limit=units, extravars=ev, run_id=run_id, playbook=UPGRADE_PLAYBOOK,
                           results_dir=results_dir, report=False)
        run_dir = Path(result.run_dir)
        failed_rc = failed_rc or result.rc
        decided_now = {d["host"] for d in read_all(run_dir) if _written_since(run_dir, d, started)}
        pending = _measured_hosts(run_dir, started) - decided_now
        if not pending:
            break
        if n == max_rounds:
            print(f"sparkbench upgrade: still undecided after {n} rounds on {', '.join(sorted(pending))}", file=out)
            return EXIT_PLAYBOOK_ERROR
        print(f"round {n}: the gate cannot tell within the tolerance yet on {', '.join(sorted(pending))}; "
              "measuring both again", file=out)
        units = ",".join(sorted(pending))
    decided = [d for d in read_all(run_dir) if _written_since(run_dir, d, first)]
    if not decided:
        reasons = sorted(set(result.failed_hosts.values()))
        why = "; ".join(reasons) if reasons else output_tail(result.artifacts_dir)
        print(f"sparkbench upgrade: decided nothing: {why}", file=out)
        return EXIT_USAGE if PLAN_TASK in why else EXIT_PLAYBOOK_ERROR
    for line in decision_lines(decided):
        print(line, file=out)
    print(f"upgrade report: {run_dir / 'upgrade.md'}", file=out)
    refused = any(d["state"] == "refused" for d in decided)
    return EXIT_VARIANT_FAILED if refused or failed_rc != 0 else EXIT_OK


def _measured_hosts(run_dir: Path, since: float) -> set[str]:
    """The units whose round wrote a result (they measured)."""
    return {p.parent.name for p in run_dir.glob("*/*.json")
            if not p.name.endswith(".upgrade.json") and p.stat().st_mtime >= since}


def _written_since(run_dir: Path, doc: dict, since: float) -> bool:
    path = run_dir / doc["host"] / f"{doc['variant']}.upgrade.json"
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False
