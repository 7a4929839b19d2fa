#!/usr/bin/env python3
"""``make demo``: the source article's full matrix on the whole simulated fleet, its reports, and a
simulated vLLM version bridge.

1. ``ansible-playbook bench.yml -l sim_sparks`` (spark-sim01..03: one simulator container per host,
   spark-sim03 about 8 % slower with another driver) with the article's settings (256 tokens, 5 runs,
   2/4/8 parallel, quality, image). The play's bench_report role renders report.md, report.html,
   results.csv, results.json and charts/; the demo prints the main table from results.json (the one
   the play prints, labelled simulated), the report's summary and what each chart shows.
2. Two Sparks: ``ansible-playbook bench.yml -l sim_pair`` — gpt-oss-120b on each simulated unit
   alone, then across both as one model on a real two-node Ray cluster (``--tensor-parallel-size 2``
   and ``--pipeline-parallel-size 2`` with ``--distributed-executor-backend ray``); the table has the
   TP=2 row beside the single-unit rows, with the cluster-vs-one-unit verdicts.
3. The same pipeline on real vLLM: ``ansible-playbook bench.yml -l cpu-real01`` (vLLM 0.32.0's
   CPU build in ``sparkbench/vllm-cpu``, the tiny model baked into it; 2 variants, bf16 and fp32,
   each a real container that needs 60-90 s to become ready). Its table (from its results.json,
   labelled as real vLLM on a CPU: measured, not simulated, no Spark roofline) is printed the same way.
4. The version bridge, as the article did between vLLM v0.24 and v0.25: a reference variant
   (``nvidia-bare``, 128 tokens × 5 runs: a verdict needs 5 requests per side) on one simulated host (spark-sim01), first on
   ``sparkbench/vllm-sim:v0.24.0`` (the simulator emulating vLLM 0.24.0), then on ``:v0.25.0``.
5. ``ansible-playbook playbooks/report.yml -e run=<v0.25 run> -e baseline=<v0.24 run>``: the
   run-to-run section and the bridge verdict ("differs by +1.8 % [lo, hi], within the 2.5 % bridge
   tolerance").
6. Fleet health: ``ansible-playbook playbooks/health.yml -l sim_sparks`` runs the canary on every
   simulated unit at once and prints one verdict line per unit (spark-sim03: slow, its older driver
   the probable cause); the playbook's non-zero exit is what cron or CI would act on, so this step
   succeeds when health.json was written.

Progress: one line per variant stage; the full Ansible output of each step goes to
``results/<run-id>/ansible.log``.

    python3 scripts/demo.py                      # what make demo runs
    python3 scripts/demo.py --skip-fleet         # two Sparks, real vLLM, the version bridge, health
    python3 scripts/demo.py --skip-fleet --no-real --no-bridge --no-health   # only two Sparks (2-3 minutes)
    python3 scripts/demo.py --skip-fleet --no-pair --no-bridge --no-health   # only real vLLM on the CPU (2-4 minutes)
    python3 scripts/demo.py --skip-fleet --no-pair --no-real --no-bridge     # only fleet health (about a minute)
    python3 scripts/demo.py -- -e bench_backend_comparison=true   # extra args for step 1

Exit status: 0 when every step succeeded, else the first failing ansible-playbook's exit status
(2 when a simulator image, the simulator's Ray image or the real-vLLM image is missing).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# playbooks/tasks/variant.yml's task headers: "plan NAME" names the variant, the steps after it do not.
# playbooks/tasks/cluster_variant.yml's ("Bench cluster | ...") the same for a cluster variant.
PLAN_RE = re.compile(r"^TASK \[Bench (?:variant|cluster) \| plan ([a-z0-9._-]+)\]")
STAGE_RE = re.compile(r"^TASK \[Bench (?:variant|cluster) \| (start the Ray cluster|check the Ray cluster|launch|measure|"
                      r"record the result|record the failure)(?: in the head's Ray container| and the link)?\]")
SIM_IMAGE = "sparkbench/vllm-sim:v0.25.0"
BRIDGE_OLD_IMAGE = "sparkbench/vllm-sim:v0.24.0"
REAL_IMAGE = "sparkbench/vllm-cpu:v0.32.0"
REAL_HOST = "cpu-real01"
# Two configurations of the real_cpu matrix (inventory/group_vars/real_cpu/main.yml).
REAL_SETTINGS = {"bench_select": ["tiny-bf16", "tiny-fp32"]}
BRIDGE_HOST = "spark-sim01"
# Step 2: the simulated pair (inventory group sim_pair) and the model of its matrix.
PAIR_GROUP = "sim_pair"
PAIR_MODEL = "openai/gpt-oss-120b"
PAIR_IMAGE = "sparkbench/vllm-sim-ray:v0.25.0"
BRIDGE_VARIANT = "nvidia-bare"
# Small bridge runs: the reference variant's single-stream speed is all the bridge compares (no
# drift bracket: with one variant it would re-measure the same variant straight after itself).
BRIDGE_SETTINGS = {"bench_select": [BRIDGE_VARIANT], "llm_bench_output_tokens": 128, "llm_bench_runs": 5,
                   "llm_bench_concurrency": [], "llm_bench_quality": False, "llm_bench_image": False,
                   "bench_bracket": False}
CHART_NOTES = {
    "mtp_uplift.png": "per model × build, bare single-stream tok/s (dark) plus the uplift of its best MTP "
                      "configuration (light), total on top — the article's first chart",
    "build_vs_build.png": "nvidia vs unsloth per configuration (bare, mtp2, mtp3), with unsloth's Δ % "
                          "against nvidia printed over its bars",
    "parallel_scaling.png": "combined tok/s at 1/2/4/8 parallel streams, one line per variant: the builds' "
                            "lines converge as parallelism grows (the gap at 8 parallel is in the summary above)",
    "fleet_bars.png": "per variant, one bar per host; hosts flagged below the fleet median are hatched "
                      "(the demo's slow spark-sim03)",
    "history.png": "per host with earlier runs stored beside this one, each variant's single-stream tok/s "
                   "run after run (results/index.sqlite; scripts/sparkbench history HOST prints the same)",
}


def _bin(name: str) -> str:
    """The venv's tool next to this Python, else the one on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def _rel(path: Path) -> str:
    """``path`` relative to the repository when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def run_playbook(cmd: list[str], log_path: Path, t0: float, show_failures: bool = True) -> int:
    """Run ansible-playbook, write its whole output to ``log_path`` and print one progress line per
    variant stage (seconds since ``t0``) and, with ``show_failures``, each failed task's first
    line; returns its exit status."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as log, subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        variant = "?"
        for line in proc.stdout:
            log.write(line)
            planned = PLAN_RE.match(line)
            if planned:
                variant = planned.group(1)
            found = STAGE_RE.match(line)
            if found:  # bench.yml's per-variant task names; hosts run the same variant in step
                stage = found.group(1).replace("the ", "")
                print(f"  [{time.monotonic() - t0:6.0f} s] {stage:<14} {variant}", flush=True)
            elif show_failures and line.startswith(("fatal:", "failed:")) and "ignoring" not in line:
                print("  " + line.rstrip()[:200], flush=True)
        return proc.wait()


def load_report(run_dir: Path) -> dict:
    """The rendered results.json of a run ({} when the report was not written)."""
    try:
        return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def show_table(report: dict, rc: int, log_path: Path, what: str) -> bool:
    """Print a run's table (the one the play printed) and its failures with their fixes; False
    (and where the log is) when the run wrote no report."""
    print()
    if not report.get("rows"):
        print(f"demo: no {what} (ansible-playbook exit {rc}); see {_rel(log_path)}", file=sys.stderr)
        return False
    print(report["terminal_table"])
    for f in report.get("failures", []):
        print(f"  {f['host']}/{f['variant']}: {f['status']} at {f['stage']}: {f['reason']} — fix: {f['remedy']}")
    return True


def fleet_step(run_id: str, limit: str, extra: list[str], t0: float) -> int:
    """Step 1: the article's matrix on the fleet; prints the table, the summary and the charts."""
    run_dir = REPO / "results" / run_id
    log_path = run_dir / "ansible.log"
    print(f"demo 1/6: the article's matrix (2 builds × bare/mtp2/mtp3) on the simulated fleet ({limit}), run {run_id}")
    print(f"          full Ansible output: {_rel(log_path)}", flush=True)
    rc = run_playbook([_bin("ansible-playbook"), "bench.yml", "-l", limit, "-e", f"bench_run_id={run_id}", *extra],
                      log_path, t0)
    report = load_report(run_dir)  # the table the play printed, from the rendered results.json
    if not show_table(report, rc, log_path, "report"):
        return rc or 1
    for e in report.get("load_errors", []):
        print(f"  not read: {e}")
    complete = sum(1 for r in report["rows"] if r["status"] == "complete")
    print(f"demo: {complete}/{len(report['rows']) + len(report.get('load_errors', []))} variants complete")
    print("\nWhat the report found:")
    for line in report.get("summary", []):
        print(f"  - {line}")
    drawn = [c for c in report.get("charts", []) if c.get("path")]
    print(f"\nCharts ({_rel(run_dir / 'charts')}/):")
    for c in drawn:
        name = Path(c["path"]).name
        print(f"  {name:<20} {CHART_NOTES.get(name, c.get('title', ''))}")
    print(f"\nReport: {_rel(run_dir / 'report.html')} (self-contained; open it in a browser)  "
          f"· also report.md, results.csv, results.json")
    return rc


def pair_step(run_id: str, t0: float) -> int:
    """Step 2: two simulated Sparks (sim_pair): gpt-oss-120b on each unit alone, then across both
    with Ray (TP=2, PP=2); prints the table with the TP=2 row beside the single-unit rows and the
    report's cluster-vs-one-unit verdicts."""
    rid = f"{run_id}-pair"
    run_dir = REPO / "results" / rid
    log_path = run_dir / "ansible.log"
    print(f"\ndemo 2/6: two Sparks — ansible-playbook bench.yml -l {PAIR_GROUP}: {PAIR_MODEL} on each unit "
          f"alone, then across both with Ray (a real 2-node Ray cluster of simulated Sparks; TP=2 and PP=2), "
          f"run {rid}", flush=True)
    print(f"          full Ansible output: {_rel(log_path)}", flush=True)
    rc = run_playbook([_bin("ansible-playbook"), "bench.yml", "-l", PAIR_GROUP, "-e", f"bench_run_id={rid}"],
                      log_path, t0)
    report = load_report(run_dir)
    if not show_table(report, rc, log_path, "two-Spark report"):
        return rc or 1
    for line in report.get("summary", []):
        if "TP=" in line or "PP=" in line or "cluster" in line.lower():
            print(f"  - {line}")
    print(f"Report: {_rel(run_dir / 'report.html')} (the cluster's nodes, link and verdicts in its Clusters section)")
    return rc


def real_step(run_id: str, t0: float) -> int:
    """Step 3: the same pipeline on real vLLM (CPU build) on cpu-real01; prints its table."""
    rid = f"{run_id}-real-cpu"
    run_dir = REPO / "results" / rid
    log_path = run_dir / "ansible.log"
    print(f"\ndemo 3/6: the same pipeline on REAL vLLM 0.32.0 (CPU build, {REAL_IMAGE}) on {REAL_HOST}: "
          f"{', '.join(REAL_SETTINGS['bench_select'])}, run {rid}")
    print(f"          each variant is a real container (60-90 s to become ready); full Ansible output: "
          f"{_rel(log_path)}", flush=True)
    extra = json.dumps({**REAL_SETTINGS, "bench_run_id": rid})
    rc = run_playbook([_bin("ansible-playbook"), "bench.yml", "-l", REAL_HOST, "-e", extra], log_path, t0)
    report = load_report(run_dir)
    if not show_table(report, rc, log_path, "real-vLLM report"):
        return rc or 1
    for row in report["rows"]:
        if row.get("roofline_skipped"):
            print(f"  roofline: {row['roofline_skipped']}")
            break
    man = report.get("manifest") or {}
    print(f"  manifest: backend {man.get('backend', '?')}, vLLM {man.get('vllm_version', '?')}, "
          f"gpu {man.get('gpu', '?')}, simulated {man.get('simulated', '?')}")
    print(f"Report: {_rel(run_dir / 'report.html')} (same format as step 1)")
    return rc


def bridge_step(run_id: str, t0: float) -> int:
    """Steps 4 and 5: the reference variant on v0.24.0 then v0.25.0, compared with report.yml."""
    old_id, new_id = f"{run_id}-bridge-v0.24.0", f"{run_id}-bridge-v0.25.0"
    print(f"\ndemo 4/6: version bridge — {BRIDGE_VARIANT} on {BRIDGE_HOST}, "
          f"{BRIDGE_SETTINGS['llm_bench_output_tokens']} tokens × {BRIDGE_SETTINGS['llm_bench_runs']} runs, "
          f"emulated vLLM 0.24.0 then 0.25.0", flush=True)
    for rid, image in ((old_id, BRIDGE_OLD_IMAGE), (new_id, SIM_IMAGE)):
        print(f"  run {rid} on {image}", flush=True)
        extra = json.dumps({**BRIDGE_SETTINGS, "bench_image": image, "bench_run_id": rid})
        rc = run_playbook([_bin("ansible-playbook"), "bench.yml", "-l", BRIDGE_HOST, "-e", extra],
                          REPO / "results" / rid / "ansible.log", t0)
        if rc != 0:
            print(f"demo: the bridge run {rid} failed (exit {rc}); see {_rel(REPO / 'results' / rid / 'ansible.log')}",
                  file=sys.stderr)
            return rc
    new_dir = REPO / "results" / new_id
    print(f"\ndemo 4/5: ansible-playbook playbooks/report.yml -e run={new_id} -e baseline={old_id}", flush=True)
    rc = run_playbook([_bin("ansible-playbook"), "playbooks/report.yml", "-e", f"run={new_id}", "-e", f"baseline={old_id}"],
                      new_dir / "report.log", t0)
    report = load_report(new_dir)
    bridge = (report.get("run_compare") or {}).get("bridge") or {}
    if rc != 0 or not bridge.get("pairs"):
        print(f"demo: the run-to-run report failed (exit {rc}); see {_rel(new_dir / 'report.log')}", file=sys.stderr)
        return rc or 1
    for p in bridge["pairs"]:
        print(f"  {p['host']} {p['variant']}: vLLM {p['baseline_vllm']} {p['baseline_single']:.2f} tok/s → "
              f"{p['current_vllm']} {p['current_single']:.2f} tok/s ({p['single_pct']:+.1f} %)")
    verdict = next((line for line in report.get("summary", []) if line.startswith("Version bridge")), bridge.get("verdict"))
    print(f"  verdict: {verdict}")
    print(f"  report: {_rel(new_dir / 'report.html')} (sections 'Version bridge' and 'Run to run')")
    return 0


def health_step(run_id: str, limit: str, t0: float) -> int:
    """Step 6: fleet health by canary (playbooks/health.yml) on the simulated fleet; prints one
    verdict line per unit. The playbook exits non-zero when a unit is slow or failed — on this
    fleet spark-sim03 is slow on purpose — so the step succeeds when health.json was written."""
    rid = f"{run_id}-health"
    run_dir = REPO / "results" / rid
    log_path = run_dir / "ansible.log"
    print(f"\ndemo 6/6: fleet health — ansible-playbook playbooks/health.yml -l {limit} (canary "
          f"bench_health_canary, 5 single-stream requests per unit, all units at once), run {rid}", flush=True)
    # The last task fails on purpose when a unit is slow: its verdict lines are printed below.
    rc = run_playbook([_bin("ansible-playbook"), "playbooks/health.yml", "-l", limit, "-e", f"bench_run_id={rid}"],
                      log_path, t0, show_failures=False)
    try:
        health = json.loads((run_dir / "health.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        print(f"demo: no health.json (ansible-playbook exit {rc}); see {_rel(log_path)}", file=sys.stderr)
        return rc or 1
    for line in health.get("lines", []):
        print(f"  {line}")
    print(f"  exit status {rc} ({'a unit is slow or failed: what cron or CI would act on' if rc else 'all healthy'}); "
          f"{_rel(run_dir / 'health.md')}, health.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--limit", default="sim_sparks", help="hosts of step 1 (default: the simulated fleet sim_sparks)")
    parser.add_argument("--run-id", default=None, help="results/<run-id> (default: UTC now, YYYYmmddTHHMMSSZ)")
    parser.add_argument("--skip-fleet", action="store_true", help="no article matrix on the fleet (step 1)")
    parser.add_argument("--no-bridge", action="store_true", help="no version bridge (steps 4 and 5)")
    parser.add_argument("--no-pair", action="store_true", help="no two-Spark step (step 2)")
    parser.add_argument("--no-real", action="store_true", help="no real-vLLM step (step 3)")
    parser.add_argument("--no-health", action="store_true", help="no fleet-health step (step 6)")
    parser.add_argument("extra", nargs="*", help="extra ansible-playbook arguments for step 1 (after --)")
    args = parser.parse_args(argv)

    for image in ((SIM_IMAGE, BRIDGE_OLD_IMAGE) + (() if args.no_real else (REAL_IMAGE,))
                  + (() if args.no_pair else (PAIR_IMAGE,))):
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
            print(f"demo: the image {image} is missing; run 'make setup' first", file=sys.stderr)
            return 2
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    t0 = time.monotonic()
    rc = 0
    if not args.skip_fleet:
        rc = fleet_step(run_id, args.limit, args.extra, t0)
    if not args.no_pair:
        pair_rc = pair_step(run_id, t0)
        rc = rc or pair_rc
    if not args.no_real:
        real_rc = real_step(run_id, t0)
        rc = rc or real_rc
    if not args.no_bridge:
        bridge_rc = bridge_step(run_id, t0)
        rc = rc or bridge_rc
    if not args.no_health:
        health_rc = health_step(run_id, args.limit, t0)
        rc = rc or health_rc
    print(f"\ndemo: done in {(time.monotonic() - t0) / 60:.1f} min (exit {rc}); every figure is SIMULATED "
          f"except step 3's ({'skipped' if args.no_real else 'real vLLM on this CPU'})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
