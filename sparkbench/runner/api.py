"""Importable API behind ``scripts/sparkbench``: run the bench playbook on ansible-runner with live
progress, then render the report. For CI systems and notebooks::

    from sparkbench.runner import run_bench
    result = run_bench(inventory="inventory/hosts.yml", limit="sim_sparks")
    result.rc, result.states, result.report_html

Secrets (HF token, API keys) are never passed as extra vars: they travel in the environment or in
ansible-vault, ``suppress_env_files=True`` keeps ansible-runner from writing them into
``env/``, and the run's ``command`` artifact is scrubbed of secret-looking environment values."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..paths import REPO_ROOT
from ..secrets import SECRET_NAME_RE as SECRET_RE
from .outcome import outcome
from .progress import FAILED, Change, Progress

DEFAULT_PLAYBOOK = "bench.yml"
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# Exit codes (documented in docs/REPORTS.md and `sparkbench --help`). One policy with bench.yml
# (sparkbench.runner.outcome): non-zero if and only if a variant or a host failed (or the run
# could not be made), decided after the report is written.
EXIT_OK = 0            # no variant and no host failed (incomplete variants included: their figures are kept)
EXIT_VARIANT_FAILED = 1  # at least one variant failed; every host ran to the end
EXIT_HOST_FAILED = 2   # a host was unreachable or failed as a whole (provisioning, outside a variant's rescue)
EXIT_PLAYBOOK_ERROR = 3  # ansible-playbook itself failed (syntax, inventory, no hosts…) or nothing was planned
EXIT_USAGE = 4         # bad command line (unknown file, bad -e, bad run id)
EXIT_INTERRUPTED = 130  # Ctrl-C


class UsageError(Exception):
    """Bad input to the runner: one line naming the argument and the fix."""


@dataclass
class BenchResult:
    """What a bench run produced: per host × variant states, failures, the exit code and paths."""

    run_id: str
    rc: int
    ansible_rc: int | None
    status: str
    states: dict[str, dict[str, str]]
    failed_hosts: dict[str, str]
    notes: dict[str, dict[str, str]]
    run_dir: Path
    artifacts_dir: Path
    report_html: Path | None = None
    report_error: str | None = None
    summary: list[str] = field(default_factory=list)
    report_doc: dict | None = None  # the run's results.json content (None without a report)

    @property
    def failed_variants(self) -> list[str]:
        """``host/variant`` of every failed variant."""
        return [f"{h}/{v}" for h, vs in self.states.items() for v, s in vs.items() if s == FAILED]

    @property
    def ok(self) -> bool:
        """True when no variant and no host failed."""
        return self.rc == EXIT_OK


def new_run_id() -> str:
    """The default run id: UTC time ``YYYYmmddTHHMMSSZ`` (docs/ARCHITECTURE.md)."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def parse_extravars(pairs: list[str]) -> dict:
    """``KEY=VALUE`` (value parsed as JSON when it is valid JSON, else a string), a JSON object, or
    ``@file.json`` / ``@file.yml``. Refuses keys that look like secrets (use the environment or ansible-vault)."""
    out: dict = {}
    for item in pairs or []:
        if item.startswith("@"):
            path = Path(item[1:])
            if not path.is_file():
                raise UsageError(f"-e {item}: file {path} not found; pass an existing JSON/YAML vars file")
            text = path.read_text(encoding="utf-8")
            try:
                import yaml
                data = yaml.safe_load(text)
            except Exception as exc:  # noqa: BLE001 - any parse error becomes one line
                raise UsageError(f"-e {item}: not valid YAML/JSON ({exc.__class__.__name__}); fix the file") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {item}: the file must hold a mapping of variables")
            out.update(data)
            continue
        if item.lstrip().startswith("{"):
            try:
                data = json.loads(item)
            except json.JSONDecodeError as exc:
                raise UsageError(f"-e {item!r}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            out.update(data)
            continue
        if "=" not in item:
            raise UsageError(f"-e {item!r}: expected KEY=VALUE, a JSON object or @file; e.g. -e bench_force=true")
        key, value = item.split("=", 1)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise UsageError(f"-e {item!r}: {key!r} is not a valid variable name")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    for key in out:
        if SECRET_RE.search(key):
            raise UsageError(f"-e {key}=…: secrets are not passed as extra vars (they would reach command lines "
                             f"and artifacts); export it in the environment (e.g. HF_TOKEN) or use ansible-vault")
    return out


def _scrub_artifacts(artifacts_dir: Path) -> None:
    """Blank secret-looking environment values in ansible-runner's ``command`` artifact."""
    for cmd_file in artifacts_dir.glob("*/command"):
        try:
            data = json.loads(cmd_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        env = data.get("env") or {}
        changed = False
        for k in list(env):
            if SECRET_RE.search(k):
                env[k] = "<redacted>"
                changed = True
        if changed:
            cmd_file.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _playbook_path(project: Path, playbook: str | os.PathLike) -> Path:
    """The playbook, relative to the project unless absolute; it must exist."""
    pb = Path(playbook)
    pb_path = pb if pb.is_absolute() else project / pb
    if not pb_path.is_file():
        raise UsageError(f"playbook {pb_path} not found; pass --playbook PATH (default: bench.yml at the repo root)")
    return pb_path


def _inventory_paths(inventory: str | os.PathLike | list | None) -> list[str]:
    """The inventories as absolute paths (one path or a list); each must exist."""
    inv: list[str] = []
    for item in ([inventory] if isinstance(inventory, (str, os.PathLike)) else list(inventory or [])):
        path = Path(item).resolve()
        if not path.exists():
            raise UsageError(f"-i {item}: inventory not found; pass a file or folder (e.g. inventory/)")
        inv.append(str(path))
    return inv


def _bench_extravars(extravars: dict | None, run_id: str | None, results_dir: str | os.PathLike | None,
                     project: Path) -> dict:
    """The extra vars with ``bench_run_id`` (default: UTC time) and ``bench_results_dir`` (default
    ``<project>/results``), unless the extra vars set them."""
    run_id = run_id or new_run_id()
    if not RUN_ID_RE.match(run_id):
        raise UsageError(f"--run-id {run_id!r}: use letters, digits, '.', '_' or '-' (e.g. 20261130T120000Z)")
    res_dir = Path(results_dir).resolve() if results_dir else project / "results"
    ev = dict(extravars or {})
    ev.setdefault("bench_run_id", run_id)
    ev.setdefault("bench_results_dir", str(res_dir))
    return ev


#: Ansible's fact cache under ansible-runner: in memory. Runner's default, a JSON file per host
#: under the artifacts, costs each task's variable lookup a decode of that file with ansible-core's
#: typed JSON profile (two thirds of ``bench --check``'s CPU on one unit); nothing here reads facts
#: back from a former run (``gathering = explicit``, each play probes what it needs).
FACT_CACHE = "memory"


def _runner_env(project: Path) -> dict[str, str]:
    """ansible-playbook's environment: no colour, this interpreter's bin first on PATH (the .venv,
    even when it is not activated), the project's ansible.cfg."""
    bindir = str(Path(sys.executable).parent)
    env = {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")}
    cfg = project / "ansible.cfg"
    if cfg.is_file():
        env["ANSIBLE_CONFIG"] = str(cfg)
    return env


def _run_playbook(ansible_runner, kwargs: dict, artifacts: Path):
    """Run ansible-runner to the end (Ctrl-C cancels it, then re-raises); the artifacts scrubbed either way."""
    thread, runner = ansible_runner.run_async(**kwargs)
    try:
        thread.join()
    except KeyboardInterrupt:
        runner.canceled = True
        thread.join(timeout=30)
        _scrub_artifacts(artifacts)
        raise
    _scrub_artifacts(artifacts)
    return runner


def exit_code(states: dict[str, dict[str, str]], failed_hosts: dict[str, str], ansible_rc: int | None,
              report: dict | None = None) -> int:
    """The run's exit code (``EXIT_*``) from the variants' states and the failed hosts (the live
    view), the run's outcome (:func:`sparkbench.runner.outcome.outcome` of the rendered
    ``results.json``, ``report``) and ansible-playbook's rc. bench.yml exits non-zero exactly when
    the outcome says a variant or a host failed, so a non-zero rc without such a failure is a
    playbook error."""
    hosts = set(states) | set(failed_hosts)
    out = outcome(report, failed_hosts, hosts=hosts) if report else {"failed_hosts": {}, "failed_variants": []}
    n_failed = sum(1 for vs in states.values() for s in vs.values() if s == FAILED)
    n_planned = sum(len(vs) for vs in states.values())
    if failed_hosts or out["failed_hosts"]:
        return EXIT_HOST_FAILED
    if n_planned == 0 or (ansible_rc not in (0, 2) and n_failed == 0):
        return EXIT_PLAYBOOK_ERROR
    if n_failed or out["failed_variants"]:
        return EXIT_VARIANT_FAILED
    return EXIT_OK if ansible_rc == 0 else EXIT_PLAYBOOK_ERROR


def _report_doc(result: BenchResult, rendered: dict | None) -> dict | None:
    """The run's results.json: the runner's render, else the one bench.yml's report play wrote."""
    if rendered:
        return rendered
    try:
        return json.loads((result.run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _add_report(result: BenchResult, baseline: str | None) -> dict | None:
    """Render the run's report into ``result`` when the run wrote results; returns its
    results.json content (None without a report). A failure is kept in ``report_error`` (it must
    not hide the bench outcome)."""
    if not (result.run_dir.is_dir() and any(result.run_dir.glob("*/*.json"))):
        return None
    try:
        # The play's report already lists the hosts that failed as a whole; keep them listed.
        out = run_report(result.run_dir, baseline=baseline, failed_hosts=result.failed_hosts,
                         expected_hosts=sorted(result.states))
        result.report_html = Path(out["paths"]["report.html"])
        return out["doc"]
    except Exception as exc:  # noqa: BLE001 - a report failure must not hide the bench outcome
        result.report_error = f"{exc.__class__.__name__}: {exc}"
        return None


def start_playbook(playbook: str | os.PathLike, *, inventory: str | os.PathLike | list | None, limit: str | None,
                   extravars: dict, handler: Callable[[dict], bool], ident: str, check: bool = False,
                   verbosity: int = 0, project_dir: str | os.PathLike = REPO_ROOT):
    """Run ``playbook`` on ansible-runner to the end, its events to ``handler``; returns (the
    runner, its artifacts folder). One private data dir per run under
    ``<repo>/.cache/runner/<ident>-<random>`` (``$SPARKBENCH_RUNNER_DIR`` instead of
    ``<repo>/.cache/runner`` when set). ``check``: ansible-playbook's ``--check``."""
    import ansible_runner  # imported here so `--help` works without it

    project = Path(project_dir).resolve()
    pb_path = _playbook_path(project, playbook)
    inv = _inventory_paths(inventory)
    private = Path(os.environ.get("SPARKBENCH_RUNNER_DIR") or project / ".cache" / "runner") / \
        f"{ident}-{secrets.token_hex(3)}"
    private.mkdir(parents=True, exist_ok=True)
    kwargs = dict(private_data_dir=str(private), project_dir=str(project), playbook=str(pb_path),
                  extravars=extravars, limit=limit, envvars=_runner_env(project), event_handler=handler,
                  suppress_env_files=True, quiet=True, ident="run", verbosity=verbosity or None,
                  fact_cache_type=FACT_CACHE,
                  settings={"suppress_ansible_output": True}, cmdline="--check" if check else None)
    if inv:
        kwargs["inventory"] = inv if len(inv) > 1 else inv[0]
    return _run_playbook(ansible_runner, kwargs, private / "artifacts"), private / "artifacts"


def run_bench(inventory: str | os.PathLike | list | None = None, limit: str | None = None,
              extravars: dict | None = None, run_id: str | None = None,
              playbook: str | os.PathLike = DEFAULT_PLAYBOOK, results_dir: str | os.PathLike | None = None,
              project_dir: str | os.PathLike = REPO_ROOT, on_change: Callable[[Change], None] | None = None,
              progress: Progress | None = None, report: bool = True, baseline: str | None = None,
              verbosity: int = 0) -> BenchResult:
    """Run ``playbook`` (default ``bench.yml``) on ansible-runner and return a :class:`BenchResult`.

    ``inventory``: a path or a list of paths (like repeated ``-i``; default: ansible.cfg's).
    ``results_dir`` (default ``<repo>/results``) is passed as ``bench_results_dir``; ``run_id``
    (default: UTC time) as ``bench_run_id``. ``on_change`` receives every state change.
    When ``report`` is true and the run wrote results, the report is rendered (against
    ``baseline``, a run id or directory, when given). A dry run (``--check``) is
    :func:`sparkbench.runner.playbooks.run_playbook`'s: it plans no measurement to follow."""
    project = Path(project_dir).resolve()
    ev = _bench_extravars(extravars, run_id, results_dir, project)
    run_id = str(ev["bench_run_id"])
    prog = progress or Progress(on_change)
    if progress is not None and on_change is not None:
        progress.on_change = on_change
    runner, artifacts = start_playbook(playbook, inventory=inventory, limit=limit, extravars=ev, handler=prog.handle,
                                       ident=run_id, verbosity=verbosity, project_dir=project)
    if not prog.finished:  # no stats event (e.g. the playbook did not parse): close the books anyway
        prog.handle({"event": "playbook_on_stats", "event_data": {}})
    states = prog.snapshot()
    failed_hosts = prog.failed_hosts()
    result = BenchResult(run_id=run_id, rc=EXIT_OK, ansible_rc=runner.rc,
                         status=runner.status, states=states, failed_hosts=failed_hosts,
                         notes={h: dict(s.notes) for h, s in prog.hosts.items() if s.notes},
                         run_dir=Path(ev["bench_results_dir"]) / run_id, artifacts_dir=artifacts)
    if sum(len(vs) for vs in states.values()) == 0 and runner.rc != 0:  # nothing planned
        result.summary.append(f"ansible-playbook exited {runner.rc} before planning any variant: {output_tail(artifacts)}")
    rendered = _add_report(result, baseline) if report else None
    # Decided after the report is written, from it (the same policy as bench.yml's report play).
    result.report_doc = _report_doc(result, rendered)
    result.rc = exit_code(states, failed_hosts, runner.rc, result.report_doc)
    return result


def output_tail(artifacts: Path, n: int = 400) -> str:
    """The last characters of the run's stdout, on one line (for an early playbook failure)."""
    for f in artifacts.glob("*/stdout"):
        text = f.read_text(encoding="utf-8", errors="replace").strip()
        return " ".join(text[-n:].split())
    return "(no output)"


def resolve_run(run: str | os.PathLike, results_dir: str | os.PathLike | None = None) -> Path:
    """A run given as a directory or as a run id under ``results_dir`` (default ``<repo>/results``)."""
    p = Path(run)
    if p.is_dir():
        return p
    base = Path(results_dir) if results_dir else REPO_ROOT / "results"
    if (base / str(run)).is_dir():
        return base / str(run)
    raise UsageError(f"run {run!r} not found (neither a directory nor {base / str(run)}); "
                     f"pass results/<run-id> or a run id")


def run_report(run: str | os.PathLike, baseline: str | os.PathLike | None = None,
               results_dir: str | os.PathLike | None = None, **options) -> dict:
    """Render a stored run's reports (:func:`sparkbench.report.render`); returns its result dict."""
    from sparkbench.report import ReportError, render

    run_dir = resolve_run(run, results_dir)
    base_dir = resolve_run(baseline, results_dir) if baseline else None
    try:
        return render(run_dir, base_dir, **options)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
