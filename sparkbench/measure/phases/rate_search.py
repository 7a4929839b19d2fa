"""The searches after the arrival-rate list (--rate-search TARGET): the highest rate, or the most
requests in flight (--search-by concurrency), whose slo_met_share >= TARGET. The next level to try
is a pure function of the levels tried (``next_rate``, ``next_concurrency``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypedDict

from ..aggregate import RateEntry
from ..common import log

if TYPE_CHECKING:
    from ..session import Session

RATE_SEARCH_STEPS = 6  # extra rates --rate-search may try after the listed ones
CONCURRENCY_SEARCH_STEPS = 8  # levels --search-by concurrency may try in all
CONCURRENCY_SEARCH_MAX = 256  # the highest in-flight level it tries


class RateSearchBlock(TypedDict):
    """``rate_search``: the highest rate (or in-flight level) meeting the SLO share; ``by_rate``, ``by_concurrency``."""

    target_share: float
    by: Literal["rate", "concurrency"]
    best_rate: float | None
    best_concurrency: int | None
    tried: list[float]
    extra_rates: list[float]
    max_steps: int


def bounds(tried: list[tuple[float, float]], target: float) -> tuple[float | None, float | None]:
    """(highest level meeting the target, lowest failing level above it) of (level, share) pairs."""
    ok = [x for x, sh in tried if sh >= target]
    lo = max(ok) if ok else None
    bad = [x for x, sh in tried if sh < target and (lo is None or x > lo)]
    return lo, (min(bad) if bad else None)


def next_rate(tried: list[tuple[float, float]], target: float) -> float | None:
    """While no tried rate fails, double the highest; while none passes, halve the lowest; then
    bisect between the highest passing and the lowest failing rate above it, stopping when they are
    within 5 % of each other or the next rate was tried already (None: stop)."""
    lo, hi = bounds(tried, target)
    if lo is None and hi is None:
        return None
    if hi is None:
        nxt = 2 * lo  # type: ignore[operator]
    elif lo is None:
        nxt = hi / 2
    else:
        if hi - lo <= 0.05 * hi:
            return None
        nxt = (lo + hi) / 2
    nxt = float(f"{nxt:.4g}")
    return None if any(r == nxt for r, _ in tried) else nxt


def next_concurrency(tried: list[tuple[float, float]], target: float, start: int | None) -> int | None:
    """Start at ``start`` (default 1); while none failed, double the highest (at most
    CONCURRENCY_SEARCH_MAX); while none passed, halve the lowest; then bisect the integers between
    the highest passing and the lowest failing level above it until they are adjacent (None: stop)."""
    lo, hi = bounds(tried, target)
    if not tried:
        nxt = min(start or 1, CONCURRENCY_SEARCH_MAX)
    elif hi is None:
        nxt = min(2 * int(lo), CONCURRENCY_SEARCH_MAX)  # type: ignore[arg-type]
    elif lo is None:
        nxt = int(hi) // 2
    else:
        nxt = (int(lo) + int(hi)) // 2
    return None if nxt < 1 or any(c == nxt for c, _ in tried) else nxt


def by_rate(s: Session, target: float, tried: list[tuple[float, float]],
            measure: Callable[[float], RateEntry]) -> None:
    """At most RATE_SEARCH_STEPS more rates after the listed ones; ``rate_search`` records them."""
    extra: list[float] = []
    for _ in range(RATE_SEARCH_STEPS):
        nxt = next_rate(tried, target)
        if nxt is None:
            break
        tried.append((nxt, measure(nxt)["slo_met_share"] or 0.0))
        extra.append(nxt)
    lo, _ = bounds(tried, target)
    s.doc["rate_search"] = {"target_share": target, "by": "rate", "best_rate": lo, "best_concurrency": None,
                            "tried": [r for r, _ in tried], "extra_rates": extra, "max_steps": RATE_SEARCH_STEPS}
    log(f"rate search: highest rate with SLO share >= {target:g}: "
        + (f"{lo:g} req/s" if lo is not None else "none of the rates tried"))


def by_concurrency(s: Session, target: float, measure: Callable[[int], RateEntry]) -> None:
    """Closed-loop levels (rate inf, at most N in flight: vLLM's --request-rate inf --max-concurrency
    N), at most CONCURRENCY_SEARCH_STEPS in all; ``rate_search`` records them."""
    tried: list[tuple[float, float]] = []
    for _ in range(CONCURRENCY_SEARCH_STEPS):
        nxt = next_concurrency(tried, target, s.args.rate_max_concurrency)
        if nxt is None:
            break
        tried.append((nxt, measure(nxt)["slo_met_share"] or 0.0))
    lo, _ = bounds(tried, target)
    s.doc["rate_search"] = {"target_share": target, "by": "concurrency", "best_rate": None,
                            "best_concurrency": None if lo is None else int(lo),
                            "tried": [int(c) for c, _ in tried], "extra_rates": [],
                            "max_steps": CONCURRENCY_SEARCH_STEPS}
    log(f"concurrency search: most requests in flight with SLO share >= {target:g}: "
        + (f"{int(lo)}" if lo is not None else "none of the levels tried"))
