"""The shapes every section produces, and the number formatting shared by all outputs.

A :class:`Section` is one part of the report (its numbers, tables and summary lines); a
:class:`Table` holds text cells. report.md, report.html and the terminal table all print the
cells these functions make, so a figure reads the same everywhere. Missing figures are "–"
(never 0, never invented)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparkbench.secrets import REDACTED, SECRET_FLAGS, is_secret_name

DASH = "–"
SIM_TAG = "(simulated)"


@dataclass
class Table:
    """A titled table: ``headers``, text ``rows``, optional ``notes`` printed under it."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-friendly form (``results.json``)."""
        return {"key": self.key, "title": self.title, "headers": self.headers, "rows": self.rows,
                "notes": self.notes}


@dataclass
class Section:
    """One part of the report, as every section function returns it.

    ``key``: the section's name and the ``results.json`` key its ``data`` (the section's numbers)
    goes under; ``title``: the section's name for readers (its tables carry their own titles);
    ``tables``: its tables in print order (report.md, report.html); ``lines``: its summary lines.
    ``in_doc`` False keeps ``data`` out of ``results.json``: a key that only runs with that
    content have (``serving``, ``clusters``, …) or a section made of tables only (``kernels``,
    ``history``)."""

    key: str
    title: str
    data: Any = None
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    in_doc: bool = True


def table_list(*tables: Table | None) -> list[Table]:
    """The tables that were made (a table function returns None when it has no row), in order."""
    return [t for t in tables if t is not None]


def f(value: Any, digits: int = 1, suffix: str = "") -> str:
    """A number with ``digits`` decimals (+ suffix), "–" for None."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}{suffix}"
    return str(value)


def pct(value: float | None, digits: int = 1) -> str:
    """A signed percentage: ``-16.7 %`` (typographic minus), "–" for None."""
    if value is None:
        return DASH
    return f"{value:+.{digits}f} %".replace("-", "−")


def rng(median: float | None, lo: float | None, hi: float | None, digits: int = 1) -> str:
    """``median (min–max)``, or the median alone when no range was recorded."""
    if median is None:
        return DASH
    if lo is None or hi is None:
        return f(median, digits)
    return f"{median:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def yesno(value: bool | None) -> str:
    """yes / no / – ."""
    return DASH if value is None else ("yes" if value else "no")


def text(value: Any) -> str:
    """Any value as a table cell, "–" for None/empty."""
    if value is None or value == "" or value == []:
        return DASH
    return str(value)


def sim(label: str, simulated: bool) -> str:
    """``label`` with the simulated tag when the figures are simulated."""
    return f"{label} {SIM_TAG}" if simulated else label


_TOKEN_VALUE = re.compile(r"hf_[A-Za-z0-9]{8,}")
_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_FLAG = re.compile(r"--([A-Za-z0-9][A-Za-z0-9_-]*)([ =])(\S+)")


def redact(s: Any) -> Any:
    """Defence in depth: mask secrets in free text from a result (a launch command, a host's
    failure reason) by the one secret rule (:mod:`sparkbench.secrets`): ``NAME=value`` and
    ``--flag value`` whose name holds a secret, and anything shaped like a Hugging Face token.
    The launch spec already redacts; a report must never be the place a secret leaks."""
    if not isinstance(s, str):
        return s
    out = _TOKEN_VALUE.sub(REDACTED, s)
    out = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={REDACTED}" if is_secret_name(m.group(1)) else m.group(0), out)

    def flag(m: re.Match) -> str:
        name = m.group(1)
        secret = name in SECRET_FLAGS or is_secret_name(name.replace("-", "_"))
        return f"--{name}{m.group(2)}{REDACTED}" if secret else m.group(0)
    return _FLAG.sub(flag, out)
