#!/usr/bin/env python3
"""Table 4 — fleet scaling: `bench.yml` wall time at 1, 2, 4 and 8 simulated hosts.

Method: the same real `ansible-playbook bench.yml` runs as table 3 (`perf/orchestration.py`:
temporary inventory, local-connection GPU-less simulated hosts, fast simulated rates, short
measurement), each host with the same 2 variants, hosts `bench-fleet01` … `bench-fleetNN` on
ports 18501 … 185NN. Hosts run in parallel (ansible.cfg forks = 16), variants in sequence.

    ratio(N) = wall(N hosts) / wall(1 host)

Perfect scaling is 1.0; the goal is ≤ 1.25 at 8 hosts. On this machine all "hosts" share two
CPU cores and one Docker engine, so the ratio also measures that contention (said beside it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from perf import common, orchestration
from perf.common import REPO, Section, fmt, md_table, median

VARIANTS = 2
GOAL_RATIO = 1.25


def run(quick: bool = False) -> Section:
    """Measure table 4 and return its section."""
    common.require(REPO / "bench.yml", "bench.yml")
    ladder = [1, 2, 4] if quick else [1, 2, 4, 8]
    repeats = 1
    points: list[dict[str, Any]] = []
    for n in ladder:
        hosts = [(f"bench-fleet{i + 1:02d}", common.PORT_FLEET_BASE + 1 + i) for i in range(n)]
        walls, cpus, loads = [], [], []
        for rep in range(repeats):
            r = orchestration.run_playbook(f"fleet{n}r{rep}", hosts, VARIANTS)
            walls.append(r["wall"])
            cpus.append(r["cpu_s"])
            loads.append(r["load1"])
        points.append({"hosts": n, "wall": median(walls), "walls": walls, "cpu": median(cpus),
                       "load1": median(loads)})
    base = points[0]["wall"]
    for p in points:
        p["ratio"] = p["wall"] / base
    last = points[-1]
    goal_met = last["hosts"] >= 8 and last["ratio"] <= GOAL_RATIO
    cores = os.cpu_count() or 1
    for p in points:
        p["busy"] = p["cpu"] / (p["wall"] * cores)  # share of the machine's CPU the run kept busy
    table = md_table(["hosts", "variants per host", "wall time", "ratio to 1 host", "CPU seconds (all processes)",
                      "CPU busy (of all cores)"],
                     [[str(p["hosts"]), str(VARIANTS), f"{fmt(p['wall'])} s", f"{p['ratio']:.2f}×",
                       f"{fmt(p['cpu'])} s", f"{100 * p['busy']:.0f} %"] for p in points])
    if goal_met:
        verdict = f"**Goal met**: {last['ratio']:.2f}× at 8 hosts (goal ≤ {GOAL_RATIO}×)."
    elif last["hosts"] < 8:
        verdict = (f"No verdict in --quick mode (8 hosts not run); {last['ratio']:.2f}× at "
                   f"{last['hosts']} hosts.")
    else:
        first = points[0]
        per_host_cpu = [(p["cpu"] / p["hosts"]) for p in points]
        verdict = (f"**Goal missed** by {last['ratio'] - GOAL_RATIO:.2f}×: {last['ratio']:.2f}× at "
                   f"8 hosts (goal ≤ {GOAL_RATIO}×). Where the time goes: the simulated hosts are not "
                   f"independent machines — {common.machine_facts().split(' · ')[0]} run all {last['hosts']} "
                   f"simulators, measure.py processes and Ansible workers. One host's run needs "
                   f"{fmt(per_host_cpu[0])} s of CPU ({fmt(per_host_cpu[-1])} s per host at {last['hosts']} hosts); "
                   f"at 1 host the machine is {100 * first['busy']:.0f} % busy, at {last['hosts']} hosts "
                   f"{100 * last['busy']:.0f} %: the work is CPU-bound, so wall time grows with the CPU the hosts "
                   f"need together, ≈ {fmt(last['cpu'] / cores)} s on {cores} cores. On separate units (every "
                   f"Spark runs its own simulator or server and measure.py) only the controller's share "
                   f"(Ansible's workers, the plan, the report) is shared.")
    body = f"""**How:** `perf/fleet_scaling.py`{' (--quick)' if quick else ''}: real `ansible-playbook
bench.yml` runs on a temporary inventory of {', '.join(map(str, ladder))} simulated hosts (local
connection, GPU-less, ports from {common.PORT_FLEET_BASE + 1}), each with the same {VARIANTS}
variants and the settings of table 3 (`VLLM_SIM_LOAD_SECONDS={orchestration.LOAD_S:g}`,
`VLLM_SIM_RATE={orchestration.RATE}`, {orchestration.TOKENS} tokens, 1 run). Ratio = wall time at N
hosts / wall time at 1 host; {repeats} run per point.

{table}

{verdict}
"""
    # The summary (BENCHMARKS.md's section): the ratio at the most hosts, how busy the CPU was.
    word = ("met" if goal_met else "no verdict, 8 hosts not run" if last["hosts"] < 8
            else f"missed by {last['ratio'] - GOAL_RATIO:.2f}×")
    figure = f"{last['ratio']:.2f}× at {last['hosts']} hosts against 1 (goal ≤ {GOAL_RATIO}× at 8: {word})"
    if len(points) > 2:
        figure += f"; {points[1]['ratio']:.2f}× at {points[1]['hosts']} hosts"
    cpu_bound = last["busy"] >= 0.8
    load = (f"The same {VARIANTS} variants per host as table 3, all hosts on this machine. "
            + (f"The work is CPU-bound: {100 * last['busy']:.0f} % of all {cores} cores at {last['hosts']} hosts. "
               if cpu_bound else f"The CPU was {100 * last['busy']:.0f} % busy at {last['hosts']} hosts. ")
            + "On separate units only the controller's share (Ansible's workers, the plan, the report) is shared.")
    today = f"{last['ratio']:.2f}×: " + ("met" if goal_met else "no verdict (--quick)" if last["hosts"] < 8
                                         else "missed" + (f" (CPU-bound on {cores} cores)" if cpu_bound else ""))
    return Section("fleet", "Fleet scaling", body, goal_met if last["hosts"] >= 8 else None,
                   {"points": points}, figure=figure + ".", load=load, today=today)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv).body)
