"""The playbook verbs other than ``bench``: ``provision``, ``health``, ``serve`` and ``teardown``
(and ``bench --check``), each its playbook on ansible-runner with live progress, what the playbook
said, and one exit-code policy (the runner's ``EXIT_*``):

- ``health`` plans and measures a canary per unit: its progress is the bench view, and its exit
  code comes from ``results/<run>/health.json`` (read through its model): 2 when a unit failed (or
  was unreachable), 1 when a unit is slow, 0 when every unit is healthy; 3 when the file is there
  but is not a health document (the closing lines name the field and why).
- the others follow their tasks: 2 when a host was unreachable, for ``serve`` 1 when a host
  failed (the deploy was refused or rolled back: the previous resident keeps serving), for
  ``provision`` and ``teardown`` 2 when a host failed; 3 when ansible-playbook failed without a
  host failing (syntax, inventory, no hosts matched); 0 otherwise."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DocumentError
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

if TYPE_CHECKING:  # the models are imported where health.json is read (_health_outcome)
    from ..documents.health import HealthDocument, HealthUnit

#: verb → its playbook, relative to the repository
PLAYBOOKS = {"provision": "playbooks/provision.yml", "bench": "bench.yml", "health": "playbooks/health.yml",
             "serve": "playbooks/serve.yml", "teardown": "playbooks/teardown.yml",
             # `sparkbench upgrade --check` (its rounds run through sparkbench.runner.upgrade)
             "upgrade": "playbooks/upgrade.yml"}


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
    units: list[HealthUnit] = field(default_factory=list)  # health: the verdict per unit (health.json)
    early: str | None = None  # ansible-playbook's last output when it failed before any host ran


def _health_extravars(extravars: dict, run_id: str | None, results_dir: str | os.PathLike | None) -> dict:
    ev = dict(extravars)
    run_id = run_id or ev.get("bench_run_id") or f"health-{new_run_id()}"
    if not RUN_ID_RE.match(str(run_id)):
        raise UsageError(f"--run-id {run_id!r}: use letters, digits, '.', '_' or '-' (e.g. health-20261201)")
    ev["bench_run_id"] = str(run_id)
    ev.setdefault("bench_results_dir", str(Path(results_dir).resolve() if results_dir else DEFAULT_RESULTS_DIR))
    return ev


def _health_outcome(run_dir: Path) -> tuple[int | None, HealthDocument | None]:
    """(exit code, the health document) from the run's health.json; (None, None) when it was not
    written. The file is read through its model (``sparkbench.documents.load_health``): one that
    is not a health document raises ``DocumentError`` naming the file and the field."""
    path = run_dir / "health.json"
    if not path.is_file():
        return None, None
    from ..documents.load import load_health

    doc = load_health(path)
    verdicts = {u.verdict for u in doc.units}
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
        try:
            rc, judged = _health_outcome(run_dir)
        except DocumentError as exc:  # written, but not a health document: no verdict to go by
            out.said.append(("", f"the health verdict cannot be read: {exc}"))
            out.files = {"health.json": run_dir / "health.json"}
            out.rc = EXIT_PLAYBOOK_ERROR
            return out
        if rc is not None and judged is not None:
            # what health.json says is the outcome: a verdict line per unit (the play's last task
            # fails the run on one unit's behalf; that is the verdict, not a failure of that unit)
            out.units = list(judged.units)
            out.said = [("", line) for line in judged.lines]
            judged_hosts = {u.host for u in out.units}
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
