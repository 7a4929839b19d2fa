"""Where the test suite's CPU goes: per test file, the processes it starts and the containers it runs.

Three parts, for a ``make test`` (or ``.ci/run``) run on this machine:

* a pytest plugin (``-p perf.suite_cpu``, the repository root on ``PYTHONPATH``): per test, its wall time
  and the CPU time of the pytest worker itself and of the children it waited for
  (``ansible-playbook`` with its forks and module runs, measure, simulators run as processes),
  one JSON line per test into ``$SUITE_CPU_DIR/<worker>.jsonl``;
* ``sample OUT``: every 2 s, the machine's busy CPU time and each Docker container's
  ``cpuacct.usage`` (cgroup v1, Docker's cgroupfs driver) by container name, into ``OUT`` (JSON);
* ``report DIR OUT``: the two together, by test file, heaviest first (containers are credited to
  a file by their name's prefix, ``CONTAINER_FILES``).

    python perf/suite_cpu.py sample /tmp/cg.json &
    SUITE_CPU_DIR=/tmp/cpu PYTHONPATH=. PYTEST_ADDOPTS="-p perf.suite_cpu" make test
    python perf/suite_cpu.py report /tmp/cpu /tmp/cg.json   # per file, then per part against its budget

A child's CPU counts when the worker waits for it, so an sshd's sessions count when the fixture
stops it (at its file's last test); containers count whatever started them.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")
#: Container name prefixes → the test file (or fixture) that runs them.
CONTAINER_FILES = (
    (r"^sbtest-rv\d", "test_real_vllm_e2e"),
    (r"^sparkbench-test-realvllm", "the session's real vLLM (tests/conftest.py real_vllm)"),
    (r"^sbtest-svr\d", "the session's real residents (tests/shared_runs.py real_residents)"),
    (r"^sbtest-svs\d", "test_serve_ssh"),
    (r"^sbtest-sv\d", "test_serve_sim"),
    (r"^sparkbench-ray-spark-sim1", "test_sim_pair_playbook"),
    (r"^sparkbench-simtest-ray", "test_sim_ray_cluster"),
)


#: The suite's parts (the runs tests/shared_runs.py maps): the test files whose processes and
#: containers each part's CPU is, and its budget in CPU-s for a whole ``make test`` on 2 cores
#: (BENCHMARKS.md table 12, "CPU per part"): a change that adds to a part stays within its budget
#: or pays for it in another part.
PARTS = (
    ("real vLLM", {"test_compile_cache", "test_real_vllm_e2e", "test_real_vllm_serving", "test_serve_real",
                   "test_tpot_truth", "test_vllm_cpu_image", "test_sim_conformance",
                   "the session's real vLLM (tests/conftest.py real_vllm)",
                   "the session's real residents (tests/shared_runs.py real_residents)"}, 340),
    ("Ray pair", {"test_sim_pair_playbook", "test_sim_ray_cluster"}, 155),
    ("SSH units", {"test_ssh_units", "test_serve_ssh"}, 60),
)
#: Every other file that used 5 CPU-s or more (simulated playbook and serve runs), the files
#: below that (unit, simulator and report tests), and what no test file owns (the Docker engine,
#: pytest and its workers, the kernel).
SIMULATED_BUDGET, REST_BUDGET, UNOWNED_BUDGET, SIMULATED_MIN_CPU_S = 490, 60, 195, 5.0


# -- the pytest plugin ---------------------------------------------------------------------------
def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        t0, (self0, kids0) = time.time(), _cpu()
        yield
        self1, kids1 = _cpu()
        out = Path(os.environ.get("SUITE_CPU_DIR") or "suite-cpu")
        out.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with (out / f"{worker}.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"id": item.nodeid, "t0": t0, "wall": time.time() - t0, "self": self1 - self0,
                                "children": kids1 - kids0, "worker": worker}) + "\n")
except ImportError:  # the sampler and the report run without pytest
    pass


# -- the sampler ---------------------------------------------------------------------------------
def busy_s() -> float:
    """The machine's busy CPU time since boot (all of /proc/stat's first line but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def sample(out: Path, interval: float = 2.0) -> None:
    """Writes ``{elapsed, busy, containers: {id: [name, cpu_s]}}`` to ``out`` every ``interval`` s."""
    if not CGROUP.is_dir():
        sys.exit(f"{CGROUP} is missing: the sampler reads cgroup v1's cpuacct with Docker's cgroupfs driver")
    names: dict[str, str] = {}
    usage: dict[str, float] = {}
    t0, busy0 = time.time(), busy_s()
    while True:
        ids = [d.name for d in CGROUP.iterdir() if len(d.name) == 64]
        if any(i not in names for i in ids):
            listing = subprocess.run(["docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
                                     capture_output=True, text=True, timeout=30).stdout
            names.update(line.split(" ", 1) for line in listing.splitlines() if " " in line)
        for i in ids:
            try:
                usage[i] = int((CGROUP / i / "cpuacct.usage").read_text()) / 1e9
            except OSError:
                pass
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"elapsed": time.time() - t0, "busy": busy_s() - busy0,
                                   "containers": {i: [names.get(i, i), u] for i, u in usage.items()}}))
        tmp.replace(out)
        time.sleep(interval)


# -- the report ----------------------------------------------------------------------------------
def report(tests_dir: Path, containers_file: Path) -> list[str]:
    """Per test file: test time, CPU of its processes, CPU of its containers; heaviest first."""
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for path in tests_dir.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            name = Path(row["id"].split("::")[0]).stem
            per[name][0] += row["wall"]
            per[name][1] += row["self"] + row["children"]
    sampled = json.loads(containers_file.read_text()) if containers_file.is_file() else {"containers": {}}
    unmatched = 0.0
    for name, cpu in sampled["containers"].values():
        for pattern, owner in CONTAINER_FILES:
            if re.match(pattern, name):
                per[owner][2] += cpu
                break
        else:
            unmatched += cpu
    total = sum(p[1] + p[2] for p in per.values())
    lines = [f"machine busy {sampled.get('busy', 0):.0f} CPU-s over {sampled.get('elapsed', 0):.0f} s; "
             f"{total:.0f} CPU-s accounted to test files; {unmatched:.0f} in other containers",
             f"{'file':58s} {'test s':>7s} {'procs':>7s} {'ctrs':>7s} {'CPU-s':>7s}"]
    for name, (wall, procs, ctrs) in sorted(per.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        lines.append(f"{name:58s} {wall:7.0f} {procs:7.0f} {ctrs:7.0f} {procs + ctrs:7.0f}")
    return lines


def parts(tests_dir: Path, containers_file: Path) -> list[str]:
    """Per part (``PARTS``, then the simulated runs, the rest, the unowned): CPU-s against its budget."""
    per = collections.defaultdict(float)
    for line in report(tests_dir, containers_file)[2:]:
        name, _wall, _procs, _ctrs, cpu = line.rsplit(None, 4)
        per[name.strip()] += float(cpu)
    sampled = json.loads(containers_file.read_text()) if containers_file.is_file() else {}
    rows = [(part, sum(c for f, c in per.items() if f in files), budget) for part, files, budget in PARTS]
    claimed = set().union(*(files for _, files, _ in PARTS))
    sim = sum(c for f, c in per.items() if f not in claimed and c >= SIMULATED_MIN_CPU_S)
    rest = sum(c for f, c in per.items() if f not in claimed and c < SIMULATED_MIN_CPU_S)
    rows += [("simulated runs (files of 5 CPU-s or more)", sim, SIMULATED_BUDGET), ("everything else", rest, REST_BUDGET)]
    owned = sum(cpu for _, cpu, _ in rows)
    rows.append(("no test file's (Docker engine, pytest, kernel)", sampled.get("busy", owned) - owned, UNOWNED_BUDGET))
    lines = [f"{'part':48s} {'CPU-s':>7s} {'budget':>7s}"]
    for part, cpu, budget in rows:
        lines.append(f"{part:48s} {cpu:7.0f} {budget:7d}{'  OVER' if cpu > budget else ''}")
    lines.append(f"{'the whole suite':48s} {sum(c for _, c, _ in rows):7.0f} {sum(b for _, _, b in rows):7d}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="sample the machine's and the containers' CPU into OUT")
    s.add_argument("out", type=Path)
    r = sub.add_parser("report", help="per test file, from the plugin's folder and the sampler's file")
    r.add_argument("tests_dir", type=Path)
    r.add_argument("containers", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "sample":
        sample(args.out)
        return 0
    print("\n".join(report(args.tests_dir, args.containers)))
    print()
    print("\n".join(parts(args.tests_dir, args.containers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
