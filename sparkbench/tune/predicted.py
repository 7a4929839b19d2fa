"""What the twin predicts of a point before it is measured (``sparkbench predict``'s model): the
single-stream rate, or the combined rate at N streams, for the point's flags on the unit's hardware
profile with the model's profile (its MTP acceptance included)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..engine_config import PredictInputError, TwinConfig
from ..predict.estimate import predict
from ..predict.published import fit_rows
from .space import Objective, Parallel

if TYPE_CHECKING:
    from ..plan_types import PlanEntry
    from ..predict.shapes import FitRow


def predicted_rate(entry: PlanEntry, objective: Objective, rows: list[FitRow], version: str | None) -> float | None:
    """The predicted figure of ``objective`` for a planned point (tok/s); None where the twin cannot
    say (a goodput objective, a model or hardware profile without the facts it needs)."""
    if not isinstance(objective, (str, Parallel)):
        return None
    try:
        config = TwinConfig.from_args(entry["variant"].get("args") or {})
        doc = predict(entry["model_profile"], entry["hardware_profile"], config, rows, version or "0.25.0")
    except (PredictInputError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    band = doc["parallel"].get(str(objective.parallel)) if isinstance(objective, Parallel) else doc["single"]
    if band is None:
        return None
    return float(band["tok_s"]) * (objective.parallel if isinstance(objective, Parallel) else 1)


def fit_rows_for(profiles_dir: str | Path) -> list[FitRow]:
    """The published figures the twin's interval is read from; [] where they cannot be read."""
    try:
        return fit_rows(profiles_dir)
    except (OSError, ValueError, KeyError):
        return []
