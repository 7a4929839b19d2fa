"""Verdicts for comparisons of decode rates (pure, standard library only).

Every comparison in the report — build vs build, run vs run (the version bridge), host vs fleet —
goes through :func:`compare_samples`, which reads two lists of per-request values (one decode
rate per request, tok/s) and says one of three things:

* ``differs by −15.2 % [−16.0, −14.3]`` — the 95 % interval of the difference excludes 0;
* ``no difference detectable above 1.8 %`` — it includes 0; 1.8 % is the minimum detectable
  difference (MDD) at this noise and this number of requests;
* ``not enough requests for a verdict`` — a side has fewer than :data:`MIN_REQUESTS` requests (a
  result that holds only medians has none); why is in the verdict's ``reason`` ("3 and 3
  requests; 5 per side needed: --runs 5"), which a report says once under its table
  (:func:`explained` joins the two for a single sentence).

``text`` is always exactly the Trust contract's words above and nothing more.

Shares (the share of requests meeting every SLO, goodput between variants) go through
:func:`compare_shares` in the same three phrasings with percentage points ("differs by −12.5 pp
[−21.9, −3.4]"; formulas in its docstring).

Statistics (``a`` = reference values, ``b`` = other values, n_a and n_b requests):

* difference = (median(b) / median(a) − 1) × 100 %;
* bootstrap: :func:`sparkbench.measure.bootstrap_medians` resamples whole requests (a request's
  decode rate is one value; the token gaps inside a request are never resampled apart),
  ``resamples`` medians per side from one ``random.Random(seed)`` (deterministic for a seed);
  the two sides' medians are paired at random, giving ``resamples`` draws of
  L* = ln(median*(b) / median*(a));
* SE = standard deviation of L*;
* small-sample correction: the 2.5/97.5 percentiles of L* are widened about the point estimate
  L = ln(median(b) / median(a)) by w = max(t(0.975, df) / z(0.975), :data:`MIN_WIDEN`),
  df = min(n_a, n_b) − 1 (the Student t quantile over the normal one, at least 1.25). Without it
  the percentile bootstrap of a median says "differs" for two identical servers in 2.5–11 % of
  trials (2 % lognormal noise: 10.9 % at 3 per side, 7.8 % at 4, 3.0 % at 5, 5.0 % at 8); with
  it in ≤ 2.2 % at every n from 3 to 30 (``perf/verdict_accuracy.py --pure``, table in
  docs/REPORTS.md, "How to read a verdict"; through the simulator and measure.py:
  BENCHMARKS.md table 7);
* interval [lo, hi] = (exp(L − w·(L − P2.5)) − 1, exp(L + w·(P97.5 − L)) − 1) × 100 %;
* MDD = (exp((w · z(0.975) + t(0.8, df)) · SE) − 1) × 100 %: a true difference of MDD gives an
  interval that excludes 0 in about 80 % of repeats (the interval's half-width is ≈ w · z(0.975)
  · SE; 80 % power);
* t quantiles by the Cornish–Fisher expansion of Student's t in the normal quantile (four terms;
  within 0.01 of the tables for df ≥ 3).

Bridge tolerance (``tolerance_pct``, the version bridge): ``within_tolerance`` is (and
``tolerance_text``, kept apart from the words of ``text``, says)

* True — "differs" with the whole interval within ±tolerance ("…, within the 2.5 % bridge
  tolerance"), or "no difference" with MDD ≤ tolerance;
* False — "differs" with the whole interval beyond ±tolerance ("…, beyond the 2.5 % bridge
  tolerance");
* None — unresolved: a "differs" interval that reaches across ±tolerance, or "no difference"
  with MDD > tolerance (``tolerance_text`` says so and that more requests would resolve it).
"""

from __future__ import annotations

import math
import random
from statistics import NormalDist, median, pstdev
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from .measure import bootstrap_medians, figures

if TYPE_CHECKING:
    from .measure.shapes import MeasuredDocument
    from .result_shapes import StoredResult

#: requests per side a verdict needs. With 3 against 3 no test of medians reaches 5 % (a rank
#: test's smallest two-sided p is 2/20 = 0.10); at 5 per side the widened bootstrap's false
#: "differs" share is 0.8 % and its MDD 6.4 % at 2 % noise (see the module docstring); 5 is also
#: measure.py's default --runs.
MIN_REQUESTS = 5
#: the least widening of the bootstrap percentile interval (see the module docstring)
MIN_WIDEN = 1.25
#: the words of a verdict that could not be reached (the Trust contract's third phrasing)
NOT_ENOUGH = "not enough requests for a verdict"

_Z = NormalDist()

#: the kind of a verdict: the Trust contract's three phrasings
VerdictKind = Literal["differs", "no_difference", "not_enough"]


class _Counted(TypedDict):
    """What every verdict says about its requests: how many per side, how many it needs, why
    there is no verdict (None when there is one), how to get enough, and its words."""

    n_reference: int
    n_other: int
    needed: int
    reason: str | None
    remedy: str
    text: str


class SampleVerdict(_Counted):
    """:func:`compare_samples`'s verdict: kind, pct [lo, hi] and the MDD (None for "not_enough"),
    and the verdict against a bridge tolerance (None without one)."""

    kind: VerdictKind
    pct: float | None
    lo: float | None
    hi: float | None
    mdd_pct: float | None
    tolerance_pct: float | None
    within_tolerance: bool | None
    tolerance_text: str | None


class ShareVerdict(_Counted):
    """:func:`compare_shares`'s verdict: kind, pp [lo, hi] and the MDD in percentage points (None
    for "not_enough"), and the two shares of good requests (0–1; None for an empty side)."""

    kind: VerdictKind
    pp: float | None
    lo: float | None
    hi: float | None
    mdd_pp: float | None
    share_reference: float | None
    share_other: float | None


_Verdict = TypeVar("_Verdict", SampleVerdict, ShareVerdict)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile t(p, df) by the Cornish–Fisher expansion in z = Φ⁻¹(p) (Abramowitz &
    Stegun 26.7.5, four terms); df ≥ 1. Exact enough for interval widths (≤ 0.01 off for df ≥ 3)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1, got {df}")
    z = _Z.inv_cdf(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def _pct(x: float) -> str:
    """+1.8 / −15.2 (one decimal, typographic minus)."""
    return f"{x:+.1f}".replace("-", "−")


def _listed(values: Any, what: str, expected: str) -> list[Any]:
    """``values`` as a list ([] for None); ValueError naming ``what`` when it is not a sequence."""
    if values is None:
        return []
    try:
        return list(values)
    except TypeError:
        raise ValueError(f"{what}: expected a list of {expected}, got {values!r}") from None


def _clean(values: Any, what: str) -> list[float]:
    """The values as floats; ValueError naming ``what`` for anything that is not a positive number."""
    items = _listed(values, what, "per-request decode rates (tok/s)")
    out = []
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{what}[{i}] = {v!r}: every per-request value must be a positive number "
                             "(tok/s); drop invalid requests before comparing")
        out.append(float(v))
    return out


def _quantile(sorted_values: list[float], p: float) -> float:
    """Linear-interpolated quantile of an ascending list."""
    i = p * (len(sorted_values) - 1)
    lo = int(math.floor(i))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (i - lo)


def compare_samples(reference: Any, other: Any, *, seed: int = 0, resamples: int = 2000,
                    tolerance_pct: float | None = None, remedy: str | None = None) -> SampleVerdict:
    """The verdict on ``other`` against ``reference`` (lists of per-request values, e.g. tok/s).

    Returns ``{"kind": "differs"|"no_difference"|"not_enough", "pct", "lo", "hi", "mdd_pct",
    "n_reference", "n_other", "needed", "text", "reason", "remedy", "tolerance_pct",
    "within_tolerance", "tolerance_text"}`` (``tolerance_text``: the verdict against
    ``tolerance_pct``, e.g. ", within the 2.5 % bridge tolerance", None without one or without a
    verdict; module docstring): ``pct`` = (median(other) / median(reference) − 1) × 100, [``lo``,
    ``hi``] its 95 % interval and ``mdd_pct`` the minimum detectable difference (formulas: module
    docstring); figures are None for "not_enough". ``needed`` = :data:`MIN_REQUESTS`; ``remedy``
    is how to get enough requests (default ``--runs 5``); ``reason`` says why there is no verdict
    ("3 and 3 requests; 5 per side needed: --runs 5"), None when there is one. ValueError for a
    non-positive or non-numeric value, resamples < 100, or a negative tolerance."""
    ref = _clean(reference, "reference")
    oth = _clean(other, "other")
    if not isinstance(resamples, int) or resamples < 100:
        raise ValueError(f"resamples must be an integer ≥ 100, got {resamples!r}")
    if tolerance_pct is not None and (not isinstance(tolerance_pct, (int, float)) or tolerance_pct < 0):
        raise ValueError(f"tolerance_pct must be a number of percent ≥ 0, got {tolerance_pct!r}")
    # ``text`` is a placeholder, last in the dict as before: every path below sets the verdict's words.
    out: SampleVerdict = {"kind": "not_enough", "pct": None, "lo": None, "hi": None, "mdd_pct": None,
                          "n_reference": len(ref), "n_other": len(oth), "needed": MIN_REQUESTS,
                          "reason": None, "remedy": remedy or f"--runs {MIN_REQUESTS}",
                          "tolerance_pct": tolerance_pct, "within_tolerance": None, "tolerance_text": None,
                          "text": NOT_ENOUGH}
    if len(ref) < MIN_REQUESTS or len(oth) < MIN_REQUESTS:
        return _not_enough(out)
    rng = random.Random(seed)
    med_ref = bootstrap_medians(ref, resamples, rng)
    med_oth = bootstrap_medians(oth, resamples, rng)
    rng.shuffle(med_oth)  # the lists come back sorted: pair the two sides at random
    logs = sorted(math.log(o / r) for r, o in zip(med_ref, med_oth))
    point = math.log(median(oth) / median(ref))
    se = pstdev(logs)
    df = min(len(ref), len(oth)) - 1
    t975, t80 = t_quantile(0.975, df), t_quantile(0.8, df)
    widen = max(t975 / _Z.inv_cdf(0.975), MIN_WIDEN)
    lo_log = point - widen * max(point - _quantile(logs, 0.025), 0.0)
    hi_log = point + widen * max(_quantile(logs, 0.975) - point, 0.0)
    pct = (math.exp(point) - 1) * 100
    lo, hi = (math.exp(lo_log) - 1) * 100, (math.exp(hi_log) - 1) * 100
    mdd = (math.exp((widen * _Z.inv_cdf(0.975) + t80) * se) - 1) * 100
    out.update({"pct": pct, "lo": lo, "hi": hi, "mdd_pct": mdd})
    _word(out, lo, hi, f"{_pct(pct)} % [{_pct(lo)}, {_pct(hi)}]", f"{mdd:.1f} %")
    if tolerance_pct is not None:
        _against_tolerance(out, tolerance_pct, lo, hi, mdd)
    return out


def _word(out: SampleVerdict | ShareVerdict, lo: float, hi: float, difference: str, mdd: str) -> None:
    """``kind`` and ``text`` of a verdict: ``differs`` when the interval [lo, hi] leaves out 0 (its
    size and interval in words: ``difference``), else no difference detectable above ``mdd``."""
    if lo > 0 or hi < 0:
        out["kind"] = "differs"
        out["text"] = f"differs by {difference}"
    else:
        out["kind"] = "no_difference"
        out["text"] = f"no difference detectable above {mdd}"


def _against_tolerance(out: SampleVerdict, tolerance: float, lo: float, hi: float, mdd: float) -> None:
    """Set ``within_tolerance`` and ``tolerance_text`` of a reached verdict (module docstring,
    "Bridge tolerance"); ``lo``, ``hi`` and ``mdd`` are its ``lo``, ``hi`` and ``mdd_pct``."""
    if out["kind"] == "differs":
        if -tolerance <= lo and hi <= tolerance:
            out["within_tolerance"], clause = True, f", within the {tolerance:g} % bridge tolerance"
        elif lo > tolerance or hi < -tolerance:
            out["within_tolerance"], clause = False, f", beyond the {tolerance:g} % bridge tolerance"
        else:
            clause = (f", the interval reaches past the {tolerance:g} % bridge tolerance "
                      "(more requests would resolve it)")
    elif mdd <= tolerance:
        out["within_tolerance"], clause = True, f", within the {tolerance:g} % bridge tolerance"
    else:
        clause = f" (more than the {tolerance:g} % bridge tolerance: more requests would resolve it)"
    out["tolerance_text"] = clause


def _not_enough(out: _Verdict) -> _Verdict:
    """``out`` (a verdict) made a "not_enough" one: the words as ``text``, why as ``reason``."""
    out["text"] = NOT_ENOUGH
    out["reason"] = (f"{out['n_reference']} and {out['n_other']} requests; "
                     f"{out['needed']} per side needed: {out['remedy']}")
    return out


def explained(verdict: SampleVerdict | ShareVerdict | None) -> str:
    """A verdict as one sentence: its words, what it means against a bridge tolerance
    (``tolerance_text``: ", within the 2.5 % bridge tolerance") and for "not enough requests for a
    verdict" why, in parentheses ("not enough requests for a verdict (3 and 3 requests; 5 per side
    needed: --runs 5)"); for lines said once (a summary line, health.md), not for table cells."""
    if not verdict:
        return ""
    reason = verdict.get("reason")
    clause = verdict.get("tolerance_text")  # a share verdict has none
    return str(verdict["text"]) + (clause if isinstance(clause, str) else "") + (f" ({reason})" if reason else "")


def _flags(values: Any, what: str) -> list[bool]:
    """The values as booleans; ValueError naming ``what`` for anything that is not True/False."""
    items = _listed(values, what, "per-request good flags (true/false)")
    for i, v in enumerate(items):
        if not isinstance(v, bool):
            raise ValueError(f"{what}[{i}] = {v!r}: every per-request flag must be true or false "
                             "(a request that failed is not good: false)")
    return list(items)


def _pp(x: float) -> str:
    """+4.0 / −12.5 (percentage points, one decimal, typographic minus)."""
    return f"{x:+.1f}".replace("-", "−")


def compare_shares(reference: Any, other: Any, *, seed: int = 0, resamples: int = 2000,
                   remedy: str | None = None) -> ShareVerdict:
    """The verdict on the share of good requests of ``other`` against ``reference`` (lists of
    per-request flags: True = the request met every SLO, e.g. ``rates[].per_request[].good``), in
    the phrasing of :func:`compare_samples` with percentage points (pp) for percent:

    * ``differs by −12.5 pp [−21.9, −3.4]`` — the 95 % interval excludes 0;
    * ``no difference detectable above 9.8 pp`` — it includes 0; 9.8 pp is the MDD;
    * ``not enough requests for a verdict`` (``reason``: "3 and 3 requests; 5 per side needed: …").

    Formulas (x = good requests, n = requests of a side; a = reference, b = other):

    * difference d = (x_b / n_b − x_a / n_a) × 100 pp (the two ``slo_met_share`` apart);
    * bootstrap: each side gets one good and one bad pseudo-request (Agresti & Caffo 2000, "add
      one success and one failure to each group": a side whose requests were all good, or all
      bad, still has a spread), then ``resamples`` times n + 2 flags are drawn with replacement
      per side from one ``random.Random(seed)``; D* = share*(b) − share*(a) in pp, whose mean
      is d̃ = ((x_b + 1)/(n_b + 2) − (x_a + 1)/(n_a + 2)) × 100;
    * SE = standard deviation of D*; w = max(t(0.975, df) / z(0.975), :data:`MIN_WIDEN`),
      df = min(n_a, n_b) − 1, as in :func:`compare_samples`;
    * interval [lo, hi] = [d − w·(d̃ − P2.5(D*)), d + w·(P97.5(D*) − d̃)], cut to [−100, +100]:
      the bootstrap's spread about the raw difference, widened as the median comparison is;
    * MDD = (w · z(0.975) + t(0.8, df)) · SE pp (80 % power, as in :func:`compare_samples`).

    Returns ``{"kind": "differs"|"no_difference"|"not_enough", "pp", "lo", "hi", "mdd_pp",
    "share_reference", "share_other", "n_reference", "n_other", "needed", "text", "reason",
    "remedy"}`` (``text``, ``reason`` and ``remedy`` as in :func:`compare_samples`; shares 0–1;
    figures None for "not_enough", shares None for an empty side). ValueError for a flag that is
    not a bool or resamples < 100."""
    ref = _flags(reference, "reference")
    oth = _flags(other, "other")
    if not isinstance(resamples, int) or resamples < 100:
        raise ValueError(f"resamples must be an integer ≥ 100, got {resamples!r}")
    out: ShareVerdict = {"kind": "not_enough", "pp": None, "lo": None, "hi": None, "mdd_pp": None,
                         "share_reference": (sum(ref) / len(ref)) if ref else None,
                         "share_other": (sum(oth) / len(oth)) if oth else None,
                         "n_reference": len(ref), "n_other": len(oth), "needed": MIN_REQUESTS, "reason": None,
                         "remedy": remedy or f"--rate-requests {MIN_REQUESTS} or a longer --rate-duration",
                         "text": NOT_ENOUGH}
    if len(ref) < MIN_REQUESTS or len(oth) < MIN_REQUESTS:
        return _not_enough(out)
    rng = random.Random(seed)
    aug_ref = [1.0 if v else 0.0 for v in ref] + [1.0, 0.0]
    aug_oth = [1.0 if v else 0.0 for v in oth] + [1.0, 0.0]
    na, nb = len(aug_ref), len(aug_oth)
    draws = sorted((sum(rng.choices(aug_oth, k=nb)) / nb - sum(rng.choices(aug_ref, k=na)) / na) * 100
                   for _ in range(resamples))
    d = (sum(oth) / len(oth) - sum(ref) / len(ref)) * 100
    d_adj = (sum(aug_oth) / nb - sum(aug_ref) / na) * 100
    se = pstdev(draws)
    df = min(len(ref), len(oth)) - 1
    widen = max(t_quantile(0.975, df) / _Z.inv_cdf(0.975), MIN_WIDEN)
    lo = max(-100.0, d - widen * max(d_adj - _quantile(draws, 0.025), 0.0))
    hi = min(100.0, d + widen * max(_quantile(draws, 0.975) - d_adj, 0.0))
    mdd = (widen * _Z.inv_cdf(0.975) + t_quantile(0.8, df)) * se
    out.update({"pp": d, "lo": lo, "hi": hi, "mdd_pp": mdd})
    _word(out, lo, hi, f"{_pp(d)} pp [{_pp(lo)}, {_pp(hi)}]", f"{mdd:.1f} pp")
    return out


def samples(result: StoredResult | MeasuredDocument, metric: str) -> list[float]:
    """Per-request values of ``metric`` in a result document (tok/s): the figure's declaration
    says which (:func:`sparkbench.measure.figures.samples`). ValueError for an unknown metric."""
    return figures.samples(result, metric)
