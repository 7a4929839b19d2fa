"""One playbook run of the demo, on ansible-runner (``sparkbench.runner.run_bench``), with a
progress line per host × variant state. The lines come from the facts the playbooks' steps set —
``bench_plan`` and ``bench_stage`` (``sparkbench.runner.progress``), never from task names — and
a finished variant's line carries its single-stream figure, read from its result file through the
report's accessor. The whole Ansible output goes to ``results/<run-id>/<log>``."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from sparkbench.runner import DONE, FAILED, LAUNCHING, MEASURING, WAITING, Progress, run_bench

from .console import Printer

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"

_WORDS = {LAUNCHING: "launching", MEASURING: "measuring", DONE: "done", FAILED: "failed"}


@dataclass
class Played:
    """A finished playbook run: the runner's exit code (``sparkbench.runner`` policy), the
    playbook's own exit status, the run folder and its rendered results.json (``{}`` if none)."""

    rc: int
    ansible_rc: int | None
    run_dir: Path
    log: Path
    report: dict


def rel(path: Path) -> str:
    """``path`` relative to the repository when inside it."""
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return str(path)


def load_json(path: Path) -> dict:
    """A JSON file's content ({} when missing or unreadable)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _single_figure(run_dir: Path, host: str, variant: str) -> str:
    """`` — single 76.7 tok/s`` from the variant's result file ('' when it has none)."""
    doc = load_json(run_dir / host / f"{variant}.json")
    if not doc:
        return ""
    try:
        from sparkbench.report.numbers import single_stats
        median = single_stats(doc)[0]
    except Exception:  # noqa: BLE001 - a figure on a progress line is a courtesy, never a failure
        return ""
    return f" — single stream {median:.1f} tok/s" if median is not None else ""


class StageLines:
    """``on_change`` for :class:`Progress`: one stamped line per state change; a host's first
    line says it is being provisioned (the plan has arrived, no variant has started)."""

    def __init__(self, out: Printer, progress: Progress, run_dir: Path, figures: bool, host_lines: bool) -> None:
        self.out, self.progress, self.run_dir, self.figures = out, progress, run_dir, figures
        self.host_lines = host_lines
        self._hosts: set[str] = set()

    def __call__(self, change: tuple[str, str, str]) -> None:
        host, variant, state = change
        if not variant:
            if self.host_lines:
                self.out.stamped(f"{host}: {state}")
            return
        if state == WAITING:
            if host not in self._hosts:
                self._hosts.add(host)
                self.out.stamped(f"{host}: planned; provisioning the unit first (Docker, image, model cache, "
                                 f"the measurement script)")
            return
        note = (self.progress.hosts.get(host).notes.get(variant) if self.progress.hosts.get(host) else None) or ""
        text = f"{host} {variant}: {_WORDS.get(state, state)}"
        if state == DONE and note.startswith("skipped"):
            text += " (kept: complete result with the same configuration hash)"
        elif state == DONE and self.figures:
            text += _single_figure(self.run_dir, host, variant)
        elif state == FAILED and note:
            text += f" — {note}"
        self.out.stamped(text)


def play(out: Printer, playbook: str, run_id: str, limit: str | None = None, extravars: dict | None = None,
         log_name: str = "ansible.log", figures: bool = True, lines: bool = True, host_lines: bool = True) -> Played:
    """Run ``playbook`` for ``run_id`` (results/<run_id>/) and return what it left. ``lines``: a
    progress line per state change; ``host_lines``: also for a host that failed as a whole (off
    where the last task fails on purpose, as health.yml's does when a unit is slow)."""
    run_dir = RESULTS / run_id
    progress = Progress()
    on_change = StageLines(out, progress, run_dir, figures, host_lines) if lines else None
    result = run_bench(limit=limit, extravars=extravars or {}, run_id=run_id, playbook=playbook,
                       progress=progress, on_change=on_change, report=False)
    log = run_dir / log_name
    run_dir.mkdir(parents=True, exist_ok=True)
    stdout = result.artifacts_dir / "run" / "stdout"
    if stdout.is_file():
        shutil.copyfile(stdout, log)
    shutil.rmtree(result.artifacts_dir.parent, ignore_errors=True)  # the runner's private folder
    return Played(rc=result.rc, ansible_rc=result.ansible_rc, run_dir=run_dir, log=log,
                  report=load_json(run_dir / "results.json"))
