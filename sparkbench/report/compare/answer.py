"""The report's answer (pure, no I/O): per host and model, the variant that decodes fastest single
stream and the one with the highest combined throughput at 8 parallel, each against the
runner-up (the next fastest variant of that model on that host) with its verdict; see
:mod:`sparkbench.report.compare`."""

from __future__ import annotations

from ...measure.figures import SINGLE_DECODE, compared
from .. import numbers as n
from .pairs import AT_8, compare_pair, metric_value, unreliable

#: the figures the answer names a winner for: single stream and combined at 8 parallel
ANSWER_METRICS: tuple[str, ...] = (str(SINGLE_DECODE.metric), AT_8)


def _by_host_model(results: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(host, model key) → its measured results in matrix order. A cluster variant is written
    under its head host and competes there with the head's own variants."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in n.sort_results(r for r in results if isinstance(r, dict)):
        if n.is_measured(r) and n.model_key(r):
            groups.setdefault((n.host_of(r), n.model_key(r)), []).append(r)
    return groups


def _label(result: dict) -> str:
    """The variant name, with a cluster variant's layout: ``gptoss-tp2 (TP=2)``."""
    layout = n.parallel_label(result) if n.is_cluster(result) else None
    return n.variant_name(result) + (f" ({layout})" if layout else "")


def winner(docs: list[dict], metric: str) -> dict | None:
    """The fastest of ``docs`` on ``metric`` against the runner-up: ``{"variant", "label",
    "unit", "build", "config", "value", "runner_up", "runner_up_label", "runner_up_value",
    "pct_diff", "verdict"}`` (runner-up fields, ``pct_diff`` and ``verdict`` None when only one
    variant has the figure); None when none has it. Ties go to the first in matrix order; the
    figure's declaration says which way is better."""
    sign = -1.0 if compared(metric)[0].larger_is_better else 1.0
    ranked = sorted((d for d in docs if metric_value(d, metric) is not None),
                    key=lambda d: sign * metric_value(d, metric))
    if not ranked:
        return None
    best = ranked[0]
    out = {"variant": n.variant_name(best), "label": _label(best), "unit": n.unit_of(best),
           "build": n.build_of(best), "config": n.config_of(best), "value": metric_value(best, metric),
           "runner_up": None, "runner_up_label": None, "runner_up_value": None, "pct_diff": None, "verdict": None}
    if len(ranked) > 1:
        second = ranked[1]
        pair = compare_pair(second, best, metric)
        out.update(runner_up=n.variant_name(second), runner_up_label=_label(second),
                   runner_up_value=pair["reference_value"], pct_diff=pair["pct_diff"], verdict=pair["verdict"])
    return out


def answer(results: list[dict], drift: dict | None = None) -> dict:
    """Per host × model key the winners. Returns ``{"rows": [{"host", "model_key", "single",
    "combined_8", "unreliable", "simulated"}]}``: ``single`` and ``combined_8`` are
    :func:`winner` entries (None where no variant of the model has the figure), ``unreliable``
    the host's drift text or None."""
    rows = []
    for (host, mkey), docs in _by_host_model(results).items():
        row = {"host": host, "model_key": mkey}
        row.update({metric: winner(docs, metric) for metric in ANSWER_METRICS})
        row.update(unreliable=unreliable(host, drift), simulated=any(n.is_simulated(d) for d in docs))
        rows.append(row)
    return {"rows": rows}
