"""The demo's output: one clock for the whole demo (``m:ss`` since ``make demo``'s first step
began) and a printer per step. A step that runs beside others writes into a buffer that is shown,
in step order, when its turn comes; from then on it prints live."""

from __future__ import annotations

import sys
import threading
import time

from sparkbench.report.closing import output_width, wrap


class Clock:
    """Seconds since the demo began (``t0``, ``time.time()``: a step in another process shares it)."""

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.time() if t0 is None else t0

    def elapsed(self) -> float:
        return time.time() - self.t0

    def stamp(self) -> str:
        """``m:ss`` since the start."""
        return mmss(self.elapsed())


def mmss(seconds: float) -> str:
    """``m:ss`` (``1:05``)."""
    s = max(0, int(round(seconds)))
    return f"{s // 60}:{s % 60:02d}"


def minutes(seconds: float) -> str:
    """An estimate in words: ``40 s``, ``about 2 min``, ``about 2.5 min``."""
    if seconds < 90:
        return f"{int(round(seconds / 10.0) * 10) or 10} s"
    m = round(seconds / 30.0) / 2.0
    return f"about {m:g} min"


class Printer:
    """Prints lines (thread-safe); ``buffered`` keeps them until :meth:`go_live`."""

    def __init__(self, clock: Clock, stream=None, buffered: bool = False, width: int | None = None) -> None:
        self.clock = clock
        self.stream = stream or sys.stdout
        #: every line fits this width (COLUMNS, else the terminal's, else 100): longer text wraps,
        #: its continuation indented under the line's own indent
        self.width = width or output_width(self.stream)
        self._buffer: list[str] | None = [] if buffered else None
        self._lock = threading.Lock()

    def line(self, text: str = "") -> None:
        lines = []
        for part in text.split("\n"):
            lead = part[:len(part) - len(part.lstrip())]
            lines += [part] if len(part) <= self.width else wrap(part.strip(), self.width, first=lead,
                                                                  rest=lead + "  ")
        with self._lock:
            if self._buffer is not None:
                self._buffer.extend(lines)
            else:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()

    def stamped(self, text: str) -> None:
        """``  [m:ss] text`` (a progress line)."""
        self.line(f"  [{self.clock.stamp():>5}] {text}")

    def go_live(self) -> None:
        """Print what was kept, then print as it comes."""
        with self._lock:
            kept, self._buffer = self._buffer or [], None
            for text in kept:
                self.stream.write(text + "\n")
            self.stream.flush()
