#!/usr/bin/env python3
"""`make perf`: run sparkbench's self-benchmarks and rewrite BENCHMARKS.md.

    .venv/bin/python -m perf.run_all                       # every table (≈ 15–20 min)
    .venv/bin/python -m perf.run_all --quick               # fewer points and runs (< 5 min)
    .venv/bin/python -m perf.run_all --only capacity,fidelity
    .venv/bin/python -m perf.run_all --render-only         # reassemble from perf/results/

Each benchmark writes its full section to `perf/results/<name>.md`: title, stamp (UTC date,
commit, machine), a summary block (today's figure, the machine, the load: the Section's
``figure``, ``load`` and ``today``, between ``<!-- summary … -->`` and ``<!-- /summary -->``),
then how it was measured, the tables and the verdict against its goal. BENCHMARKS.md is the
short reference assembled from those files (:func:`assemble`): the header, a table of goals and
today's figures, then per benchmark its title, what it measures, the summary block, how to
reproduce it and a link to its file. `perf/results/gpu_real.md` (table 5, written by
`perf/gpu_bench.py` on a GPU machine) and `perf/results/first_half_hour.md` (table 12, by
hand) are made outside `make perf` and carry the same block. A subset run therefore refreshes
only its tables and keeps the others as last measured, each with its own stamp. The run-by-run
history is perf/HISTORY.md, kept by hand.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
import traceback
from pathlib import Path

from perf import common
from perf.common import REPO, RESULTS, PerfError, Section

# (key for --only, module, table number); order = order in BENCHMARKS.md.
BENCHMARKS: list[tuple[str, str, int]] = [
    ("fidelity", "fidelity", 1),
    ("capacity", "client_capacity", 2),
    ("orchestration", "orchestration", 3),
    ("fleet", "fleet_scaling", 4),
    ("real_fidelity", "real_fidelity", 6),
    ("verdict", "verdict_accuracy", 7),
    ("health", "health_false_alarms", 8),
    ("pair", "pair", 9),
    ("serving", "serving", 10),
    ("compile_cache", "compile_cache", 11),
    ("prediction", "prediction", 13),
]
# Written outside make perf, included when present: gpu_real by perf/gpu_bench.py (a GPU machine),
# first_half_hour by hand from timed fresh-clone runs of make demo and .ci/run (its text says how).
EXTRA = [("gpu_real", 5), ("first_half_hour", 12)]
EXTRA_HOW = {"gpu_real": "on a machine with an NVIDIA GPU, torch and transformers, run "
                         "`python3 -m perf.gpu_bench --out perf/results/gpu_real.md`",
             "first_half_hour": "time `make demo` and `CI=true .ci/run` on fresh clones and write "
                                "perf/results/first_half_hour.md"}

TITLES = {"fidelity": "Fidelity", "capacity": "Client capacity",
          "orchestration": "Orchestration overhead", "fleet": "Fleet scaling",
          "gpu_real": "Real GPU", "real_fidelity": "Real vLLM fidelity",
          "health": "Fleet health false alarms", "verdict": "Verdict accuracy", "pair": "Two Sparks",
          "serving": "Arrival schedule and goodput", "compile_cache": "Compile cache",
          "first_half_hour": "First half hour", "prediction": "Prediction"}

# What each benchmark measures: the line under its title in BENCHMARKS.md.
ABOUT = {
    "fidelity": "measure.py's decode and combined figures against the simulator's own timeline, beside "
                "AIPerf and GuideLLM.",
    "capacity": "How many chunks per second measure.py follows on one core.",
    "orchestration": "`bench.yml`'s wall time beyond the servers' load and the measurement.",
    "fleet": "Wall time of `bench.yml` on 1, 2, 4 and 8 simulated hosts.",
    "gpu_real": "measure.py against a real inference server, compared with the roofline. This runs outside "
                "`make perf`.",
    "real_fidelity": "measure.py's mean time per output token against real vLLM's own TPOT histogram, beside "
                     "GuideLLM and AIPerf on the same server.",
    "verdict": "`sparkbench.verdict` on seeded trials: two simulators measured by measure.py, one slower by a "
               "known true difference.",
    "health": "`playbooks/health.yml`'s judgement over seeded rounds on a healthy simulated fleet, and on a "
              "fleet with one slow unit.",
    "pair": "`bench.yml -l sim_pair`, a real two-node Ray cluster of simulated Sparks, against the published "
            "gpt-oss-120b figures.",
    "serving": "measure.py's arrival-rate phase against the simulator's arrival stamps and SLO truth, beside "
               "`vllm bench serve --goodput` on the same simulator.",
    "compile_cache": "Real vLLM's time to ready with an empty compile cache, against a relaunch with the cache "
                     "the first start left, mounted as bench.yml mounts it.",
    "first_half_hour": "A new user's `make demo` and `make test` on fresh clones of the usual machine size. This "
                       "runs outside `make perf`.",
    "prediction": "The twin (`sparkbench predict`) against published Spark figures, fitted and held out, and "
                  "against measured runs.",
}

# Each benchmark's goal: its row of BENCHMARKS.md's table.
GOALS = {
    "fidelity": "≤ 0.5 % single stream, ≤ 1 % at 64 streams, no worse than AIPerf or GuideLLM",
    "capacity": "≥ 10,000 chunks/s with < 1 % timing error",
    "orchestration": "≤ 5 s per variant",
    "fleet": "≤ 1.25× at 8 hosts",
    "gpu_real": "— (outside `make perf`)",
    "real_fidelity": "≤ 1 % each repetition",
    "verdict": "≥ 95 % correct at 0 % and 15 %, 70–90 % found at the MDD",
    "health": "≤ 5 % false alarms, ≥ 80 % caught",
    "pair": "fitted figures within 2 % end to end",
    "serving": "schedule error p99 < 1 ms, goodput within 1 %",
    "compile_cache": "the relaunch compiles no kernel anew",
    "first_half_hour": "first table ≤ 5 min, demo ≤ 10 min after setup, `make check` ≤ 60 s, pytest ≤ 9 min, `make test` ≤ 12 min",
    "prediction": "fitted rows within 4 %; held-out errors stated",
}

# How to run each benchmark again: the section's **Reproduce.** (its file's link is added after it).
REPRODUCE = {
    "fidelity": "`python -m perf.run_all --only fidelity` (`perf/fidelity.py`, peers from `perf/peers.py`).",
    "capacity": "`python -m perf.run_all --only capacity` (`perf/client_capacity.py`).",
    "orchestration": "`python -m perf.run_all --only orchestration` (`perf/orchestration.py`).",
    "fleet": "`python -m perf.run_all --only fleet` (`perf/fleet_scaling.py`).",
    "gpu_real": "On a machine with an NVIDIA GPU, torch and transformers: "
                "`python3 -m perf.gpu_bench --out perf/results/gpu_real.md`.",
    "real_fidelity": "`python -m perf.run_all --only real_fidelity` (`perf/real_fidelity.py`, about 5 min).",
    "verdict": "`python -m perf.run_all --only verdict` (`perf/verdict_accuracy.py`, about 25 min; `--pure` for the "
               "lognormal experiment behind the 5-request minimum).",
    "health": "`python -m perf.run_all --only health` (`perf/health_false_alarms.py`).",
    "pair": "`python -m perf.run_all --only pair` (`perf/pair.py`, about 8 min).",
    "serving": "`python -m perf.run_all --only serving` (`perf/serving.py`, about 5 min; figures also in "
               "`perf/results/serving.json`).",
    "compile_cache": "`python -m perf.run_all --only compile_cache` (`perf/compile_cache.py`).",
    "first_half_hour": "Time `make demo` and `CI=true .ci/run` on fresh clones, and write "
                       "`perf/results/first_half_hour.md`. Every run since r1: [perf/HISTORY.md](perf/HISTORY.md).",
    "prediction": "`python -m perf.run_all --only prediction` (`perf/prediction.py`).",
}

HEADER = """# BENCHMARKS — sparkbench measured against itself

The reference of sparkbench's self-benchmarks: one section per benchmark with today's figure
against its goal, the machine it was measured on, the load it measured, and how to reproduce it.
The full write-up of each benchmark (method, every table, the verdict) is
`perf/results/<name>.md`, linked from its section; the run-by-run timing history of the test
suite and the demo is [perf/HISTORY.md](perf/HISTORY.md).

This file is written by `perf/run_all.py` (`make perf`) from the summary block at the top of
each `perf/results/<name>.md`: a rerun rewrites both, so edit the benchmark (or, for tables 5 and
12, its file), not this page. The machine that runs `make perf` is small and shared, so figures
are medians with their spread, and goals are judged on medians.

```sh
make perf                                              # every table below but 5 and 12 (.venv/bin/python -m perf.run_all)
.venv/bin/python -m perf.run_all --quick               # fewer points and runs
.venv/bin/python -m perf.run_all --only fidelity,capacity
.venv/bin/python -m perf.run_all --render-only         # reassemble from perf/results/ without measuring
```
"""


def section_path(name: str, results: Path = RESULTS) -> Path:
    """Where a section is kept between runs."""
    return results / f"{name}.md"


def render_section(sec: Section, number: int, machine: str | None = None) -> str:
    """Markdown of one results file: numbered title, stamp, summary block, body."""
    return common.render_section(sec, number, machine)


def failed_section(name: str, number: int, title: str, err: str) -> str:
    """The section written when a benchmark could not run: says why, in its summary."""
    sec = Section(name, title, "", None, figure=f"**Not measured in this run.** {err}",
                  today="not measured in the last run")
    return render_section(sec, number)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading ("10. Arrival schedule" → "10-arrival-schedule")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def entries() -> list[tuple[str, int]]:
    """(key, table number) of every benchmark, in table order (the measured ones and EXTRA)."""
    return sorted([(k, n) for k, _, n in BENCHMARKS] + EXTRA, key=lambda e: e[1])


def short_section(key: str, number: int, text: str | None) -> tuple[str, str]:
    """(BENCHMARKS.md's section of one benchmark, its "today" cell) from its results file's text.

    The section: title, what it measures, the summary block's bullets but Today, how to reproduce
    it and a link to the file. A file without a summary block is taken whole (as written), a
    missing one says how to make it.
    """
    title = f"## {number}. {TITLES[key]}"
    if text is None:
        how = EXTRA_HOW[key] if key in EXTRA_HOW else f"run `make perf` or `python -m perf.run_all --only {key}`"
        return f"{title}\n\n{common.wrap(ABOUT[key])}\n\n_Not measured yet: {how}._\n", "not measured yet"
    summary = common.read_summary(text)
    if summary is None:
        return text.strip() + "\n", "—"
    rel = f"perf/results/{key}.md"
    bullets = [f"- **{k}.** {v}" for k, v in summary.items() if k != "Today"]
    bullets.append(common.bullet("Reproduce", f"{REPRODUCE[key]} Full write-up: [{rel}]({rel})."))
    today = " ".join(summary.get("Today", "—").split())
    return f"{title}\n\n{common.wrap(ABOUT[key])}\n\n" + "\n".join(bullets) + "\n", today


def render(results: Path = RESULTS) -> str:
    """BENCHMARKS.md's text: the header, the table of goals and today's figures, then one short
    section per benchmark in table order."""
    rows = ["| # | benchmark | goal | today |", "|---|---|---|---|"]
    sections = []
    for key, number in entries():
        p = section_path(key, results)
        section, today = short_section(key, number, p.read_text(encoding="utf-8") if p.exists() else None)
        sections.append(section)
        name = f"{number}. {TITLES[key]}"
        rows.append(f"| {number} | [{TITLES[key]}](#{anchor(name)}) | {GOALS[key]} | {today.replace('|', '/')} |")
    return HEADER + "\n" + "\n".join(rows) + "\n\n" + "\n".join(sections)


def assemble(out: Path, results: Path = RESULTS) -> str:
    """Write BENCHMARKS.md (``out``) from the header and every section file present; return its text."""
    text = render(results)
    out.write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="",
                    help="comma-separated subset of: " + ",".join(k for k, _, _ in BENCHMARKS))
    ap.add_argument("--quick", action="store_true", help="fewer points and runs (< 5 minutes)")
    ap.add_argument("--render-only", action="store_true",
                    help="reassemble BENCHMARKS.md from perf/results/ without measuring")
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    args = ap.parse_args(argv)

    keys = [k for k, _, _ in BENCHMARKS]
    only = [s.strip() for s in args.only.split(",") if s.strip()] or keys
    unknown = [s for s in only if s not in keys]
    if unknown:
        print(f"error: --only: unknown benchmark {', '.join(unknown)}; choose from "
              f"{', '.join(keys)}", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    common.WORK.mkdir(parents=True, exist_ok=True)
    failures = 0
    if not args.render_only:
        for key, modname, number in BENCHMARKS:
            if key not in only:
                continue
            t0 = time.monotonic()
            print(f"perf: {key} ({'quick' if args.quick else 'full'}) …", flush=True)
            try:
                mod = importlib.import_module(modname)
                sec: Section = mod.run(quick=args.quick)
                text = render_section(sec, number)
                verdict = {True: "goal met", False: "goal missed", None: "no verdict"}[sec.goal_met]
                print(f"perf: {key} done in {time.monotonic() - t0:.0f} s ({verdict})", flush=True)
            except PerfError as exc:
                failures += 1
                text = failed_section(key, number, TITLES[key], str(exc))
                print(f"perf: {key} not measured: {exc}", file=sys.stderr, flush=True)
            except Exception as exc:  # a bug in a benchmark: keep the others going, show where
                failures += 1
                tb = traceback.format_exc(limit=3)
                text = failed_section(key, number, TITLES[key],
                                      f"The benchmark failed: `{type(exc).__name__}: {exc}`.")
                print(f"perf: {key} failed:\n{tb}", file=sys.stderr, flush=True)
            section_path(key).write_text(text)
    text = assemble(Path(args.out))
    out = Path(args.out).resolve()
    where = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    print(f"perf: wrote {where} ({len(text.splitlines())} lines)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
