"""The one table shape every section produces, and the number formatting shared by all outputs.

A :class:`Table` holds text cells; markdown, CSV-free HTML and the terminal all render it the same
way. Missing figures are "–" (never 0, never invented)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

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


_SECRET_PATTERNS = [
    re.compile(r"(hf_[A-Za-z0-9]{8,})"),
    re.compile(r"(?i)((?:--api-key|--hf-token|--token)[ =])(\S+)"),
    re.compile(r"(?i)\b((?:HF_TOKEN|HUGGING_FACE_HUB_TOKEN|VLLM_API_KEY|OPENAI_API_KEY|API_KEY)=)(\S+)"),
]


def redact(s: Any) -> Any:
    """Defence in depth: mask anything that looks like a token or API key in a launch command
    (the role already redacts; a report must never be the place a secret leaks)."""
    if not isinstance(s, str):
        return s
    out = _SECRET_PATTERNS[0].sub("<redacted>", s)
    for pat in _SECRET_PATTERNS[1:]:
        out = pat.sub(lambda m: m.group(1) + "<redacted>", out)
    return out


def rows_sorted(rows: Iterable[list[str]]) -> list[list[str]]:
    """Rows as a list (kept in the order given)."""
    return list(rows)
