"""Verdicts in tables: a verdict cell holds the Trust contract's words and nothing more
("differs by X % [lo, hi]", "no difference detectable above Y %", "not enough requests for a
verdict"); why a verdict is missing is said once, in a note under the table
(:func:`missing_notes`); a host whose comparisons drifted is marked in its own cell
(:func:`unit_mark`), with :data:`DRIFT_NOTE` under the table."""

from __future__ import annotations

from collections.abc import Iterable

from ...verdict import NOT_ENOUGH
from ..table import DASH

#: the mark of a host (or cluster unit) whose reference variant drifted, in its row's first cell
DRIFT_MARK = " (unreliable: drift)"
#: the note under a table with a marked row
DRIFT_NOTE = ("(unreliable: drift) = the host's reference variant, measured again after its last variant, "
              "differs from its first measurement (the drift table below): its comparisons may show the "
              "drift, not the variants")


def verdict_cell(verdict: dict | None) -> str:
    """A comparison's verdict cell: its words (:func:`sparkbench.verdict.compare_samples`'s
    ``text``), "–" without a comparison."""
    return str(verdict["text"]) if verdict else DASH


def unit_mark(unit: str, unreliable: str | None) -> str:
    """A row's host (or unit) cell, marked "(unreliable: drift)" when its host drifted."""
    return unit + (DRIFT_MARK if unreliable else "")


def drift_notes(marked: Iterable[str | None]) -> list[str]:
    """[:data:`DRIFT_NOTE`] when any row of a table is marked unreliable, else []."""
    return [DRIFT_NOTE] if any(marked) else []


def missing_notes(columns: Iterable[tuple[str, Iterable[dict | None]]]) -> list[str]:
    """Why verdicts are missing, once per table: ``columns`` = (column title, the column's
    verdicts, one per row; None for a row whose cell holds no verdict, e.g. the reference
    variant's, left out). One line per reason, naming the columns it applies to, e.g. "2 par
    verdict: not enough requests for a verdict (2 and 2 requests; 5 per side needed: measure at 5
    or more parallel)", with "in k of n rows" where only some compared rows of a column lack it."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for title, verdicts in columns:
        cells = [v for v in verdicts if v]
        reasons: dict[str, int] = {}
        for v in cells:
            if v.get("kind") == "not_enough" and v.get("reason"):
                reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
        for reason, count in reasons.items():
            where = "" if count == len(cells) else f" in {count} of {len(cells)} rows"
            grouped.setdefault((reason, where), []).append(title)
    return [f"{', '.join(titles)}: {NOT_ENOUGH} ({reason}){where}" for (reason, where), titles in grouped.items()]
