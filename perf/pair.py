#!/usr/bin/env python3
"""Two Sparks: `bench.yml -l sim_pair` end to end against the published two-Spark figures.

Each repetition is one real run of the pair (two simulated Sparks as a real two-node Ray 2.60
cluster of `sparkbench/vllm-sim-ray` containers; inventory group ``sim_pair``) with the
inventory's settings (gpt-oss-120b, 128 tokens, 5 single-stream runs, 8 parallel): each unit
alone, then TP=2 and PP=2 across both. Read from each run's result documents and its rendered
``results.json``: the head's single-unit and the cluster variants' single-stream decode tok/s
(median of the 5 runs) and the 8-stream combined tok/s (aggregate; measure.py's wall-clock figure,
TTFT included), the "Cluster vs one unit" verdict, and from Ansible's task profile the seconds
the Ray cluster's start and check (every node joined, the probes, the link test) took per cluster
variant. Published figures: kubis.ai gpt-oss-120b topology benchmark (vLLM, llama-benchy
pp1024/tg128; shared/reference/multispark.md section 9). Every figure here is simulated.

    .venv/bin/python -m perf.pair [--quick] [--reps N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf import common
from perf.common import REPO, PerfError, Section

IMAGE = "sparkbench/vllm-sim-ray:v0.25.0"
HEAD = "spark-sim11"
#: Published (kubis.ai): one Spark and TP=2, decode tok/s at 1 and 8 streams (8: aggregate).
PUBLISHED = {("single", 1): 57.5, ("tp2", 1): 69.0, ("single", 8): 153.5, ("tp2", 8): 231.0}
FITTED = {("single", 1), ("tp2", 1)}
TASK_RE = re.compile(r"^ray_cluster : Ray cluster \| .*? -+ ([0-9.]+)s$")


def one_run(work: Path, n: int) -> dict[str, Any]:
    """One `bench.yml -l sim_pair` run; its figures, verdict lines and Ray cluster seconds."""
    run_id = f"pair-{n}"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    t0 = time.monotonic()
    proc = subprocess.run(["flock", "/tmp/sim_pair.lock", str(Path(sys.executable).parent / "ansible-playbook"),
                           "bench.yml", "-l", "sim_pair", "-e",
                           json.dumps({"bench_results_dir": str(work), "bench_run_id": run_id})],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.monotonic() - t0
    (work / f"{run_id}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    figures: dict[tuple[str, int], float] = {}
    for config in ("single", "tp2", "pp2"):
        path = work / run_id / HEAD / f"gptoss-{config}.json"
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise PerfError(f"no result {path} (ansible-playbook exit {proc.returncode}); see {work}/{run_id}.log")
        if doc.get("status") != "complete":
            raise PerfError(f"{path}: {doc.get('status')}: {(doc.get('failure') or {}).get('reason')}")
        figures[(config, 1)] = float(doc["single"]["decode_tok_s_median"])
        eight = next((p for p in doc.get("parallel") or [] if p.get("concurrency") == 8), None)
        if eight and eight.get("combined_tok_s") is not None:
            figures[(config, 8)] = float(eight["combined_tok_s"])
    report = json.loads((work / run_id / "results.json").read_text(encoding="utf-8"))
    verdicts = {r["variant"]: r["verdict"]["text"] if isinstance(r.get("verdict"), dict) else str(r.get("verdict"))
                for r in (report.get("cluster_vs_unit") or {}).get("rows", []) if r.get("metric") == "single"}
    ray_s = sum(float(m.group(1)) for line in proc.stdout.splitlines() if (m := TASK_RE.match(line.strip())))
    return {"figures": figures, "verdicts": verdicts, "ray_s": ray_s, "wall_s": wall}


def run(quick: bool = False, reps: int | None = None) -> Section:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        raise PerfError(f"{IMAGE} is missing: run make setup")
    reps = reps or (1 if quick else 3)
    common.WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=common.WORK) as tmp:
        runs = [one_run(Path(tmp), n) for n in range(reps)]
    med = {key: common.median([r["figures"][key] for r in runs if key in r["figures"]])
           for key in sorted({k for r in runs for k in r["figures"]})}
    rows = []
    worst_fitted = 0.0
    for (config, streams), published in PUBLISHED.items():
        got = med.get((config, streams))
        err = (got - published) / published * 100.0 if got is not None else None
        if (config, streams) in FITTED and err is not None:
            worst_fitted = max(worst_fitted, abs(err))
        rows.append([{"single": "one Spark", "tp2": "TP=2"}[config], streams, f"{published:.1f}",
                     f"{got:.1f}" if got is not None else "–", f"{err:+.1f} %" if err is not None else "–",
                     "fitted" if (config, streams) in FITTED else "held out"])
    for streams in (1, 8):
        got = med.get(("pp2", streams))
        rows.append(["PP=2", streams, "–", f"{got:.1f}" if got is not None else "–", "–", "not published"])
    ratio = med[("tp2", 1)] / med[("single", 1)]
    ray_per_variant = common.median([r["ray_s"] / 2 for r in runs])
    wall = common.median([r["wall_s"] for r in runs])
    goal = worst_fitted <= 2.0
    table = common.md_table(["unit", "streams", "published tok/s", "measured tok/s (median)", "difference", "role"], rows)
    body = f"""SIMULATED. `ansible-playbook bench.yml -l sim_pair` × {reps} (each a fresh real two-node Ray
2.60 cluster of `{IMAGE}` containers on a Docker network, gpt-oss-120b, 128 tokens, 5 single-stream
runs, 8 parallel), measured end to end by measure.py like any unit: single stream = median of the
runs' medians; 8 streams = combined tok/s of 8 parallel requests (the aggregate, wall clock from the
first request to the last token, TTFT included, so a little below a decode-only aggregate).
Published: kubis.ai gpt-oss-120b topology benchmark (vLLM, llama-benchy pp1024/tg128). Goal: the
fitted figures (one Spark and TP=2 at one stream) within 2 % end to end through Ansible, Ray and
measure.py; the held-out 8-stream figures are reported, not judged.

{table}

- TP=2 / one Spark at one stream: {ratio:.3f} (published 69.0 / 57.5 = 1.200); the report's
  verdict: {runs[-1]['verdicts'].get('gptoss-tp2', '–')}; PP=2: {runs[-1]['verdicts'].get('gptoss-pp2', '–')}.
- The Ray cluster's start and check per cluster variant (containers, every node joined, probes,
  link test by iperf3 on the container network): {ray_per_variant:.1f} s (median over the runs);
  the whole run (both units alone, then TP=2 and PP=2, report): {wall / 60:.1f} min.
- Goal {'met' if goal else 'NOT met'}: the fitted figures are within {worst_fitted:.1f} %.
"""
    # The summary (BENCHMARKS.md's section): each published figure against the measured median.

    def against(config: str, streams: int) -> str:
        got, published = med.get((config, streams)), PUBLISHED[(config, streams)]
        name = {"single": "one Spark", "tp2": "TP=2"}[config]
        if got is None:
            return f"{name} not measured (published {published:.1f})"
        return f"{name} {got:.1f} tok/s (published {published:.1f}, {(got - published) / published * 100:+.1f} %)"

    figure = ("At one stream (fitted): " + "; ".join(against(*k) for k in PUBLISHED if k in FITTED)
              + ". At 8 streams (held out): " + "; ".join(against(*k) for k in PUBLISHED if k not in FITTED)
              + f". The report's verdict on TP=2 against one Spark: {runs[-1]['verdicts'].get('gptoss-tp2', '–')}.")
    load = (f"{reps} runs of `bench.yml`, each a fresh Ray 2.60 cluster of `{IMAGE}` containers, 128 tokens, "
            f"5 single-stream runs, 8 parallel. The cluster's start and check take {ray_per_variant:.1f} s per "
            f"cluster variant, and the whole run {wall / 60:.1f} min. SIMULATED.")
    return Section("pair", "Two Sparks", body, goal_met=goal,
                   data={"median": {f"{c}@{s}": v for (c, s), v in med.items()}, "ratio": ratio,
                         "ray_s_per_variant": ray_per_variant, "wall_s": wall},
                   figure=figure, load=load, today=f"within {worst_fitted:.1f} %: {'met' if goal else 'missed'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repetition")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    ap.add_argument("--out", default=None, help="write the section Markdown here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        sec = run(args.quick, args.reps)
    except PerfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = common.render_section(sec, 9)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
