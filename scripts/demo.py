#!/usr/bin/env python3
"""``make demo``: the seed article's full matrix on the whole simulated fleet, then the table.

Runs ``ansible-playbook bench.yml -l sim_sparks`` (spark-sim01..03: one simulator container per
host, spark-sim03 about 8 % slower with another driver) with the seed's settings (256 tokens,
3 runs, 2/4/8 parallel, quality, image), shows one progress line per variant stage, keeps the full
Ansible output in ``results/<run-id>/ansible.log`` and prints the main table, labelled simulated.

    python3 scripts/demo.py                        # what make demo runs
    python3 scripts/demo.py -- -e bench_backend_comparison=true   # extra ansible-playbook args

Exit status: ansible-playbook's.
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
STAGE_RE = re.compile(r"^TASK \[Bench variant \| (launch|measure|record result|record failure) ([a-z0-9._-]+)\]")
SIM_IMAGE = "sparkbench/vllm-sim:v0.25.0"


def _bin(name: str) -> str:
    """The venv's tool next to this Python, else the one on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", default="sim_sparks", help="hosts (default: the simulated fleet sim_sparks)")
    parser.add_argument("--run-id", default=None, help="results/<run-id> (default: UTC now, YYYYmmddTHHMMSSZ)")
    parser.add_argument("extra", nargs="*", help="extra ansible-playbook arguments (after --)")
    args = parser.parse_args(argv)

    if subprocess.run(["docker", "image", "inspect", SIM_IMAGE], capture_output=True).returncode != 0:
        print(f"demo: the simulator image {SIM_IMAGE} is missing; run 'make setup' first", file=sys.stderr)
        return 2
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    results = REPO / "results"
    run_dir = results / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "ansible.log"
    cmd = [_bin("ansible-playbook"), "bench.yml", "-l", args.limit, "-e", f"bench_run_id={run_id}", *args.extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    print(f"demo: the seed matrix on the simulated fleet ({args.limit}), run {run_id}")
    print(f"demo: full Ansible output in {log_path.relative_to(REPO)}")
    t0 = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log, subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            found = STAGE_RE.match(line)
            if found:
                print(f"  [{time.monotonic() - t0:6.0f} s] {found.group(1):<14} {found.group(2)}", flush=True)
            elif line.startswith(("fatal:", "failed:")) and "ignoring" not in line:
                print("  " + line.rstrip()[:200], flush=True)
        rc = proc.wait()
    elapsed = time.monotonic() - t0

    sys.path.insert(0, str(REPO / "filter_plugins"))
    from bench_table import bench_table  # noqa: E402  (the same filter the play prints with)

    docs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(run_dir.glob("*/*.json"))]
    print()
    if docs:
        print(bench_table(docs))
        print()
        failed = [d for d in docs if d.get("status") != "complete"]
        for d in failed:
            f = d.get("failure") or {}
            print(f"  {d.get('host')}/{d['variant']['name']}: {d.get('status')} at {f.get('stage')}: {f.get('reason')}"
                  f" — fix: {f.get('remedy')}")
        print(f"demo: {len(docs) - len(failed)}/{len(docs)} variants complete in {elapsed / 60:.1f} min; "
              f"report: {(run_dir / 'report.md').relative_to(REPO)}")
    else:
        print(f"demo: no results (ansible-playbook exit {rc}); see {log_path.relative_to(REPO)}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
