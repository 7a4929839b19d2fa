"""A tune's answer: every point with its status and figures, the winner, its verdict against the
runner-up, and the matrix entry that measures it again.

The winner is the measured point with the best median of the (first) objective. Its verdict
against the runner-up is :func:`sparkbench.verdict.compare_samples` over their per-request values,
in the Trust contract's words. When the verdict cannot tell them apart, the two leaders are raced
(measured again with more requests, the requests pooled) until it can or the budget's minutes run
out; if they still cannot be told apart, the answer names the cheaper of the two as the equal
choice: fewer speculative tokens, then less memory asked (``gpu-memory-utilization``), then fewer
sequences and batched tokens. With two objectives, the points no other point beats on both form
the Pareto front, and the winner is the front's best on the first objective.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

from .. import verdict as verdict_mod
from ..measure.figures import COMBINED, SINGLE_DECODE
from .space import Goodput, Objective, Parallel, PointValue, objective_name

if TYPE_CHECKING:
    from ..result_shapes import StoredResult
    from ..verdict import SampleVerdict

Status = Literal["measured", "pruned", "failed", "unmeasured"]


class TrialRecord(TypedDict):
    """One point of the space in ``tune.json``."""

    name: str
    point: dict[str, PointValue]
    status: Status
    figures: dict[str, float | None]
    reason: str | None
    predicted_tok_s: float | None


class Winner(TypedDict):
    """The answer: the winning point, the runner-up and the verdict between them."""

    name: str
    point: dict[str, PointValue]
    figures: dict[str, float | None]
    runner_up: str | None
    verdict: SampleVerdict | None
    equal_choice: bool
    words: str


def objective_value(doc: StoredResult, objective: Objective) -> float | None:
    """The objective's figure in a result: the single-stream median, the combined rate at N
    streams, or the goodput at the given arrival rate."""
    if isinstance(objective, Parallel):
        return COMBINED.read(doc, objective.parallel)
    if isinstance(objective, Goodput):
        for entry in doc.get("rates") or []:
            if entry.get("rate") == objective.goodput.rate:
                value = entry.get("goodput")
                return float(value) if isinstance(value, (int, float)) else None
        return None
    return SINGLE_DECODE.read(doc)


def objective_samples(docs: Sequence[StoredResult], objective: Objective) -> list[float]:
    """The per-request values a verdict compares, pooled over ``docs`` (a point and its races)."""
    metric = COMBINED.metric_at(objective.parallel) if isinstance(objective, Parallel) else str(SINGLE_DECODE.metric)
    return [x for doc in docs for x in verdict_mod.samples(doc, metric)]


def cost(point: Mapping[str, PointValue]) -> tuple[float, ...]:
    """How much a point asks of the unit, smaller first: speculative tokens, memory share, sequences,
    batched tokens (a key the point does not set counts as 0)."""
    def num(*keys: str) -> float:
        for key in keys:
            value = point.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        return 0.0
    return (num("speculative-config.num_speculative_tokens"), num("gpu-memory-utilization"),
            num("max-num-seqs"), num("max-num-batched-tokens"))


def pareto_front(trials: Sequence[TrialRecord], names: Sequence[str]) -> list[str]:
    """The measured points no other measured point beats or equals on both objectives ``names``."""
    measured = [t for t in trials if t["status"] == "measured"
                and all(t["figures"].get(n) is not None for n in names)]

    def beaten(t: TrialRecord) -> bool:
        a = [float(t["figures"][n] or 0.0) for n in names]
        for o in measured:
            b = [float(o["figures"][n] or 0.0) for n in names]
            if o is not t and all(y >= x for x, y in zip(a, b)) and any(y > x for x, y in zip(a, b)):
                return True
        return False
    return [t["name"] for t in measured if not beaten(t)]


def leaders(trials: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[TrialRecord]:
    """The measured points best first on the first objective (within the Pareto front for two)."""
    first = objective_name(objectives[0])
    measured = sorted((t for t in trials if t["status"] == "measured" and t["figures"].get(first) is not None),
                      key=lambda t: -float(t["figures"][first] or 0.0))
    if len(objectives) > 1:
        front = set(pareto_front(trials, [objective_name(o) for o in objectives]))
        measured = [t for t in measured if t["name"] in front] + [t for t in measured if t["name"] not in front]
    return measured


def judge(best: TrialRecord, second: TrialRecord | None, best_samples: list[float],
          second_samples: list[float]) -> tuple[SampleVerdict | None, bool]:
    """The verdict of ``best`` against ``second`` (the runner-up as reference) and whether it
    separates them (``differs``)."""
    if second is None:
        return None, True
    v = verdict_mod.compare_samples(second_samples, best_samples)
    return v, v["kind"] == "differs"


def winner(best: TrialRecord, second: TrialRecord | None, v: SampleVerdict | None, separated: bool) -> Winner:
    """The answer from the leaders and their verdict: the best, or the cheaper of two equals."""
    if second is None:
        return {"name": best["name"], "point": best["point"], "figures": best["figures"], "runner_up": None,
                "verdict": None, "equal_choice": False,
                "words": f"{best['name']} is the only point measured: nothing to compare it with"}
    if separated:
        return {"name": best["name"], "point": best["point"], "figures": best["figures"],
                "runner_up": second["name"], "verdict": v, "equal_choice": False,
                "words": f"{best['name']} wins: against {second['name']} it {v['text'] if v else 'differs'}"}
    cheap, other = (best, second) if cost(best["point"]) <= cost(second["point"]) else (second, best)
    said = v["text"] if v else "no verdict"
    why = ("it asks less of the unit" if cost(cheap["point"]) < cost(other["point"]) else
           "the two ask the same of the unit and its median is the higher")
    return {"name": cheap["name"], "point": cheap["point"], "figures": cheap["figures"],
            "runner_up": other["name"], "verdict": v, "equal_choice": True,
            "words": f"{best['name']} and {second['name']} cannot be told apart ({said}); "
                     f"{cheap['name']} is the equal choice: {why}"}
