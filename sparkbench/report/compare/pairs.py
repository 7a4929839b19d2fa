"""One comparison of two results on one metric (pure, no I/O), shared by every comparison of the
package: the values, the % difference, the verdict on the per-request values and the drift mark."""

from __future__ import annotations

from typing import Any

from ... import verdict as vd
from ...measure.figures import COMBINED, SINGLE_DECODE, compared
from .. import numbers as n

#: the compared figures' names: the single-stream median, then the combined rate at each concurrency
METRICS: tuple[str, ...] = (str(SINGLE_DECODE.metric), *(COMBINED.metric_at(c) for c in n.CONCURRENCIES))
#: the combined figure at 8 parallel: the seed's headline beside the single stream
AT_8 = COMBINED.metric_at(8)


def parse_threshold(value: Any, what: str) -> float:
    """A threshold in percent (≥ 0), or ValueError naming ``what``."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} threshold must be a number of percent, got {value!r}") from None
    if threshold < 0:
        raise ValueError(f"{what} threshold must be ≥ 0 %, got {threshold}")
    return threshold


def pct_diff(value: float | None, reference: float | None) -> float | None:
    """(value − reference) / reference × 100, None when either is missing or reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / reference * 100.0


def metric_value(result: dict, metric: str) -> float | None:
    """The recorded figure a comparison name stands for (``single``, ``combined_N``), None where
    the result was not measured."""
    figure, concurrency = compared(metric)
    return figure.read(result, concurrency) if n.is_measured(result) else None


def remedy(metric: str) -> str:
    """How to get enough requests for a verdict on ``metric`` (the hint of "not enough …")."""
    if metric == SINGLE_DECODE.metric:
        return f"--runs {vd.MIN_REQUESTS}"
    return f"measure at {vd.MIN_REQUESTS} or more parallel"


def verdict_of(ref: dict, other: dict, metric: str, tolerance_pct: float | None = None) -> dict:
    """:func:`sparkbench.verdict.compare_samples` of ``other`` against ``ref`` on ``metric``'s
    per-request values (:func:`sparkbench.verdict.samples`)."""
    return vd.compare_samples(vd.samples(ref, metric), vd.samples(other, metric),
                              tolerance_pct=tolerance_pct, remedy=remedy(metric))


def unreliable(host: str | None, drift: dict | None) -> str | None:
    """The drift text when ``drift`` marks ``host`` unreliable, else None."""
    entry = (drift or {}).get(host) if host is not None else None
    if isinstance(entry, dict) and entry.get("unreliable"):
        return str(entry.get("text") or "drift beyond the noise")
    return None


def compare_pair(ref: dict, other: dict, metric: str) -> dict:
    """One comparison row: values, % difference (of the recorded figures) and the verdict on the
    per-request values for ``metric``."""
    rv, ov = metric_value(ref, metric), metric_value(other, metric)
    return {"metric": metric, "reference_value": rv, "value": ov, "pct_diff": pct_diff(ov, rv),
            "verdict": verdict_of(ref, other, metric)}
