#!/usr/bin/env python3
"""Table 7 — verdict accuracy: seeded trials of `sparkbench.verdict` through the real simulator and
the real measure.py, at true differences of 0, 1, 3 and 15 % and at the reported MDD.

    .venv/bin/python -m perf.verdict_accuracy [--quick] [--trials N] [--points 0,1,3,15,mdd]
    .venv/bin/python -m perf.verdict_accuracy --pure [--trials 1000]   # no simulator: lognormal draws

``--pure`` is the experiment behind ``MIN_REQUESTS`` and the small-sample widening of
:mod:`sparkbench.verdict` (docs/REPORTS.md, "How to read a verdict"): per n requests per side,
seeded lognormal samples with a 2 % s.d., the share of "differs" at a true difference of 0 (the
plain percentile bootstrap beside the verdict's widened interval), the median MDD, and the share
found at a true difference of that MDD.

Method: per point two simulator processes (`python3 scripts/vllm_sim serve`, the 35B-A3B bare
profile, ports 18560–18599): the reference and the other server, whose decode is slower by the
true difference d (``VLLM_SIM_RATE`` = ``RATE`` × (1 − d) against ``RATE``). Both run ``VLLM_SIM_REQUEST_NOISE`` =
``NOISE`` (each request draws a step-time factor exp(N(0, NOISE)), so one request's decode rate
has a relative s.d. of ≈ NOISE: the measured spread is in the table) and the default per-step
jitter, each with its own seed, at ``VLLM_SIM_SPEEDUP`` = ``SPEEDUP``. One trial = one measure.py
single-stream run (``--runs`` = the measure.py default, ``--concurrency none``, ``OUTPUT_TOKENS``
forced tokens) against each server, then :func:`sparkbench.verdict.compare_samples` of the two
``single.runs[]`` lists. The servers stay up across a point's trials: every request draws a fresh
noise factor, so the trials are independent. The points run at the same time (each has its own
two servers; the work is mostly waiting on the simulated clock).

A verdict is correct when it says "no difference" at d = 0 and "differs" with a negative sign at
d > 0. "At MDD" is the point whose true difference is the median MDD that 0 % trials report: a
calibrated MDD is found there in ≈ 80 % of trials (its difference comes from a short 0 % pilot, so
all points can run at once). Goal: correct in ≥ 95 % of trials at 0 % and at
15 %, and 70–90 % detection at the MDD point.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median, pstdev
from typing import Any

from perf import common
from perf.common import SIM, PerfError, Section, md_table
from sparkbench import verdict as vd

PORT_BASE = 18560
MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
FLAGS = ["--quantization", "modelopt", "--kv-cache-dtype", "fp8", "--max-model-len", "65536",
         "--max-num-seqs", "8", "--max-num-batched-tokens", "4096"]
RATE = 76.0           # VLLM_SIM_RATE of the reference: tok/s of one bare stream (the seed's 76.7, rounded)
NOISE = 0.02          # VLLM_SIM_REQUEST_NOISE: 2 % per-request s.d. (log scale)
SPEEDUP = 3.0         # VLLM_SIM_SPEEDUP
OUTPUT_TOKENS = 64    # forced tokens per request
TRIALS = 200
QUICK_TRIALS = 20
PILOT_TRIALS = 20     # 0 % trials that set the MDD point's true difference
PILOT_INDEX = 19      # ports 18598/18599; the points use pairs 0–18
POINTS = ("0", "1", "3", "15", "mdd")
GOAL_CORRECT = 0.95
GOAL_MDD_DETECT = (0.70, 0.90)


class Sim:
    """One simulator process (its own process group), stopped by :meth:`close`."""

    def __init__(self, port: int, seed: int, rate: float) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "VLLM_SIM_LOAD_SECONDS": "0.1", "VLLM_SIM_SEED": str(seed),
               "VLLM_SIM_SPEEDUP": str(SPEEDUP), "VLLM_SIM_REQUEST_NOISE": str(NOISE),
               "VLLM_SIM_RATE": f"{rate:.6f}", "VLLM_SIM_LOG_INTERVAL": "3600"}
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([common.python(), str(SIM), "serve", MODEL, "--host", "127.0.0.1",
                                      "--port", str(port), *FLAGS], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=os.setpgrp)
        try:
            common.wait_http(self.url + "/health", 60, self.proc)
        except PerfError:
            self.log.seek(0)
            tail = self.log.read().decode(errors="replace").strip().splitlines()[-3:]
            self.close()
            raise PerfError(f"simulator on port {port} did not start: {' / '.join(tail)}") from None

    def close(self) -> None:
        common.stop(self.proc)
        self.log.close()


def measure(url: str, out: Path) -> list[float]:
    """One measure.py single-stream run; its per-request decode rates (tok/s, simulated clock)."""
    mr = common.run_measure(url, OUTPUT_TOKENS, runs_default(), 1, "none", out, timeout=300,
                            extra=["--telemetry", "off", "--kernel-log", "off"])
    rates = vd.samples(mr.result, "single")
    if mr.returncode != 0 or not rates:
        last = (mr.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfError(f"measure.py failed against {url} (exit {mr.returncode}): {last}")
    return rates


def runs_default() -> int:
    """measure.py's default ``--runs`` (read from its parser, so the table follows the default)."""
    from sparkbench import measure as m
    return int(m.build_parser().get_default("runs"))


def run_point(diff_pct: float, trials: int, index: int, work: Path) -> dict[str, Any]:
    """``trials`` verdicts with a true difference of ``diff_pct`` % on one pair of servers
    (ports and seeds from ``index``): the raw verdicts and spreads, for :func:`summarize`."""
    ref = other = None
    verdicts: list[dict] = []
    spreads: list[float] = []
    t0 = time.monotonic()
    try:
        ref = Sim(PORT_BASE + 2 * index, 1000 + 2 * index, RATE)
        other = Sim(PORT_BASE + 2 * index + 1, 1001 + 2 * index, RATE * (1.0 - diff_pct / 100.0))
        for t in range(trials):
            a = measure(ref.url, work / f"p{index}-t{t}-ref.json")
            b = measure(other.url, work / f"p{index}-t{t}-other.json")
            spreads += [pstdev([math.log(x) for x in a]), pstdev([math.log(x) for x in b])]
            verdicts.append(vd.compare_samples(a, b, seed=t))
    finally:
        for s in (ref, other):
            if s is not None:
                s.close()
    return {"diff_pct": diff_pct, "verdicts": verdicts, "spreads": spreads, "wall_s": time.monotonic() - t0,
            "load1": os.getloadavg()[0]}


def summarize(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One point's figures from its shards (:func:`run_point` results with the same difference)."""
    diff_pct = parts[0]["diff_pct"]
    verdicts = [v for p in parts for v in p["verdicts"]]
    spreads = [x for p in parts for x in p["spreads"]]
    kinds = [v["kind"] for v in verdicts]
    if diff_pct == 0:
        correct = sum(k == "no_difference" for k in kinds)
    else:
        correct = sum(v["kind"] == "differs" and v["pct"] < 0 for v in verdicts)
    mdds = [v["mdd_pct"] for v in verdicts if v["mdd_pct"] is not None]
    pcts = [v["pct"] for v in verdicts if v["pct"] is not None]
    return {"diff_pct": diff_pct, "trials": len(verdicts), "differs": sum(k == "differs" for k in kinds) / len(kinds),
            "correct": correct / len(kinds), "mdd_median": median(mdds) if mdds else None,
            "pct_median": median(pcts) if pcts else None, "spread_median": median(spreads) * 100,
            "not_enough": sum(k == "not_enough" for k in kinds), "wall_s": max(p["wall_s"] for p in parts),
            "load1": max(p["load1"] for p in parts), "shards": len(parts)}


def table(points: list[dict[str, Any]], runs: int) -> str:
    """The Markdown table of the points (one row per true difference)."""
    rows = []
    for p in points:
        label = f"{p['diff_pct']:.1f} % (= median MDD of the 0 % pilot)" if p.get("at_mdd") else f"{p['diff_pct']:g} %"
        rows.append([label, str(p["trials"]), f"{100 * p['differs']:.1f} %", f"{100 * p['correct']:.1f} %",
                     f"{p['pct_median']:+.2f} %", f"{p['mdd_median']:.2f} %", f"{p['spread_median']:.2f} %",
                     f"{p['wall_s']:.0f} s", f"{p['load1']:.2f}"])
    return md_table(["true difference (other slower by)", "trials", "share \"differs\"", "share correct",
                     "median reported Δ", "median reported MDD", "per-request s.d. measured (median)",
                     "wall", "load avg (1 min, at end)"], rows) + (
        f"\n\n{runs} runs per side (measure.py's default `--runs`), {OUTPUT_TOKENS} forced tokens per request, "
        f"`VLLM_SIM_REQUEST_NOISE={NOISE}`, `VLLM_SIM_SPEEDUP={SPEEDUP:g}`, all figures **simulated**; "
        "\"correct\" = no difference at 0 %, \"differs\" with the right sign otherwise; the measured s.d. is the "
        "population s.d. of each side's 5 log rates, which reads ≈ 0.83 × the drawn s.d. at 5 values.")


def run(quick: bool = False, trials: int | None = None, points: tuple[str, ...] = POINTS,
        shards: int = 1) -> Section:
    """Measure table 7 and return its section. ``shards``: each point's trials are split over that
    many independent server pairs running at once (for a machine with more cores)."""
    common.require(SIM, "scripts/vllm_sim")
    n = trials or (QUICK_TRIALS if quick else TRIALS)
    runs = runs_default()
    work = common.WORK / "verdict_accuracy"
    work.mkdir(parents=True, exist_ok=True)
    plan: list[tuple[int, str, int]] = []  # (index, label, trials); "label:N" sets a point's own count
    for i, item in enumerate(points):
        label, _, count = item.partition(":")
        if label != "mdd":
            try:
                float(label)
            except ValueError:
                raise PerfError(f"--points: {item!r} is neither a difference in % nor 'mdd'") from None
        plan.append((i, label, int(count) if count.isdigit() else n))

    if shards < 1 or len(plan) * shards > PILOT_INDEX:
        raise PerfError(f"{len(plan)} points × {shards} shards need more than the {PILOT_INDEX} server pairs "
                        f"of ports {PORT_BASE}–{PORT_BASE + 2 * PILOT_INDEX - 1}; use fewer shards")

    def one(i: int, diff: float, count: int, at_mdd: bool) -> dict[str, Any]:
        print(f"verdict_accuracy: true difference {diff:g} %, {count} trials (pair {i}) …", flush=True)
        p = run_point(diff, count, i, work)
        p["at_mdd"] = at_mdd
        return p

    pilot = None
    if any(label == "mdd" for _, label, _ in plan):
        # the MDD point's true difference: the median MDD of a short 0 % pilot (its own servers),
        # so that every point can run at the same time
        pilot = summarize([one(PILOT_INDEX, 0.0, PILOT_TRIALS, False)])
        if pilot["mdd_median"] is None:
            raise PerfError("the 0 % pilot reported no MDD; check measure.py's runs")
    jobs = [(i * shards + k, round(pilot["mdd_median"], 1) if label == "mdd" else float(label),
             count // shards + (1 if k < count % shards else 0), label == "mdd")
            for i, label, count in plan for k in range(shards)]
    with ThreadPoolExecutor(max(len(jobs), 1)) as pool:
        raw = list(pool.map(lambda j: one(*j), jobs))
    results = []
    for i, _label, _count in plan:
        p = summarize(raw[i * shards:(i + 1) * shards])
        p["at_mdd"] = raw[i * shards]["at_mdd"]
        results.append(p)
        print(f"verdict_accuracy: {p['diff_pct']:g} %: differs {100 * p['differs']:.1f} %, correct "
              f"{100 * p['correct']:.1f} %, MDD {p['mdd_median']:.2f} % ({p['wall_s']:.0f} s)", flush=True)
    by = {(p["diff_pct"], p["at_mdd"]): p for p in results}
    zero = by.get((0.0, False))
    fifteen = by.get((15.0, False))
    at_mdd = next((p for p in results if p["at_mdd"]), None)
    goal = None
    if zero and fifteen and at_mdd:
        goal = (zero["correct"] >= GOAL_CORRECT and fifteen["correct"] >= GOAL_CORRECT
                and GOAL_MDD_DETECT[0] <= at_mdd["differs"] <= GOAL_MDD_DETECT[1])
    lines = [__doc__[__doc__.index("Method:"):].strip(), "", table(results, runs), ""]
    if goal is not None:
        lines.append(f"**Goal {'met' if goal else 'missed'}**: correct {100 * zero['correct']:.1f} % at 0 % and "
                     f"{100 * fifteen['correct']:.1f} % at 15 % (goal ≥ {100 * GOAL_CORRECT:.0f} %); a true "
                     f"difference of the reported MDD ({at_mdd['diff_pct']:.1f} %) was found in "
                     f"{100 * at_mdd['differs']:.1f} % of trials (a calibrated MDD: ≈ 80 %).")
    if pilot is not None:
        lines.append(f"\nThe MDD point's true difference ({pilot['mdd_median']:.2f} %) is the median MDD of a "
                     f"{pilot['trials']}-trial 0 % pilot run just before the points.")
    short = [p for p in results if p["trials"] < TRIALS]
    if short:
        lines.append("\n_Fewer than the full " + str(TRIALS) + " trials at: " + ", ".join(
            f"{p['diff_pct']:g} % ({p['trials']})" for p in short) + "._")
    # The summary (BENCHMARKS.md's section): correct at 0 % and 15 %, found at the MDD.
    if goal is not None:
        figure = (f"Correct {100 * zero['correct']:.1f} % at a true difference of 0 % and "
                  f"{100 * fifteen['correct']:.1f} % at 15 % ({zero['trials']} and {fifteen['trials']} trials). "
                  f"At the reported minimum detectable difference ({at_mdd['diff_pct']:.1f} %), the difference "
                  f"was found in {100 * at_mdd['differs']:.1f} % of trials; a calibrated MDD gives about 80 %.")
        today = (f"{100 * zero['correct']:.1f} %, {100 * fifteen['correct']:.1f} %, "
                 f"{100 * at_mdd['differs']:.1f} %: {'met' if goal else 'missed'}")
    else:
        figure = "; ".join(f"{p['diff_pct']:g} %: {100 * p['correct']:.1f} % correct ({p['trials']} trials)"
                           for p in results) + " (not every point of the goal ran: no verdict)."
        today = "no verdict"
    load = (f"{runs} runs per side of {OUTPUT_TOKENS} forced tokens, `VLLM_SIM_REQUEST_NOISE={NOISE:g}`, "
            f"`VLLM_SIM_SPEEDUP={SPEEDUP:g}`, `--shards {shards}`. All figures simulated.")
    return Section("verdict", "Verdict accuracy", "\n".join(lines), goal, {"points": results},
                   figure=figure, load=load, today=today)


def pure_experiment(ns: tuple[int, ...] = (3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30), trials: int = 1000,
                    sd: float = 0.02) -> str:
    """The ``--pure`` experiment (no simulator): a Markdown table, one row per n."""
    import random
    from statistics import median as med
    rows = []
    for n in ns:
        rng = random.Random(1000 + n)
        draw = lambda c: [c * math.exp(rng.gauss(0.0, sd)) for _ in range(n)]  # noqa: E731
        false_widened = false_plain = 0
        mdds = []
        for t in range(trials):
            a, b = draw(80.0), draw(80.0)
            v = _compare_any_n(a, b, t)
            false_widened += v["kind"] == "differs"
            mdds.append(v["mdd_pct"])
            lo, hi = _plain_percentile(a, b, t)
            false_plain += lo > 0 or hi < 0
        mdd = med(mdds)
        found = sum(_compare_any_n(draw(80.0), draw(80.0 * (1 + mdd / 100)), t)["kind"] == "differs"
                    for t in range(trials))
        rows.append([str(n), f"{100 * false_plain / trials:.1f} %", f"{100 * false_widened / trials:.1f} %",
                     f"{mdd:.2f} %", f"{100 * found / trials:.1f} %"])
    return md_table(["requests per side", "false \"differs\", plain percentile bootstrap",
                     "false \"differs\", verdict (widened)", "median MDD", "found at a true difference = MDD"],
                    rows) + f"\n\n{trials} seeded trials per n, lognormal noise s.d. {100 * sd:g} % per request."


def _compare_any_n(a: list[float], b: list[float], seed: int) -> dict:
    """:func:`sparkbench.verdict.compare_samples` with the request threshold lifted (for n below it)."""
    keep = vd.MIN_REQUESTS
    vd.MIN_REQUESTS = 1
    try:
        return vd.compare_samples(a, b, seed=seed)
    finally:
        vd.MIN_REQUESTS = keep


def _plain_percentile(a: list[float], b: list[float], seed: int, resamples: int = 2000) -> tuple[float, float]:
    """The plain 95 % percentile-bootstrap interval of ln(median b / median a) (no widening)."""
    import random

    from sparkbench.measure import bootstrap_medians
    rng = random.Random(seed)
    ma, mb = bootstrap_medians(a, resamples, rng), bootstrap_medians(b, resamples, rng)
    rng.shuffle(mb)
    logs = sorted(math.log(y / x) for x, y in zip(ma, mb))
    return logs[int(0.025 * (resamples - 1))], logs[int(0.975 * (resamples - 1))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_TRIALS} trials per point")
    ap.add_argument("--trials", type=int, default=None, help=f"trials per point (default {TRIALS})")
    ap.add_argument("--points", default=",".join(POINTS),
                    help="true differences in %% and/or 'mdd', comma-separated; 'X:N' gives point X its own "
                         "number of trials")
    ap.add_argument("--out", default=None, help="write the section Markdown here (default: stdout)")
    ap.add_argument("--shards", type=int, default=1,
                    help="split each point over this many server pairs at once (default 1; ≤ 19 pairs in all)")
    ap.add_argument("--pure", action="store_true", help="the experiment without the simulator (see above)")
    args = ap.parse_args(argv)
    if args.pure:
        print(pure_experiment(trials=args.trials or 1000))
        return 0
    try:
        sec = run(args.quick, args.trials, tuple(x.strip() for x in args.points.split(",") if x.strip()),
                  args.shards)
    except PerfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = common.render_section(sec, 7)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
