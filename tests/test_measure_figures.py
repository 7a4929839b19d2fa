"""Every figure of ``sparkbench.measure`` from records and rows built here: the statistics
(``stats``), one record per request (``record``), each phase's aggregation (``aggregate``), the
spec-decode and prefix-cache counters (``metrics``), the tool-call summary (``tool_judge``) and the
search steps (``phases.rate_search``). No subprocess, server, socket or Docker.

Oracles: ``numpy.percentile`` for the percentiles; for everything else the figure's definition
(``sparkbench/measure/__init__.py``, docs/MEASUREMENT.md) computed by hand in the test.
"""
from __future__ import annotations

import math
import random
import statistics

import numpy
import pytest

from sparkbench import measure as M
from sparkbench.measure.phases.rate_search import bounds

pytestmark = pytest.mark.unit
pytestmark = [pytestmark, pytest.mark.unit]

approx = pytest.approx


# ---------------------------------------------------------------------------------------------
# Builders


def stream(marks: list[tuple[float, int | None]], *, t_start: float = 0.0, completion: int | None = -1,
           prompt: int | None = 100, usage: bool = True, error: str | None = None, status: int | None = 200,
           extra_usage: dict | None = None) -> M.StreamResult:
    """A parsed stream as ``sse.parse_sse`` leaves it: one carrying chunk per (arrival time, running
    token count or None) mark. ``completion`` -1: the last mark's count; ``usage`` False: no usage."""
    if completion == -1:
        completion = marks[-1][1] if marks else 0
    u = {"completion_tokens": completion, "prompt_tokens": prompt, **(extra_usage or {})} if usage else None
    r = M.StreamResult(t_start=t_start, status=status, error=error, usage=u)
    for t, n in marks:
        if r.t_first is None:
            r.t_first, r.tokens_first = t, n
        r.t_last, r.tokens_last, r.carrying = t, n, r.carrying + 1
        r.marks.append((t, n))
        r.usage_marks += n is not None
        r.content += "x"
    r.finish_reason, r.done = ("length", True) if error is None else (None, False)
    return r


def record(marks: list[tuple[float, int | None]], **kw) -> M.RequestRecord:
    return M.RequestRecord.from_stream(stream(marks, **kw), True)


def failed(t_start: float = 0.0, error: str = "HTTP 500: boom") -> M.RequestRecord:
    return record([], t_start=t_start, error=error, status=500, usage=False)


def run(decode: float | None, ttft: float | None, *, source: str | None = "usage", prompt: int | None = 100,
        bound: dict | None = None, reason: str | None = None, error: str | None = None) -> dict:
    """One ``single.runs[]`` entry with the keys ``summarise_single`` reads."""
    r = {"decode_tok_s": decode, "ttft_s": ttft, "valid": decode is not None,
         "decode_source": source if decode is not None else None, "prompt_tokens": prompt, "error": error}
    if bound is not None:
        r["decode_bound"] = bound
    if reason is not None:
        r["decode_reason"] = reason
    return r


# ---------------------------------------------------------------------------------------------
# stats


@pytest.mark.parametrize("values", [[3.0], [2.0, 1.0], [5.0, 1.0, 4.0, 2.0, 3.0],
                                    [0.013, 0.2, 7.5, 7.5, 1e-4, 42.0, 3.3, 0.9]])
def test_percentile_pcts_median_and_stat4_match_numpy(values: list[float]) -> None:
    for q in (0, 2.5, 25, 50, 90, 97.5, 99, 100):
        assert M.percentile(values, q) == approx(float(numpy.percentile(values, q)), rel=1e-12)
    assert M.pcts(values) == approx({k: float(numpy.percentile(values, q))
                                     for k, q in (("p50", 50), ("p90", 90), ("p99", 99))}, rel=1e-12)
    assert M.median(values) == approx(statistics.median(values), rel=1e-12)
    s4 = M.stat4(values)
    assert set(s4) == {"p50", "p90", "p99", "mean"} and s4["mean"] == approx(sum(values) / len(values))


def test_percentile_edges_and_inputs_left_alone() -> None:
    assert M.percentile([], 50) is None and M.median([]) is None
    assert M.pcts([]) == {"p50": None, "p90": None, "p99": None}
    assert M.stat4([]) == {"p50": None, "p90": None, "p99": None, "mean": None}
    assert M.percentile([7.0], 0) == M.percentile([7.0], 99) == 7.0
    vals = [3.0, 1.0, 2.0]
    M.pcts(vals)
    assert vals == [3.0, 1.0, 2.0]


def test_bootstrap_medians_sorted_deterministic_and_of_resampled_values() -> None:
    values = [10.0, 11.0, 12.5, 9.0, 30.0]
    a = M.bootstrap_medians(values, 500, random.Random(7))
    b = M.bootstrap_medians(values, 500, random.Random(7))
    assert a == b and len(a) == 500 and a == sorted(a)
    assert M.bootstrap_medians(values, 500, random.Random(8)) != a
    assert set(a) <= set(values)  # odd size: each median is one of the values
    # hand oracle: the same draws, median of each resample
    rng = random.Random(7)
    assert a == sorted(statistics.median(rng.choices(values, k=5)) for _ in range(500))
    # even size: the mean of the two middle values
    even = M.bootstrap_medians([1.0, 2.0, 3.0, 4.0], 300, random.Random(1))
    rng = random.Random(1)
    assert even == sorted(statistics.median(rng.choices([1.0, 2.0, 3.0, 4.0], k=4)) for _ in range(300))
    assert M.bootstrap_medians([], 100, random.Random(0)) == []
    assert M.bootstrap_medians([5.0, 5.0], 50, random.Random(0)) == [5.0] * 50


def test_median_precision_pct_is_the_bootstrap_half_width_and_shrinks_with_n() -> None:
    assert M.median_precision_pct([]) is None and M.median_precision_pct([100.0]) is None
    assert M.median_precision_pct([0.0, 0.0, 0.0]) is None  # median <= 0
    assert M.median_precision_pct([50.0, 50.0, 50.0]) == 0.0
    spread = [90.0, 95.0, 100.0, 105.0, 110.0]
    # oracle: numpy's percentiles of the same 2000 resampled medians (seed 0), over the median
    rng = random.Random(0)
    meds = [statistics.median(rng.choices(spread, k=5)) for _ in range(2000)]
    lo, hi = numpy.percentile(meds, [2.5, 97.5])
    p5 = M.median_precision_pct(spread)
    assert p5 == approx(100 * (hi - lo) / 2 / 100.0)
    assert M.median_precision_pct(spread) == p5  # fixed seed: same runs, same precision
    # the same spread (90..110 evenly) with more runs: narrower, about 1/sqrt(n)
    p = [M.median_precision_pct([float(x) for x in numpy.linspace(90, 110, n)]) for n in (5, 20, 80, 320)]
    assert p[0] > p[1] > p[2] > p[3] > 0
    assert all(0.35 < b / a < 0.65 for a, b in zip(p, p[1:]))  # 4 x the runs: about half the width


def test_count_waves() -> None:
    # 8 requests of 1 s on 4 slots: the second four start after the first four ended
    first = [(0.10 + 0.01 * i, 1.10 + 0.01 * i) for i in range(4)]
    second = [(1.20 + 0.01 * i, 2.20 + 0.01 * i) for i in range(4)]
    assert M.count_waves(second + first) == (2, 4)
    # all at once: one wave, nobody queued
    assert M.count_waves([(0.1 + 0.001 * i, 1.0 + 0.01 * i) for i in range(8)]) == (1, 0)
    # 12 on 4 slots: three waves
    third = [(2.30 + 0.01 * i, 3.30 + 0.01 * i) for i in range(4)]
    assert M.count_waves(first + second + third) == (3, 8)
    # a burst (whole stream in one read at 0.05) ends before another stream's first token at 0.10;
    # 0.05 s after the wave's first token is far below half the median duration: not a freed slot
    burst = [(0.05, 0.05), (0.05, 1.0), (0.06, 1.0), (0.07, 1.0), (0.10, 1.1)]
    assert M.count_waves(burst) == (1, 0)
    assert M.count_waves([]) == (0, 0)
    assert M.count_waves([(0.2, 0.9)]) == (1, 0)


def test_request_tpot_and_meets_slo() -> None:
    assert M.request_tpot(1.2, 0.2, 11) == approx(0.1)
    assert M.request_tpot(1.2, 0.2, 1) == 0.0 and M.request_tpot(1.2, 0.2, 0) == 0.0
    assert M.request_tpot(1.2, 0.2, None) is None
    assert M.meets_slo({"ttft": 0.5}, 0.5, None, None)  # <= the limit is good; others not asked
    assert not M.meets_slo({"ttft": 0.5}, 0.51, 0.01, 1.0)
    assert not M.meets_slo({"tpot": 0.1}, 0.1, None, 1.0)  # a missing figure fails
    slo = {"ttft": 0.5, "tpot": 0.05, "e2e": 2.0}
    assert M.meets_slo(slo, 0.4, 0.05, 2.0)
    assert not M.meets_slo(slo, 0.4, 0.06, 1.0) and not M.meets_slo(slo, 0.4, 0.01, 2.1)
    assert M.meets_slo(None, None, None, None) and M.meets_slo({}, None, None, None)


def test_rate_schedule() -> None:
    for burstiness in (1.0, 0.5, 4.0):
        s = M.rate_schedule(20, 4.0, burstiness, seed=3)
        assert len(s) == 20 and s == sorted(s) and s[0] > 0
        assert s[-1] == approx(20 / 4.0, rel=1e-12)  # the last send at exactly n/rate
        assert s == M.rate_schedule(20, 4.0, burstiness, seed=3)
        assert s != M.rate_schedule(20, 4.0, burstiness, seed=4)
        # hand oracle: cumulative gamma(K, 1/(rate K)) gaps from Random(seed), rescaled to end at n/rate
        rng = random.Random(3)
        acc, cum = 0.0, []
        for _ in range(20):
            acc += rng.gammavariate(burstiness, 1 / (4.0 * burstiness))
            cum.append(acc)
        assert s == approx([c * 5.0 / cum[-1] for c in cum], rel=1e-12)
    # Poisson gaps vary; burstiness inf: constant gaps of 1/rate
    gaps = numpy.diff([0.0, *M.rate_schedule(20, 4.0, 1.0, 0)])
    assert gaps.std() > 0.01
    assert M.rate_schedule(5, 2.0, math.inf, 0) == approx([0.5, 1.0, 1.5, 2.0, 2.5])
    assert M.rate_schedule(6, math.inf, 1.0, 0) == [0.0] * 6
    assert M.rate_schedule(0, 2.0, 1.0, 0) == []


# ---------------------------------------------------------------------------------------------
# record


def test_record_of_a_good_stream() -> None:
    # sent at 0.2; chunks of 2, 1, 2, 1 tokens (running usage counts)
    rec = record([(0.5, 2), (0.6, 3), (0.8, 5), (1.0, 6)], t_start=0.2,
                 extra_usage={"prompt_tokens_details": {"cached_tokens": 64}})
    assert rec.failure is None and not rec.lost
    assert rec.ttft == approx(0.3) and rec.e2e == approx(0.8)
    assert rec.decode_tok_s == approx((6 - 2) / (1.0 - 0.5))
    assert rec.completion_tokens == 6 and rec.prompt_tokens == 100 and rec.cached_tokens == 64
    # a gap before a chunk of k tokens counts as k gaps of gap/k
    assert rec.itl == approx([0.1, 0.1, 0.1, 0.2])
    f = rec.run_fields(6)
    assert f["valid"] is True and f["length_ok"] is True and f["decode_source"] == "usage"
    assert f["decode_tok_s"] == approx(8.0) and f["ttft_s"] == approx(0.3)
    assert f["first_chunk_tokens"] == 2 and f["content_chunks"] == 4 and f["continuous_usage"] is True
    assert f["itl_ms"] == [100.0, 100.0, 100.0, 200.0]
    assert "itl_reason" not in f and "decode_reason" not in f and f["error"] is None
    assert f["requested_tokens"] == 6 and f["forced_length"] is True and f["done_marker"] is True
    assert rec.run_fields(8)["length_ok"] is False
    assert record([(0.5, None), (0.6, None)], usage=False).run_fields(8)["length_ok"] is None


def test_record_failure_rule() -> None:
    bad = record([(0.3, 1), (0.4, 2)], error="stream error: oom", status=200)
    assert bad.failure == "stream error: oom" and bad.ttft is None and bad.e2e is None
    assert bad.decode_tok_s is None and bad.itl is None
    f = bad.run_fields(2)
    assert f["valid"] is False and f["ttft_s"] is None and f["decode_reason"] == "request failed"
    assert f["itl_ms"] is None and f["itl_reason"] == "request failed" and f["error"] == "stream error: oom"
    http = failed()
    assert http.failure == "HTTP 500: boom" and http.run_fields(8)["valid"] is False
    # status 200, no error, but no chunk carried content or reasoning
    empty = record([], completion=0)
    assert empty.error is None and empty.failure == M.record.NO_CONTENT == "no chunk carried content or reasoning"
    assert empty.ttft is None and empty.e2e is None and empty.decode_tok_s is None
    f = empty.run_fields(8)
    assert f["valid"] is False and f["decode_reason"] == M.record.NO_CONTENT and f["itl_ms"] is None
    # a burst has a TTFT but no decode time
    burst = record([(0.5, 1), (0.5, 8)])
    assert burst.failure is None and burst.ttft == 0.5 and burst.decode_tok_s is None
    assert "one read" in burst.run_fields(8)["decode_reason"]
    # a connection that never answered is lost
    assert record([], status=None, error="connection refused", usage=False).lost


# ---------------------------------------------------------------------------------------------
# aggregate: single


def test_summarise_single_figures_over_valid_runs() -> None:
    s = {"runs": [run(10.0, 0.2), run(None, 0.9, reason="burst"), run(14.0, 0.3, source="chunk_count"),
                  run(30.0, 0.25)],
         "decode_tok_s_median_bound": {"low": 1, "high": 2}, "decode_reason": "stale"}
    M.aggregate.summarise_single(s, 100)
    assert s["decode_tok_s_median"] == 14.0 and s["decode_tok_s_min"] == 10.0 and s["decode_tok_s_max"] == 30.0
    assert s["ttft_s_median"] == approx(statistics.median([0.2, 0.9, 0.3, 0.25]))  # every run with a TTFT
    assert s["ttft_n"] == 4 and s["attempted_runs"] == 4 and s["valid_runs"] == s["n"] == 3
    assert s["decode_sources"] == ["chunk_count", "usage"]
    assert "decode_tok_s_median_bound" not in s and "decode_reason" not in s  # stale keys removed
    assert s["prompt_tokens"] == 100 and s["prompt_tokens_uniform"] is True


def test_summarise_single_median_bound() -> None:
    s = {"runs": [run(10.0, 0.2, source="chunk_count_bounded", bound={"low": 6.0, "high": 10.0}),
                  run(12.0, 0.2),
                  run(16.0, 0.2, source="chunk_count_bounded", bound={"low": 11.0, "high": 16.0}),
                  run(None, 0.2, reason="burst")]}
    M.aggregate.summarise_single(s, None)
    # a run without a bound counts with its own figure at both ends
    assert s["decode_tok_s_median_bound"] == {"low": statistics.median([6.0, 12.0, 11.0]),
                                              "high": statistics.median([10.0, 12.0, 16.0])}
    s["runs"] = [run(10.0, 0.2), run(12.0, 0.2)]
    M.aggregate.summarise_single(s, None)
    assert "decode_tok_s_median_bound" not in s


@pytest.mark.parametrize("prompts,warmup,uniform,tokens", [
    ([100, 100], 100, True, 100), ([100, 100], 120, False, None), ([100, 100], None, True, 100),
    ([100, 101], None, False, None), ([None, None], 100, None, None)])
def test_summarise_single_prompt_tokens_uniform(prompts, warmup, uniform, tokens) -> None:
    s = {"runs": [run(10.0, 0.2, prompt=p) for p in prompts]}
    M.aggregate.summarise_single(s, warmup)
    assert s["prompt_tokens_uniform"] is uniform and s["prompt_tokens"] == tokens


def test_summarise_single_without_a_valid_run_says_why() -> None:
    s = {"runs": [run(None, 0.3, reason="burst b"), run(None, None, error="HTTP 500: x"),
                  run(None, 0.4, reason="burst b"), run(None, None, reason="request failed", error="HTTP 503")]}
    M.aggregate.summarise_single(s, None)
    assert s["decode_tok_s_median"] is None and s["decode_tok_s_min"] is None and s["decode_tok_s_max"] is None
    assert s["valid_runs"] == 0 and s["attempted_runs"] == 4 and s["ttft_s_median"] == approx(0.35)
    assert s["decode_reason"] == "HTTP 500: x; burst b; request failed"
    assert s["decode_sources"] == []
    empty = {"runs": []}
    M.aggregate.summarise_single(empty, None)
    assert empty["decode_tok_s_median"] is None and "decode_reason" not in empty and empty["attempted_runs"] == 0


# ---------------------------------------------------------------------------------------------
# aggregate: parallel


def test_parallel_entry_figures() -> None:
    recs = [record([(0.20, 1), (0.40, 2), (0.70, 4), (1.00, 5)], t_start=0.00),
            record([(0.25, 1), (0.35, 2), (0.55, 3), (0.85, 5)], t_start=0.01),
            record([(0.30, 1), (0.50, 3), (1.20, 5)], t_start=0.02),
            failed(t_start=0.03, error="HTTP 503: busy")]
    streams = [r.run_fields(5) for r in recs]
    e = M.parallel_entry(4, recs, streams, 5, True, 8)
    assert e["requests"] == e["concurrency"] == 4 and e["completed"] == 3 and e["errors"] == 1
    # combined = all completion tokens / (last token - first send)
    assert e["completion_tokens"] == 15 and e["wall_s"] == approx(1.2 - 0.0)
    assert e["combined_tok_s"] == approx(15 / 1.2)
    per = [4 / 0.8, 4 / 0.6, 4 / 0.9]
    assert e["per_stream_decode_tok_s"] == approx(per) and e["per_stream_n"] == 3
    assert e["per_stream_decode_tok_s_median"] == approx(statistics.median(per))
    assert e["per_stream"] is streams and e["server_slots"] == 8 and e["forced_length"] is True
    assert e["ttft_s"] == approx({k: float(numpy.percentile([0.2, 0.24, 0.28], q))
                                  for k, q in (("p50", 50), ("p90", 90), ("p99", 99))})
    pooled = [0.2, 0.15, 0.15, 0.3] + [0.1, 0.2, 0.15, 0.15] + [0.1, 0.1, 0.35, 0.35]
    assert e["itl_s"] == approx({k: float(numpy.percentile(pooled, q))
                                 for k, q in (("p50", 50), ("p90", 90), ("p99", 99))})
    assert e["itl_streams"] == 3 and "itl_reason" not in e
    assert e["length_ok"] is True and e["prompt_tokens_uniform"] is True
    assert e["waves_observed"] == 1 and e["queued_requests"] == 0 and "combined_reason" not in e
    assert M.parallel_entry(4, recs, streams, 6, True, None)["length_ok"] is False


def test_parallel_entry_waves_and_missing_figures() -> None:
    # 8 streams on 4 slots
    recs = [record([(0.1 + 0.01 * i, 1), (1.1 + 0.01 * i, 11)], t_start=0.0) for i in range(4)]
    recs += [record([(1.2 + 0.01 * i, 1), (2.2 + 0.01 * i, 11)], t_start=0.0) for i in range(4)]
    e = M.parallel_entry(8, recs, [r.run_fields(11) for r in recs], 11, True, 4)
    assert e["waves_observed"] == 2 and e["queued_requests"] == 4
    assert e["combined_tok_s"] == approx(88 / 2.23)
    # no usage at all: no token counts, so no combined figure and no gaps, with the reasons
    nouse = [record([(0.2, None), (0.5, None)], t_start=0.0, usage=False) for _ in range(2)]
    e = M.parallel_entry(2, nouse, [r.run_fields(8) for r in nouse], 8, False, None)
    assert e["combined_tok_s"] is None and e["combined_reason"] == "server sent no usage: token counts unknown"
    assert e["completed"] == 2 and e["length_ok"] is None and e["itl_streams"] == 0
    assert e["itl_reason"].startswith("2 of 2 completed streams have no per-token gaps")
    assert e["itl_reason"].endswith(": no ITL figure") and "server sent no usage" in e["itl_reason"]
    # nothing completed
    dead = [failed(), failed()]
    e = M.parallel_entry(2, dead, [r.run_fields(8) for r in dead], 8, True, None)
    assert e["completed"] == 0 and e["errors"] == 2 and e["combined_tok_s"] is None
    assert e["combined_reason"] == "no request completed" and e["itl_reason"] == "no request completed"
    assert e["waves_observed"] is None and e["per_stream_decode_tok_s_median"] is None
    assert e["ttft_s"] == {"p50": None, "p90": None, "p99": None}


# ---------------------------------------------------------------------------------------------
# aggregate: prefix cache, multi-turn


def test_prefix_figures() -> None:
    rows = [{"i": 0, "error": None, "ttft_s": 2.0, "prompt_tokens": 1000},
            {"i": 1, "error": None, "ttft_s": 0.2, "prompt_tokens": 1000},
            {"i": 2, "error": None, "ttft_s": 0.25, "prompt_tokens": 1000},
            {"i": 3, "error": "HTTP 500: x", "ttft_s": 0.01, "prompt_tokens": 1000},  # ignored
            {"i": 4, "error": None, "ttft_s": 0.5, "prompt_tokens": 1000}]
    f = M.prefix_figures(rows)
    assert f["cold_ttft_s"] == 2.0
    warm = [0.2, 0.25, 0.5]
    assert f["ttft_s"] == approx({"p50": float(numpy.percentile(warm, 50)), "p90": float(numpy.percentile(warm, 90)),
                                  "p99": float(numpy.percentile(warm, 99)), "mean": sum(warm) / 3})
    assert f["prefill_tok_s"] == approx(statistics.median([1000 / t for t in warm]))
    # the cold request failed: no cold figure, the warm ones stand
    rows[0]["error"] = "HTTP 500: x"
    f = M.prefix_figures(rows)
    assert f["cold_ttft_s"] is None and f["ttft_s"]["mean"] == approx(sum(warm) / 3)
    assert M.prefix_figures([]) == {"cold_ttft_s": None, "ttft_s": M.stat4([]), "prefill_tok_s": None}


def test_prefix_hits() -> None:
    h = M.prefix_hits((1000.0, 200.0), (3000.0, 1700.0), None)
    assert h == {"hit_rate": 0.75, "hit_tokens": 1500, "query_tokens": 2000, "reason": None}
    why = "the server exposes no counters"
    assert M.prefix_hits(None, (1.0, 1.0), why) == {"hit_rate": None, "hit_tokens": None,
                                                   "query_tokens": None, "reason": why}
    assert M.prefix_hits((1.0, 1.0), None, why)["reason"] == why
    none = M.prefix_hits((500.0, 100.0), (500.0, 100.0), None)
    assert none["hit_rate"] is None and none["query_tokens"] == 0 and "no prefix-cache queries" in none["reason"]


def test_multi_turn_per_turn() -> None:
    def row(turn, prompt, ttft, dec, error=None):
        return {"turn": turn, "prompt_tokens": prompt, "ttft_s": ttft, "decode_tok_s": dec, "error": error}

    rows = [row(1, 100, 0.1, 50.0), row(1, 120, 0.3, 40.0), row(1, 999, 9.0, 1.0, "HTTP 500: x"),
            row(2, 300, 0.2, 30.0), row(2, 5000, 0.01, 900.0, "stream error: y"), row(2, 320, 0.4, None),
            row(3, None, None, None, "HTTP 503: z")]
    t1, t2, t3 = M.multi_turn_per_turn(rows, 3)
    assert t1 == approx({"turn": 1, "requests": 2, "context_tokens": 110.0, "ttft_s": 0.2, "decode_tok_s": 45.0,
                         "prefill_tok_s": statistics.median([100 / 0.1, 120 / 0.3])})
    assert t2 == approx({"turn": 2, "requests": 2, "context_tokens": 310.0, "ttft_s": 0.3, "decode_tok_s": 30.0,
                         "prefill_tok_s": statistics.median([300 / 0.2, 320 / 0.4])})
    assert t3 == {"turn": 3, "requests": 0, "context_tokens": None, "ttft_s": None, "decode_tok_s": None,
                  "prefill_tok_s": None}
    assert [t["turn"] for t in M.multi_turn_per_turn([], 2)] == [1, 2]


# ---------------------------------------------------------------------------------------------
# aggregate: arrival rates


def epoch(t: float) -> float:
    return 1000.0 + t


def test_rate_row() -> None:
    rec = record([(10.2, 1), (10.6, 5), (11.2, 11)], t_start=10.0)
    row = M.rate_row(rec, "r0", 0.9, 9.0, {"ttft": 0.5, "tpot": 0.15}, epoch)
    assert row["id"] == "r0" and row["scheduled_s"] == 0.9 and row["error"] is None
    assert row["sent"] == 1010.0 and row["end"] == approx(1011.2)
    assert row["schedule_error_ms"] == approx((10.0 - 9.0 - 0.9) * 1000)  # actual - scheduled send
    assert row["ttft_s"] == approx(0.2) and row["e2e_s"] == approx(1.2) and row["output_tokens"] == 11
    assert row["tpot_s"] == approx((1.2 - 0.2) / 10) and row["good"] is True
    assert M.rate_row(rec, "r0", 0.9, 9.0, {"e2e": 1.0}, epoch)["good"] is False
    assert M.rate_row(rec, "r0", 0.9, 9.0, None, epoch)["good"] is None
    # no usage: no TPOT, and an SLO on TPOT fails
    nouse = record([(10.2, None), (11.2, None)], t_start=10.0, usage=False)
    row = M.rate_row(nouse, "r1", 0.9, 9.0, {"tpot": 1.0}, epoch)
    assert row["tpot_s"] is None and "no usage" in row["tpot_reason"] and row["good"] is False
    # a failed request: its send and schedule error stay, no times, not good
    row = M.rate_row(failed(t_start=10.5), "r2", 1.4, 9.0, {"ttft": 0.5}, epoch)
    assert row["error"] == "HTTP 500: boom" and row["good"] is False and "end" not in row
    assert row["ttft_s"] is None and row["tpot_s"] is None and row["e2e_s"] is None
    assert row["sent"] == 1010.5 and row["schedule_error_ms"] == approx(100.0)
    assert M.rate_row(failed(t_start=10.5), "r2", 1.4, 9.0, None, epoch)["good"] is None
    row = M.rate_row(record([], t_start=10.0, completion=0), "r3", 0.9, 9.0, {"ttft": 0.5}, epoch)
    assert row["error"] == "no chunk carried content or reasoning" and row["good"] is False


def test_rate_figures() -> None:
    t0, slo = 100.0, {"ttft": 0.4}
    recs = [record([(100.21, 1), (101.01, 11)], t_start=100.01),   # ttft 0.2, e2e 1.0: good
            record([(100.82, 1), (101.52, 11)], t_start=100.52),   # ttft 0.3, e2e 1.0: good
            record([(101.53, 1), (103.03, 11)], t_start=101.03),   # ttft 0.5: not good
            failed(t_start=101.5)]
    sched = [0.0, 0.5, 1.0, 1.5]
    rows = [M.rate_row(r, f"r{i}", sched[i], t0, slo, epoch) for i, r in enumerate(recs)]
    f = M.rate_figures(rows, recs, slo, epoch)
    duration = 103.03 - 100.01  # last completion - first send
    assert f["requests"] == 4 and f["completed"] == 3 and f["failed"] == 1
    assert f["start"] == approx(1100.01) and f["end"] == approx(1103.03) and f["duration_s"] == approx(duration)
    assert f["goodput"] == approx(2 / duration) and f["slo_met_share"] == 0.5 and f["slo"] == slo
    assert f["achieved_rate"] == approx(4 / duration) and f["output_tok_s"] == approx(33 / duration)
    errs = [10.0, 20.0, 30.0, 0.0]
    assert f["schedule_error_ms"] == approx({"p50": float(numpy.percentile(errs, 50)),
                                             "p99": float(numpy.percentile(errs, 99)), "max": 30.0})
    ttfts, e2es = [0.2, 0.3, 0.5], [1.0, 1.0, 2.0]
    assert f["ttft_s"]["p50"] == approx(0.3) and f["ttft_s"]["mean"] == approx(sum(ttfts) / 3)
    assert f["e2e_s"]["mean"] == approx(sum(e2es) / 3)
    assert f["tpot_s"]["mean"] == approx(statistics.mean([0.8 / 10, 0.7 / 10, 1.5 / 10]))
    # without an SLO: no goodput and no share
    plain = M.rate_figures([M.rate_row(r, "x", 0.0, t0, None, epoch) for r in recs], recs, None, epoch)
    assert plain["goodput"] is None and plain["slo_met_share"] is None and plain["slo"] is None
    # nothing completed: no duration, goodput 0 with an SLO
    dead = [failed(t_start=100.0), failed(t_start=100.5)]
    f = M.rate_figures([M.rate_row(r, "x", 0.0, t0, slo, epoch) for r in dead], dead, slo, epoch)
    assert f["duration_s"] is None and f["achieved_rate"] is None and f["output_tok_s"] is None
    assert f["goodput"] == 0.0 and f["slo_met_share"] == 0.0 and f["end"] is None and f["completed"] == 0


# ---------------------------------------------------------------------------------------------
# metrics


def test_spec_delta() -> None:
    before = M.SpecCounters(drafts=100, draft_tokens=300, accepted=150, per_pos={0: 80, 1: 50, 2: 20})
    after = M.SpecCounters(drafts=300, draft_tokens=900, accepted=500, per_pos={0: 240, 1: 170, 2: 90})
    d = M.spec_delta(before, after)
    rates = [160 / 200, 120 / 200, 70 / 200]
    assert d["acceptance_per_position"] == approx(rates)
    assert d["mean_acceptance_length"] == approx(1 + sum(rates))
    assert d["draft_acceptance_rate"] == approx(350 / 600)
    assert (d["num_drafts"], d["num_draft_tokens"], d["num_accepted_tokens"]) == (200, 600, 350)
    assert "reason" not in d
    # a position first seen in the second scrape counts from 0
    d = M.spec_delta(M.SpecCounters(10, 20, 5, {0: 5}), M.SpecCounters(20, 40, 13, {0: 10, 1: 3}))
    assert d["acceptance_per_position"] == approx([0.5, 0.3])
    # a counter going backwards (restart)
    back = M.spec_delta(after, before)
    assert "backwards" in back["reason"] and back["mean_acceptance_length"] is None
    assert back["num_drafts"] is None and back["num_draft_tokens"] is None and back["num_accepted_tokens"] is None
    only_pos = M.spec_delta(before, M.SpecCounters(300, 900, 500, {0: 70, 1: 60, 2: 30}))
    assert "backwards" in only_pos["reason"] and only_pos["acceptance_per_position"] is None
    # nothing drafted
    idle = M.spec_delta(before, before)
    assert idle["reason"] == "no drafts were made during this interval" and idle["num_drafts"] == 0
    assert idle["acceptance_per_position"] is None and idle["draft_acceptance_rate"] is None
    assert M.spec_delta(None, after) is None and M.spec_delta(before, None) is None


def test_sum_spec_deltas_adds_before_dividing() -> None:
    a = (M.SpecCounters(0, 0, 0, {0: 0}), M.SpecCounters(100, 200, 90, {0: 90}))  # 0.9 per draft
    b = (M.SpecCounters(500, 1000, 400, {0: 400}), M.SpecCounters(800, 1600, 460, {0: 460}))  # 0.2
    d = M.sum_spec_deltas([a, b])
    assert d["acceptance_per_position"] == approx([150 / 400])  # not the mean of 0.9 and 0.2
    assert d["mean_acceptance_length"] == approx(1 + 150 / 400)
    assert d["draft_acceptance_rate"] == approx(150 / 800) and d["num_drafts"] == 400
    # an interval whose drafts went backwards (restart) is left out
    restarted = (M.SpecCounters(900, 1800, 500, {0: 500}), M.SpecCounters(10, 20, 5, {0: 5}))
    assert M.sum_spec_deltas([a, restarted, b]) == d
    assert M.sum_spec_deltas([]) is None


def test_prefix_cache_counters() -> None:
    total = [("vllm:prefix_cache_queries_total", {"engine": "0"}, 1000.0),
             ("vllm:prefix_cache_queries_total", {"engine": "1"}, 500.0),
             ("vllm:prefix_cache_hits_total", {"engine": "0"}, 300.0),
             ("vllm:prefix_cache_hits_total", {"engine": "1"}, 200.0),
             ("vllm:prefix_cache_queries_created", {"engine": "0"}, 1.7e9)]  # not a counter value
    assert M.prefix_cache_counters(total) == ((1500.0, 500.0), None)
    bare = [("vllm:prefix_cache_queries", {}, 64.0), ("vllm:prefix_cache_hits", {}, 16.0)]
    assert M.prefix_cache_counters(bare) == ((64.0, 16.0), None)
    text = ("# TYPE vllm:prefix_cache_queries counter\n"
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 2048.0\n'
            'vllm:prefix_cache_hits_total{model_name="m",engine="0"} 1024.0\n')
    assert M.prefix_cache_counters(M.parse_prometheus(text)) == ((2048.0, 1024.0), None)
    for samples in ([], [("vllm:prefix_cache_queries_total", {}, 1.0)], [("vllm:num_requests_running", {}, 1.0)]):
        counters, why = M.prefix_cache_counters(samples)
        assert counters is None and "exposes no vllm:prefix_cache_queries" in why


def test_engine_timing_is_one_requests_decode_time_on_the_engines_clock() -> None:
    from sparkbench.measure.metrics import ENGINE_ORIGIN, DecodeCounters, decode_counters, engine_timing

    # vLLM 0.32's exposition (names and labels as the real server prints them)
    text = ('vllm:generation_tokens_total{engine="0",model_name="m"} 1664.0\n'
            'vllm:request_decode_time_seconds_count{engine="0",model_name="m"} 52.0\n'
            'vllm:request_decode_time_seconds_sum{engine="0",model_name="m"} 12.5\n'
            'vllm:request_decode_time_seconds_bucket{engine="0",le="0.3",model_name="m"} 50.0\n')
    before = decode_counters(M.parse_prometheus(text))
    assert before == DecodeCounters(12.5, 52.0, 1664.0)
    after = DecodeCounters(12.5 + 0.155, 53.0, 1664.0 + 32)
    t = engine_timing(before, after, 32)
    assert t is not None and t["origin"] == ENGINE_ORIGIN and t["predicted_n"] == 32
    assert t["predicted_ms"] == approx(155.0) and t["decode_tok_s"] == approx(31 / 0.155)
    # another request finished in between, the tokens are not this request's, or nothing to time
    assert engine_timing(before, DecodeCounters(12.8, 54.0, 1728.0), 32) is None
    assert engine_timing(before, after, 16) is None
    assert engine_timing(before, after, 1) is None and engine_timing(None, after, 32) is None
    assert decode_counters(M.parse_prometheus(text.split("\n", 1)[1])) is None  # no token counter


def test_engine_timing_replaces_the_clients_figure_only_where_the_reads_time_nothing() -> None:
    from sparkbench.measure.decode_rate import decode_rate, with_engine_timing

    timing = {"predicted_n": 9, "predicted_ms": 80.0, "predicted_per_second": None, "decode_tok_s": 100.0,
              "origin": "vllm:request_decode_time_seconds"}
    # read as it was made: the client's figure stays, the engine's is recorded beside it
    kept = stream([(0.10 + 0.01 * j, j + 1) for j in range(9)])
    d = with_engine_timing(decode_rate(kept), kept, timing)
    assert d.source == "usage" and d.tok_s == approx(8 / 0.08) and d.server is timing
    # the whole stream in one read: the engine's figure, with the client's reason in the note
    burst = stream([(0.2, 1), (0.2, 9)])
    assert decode_rate(burst).tok_s is None
    d = with_engine_timing(decode_rate(burst), burst, timing)
    assert (d.tok_s, d.source, d.reason) == (100.0, "server_metrics", None) and "one read" in d.note
    rec = M.RequestRecord(**{**vars(M.RequestRecord.from_stream(burst, True)), "decode": d}).run_fields(9)
    assert rec["valid"] and rec["decode_source"] == "server_metrics" and rec["server_decode_tok_s"] == 100.0
    assert rec["server_timings"]["origin"] == "vllm:request_decode_time_seconds" and "decode_reason" not in rec
    # bunched reads: 8 tokens within 10 ms of the first, made over 80 ms: the engine's figure
    bunched = stream([(0.2, 1), *[(0.21, j + 1) for j in range(1, 9)]])
    d = with_engine_timing(decode_rate(bunched), bunched, timing)
    assert d.source == "server_metrics" and d.tok_s == 100.0 and "bunched" in d.note
    # half the engine's span is still a reading: kept
    half = stream([(0.2, 1), (0.241, 9)])
    assert with_engine_timing(decode_rate(half), half, timing).source == "usage"
    # a failed request, or llama.cpp's own timings already in the stream: unchanged
    bad = stream([(0.2, 1)], error="HTTP 500: boom")
    assert with_engine_timing(decode_rate(bad), bad, timing).tok_s is None
    assert with_engine_timing(decode_rate(burst), burst, None).tok_s is None


# ---------------------------------------------------------------------------------------------
# tool calls


def test_summarise_tools() -> None:
    def e(verdict, category, bucket=None):
        return {"verdict": verdict, "category": category, "bucket": bucket}

    entries = [e("pass", "simple"), e("fail", "simple", "wrong_tool"), e("skipped", "irrelevance"),
               e("fail", "parallel", "param_value_error"), e("pass", "irrelevance"),
               e("fail", "multiple", "wrong_tool"), e("skipped", "simple")]
    s = M.summarise_tools(entries)
    assert (s["passed"], s["failed"], s["skipped"], s["total"]) == (2, 3, 2, 5)  # skipped not in total
    assert s["by_category"] == {"simple": {"passed": 1, "total": 2}, "irrelevance": {"passed": 1, "total": 1},
                                "parallel": {"passed": 0, "total": 1}, "multiple": {"passed": 0, "total": 1}}
    assert s["by_bucket"] == {"wrong_tool": 2, "param_value_error": 1}
    assert M.summarise_tools([]) == {"passed": 0, "failed": 0, "skipped": 0, "total": 0,
                                     "by_category": {}, "by_bucket": {}}


# ---------------------------------------------------------------------------------------------
# rate search


def test_next_rate_steps() -> None:
    assert M.next_rate([], 0.9) is None
    assert bounds([(1.0, 1.0), (2.0, 0.95), (8.0, 0.5), (16.0, 0.1)], 0.9) == (2.0, 8.0)
    assert M.next_rate([(1.0, 1.0)], 0.9) == 2.0  # none failed: double the highest
    assert M.next_rate([(1.0, 1.0), (2.0, 0.9)], 0.9) == 4.0  # share == target passes
    assert M.next_rate([(4.0, 0.5)], 0.9) == 2.0  # none passed: halve the lowest
    assert M.next_rate([(4.0, 0.5), (2.0, 0.3)], 0.9) == 1.0
    assert M.next_rate([(2.0, 1.0), (4.0, 0.5)], 0.9) == 3.0  # bisect
    assert M.next_rate([(2.0, 1.0), (3.0, 1.0), (4.0, 0.5)], 0.9) == 3.5
    assert M.next_rate([(1.0, 1.0), (3.0, 0.2)], 0.9) == 2.0
    assert M.next_rate([(1.0, 1.0), (1.0 / 3, 0.2), (3.0, 0.2)], 0.9) == 2.0  # a failure below passes is ignored
    assert M.next_rate([(2.0, 1.0), (2.1, 0.5)], 0.9) is None  # within 5 %
    assert M.next_rate([(2.0, 1.0), (2.2, 0.5)], 0.9) == 2.1
    assert M.next_rate([(1.0, 1.0), (1.0 / 3 * 4, 0.5)], 0.9) == 1.167  # 4 significant digits
    # the bisection stays inside the open interval, so the "tried already" guard only answers for a
    # level 0 (doubled is itself)
    assert M.next_rate([(0.0, 1.0)], 0.9) is None


def test_next_concurrency_steps() -> None:
    cap = M.CONCURRENCY_SEARCH_MAX
    assert M.next_concurrency([], 0.9, None) == 1 and M.next_concurrency([], 0.9, 6) == 6
    assert M.next_concurrency([], 0.9, cap * 2) == cap
    assert M.next_concurrency([(1, 1.0)], 0.9, None) == 2 and M.next_concurrency([(1, 1.0), (2, 1.0)], 0.9, None) == 4
    assert M.next_concurrency([(200, 1.0)], 0.9, None) == cap  # doubled, at most the cap
    assert M.next_concurrency([(200, 1.0), (cap, 1.0)], 0.9, None) is None  # the cap was tried
    assert M.next_concurrency([(8, 0.2)], 0.9, None) == 4  # halve the lowest failing
    assert M.next_concurrency([(1, 0.2)], 0.9, None) is None  # below 1
    assert M.next_concurrency([(4, 1.0), (8, 0.5)], 0.9, None) == 6  # bisect
    assert M.next_concurrency([(4, 1.0), (6, 0.5)], 0.9, None) == 5
    assert M.next_concurrency([(4, 1.0), (5, 0.5)], 0.9, None) is None  # adjacent: 4 again, tried
    # a whole search against a server that holds the target up to 11 in flight
    tried: list[tuple[float, float]] = []
    while (nxt := M.next_concurrency(tried, 0.9, None)) is not None:
        tried.append((nxt, 1.0 if nxt <= 11 else 0.0))
    assert [c for c, _ in tried] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert bounds(tried, 0.9) == (11, 12) and len(tried) <= M.CONCURRENCY_SEARCH_STEPS
