"""The gate: a candidate against the resident's current image, both measured in the same run.

The gated figure is the single-stream decode rate per request (``measure.figures.SINGLE_DECODE``),
the current's requests pooled over its measurements (first, bracket, measured-again rounds) and the
candidate's over its own; :func:`sparkbench.verdict.compare_samples` gives the verdict in the
Trust contract's words, with the tolerance (default 2.5 %, the seed's bridge tolerance).

* **refused** — the candidate did not become healthy or could not be measured (its failure's
  stage and reason); or the verdict "differs by" a fall whose estimate is beyond the tolerance;
  or the verdict cannot tell within the tolerance (too few requests, or "no difference detectable
  above Y %" with Y above it) once the rounds of measuring again are spent, unless the user
  accepts that (``upgrade_accept_unresolved``);
* **passed** — a rise, a fall within the tolerance, or no difference detectable above a Y within it;
* **again** — not resolved yet: both are measured again with twice the requests
  (``MAX_AGAIN`` rounds at most).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import TYPE_CHECKING, Literal, TypedDict

from .. import verdict as verdict_mod
from ..measure.figures import SINGLE_DECODE

if TYPE_CHECKING:
    from ..result_shapes import StoredResult
    from ..verdict import SampleVerdict

#: rounds of measuring both again while the verdict cannot tell within the tolerance
MAX_AGAIN = 2
DEFAULT_TOLERANCE_PCT = 2.5
State = Literal["passed", "refused", "again"]


class FigureJudgement(TypedDict):
    """One gated figure: both medians, the verdict of the candidate against the current, the outcome."""

    figure: str
    unit: str
    current_median: float | None
    candidate_median: float | None
    verdict: SampleVerdict | None
    outcome: Literal["pass", "fall", "unresolved", "no figure"]


class Judgement(TypedDict):
    """The gate's answer for one resident."""

    state: State
    reason: str
    figures: list[FigureJudgement]
    accepted_unresolved: bool


def _failure(docs: Sequence[StoredResult]) -> str | None:
    """Why the latest of ``docs`` has no figures (None when it is complete)."""
    if not docs:
        return "it has no result in this run"
    last = docs[-1]
    if last.get("status") == "complete":
        return None
    failure = last.get("failure") or {}
    return f"{failure.get('stage') or last.get('status')}: {failure.get('reason') or 'no reason recorded'}"


def _pooled(docs: Sequence[StoredResult]) -> list[float]:
    return [x for d in docs if d.get("status") == "complete" for x in verdict_mod.samples(d, "single")]


def figure(current: Sequence[StoredResult], candidate: Sequence[StoredResult],
           tolerance_pct: float) -> FigureJudgement:
    """The single-stream decode figure's judgement (``outcome`` before the rounds and the user's say)."""
    ref, new = _pooled(current), _pooled(candidate)
    out: FigureJudgement = {"figure": SINGLE_DECODE.field, "unit": SINGLE_DECODE.unit,
                            "current_median": round(median(ref), 2) if ref else None,
                            "candidate_median": round(median(new), 2) if new else None,
                            "verdict": None, "outcome": "no figure"}
    if not ref or not new:
        return out
    v = verdict_mod.compare_samples(ref, new, tolerance_pct=tolerance_pct,
                                    remedy="the upgrade measures both again with more requests")
    out["verdict"] = v
    if v["kind"] == "differs":
        out["outcome"] = "fall" if (v["pct"] or 0.0) < -tolerance_pct else "pass"
    elif v["kind"] == "no_difference" and v["mdd_pct"] is not None and v["mdd_pct"] <= tolerance_pct:
        out["outcome"] = "pass"
    else:
        out["outcome"] = "unresolved"
    return out


def judge(current: Sequence[StoredResult], candidate: Sequence[StoredResult], *, tolerance_pct: float,
          accept_unresolved: bool, again_left: bool) -> Judgement:
    """The gate's state and why, for one resident (module docstring)."""
    failed = _failure(candidate)
    if failed:
        return {"state": "refused", "reason": f"the candidate did not become healthy or could not be measured ({failed})",
                "figures": [], "accepted_unresolved": False}
    failed = _failure(current)
    if failed:
        return {"state": "refused", "reason": f"the current image could not be measured again ({failed}): nothing to "
                                              "hold the candidate to", "figures": [], "accepted_unresolved": False}
    fig = figure(current, candidate, tolerance_pct)
    v = fig["verdict"]
    said = f"single-stream decode: {v['text']}{v.get('tolerance_text') or ''}" if v else "no single-stream figure"
    if fig["outcome"] == "fall":
        beyond = "" if v and v.get("tolerance_text") else f": a fall beyond the {tolerance_pct:g} % tolerance"
        return {"state": "refused", "reason": f"{said}{beyond}",
                "figures": [fig], "accepted_unresolved": False}
    if fig["outcome"] == "pass":
        return {"state": "passed", "reason": said, "figures": [fig], "accepted_unresolved": False}
    if again_left:
        return {"state": "again", "reason": f"{said}: cannot tell within the {tolerance_pct:g} % tolerance yet; both "
                                            "are measured again with twice the requests",
                "figures": [fig], "accepted_unresolved": False}
    if accept_unresolved:
        return {"state": "passed", "reason": f"{said}: cannot tell within the {tolerance_pct:g} % tolerance, accepted "
                                             "(upgrade_accept_unresolved)", "figures": [fig], "accepted_unresolved": True}
    return {"state": "refused", "reason": f"{said}: cannot tell within the {tolerance_pct:g} % tolerance after "
                                          f"{MAX_AGAIN} rounds of measuring again; -e upgrade_accept_unresolved=true "
                                          "accepts that", "figures": [fig], "accepted_unresolved": False}
