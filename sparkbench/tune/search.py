"""Which points a tune measures, in which order: the prediction first, then the search.

When the budget covers every point that preflight let through, the tune measures them all (a grid).
Otherwise the first batch is the points the prediction ranks highest (half the budget, at least
two), and every later trial is what Optuna's sampler proposes from the figures so far. The study
lives in the run folder (``tune.db``, SQLite) under the name ``tune``: it can be inspected with
Optuna's own tools, and a resumed tune reopens it and finds the trials already told.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .points import Point
from .space import PointValue, TuneSpace

if TYPE_CHECKING:
    import optuna

STUDY_NAME = "tune"
STUDY_FILE = "tune.db"
SEED = 0


def predicted_order(points: Sequence[Point], predicted: Callable[[Point], float | None]) -> list[Point]:
    """``points`` from the highest predicted figure down; points without a prediction after those
    with one, each group in grid order."""
    keyed = [(predicted(p), p["index"], p) for p in points]
    known = sorted((k for k in keyed if k[0] is not None), key=lambda k: (-float(k[0] or 0.0), k[1]))
    unknown = [k for k in keyed if k[0] is None]
    return [k[2] for k in known + unknown]


def first_batch(candidates: Sequence[Point], ranked: Sequence[Point], trials: int) -> list[Point]:
    """The points measured first: every candidate when the budget covers them (a grid), else the
    ``max(2, ceil(trials / 2))`` the prediction ranks highest (never more than the budget)."""
    if trials >= len(candidates):
        return list(candidates)
    return list(ranked[:min(trials, max(2, math.ceil(trials / 2)))])


def _distributions(space: TuneSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    import optuna

    return {key: optuna.distributions.CategoricalDistribution(list(values)) for key, values in space.space.items()}


def open_study(run_dir: Path, objectives: int) -> optuna.Study:
    """The run's study (created on the first call, reopened after): TPE for one objective, NSGA-II
    for two (a Pareto front), both seeded, every objective maximised."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler: optuna.samplers.BaseSampler = (optuna.samplers.TPESampler(seed=SEED, n_startup_trials=2)
                                            if objectives == 1 else optuna.samplers.NSGAIISampler(seed=SEED))
    return optuna.create_study(study_name=STUDY_NAME, storage=f"sqlite:///{run_dir / STUDY_FILE}",
                               load_if_exists=True, sampler=sampler, directions=["maximize"] * objectives)


def _key(values: dict[str, PointValue]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in values.items()))


def told(study: optuna.Study) -> set[tuple[tuple[str, str], ...]]:
    """The points the study has a finished trial for (measured, or failed)."""
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    return {_key(t.params) for t in study.get_trials(deepcopy=False, states=done)}


def tell(study: optuna.Study, space: TuneSpace, point: Point, values: list[float] | None) -> None:
    """Record a measured point (its objective values) or a failed one (``None``) in the study,
    once: a point the study already holds is not told again."""
    import optuna

    if _key(point["values"]) in told(study):
        return
    trial = optuna.trial.create_trial(
        params=dict(point["values"]), distributions=_distributions(space),
        values=values, state=optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL)
    study.add_trial(trial)


def propose(study: optuna.Study, space: TuneSpace, candidates: Sequence[Point], ranked: Sequence[Point],
            measured: set[str]) -> Point | None:
    """The next point to measure: the sampler's proposal when it is a candidate not yet measured,
    else the highest-ranked candidate not yet measured; None when every candidate is measured."""
    left = [p for p in ranked if p["name"] not in measured]
    if not left:
        return None
    import optuna

    by_key = {_key(p["values"]): p for p in candidates if p["name"] not in measured}
    trial = study.ask(_distributions(space))
    pick = by_key.get(_key(trial.params))
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # the real figures are told by tell()
    return pick or left[0]
