"""The canary's judgement: the deployed service against the result it was deployed from.

``judge(baseline, measured, rc, slower_pct, stderr)``: ``baseline`` the source result's
per-request single-stream decode rates, ``measured`` measure's JSON document of the canary (single
stream, the measured settings, ≥ 5 requests). The verdict is ``sparkbench.verdict.compare_samples``
(source → canary), its ``text`` in the Trust contract's words. The canary fails when measure
failed or left fewer than ``verdict.MIN_REQUESTS`` valid requests ("not enough requests for a
verdict"), or when the verdict is "differs" and the canary is slower by more than ``slower_pct``
(the point estimate below −``slower_pct``). Faster, or slower within ``slower_pct``, passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import verdict as verdict_mod
from ..measure.figures import SINGLE_DECODE
from ..result_files import parse_measured

if TYPE_CHECKING:
    from .shapes import CanaryJudgement, JudgementFigures


def judge(baseline: Sequence[float], measured: Any, rc: Any, slower_pct: float, stderr: Any = "") -> CanaryJudgement:
    """``{passed, verdict, text, reason, <the single-stream median's field>, requests}`` (see the module
    docstring)."""
    doc = parse_measured(measured)
    samples = verdict_mod.samples(doc, "single") if isinstance(doc, Mapping) else []
    median = SINGLE_DECODE.read(doc)
    out: JudgementFigures = {"passed": False, "verdict": None, "text": None, SINGLE_DECODE.field: median,
                           "requests": len(samples), "slower_pct": slower_pct}
    if doc is None or (rc not in (0, 3, "0", "3") and not samples):
        tail = str(stderr or "").strip().splitlines()[-1:] or [f"measure exited with status {rc}"]
        return {**out, "reason": f"the canary's measurement failed: {tail[0][:300]}"}
    v = verdict_mod.compare_samples(list(baseline), samples, remedy=f"serve_canary_runs: {verdict_mod.MIN_REQUESTS}")
    out["verdict"] = v
    out["text"] = v["text"]
    if v["kind"] == "not_enough":
        return {**out, "reason": f"canary: {verdict_mod.explained(v)}"}
    if v["kind"] == "differs" and v["pct"] is not None and v["pct"] < -float(slower_pct):
        return {**out, "reason": f"canary {v['text']} against the result it was deployed from: slower by more "
                                 f"than {float(slower_pct):g} %"}
    return {**out, "passed": True, "reason": f"canary {v['text']} against the result it was deployed from"}


def samples_of(measured: Any) -> list[float]:
    """The canary's per-request single-stream decode rates (its document from measure's stdout)."""
    doc = parse_measured(measured)
    return verdict_mod.samples(doc, "single") if isinstance(doc, Mapping) else []
