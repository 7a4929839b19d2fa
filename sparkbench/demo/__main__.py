"""``make demo``: the source article's matrix on one simulated Spark first — its table within
minutes — then the rest of sparkbench, each step saying what it shows and how long it takes.

1. the article's matrix (nvidia / unsloth × bare / mtp2 / mtp3) on spark-sim01: single stream,
   2/4/8 parallel, acceptance per draft position, unsloth vs nvidia with a verdict per configuration;
2. the quality and image checks of both builds;
3. the fleet: ``playbooks/health.yml`` on spark-sim01..03 (spark-sim03 slow on purpose) and the
   fleet comparison of the same run (``playbooks/report.yml``);
4. the version bridge: nvidia-bare on the emulated vLLM 0.24.0 against step 1's 0.25.0;
5. two simulated Sparks over a real two-node Ray cluster (TP=2, PP=2), beside steps 2–4;
6. real vLLM (its CPU build) on this machine: bf16 against fp32.

The plan with each step's estimate is printed first; each step prints what it shows, what it
shortened for the demo, a progress line per host × variant stage and its time. ``make demo`` sets
up only what step 1 needs (the venv's runtime packages, a Docker engine, the simulator images);
an image a later step needs (``sparkbench/vllm-sim-ray``, ``sparkbench/vllm-cpu``) is built by
its ``scripts/build_*.sh`` just before that step, its progress shown (seconds when up to date).
Every figure is simulated (and labelled so) except step 6's. This package (``sparkbench/demo/``)
holds the steps.

    .venv/bin/python -m sparkbench.demo                  # what make demo runs
    .venv/bin/python -m sparkbench.demo --steps 1        # only the first table
    .venv/bin/python -m sparkbench.demo --steps pair,real  # steps by name or number
    .venv/bin/python -m sparkbench.demo --serial         # step 5 in its turn, not beside steps 2-4
    .venv/bin/python -m sparkbench.demo -e bench_backend_comparison=true   # extra variables for step 1

Exit status: 0 when every step succeeded, else the first failing step's (2 when a simulator image
is missing: run ``make demo`` or ``make setup``).
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from sparkbench.demo import plan
from sparkbench.demo.console import Clock, Printer, minutes
from sparkbench.demo.pieces import missing_sim_images
from sparkbench.runner import UsageError, parse_extravars


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m sparkbench.demo", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--run-id", default=None, help="results/<run-id> of step 1, the others with a suffix "
                                                       "(default: UTC now, YYYYmmddTHHMMSSZ)")
    parser.add_argument("--steps", default=None, help="comma-separated steps to run, by number or name "
                                                      f"({', '.join(s.key for s in plan.STEPS)}; default: all)")
    parser.add_argument("--serial", action="store_true", help="run every step in its turn (step 5 not beside 2-4)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables for step 1 (KEY=VALUE, JSON or @file), as ansible-playbook -e")
    args = parser.parse_args(argv)
    try:
        steps = plan.select(args.steps.split(",") if args.steps else None)
        extra = parse_extravars(args.extra_vars)
    except (ValueError, UsageError) as exc:
        parser.error(str(exc))
    missing = missing_sim_images()
    if missing:
        print(f"demo: the simulator image(s) {', '.join(missing)} are missing; run 'make demo' (it builds them) "
              f"or 'make setup'", file=sys.stderr)
        return 2
    run_id = args.run_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    clock = Clock()
    out = Printer(clock)  # every line within the terminal's width (COLUMNS, else 100)
    out.line(f"make demo: {len(steps)} of {len(plan.STEPS)} steps, run {run_id} (results/{run_id}*/); the plan:")
    for line in plan.plan_lines(steps, args.serial):
        out.line(line)
    try:
        status = plan.run(steps, plan.Context(run_id=run_id, extra=extra), clock, serial=args.serial)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; a server or Ray node a step started may still run: ansible-playbook "
              "playbooks/teardown.yml -l sim_sparks,sim_pair,cpu-real01 removes them", file=sys.stderr)
        return 130
    failed = [s for s in steps if status.get(s.key, 1) != 0]
    out.line()
    out.line(f"demo: done in {clock.stamp()} (the plan said {minutes(plan.total_s(steps, args.serial))}); "
             + ("every step succeeded" if not failed else
                f"step(s) {', '.join(plan.number(s) for s in failed)} did not succeed (see above)"))
    return next((status[s.key] or 1 for s in failed), 0)


if __name__ == "__main__":
    sys.exit(main())
