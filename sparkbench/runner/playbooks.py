"""The playbook verbs other than ``bench``: ``provision``, ``health``, ``serve`` and ``teardown``
(and ``bench --check``), each its playbook on ansible-runner with live progress, what the playbook
said, and one exit-code policy (the runner's ``EXIT_*``):

- ``health`` plans and measures a canary per unit: its progress is the bench view, and its exit
  code comes from ``results/<run>/health.json``: 2 when a unit failed (or was unreachable), 1 when
  a unit is slow, 0 when every unit is healthy.
- the others follow their tasks: 2 when a host was unreachable, for ``serve`` 1 when a host
  failed (the deploy was refused or rolled back: the previous resident keeps serving), for
  ``provision`` and ``teardown`` 2 when a host failed; 3 when ansible-playbook failed without a
  host failing (syntax, inventory, no hosts matched); 0 otherwise."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import DEFAULT_RESULTS_DIR, REPO_ROOT
from .api import (
    EXIT_HOST_FAILED,
    EXIT_OK,
    EXIT_PLAYBOOK_ERROR,
    EXIT_VARIANT_FAILED,
    RUN_ID_RE,
    UsageError,
    new_run_id,
    output_tail,
    start_playbook,
)
from .progress import Progress
from .tasks import TaskProgress

#: verb → its playbook, relative to the repository
PLAYBOOKS = {"provision": "playbooks/provision.yml", "bench": "bench.yml", "health": "playbooks/health.yml",
             "serve": "playbooks/serve.yml", "teardown": "playbooks/teardown.yml"}


@dataclass
class PlaybookResult:
    """What a playbook verb produced: the exit code, ansible-playbook's rc, the hosts that failed,
    what the playbook said (``debug`` lines, per host), and the files it wrote."""

    verb: str
    rc: int
    ansible_rc: int | None
    failed_hosts: dict[str, str]
    said: list[tuple[str, str]]
    artifacts_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    units: list[dict] = field(default_factory=list)  # health: the verdict per unit
    early: str | None = None  # ansible-playbook's last output when it failed before any host ran


def _health_extravars(extravars: dict, run_id: str | None, results_dir: str | os.PathLike | None) -> dict:
    ev = dict(extravars)
    run_id = run_id or ev.get("bench_run_id") or f"health-{new_run_id()}"
    if not RUN_ID_RE.match(str(run_id)):
        raise UsageError(f"--run-id {run_id!r}: use letters, digits, '.', '_' or '-' (e.g. health-20261201)")
    ev["bench_run_id"] = str(run_id)
    ev.setdefault("bench_results_dir", str(Path(results_dir).resolve() if results_dir else DEFAULT_RESULTS_DIR))
    return ev


def _health_outcome(run_dir: Path) -> tuple[int | None, dict]:
    """(exit code, the health document) from the run's health.json; (None, {}) when it was not
    written."""
    try:
        doc = json.loads((run_dir / "health.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, {}
    verdicts = {u.get("verdict") for u in doc.get("units") or []}
    rc = EXIT_HOST_FAILED if "failed" in verdicts else EXIT_VARIANT_FAILED if "slow" in verdicts else EXIT_OK
    return rc, doc


def run_playbook(verb: str, *, inventory=None, limit: str | None = None, extravars: dict | None = None,
                 check: bool = False, run_id: str | None = None, results_dir: str | os.PathLike | None = None,
                 verbosity: int = 0, on_change=None, project_dir: str | os.PathLike = REPO_ROOT) -> PlaybookResult:
    """Run the verb's playbook (``PLAYBOOKS``) and return a :class:`PlaybookResult`. ``on_change``:
    the view's callback (a :class:`Progress` change for ``health``, a :class:`TaskProgress`
    change otherwise); ``run_id`` and ``results_dir`` are ``health``'s."""
    if verb not in PLAYBOOKS:
        raise UsageError(f"unknown playbook verb {verb!r}; one of {', '.join(PLAYBOOKS)}")
    ev = dict(extravars or {})
    measured = verb == "health" and not check
    if verb == "health":
        ev = _health_extravars(ev, run_id, results_dir)
    tasks = TaskProgress(None if measured else on_change)
    bench = Progress(on_change if measured else None)

    def handle(event: dict) -> bool:
        tasks.handle(event)
        return bench.handle(event) if measured else True

    ident = ev.get("bench_run_id") or f"{verb}-{new_run_id()}"
    runner, artifacts = start_playbook(PLAYBOOKS[verb], inventory=inventory, limit=limit, extravars=ev,
                                       handler=handle, ident=str(ident), check=check, verbosity=verbosity,
                                       project_dir=project_dir)
    if not tasks.finished:
        tasks.handle({"event": "playbook_on_stats", "event_data": {}})
    failed = tasks.failed_hosts()
    out = PlaybookResult(verb=verb, rc=EXIT_OK, ansible_rc=runner.rc, failed_hosts=failed, said=list(tasks.said),
                         artifacts_dir=artifacts)
    if not tasks.hosts and runner.rc != 0:
        out.early = output_tail(artifacts)
    if measured:
        run_dir = Path(ev["bench_results_dir"]) / str(ev["bench_run_id"])
        rc, judged = _health_outcome(run_dir)
        if rc is not None:
            # what health.json says is the outcome: a verdict line per unit (the play's last task
            # fails the run on one unit's behalf; that is the verdict, not a failure of that unit)
            out.units = list(judged.get("units") or [])
            out.said = [("", str(line)) for line in judged.get("lines") or []]
            judged_hosts = {u.get("host") for u in out.units}
            out.failed_hosts = {h: why for h, why in failed.items() if h not in judged_hosts}
            out.files = {"health.md": run_dir / "health.md", "health.json": run_dir / "health.json"}
            out.rc = rc
            return out
    if tasks.unreachable_hosts():
        out.rc = EXIT_HOST_FAILED
    elif failed:
        out.rc = EXIT_VARIANT_FAILED if verb == "serve" else EXIT_HOST_FAILED
    elif runner.rc != 0:
        out.rc = EXIT_PLAYBOOK_ERROR
    return out
