"""The published figures (``sparkbench/data/published_figures.json``) and the twin's error on each.

A row is fitted (an engine or model-profile field was fitted on it) or held out (no fit used it).
The held-out rows' largest error is the interval a prediction carries when the unit has no
measured history (the shipped fit's interval).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine_config import TwinConfig, build_twin, decode_rate
from ..package_data import PUBLISHED_FIGURES, hardware_profile_file, model_profile_file
from ..paths import PROFILES_DIR

if TYPE_CHECKING:
    from ..plan_types import HardwareProfile, ModelProfile
    from .shapes import FitRow, PublishedFigure

#: the floor of the shipped interval (a held-out error of 0 would not make the twin exact)
MIN_INTERVAL = 0.03


def published_figures(path: str | Path = PUBLISHED_FIGURES) -> list[PublishedFigure]:
    return list(json.loads(Path(path).read_text(encoding="utf-8"))["figures"])


def _load_hardware(path: Path) -> HardwareProfile:
    return json.loads(path.read_text(encoding="utf-8"))


def _load_model(path: Path) -> ModelProfile:
    return json.loads(path.read_text(encoding="utf-8"))


def twin_rate(figure: PublishedFigure, model: ModelProfile, hardware: HardwareProfile) -> float:
    """The twin's per-stream tok/s for one published configuration."""
    twin = build_twin(model, hardware, TwinConfig.from_args(figure.get("args")), figure.get("vllm_version", "0.25.0"))
    return decode_rate(twin, int(figure.get("parallel", 1)), float(figure.get("context_tokens", 0.0)))


def fit_rows(profiles_dir: str | Path = PROFILES_DIR, figures: list[PublishedFigure] | None = None,
             hardware: str = "dgx-spark") -> list[FitRow]:
    """Each published figure with the twin's prediction and its error (predicted / published - 1)."""
    hw = _load_hardware(hardware_profile_file(hardware, profiles_dir))
    rows: list[FitRow] = []
    for fig in figures if figures is not None else published_figures():
        predicted = twin_rate(fig, _load_model(model_profile_file(fig["model"], profiles_dir)), hw)
        rows.append({**fig, "predicted": predicted, "error": predicted / float(fig["tok_s"]) - 1.0})
    return rows


def shipped_interval(rows: list[FitRow], parallel: int = 1) -> float:
    """The shipped fit's relative half-width at ``parallel`` streams: the largest |error| among the
    held-out rows of that kind (one stream, or several)."""
    held = [abs(r["error"]) for r in rows
            if r["role"] == "held-out" and (int(r.get("parallel", 1)) > 1) == (parallel > 1)]
    return max([MIN_INTERVAL, *held])
