"""Progress views: a redrawn host × variant table on a terminal, plain progress lines otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from ..report.closing import output_width
from .progress import DONE, FAILED, LAUNCHING, MEASURING, WAITING, Change, Progress
from .tasks import TaskChange, TaskProgress

SYMBOL = {WAITING: "·  waiting", LAUNCHING: "▶  launching", MEASURING: "◆  measuring", DONE: "✔  done",
          FAILED: "✘  failed"}


def table(progress: Progress, elapsed_s: float) -> str:
    """The host × variant table as text (rows = hosts, columns = variants)."""
    snap = progress.snapshot()
    variants = progress.variant_names()
    if not snap:
        return f"sparkbench: waiting for the plan… ({elapsed_s:.0f} s)"
    width = max([len(v) for v in variants] + [12]) + 1
    hw = max(len(h) for h in snap) + 2
    lines = [" " * hw + "".join(v.ljust(width) for v in variants)]
    for host, states in snap.items():
        cells = [(SYMBOL[states[v]] if v in states else "").ljust(width) for v in variants]
        line = host.ljust(hw) + "".join(cells)
        reason = progress.failed_hosts().get(host)
        if reason:
            line += f"  host {reason}"
        lines.append(line.rstrip())
    c = progress.counts()
    lines.append(f"\n{c[DONE]} done · {c[FAILED]} failed · {c[MEASURING] + c[LAUNCHING]} running · "
                 f"{c[WAITING]} waiting — {elapsed_s:.0f} s")
    return "\n".join(lines)


class View:
    """Receives progress changes; on a TTY redraws the table (at most 4 times a second, and on
    stop), otherwise prints one line per change."""

    def __init__(self, progress: Progress, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.progress = progress
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self.start = time.monotonic()
        self._last_lines = 0
        self._last_draw = 0.0
        self._lock = threading.Lock()

    def change(self, change: Change) -> None:
        """Called by :class:`Progress` for every state change."""
        host, variant, state = change
        with self._lock:
            if self.tty:
                now = time.monotonic()
                if now - self._last_draw >= 0.25 or state in (DONE, FAILED):
                    self._draw()
            else:
                t = time.monotonic() - self.start
                what = f"{host} {variant}: {state}" if variant else f"{host}: {state}"
                self.stream.write(f"[{t:6.1f}s] {what}\n")
                self.stream.flush()

    def _text(self) -> str:
        """What a redraw shows."""
        return table(self.progress, time.monotonic() - self.start)

    def _draw(self) -> None:
        text = self._text()
        if self._last_lines:
            self.stream.write(f"\x1b[{self._last_lines}F\x1b[J")  # back to the table's first line, clear below
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_lines = text.count("\n") + 1
        self._last_draw = time.monotonic()

    def stop(self) -> None:
        """Final redraw on a TTY."""
        with self._lock:
            if self.tty:
                self._draw()


#: the task Ansible runs first in a role with an argument spec (not a step worth a line)
ARG_SPEC_TASK = "Validating arguments against arg spec"


def task_table(progress: TaskProgress, elapsed_s: float) -> str:
    """One line per host: the task it is in and its counts (a playbook without variants)."""
    snap = progress.snapshot()
    if not snap:
        return f"sparkbench: starting the playbook… ({elapsed_s:.0f} s)"
    hw = max(len(h) for h in snap) + 2
    lines = []
    for host, s in snap.items():
        state = (f"✘  unreachable: {s.unreachable}" if s.unreachable else f"✘  {s.failed}" if s.failed
                 else f"▶  {s.task}")
        c = s.counts
        lines.append(f"{host.ljust(hw)}{state}  ({c['ok']} ok · {c['changed']} changed · {c['failed']} failed)")
    lines.append(f"\n{elapsed_s:.0f} s")
    return "\n".join(lines)


class TaskView(View):
    """A :class:`TaskProgress` view: on a TTY the redrawn per-host lines, otherwise a line per task
    a host starts and per failure."""

    def __init__(self, progress: TaskProgress, stream: TextIO | None = None, tty: bool | None = None) -> None:
        super().__init__(progress, stream, tty)  # type: ignore[arg-type]
        self.width = output_width(self.stream)

    def change(self, change: TaskChange) -> None:  # type: ignore[override]
        host, task, outcome = change
        with self._lock:
            if self.tty:
                if time.monotonic() - self._last_draw >= 0.25 or outcome in ("failed", "unreachable"):
                    self._draw()
            elif outcome in ("failed", "unreachable") or (outcome == "start" and not task.startswith(ARG_SPEC_TASK)):
                t = time.monotonic() - self.start
                said = task if outcome == "start" else f"{task}: {outcome}"
                line = f"[{t:6.1f}s] {host}: {said}"
                self.stream.write((line if len(line) <= self.width else line[:self.width - 1] + "…") + "\n")
                self.stream.flush()

    def _text(self) -> str:
        return task_table(self.progress, time.monotonic() - self.start)  # type: ignore[arg-type]
