"""Progress views: a redrawn host × variant table on a terminal, plain progress lines otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from .progress import DONE, FAILED, LAUNCHING, MEASURING, WAITING, Change, Progress

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

    def _draw(self) -> None:
        text = table(self.progress, time.monotonic() - self.start)
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
