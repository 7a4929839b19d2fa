"""Pure statistics over lists of numbers and requests: percentiles, the bootstrap of the median,
parallel waves, per-request TPOT, SLOs and the arrival schedule. No I/O."""
from __future__ import annotations

import math
import random
from typing import TypedDict


class Percentiles(TypedDict):
    """p50/p90/p99 of a list (None when it is empty); ``pcts``."""

    p50: float | None
    p90: float | None
    p99: float | None


class Stat4(Percentiles):
    """p50/p90/p99 and the mean; ``stat4``."""

    mean: float | None


def count_waves(spans: list[tuple[float, float]]) -> tuple[int, int]:
    """(waves, queued) of one parallel wave from each request's (t_first, t_last).

    A request is *queued* when its first token came after another request of the wave had
    delivered its last one, and later than the wave's earliest first token by more than half the
    median stream duration (t_last - t_first), so a stream that ended early (a burst, a short
    stream) does not count as a slot freed. ``waves`` is the longest chain of requests each
    starting after the previous one finished: 8 requests on 4 slots give 2.
    """
    order = sorted(spans)
    if not order:
        return 0, 0
    durations = sorted(tl - tf for tf, tl in order)
    half = 0.5 * durations[len(durations) // 2] if len(durations) % 2 else \
        0.25 * (durations[len(durations) // 2 - 1] + durations[len(durations) // 2])
    first0 = order[0][0]
    depth: list[int] = []
    queued = 0
    for j, (tf, _tl) in enumerate(order):
        late = half > 0 and tf - first0 > half
        before = [depth[i] for i in range(j) if order[i][1] < tf] if late else []
        depth.append(1 + max(before, default=0))
        queued += bool(before)
    return max(depth), queued


def percentile(values: list[float], q: float) -> float | None:
    """q-th percentile (0..100) with linear interpolation between closest ranks (numpy default)."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def pcts(values: list[float]) -> Percentiles:
    """p50, p90 and p99 of ``values``."""
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99)}


def median(values: list[float]) -> float | None:
    """The 50th percentile (None for no values)."""
    return percentile(values, 50)


def bootstrap_medians(values: list[float], resamples: int, rng: random.Random) -> list[float]:
    """Medians of ``resamples`` bootstrap resamples of ``values`` (drawn with replacement, same
    size), sorted ascending. Each value is one whole request (its decode rate), so gaps inside
    a request are never resampled apart. Empty when ``values`` is empty."""
    if not values:
        return []
    k = len(values)
    out = []
    for _ in range(resamples):
        s = sorted(rng.choices(values, k=k))
        mid = k // 2
        out.append(s[mid] if k % 2 else (s[mid - 1] + s[mid]) / 2.0)
    out.sort()
    return out


PRECISION_RESAMPLES = 2000  # bootstrap resamples behind --target-precision
PRECISION_SEED = 0  # fixed seed: the same runs always give the same achieved precision


def median_precision_pct(values: list[float], resamples: int = PRECISION_RESAMPLES,
                         seed: int = PRECISION_SEED) -> float | None:
    """Half-width of the 95 % bootstrap interval of the median, in % of the median:
    100 x (q97.5 - q2.5) / 2 / median, q the percentiles of ``bootstrap_medians(values,
    resamples, Random(seed))`` (whole requests resampled). None with fewer than 2 values or a
    median <= 0."""
    if len(values) < 2:
        return None
    mid = median(values)
    if not mid or mid <= 0:
        return None
    meds = bootstrap_medians(values, resamples, random.Random(seed))
    lo, hi = percentile(meds, 2.5), percentile(meds, 97.5)
    assert lo is not None and hi is not None
    return 100.0 * (hi - lo) / 2.0 / mid



def rate_schedule(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send offsets [s] of ``n`` requests at ``rate`` req/s, as vllm bench serve (0.25+) makes them.

    Gaps ~ gamma(shape=burstiness, scale=1/(rate*burstiness)) (burstiness 1: Poisson, exponential
    gaps; inf: constant 1/rate), the first request after one gap too; the cumulative delays are then
    rescaled so the last request goes out at exactly n/rate s. ``rate`` inf: every offset 0.
    ``random.Random(seed).gammavariate`` draws the gaps, so one seed gives one schedule.
    """
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    delays: list[float] = []
    acc = 0.0
    for _ in range(n):
        gap = 1.0 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        acc += gap
        delays.append(acc)
    if delays and delays[-1] > 0:
        k = (n / rate) / delays[-1]
        delays = [d * k for d in delays]
    return delays


def request_tpot(e2e: float, ttft: float, output_tokens: int | None) -> float | None:
    """vLLM's per-request TPOT: (e2e - ttft) / (output_tokens - 1), 0 when output_tokens <= 1."""
    if output_tokens is None:
        return None
    if output_tokens <= 1:
        return 0.0
    return (e2e - ttft) / (output_tokens - 1)


def meets_slo(slo: dict[str, float] | None, ttft: float | None, tpot: float | None, e2e: float | None) -> bool:
    """A completed request is good when every given metric is <= its SLO (a missing figure fails)."""
    got = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
    return all(got[k] is not None and got[k] <= v for k, v in (slo or {}).items())


def stat4(values: list[float]) -> Stat4:
    """p50, p90, p99 and the mean (None for each when ``values`` is empty)."""
    out = pcts(values)
    out["mean"] = sum(values) / len(values) if values else None
    return out

