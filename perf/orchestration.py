#!/usr/bin/env python3
"""Table 3 — orchestration overhead of `ansible-playbook bench.yml`, and how it grows.

Method: real `ansible-playbook bench.yml` runs on a temporary inventory of simulated hosts
(local connection, GPU-less, the simulator image; group `sparks` and `sim_sparks`, so the
repository's group_vars for the simulated fleet apply), with 1, 2, 4 and 8 variants (bare
configs `v1` … `vN` of one build), fast simulated rates and a short measurement:
``VLLM_SIM_LOAD_SECONDS`` = 1, ``VLLM_SIM_RATE`` = 2000 tok/s, 64 forced tokens, 1 run, no
warm-up, no parallel levels, no quality or image checks.

    overhead per variant = (wall − Σ over variants (load + measurement)) / variants        [s]

with wall = the whole `ansible-playbook` process (provisioning, every variant, the report play),
load = the simulated load time (the knob; the real wait on /health is part of the overhead) and
measurement = the time the measured requests took, from measure.py's own figures in the result
file (Σ TTFT + decode time of each run, + the wall time of each parallel level). The growth is the least-squares slope of wall time over
the number of variants; slope − (load + measurement) is the marginal overhead of one variant.

Goal: ≤ 5 s per variant. Where it is missed, `ANSIBLE_CALLBACKS_ENABLED=profile_tasks` gives the
slowest tasks (listed under the table).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perf import common
from perf.common import REPO, WORK, PerfError, Section, fmt, md_table, median

LOAD_S = 1.0
RATE = 2000
TOKENS = 64
GOAL_PER_VARIANT_S = 5.0
GOAL_FIXED_S = 20.0
ORCH_PORT = 18450


def ansible_playbook() -> str:
    """The ansible-playbook of the interpreter's venv (make perf), else the one on PATH."""
    cand = Path(sys.executable).parent / "ansible-playbook"
    if cand.exists():
        return str(cand)
    found = shutil.which("ansible-playbook")
    if not found:
        raise PerfError("ansible-playbook not found; run `make setup` (it installs ansible into .venv)")
    return found


def write_inventory(path: Path, hosts: list[tuple[str, int]]) -> None:
    """A YAML inventory: the hosts in `sparks` → `sim_sparks` with their own ports (JSON is YAML)."""
    inv = {"all": {"children": {"sparks": {"children": {"sim_sparks": {"hosts": {
        h: {"vllm_server_port": p, "vllm_server_container_prefix": "sparkbench-bench"}
        for h, p in hosts}}}}}}}
    path.write_text(json.dumps(inv, indent=1))


def write_vars(path: Path, variants: int, results_dir: Path) -> None:
    """Extra vars: one build, ``variants`` bare configs, short measurement, fast simulator."""
    ev = {
        "bench_builds": [{"name": "nvidia", "model": "nvidia/Qwen3.6-35B-A3B-NVFP4",
                          "args": {"quantization": "modelopt"}}],
        "bench_configs": [{"name": f"v{i + 1}"} for i in range(variants)],
        "bench_extra_variants": [], "bench_backend_comparison": False, "bench_select": [],
        # No bracket: re-measuring the reference at the end would be a variant more than counted.
        "bench_bracket": False,
        "bench_results_dir": str(results_dir), "bench_force": True,
        "llm_bench_output_tokens": TOKENS, "llm_bench_runs": 1, "llm_bench_warmup": 0,
        "llm_bench_concurrency": [], "llm_bench_context": [0], "llm_bench_quality": False,
        "llm_bench_image": False, "llm_bench_telemetry": "off",
        "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": str(LOAD_S),
                                      "VLLM_SIM_RATE": str(RATE), "VLLM_SIM_LOG_INTERVAL": "3600"},
    }
    path.write_text(json.dumps(ev, indent=1))


def measurement_seconds(doc: dict[str, Any]) -> float | None:
    """Seconds the measurement's requests took, from a result file (measure.py's own figures).

    = Σ single runs (ttft_s + (completion_tokens − first_chunk_tokens) / decode_tok_s)
      + Σ parallel levels wall_s.
    (started_at/finished_at have one-second resolution, too coarse for a 0.1 s measurement.)
    """
    total = 0.0
    single = doc.get("single") or {}
    for r in single.get("runs") or []:
        dec, ct = r.get("decode_tok_s"), r.get("completion_tokens")
        if not dec or not ct:
            return None
        total += (r.get("ttft_s") or 0.0) + (ct - (r.get("first_chunk_tokens") or 1)) / dec
    for p in doc.get("parallel") or []:
        total += p.get("wall_s") or 0.0
    return total


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of the whole machine so far, from /proc/stat: the playbook,
    its workers, measure.py and the simulators in their containers all count."""
    with open("/proc/stat") as fh:
        fields = fh.readline().split()[1:]
    user, nice, system = (int(x) for x in fields[:3])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def run_playbook(tag: str, hosts: list[tuple[str, int]], variants: int,
                 profile: bool = False, timeout: float = 900) -> dict[str, Any]:
    """One `ansible-playbook bench.yml` run; wall time, per-variant results, task profile."""
    d = WORK / "orch" / tag
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    inv, ev, res = d / "inventory.yml", d / "vars.json", d / "results"
    write_inventory(inv, hosts)
    write_vars(ev, variants, res)
    run_id = "bench" + tag
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", PATH=str(Path(sys.executable).parent) + os.pathsep
               + os.environ.get("PATH", ""))
    if profile:
        env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
        env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "40"
    cmd = [ansible_playbook(), "bench.yml", "-i", str(REPO / "inventory"), "-i", str(inv),
           "-l", ",".join(h for h, _ in hosts), "-e", f"@{ev}", "-e", f"bench_run_id={run_id}"]
    t0 = time.perf_counter()
    cpu0 = _cpu_seconds()
    with open(d / "ansible.log", "w") as log:
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    load1 = os.getloadavg()[0]
    _cleanup_containers()
    out = (d / "ansible.log").read_text(errors="replace")
    docs = []
    for f in sorted((res / run_id).glob("*/*.json")):
        try:
            docs.append(json.loads(f.read_text()))
        except json.JSONDecodeError:
            pass
    complete = [x for x in docs if x.get("status") == "complete"]
    meas = [measurement_seconds(x) for x in complete]
    if rc != 0 or len(complete) < variants * len(hosts):
        tail = [l for l in out.splitlines() if l.strip()][-3:]
        raise PerfError(f"ansible-playbook bench.yml ({tag}) exit {rc}, {len(complete)} of "
                        f"{variants * len(hosts)} variants complete: {' / '.join(tail)[:300]}")
    return {"tag": tag, "hosts": len(hosts), "variants": variants, "wall": wall, "load1": load1,
            "cpu_s": cpu, "measure_s": meas, "log": out, "docs": complete}


def _cleanup_containers() -> None:
    """Remove any simulator container this benchmark's inventory started (prefix sparkbench-bench)."""
    try:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", "name=sparkbench-bench"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass


def profile_top(log: str, n: int = 8) -> list[tuple[str, float]]:
    """The slowest tasks from profile_tasks' summary lines ``name ---- 1.23s``, summed by name."""
    acc: dict[str, float] = {}
    for line in log.splitlines():
        m = re.match(r"^(.*?)\s-{3,}\s+(\d+(?:\.\d+)?)s\s*$", line.strip())
        if m:
            name = re.sub(r"\s+", " ", m.group(1)).strip()
            acc[name] = acc.get(name, 0.0) + float(m.group(2))
    return sorted(acc.items(), key=lambda kv: -kv[1])[:n]


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def run(quick: bool = False) -> Section:
    """Measure table 3 and return its section."""
    common.require(REPO / "bench.yml", "bench.yml")
    ladder = [1, 2, 4] if quick else [1, 2, 4, 8]
    repeats = 1
    points: list[dict[str, Any]] = []
    loads: list[float] = []
    for v in ladder:
        walls, per_v, meas_all = [], [], []
        for rep in range(repeats):
            r = run_playbook(f"v{v}r{rep}", [("bench-orch01", ORCH_PORT)], v)
            meas = [m for m in r["measure_s"] if m is not None]
            m_total = sum(meas) if len(meas) == v else None
            walls.append(r["wall"])
            loads.append(r["load1"])
            meas_all.append(m_total)
            if m_total is not None:
                per_v.append((r["wall"] - v * LOAD_S - m_total) / v)
        points.append({"variants": v, "wall": median(walls), "walls": walls,
                       "measure": median(m for m in meas_all if m is not None) if any(
                           m is not None for m in meas_all) else None,
                       "per_variant": median(per_v) if per_v else None})
    # Where the time goes: one profiled run at 2 variants.
    prof = run_playbook("profile", [("bench-orch01", ORCH_PORT)], 2, profile=True)
    top = profile_top(prof["log"])
    xs = [float(p["variants"]) for p in points]
    k = slope(xs, [p["wall"] for p in points])
    meas_per = median((p["measure"] / p["variants"]) for p in points if p["measure"] is not None)
    marginal = k - LOAD_S - meas_per if meas_per == meas_per else None
    fixed = points[0]["wall"] - k if points else None
    worst = max((p["per_variant"] for p in points if p["per_variant"] is not None), default=None)
    marginal_met = marginal is not None and marginal <= GOAL_PER_VARIANT_S
    fixed_met = fixed is not None and fixed <= GOAL_FIXED_S
    goal_met = marginal_met and fixed_met

    def part(name: str, value: float | None, goal: float, met: bool) -> str:
        word = "within" if met else f"misses by {fmt((value or 0) - goal, 2)} s"
        return f"{name} {fmt(value, 2)} s (goal ≤ {goal:g} s: {word})"

    table = md_table(
        ["variants", "wall time, median (runs)", "load (knob) total", "measurement total",
         "overhead / variants (fixed part shared)"],
        [[str(p["variants"]), f"{fmt(p['wall'])} s ({', '.join(fmt(w) for w in p['walls'])})",
          f"{fmt(p['variants'] * LOAD_S)} s", f"{fmt(p['measure'])} s" if p["measure"] else "—",
          f"{fmt(p['per_variant'])} s" if p["per_variant"] is not None else "—"] for p in points])
    top_table = md_table(["task (profile_tasks, 2 variants)", "seconds"],
                         [[n, fmt(s, 2)] for n, s in top]) if top else \
        "_profile_tasks printed no task timings (callback not available)._"
    verdict = ("**Goals met**: " if goal_met else "**Goal missed**: ") + "; ".join([
        part("each added variant costs", marginal, GOAL_PER_VARIANT_S, marginal_met)
        + " of orchestration beyond its load and measurement",
        part("the fixed cost per run (plan, provisioning, report) is", fixed, GOAL_FIXED_S, fixed_met)]) + "."
    if not goal_met:
        cores = os.cpu_count() or 1
        verdict += (f" The 1-minute load average at the end of the runs was "
                    f"{fmt(median(loads), 1)} on {cores} cores (other work on the machine): every "
                    f"task waits for a CPU, so the figure is an upper bound; the slowest tasks "
                    f"below say where the time goes.")
    body = f"""**How:** `perf/orchestration.py`{' (--quick)' if quick else ''}: `ansible-playbook
bench.yml` on a temporary inventory of one simulated host (local connection, GPU-less, the
simulator image, group vars of `sim_sparks`), {', '.join(map(str, ladder))} variants (bare configs
of one build), `VLLM_SIM_LOAD_SECONDS={LOAD_S:g}`, `VLLM_SIM_RATE={RATE}`, {TOKENS} forced tokens,
1 run, no warm-up, no parallel levels, no quality or image checks; {repeats} run(s) per point.
Overhead per variant = (wall − variants × load − Σ measurement) / variants, measurement = the
time the measured requests took by measure.py's own figures (Σ TTFT + decode time per run). Marginal overhead = slope of wall time
over variants ({fmt(k, 2)} s per variant) − load ({LOAD_S:g} s) − measurement per variant
({fmt(meas_per, 2)} s).

{table}

{verdict}

Slowest tasks of a profiled run with 2 variants (`ANSIBLE_CALLBACKS_ENABLED=profile_tasks`;
seconds summed over both variants and the run's fixed part):

{top_table}
"""
    # The summary (BENCHMARKS.md's section): the marginal and fixed cost, the slowest tasks.
    figure = (f"Each added variant costs {fmt(marginal, 2)} s of orchestration (goal ≤ {GOAL_PER_VARIANT_S:g} s), "
              f"and the fixed cost per run (plan, provisioning, report) is {fmt(fixed, 2)} s (goal ≤ "
              f"{GOAL_FIXED_S:g} s). At {points[-1]['variants']} variants the wall time is {fmt(points[-1]['wall'])} s.")
    load = (f"One simulated host (local connection) with {', '.join(map(str, ladder))} bare variants, "
            f"{LOAD_S:g} s of load each, {TOKENS} forced tokens, 1 run, no parallel, quality or image phase.")
    if len(top) >= 2:
        load += (f" The slowest tasks are `{top[0][0]}` ({fmt(top[0][1], 2)} s over 2 variants) and "
                 f"`{top[1][0]}` ({fmt(top[1][1], 2)} s).")
    return Section("orchestration", "Orchestration overhead", body, goal_met,
                   {"points": points, "slope": k, "marginal": marginal, "fixed": fixed, "fixed_met": fixed_met,
                    "top": top, "worst": worst, "loads": loads},
                   figure=figure, load=load,
                   today=f"{fmt(marginal, 2)} s: {'met' if marginal_met else 'missed'}"
                         + ("" if fixed_met else f" (fixed {fmt(fixed, 2)} s: missed)"))


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv).body)
