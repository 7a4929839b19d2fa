"""The demo's steps, in order, with what each shows, what it needs and how long it takes here, and
how they run: in order on one lane, except a step marked ``beside``, which starts as soon as the
step before it on the main lane (step 1) has printed its table and runs beside the steps between;
its lines are kept and printed when its turn comes. Estimates are what each step took on this
machine size (2 cores, images built) with one core taken by another process (load average 2–4,
rounded up); a quiet machine is up to 20 % faster, a busier one slower (perf/HISTORY.md, the demo
runs)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from . import fleet, seed, units
from .console import Clock, Printer, minutes, mmss
from .pieces import PIECES, ensure, present


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    shows: str
    shortened: str
    estimate_s: int
    run: Callable[[Printer, "Context"], int]
    needs: tuple[str, ...] = ()  # keys of pieces.PIECES
    beside: bool = False  # runs beside the main lane's steps after step 1 (see the module doc)


@dataclass
class Context:
    run_id: str
    extra: dict = field(default_factory=dict)

    def rid(self, step: str) -> str:
        """The run id of a step's run: step 1's is the demo's run id, the others carry a suffix."""
        return self.run_id if step == "matrix" else f"{self.run_id}-{step}"


STEPS: tuple[Step, ...] = (
    Step("matrix", "the article's matrix on one simulated Spark (spark-sim01)",
         "2 builds × bare/mtp2/mtp3: single-stream tok/s (median and range), combined tok/s at 2/4/8 parallel, MTP "
         "acceptance per draft position, % of roofline, unsloth vs nvidia with a verdict per configuration",
         seed.MATRIX_SHORTENED, 240, lambda out, ctx: seed.matrix(out, ctx.rid("matrix"), ctx.extra)),
    Step("quality", "quality and image checks of both builds (spark-sim01)",
         "the 4 Japanese quality questions (pass/fail, reasoning tokens spent) and the image question (answer "
         "right, speculative decoding still active with an image)",
         seed.QUALITY_SHORTENED, 120, lambda out, ctx: seed.quality(out, ctx.rid("quality"))),
    Step("fleet", "the fleet: health and the fleet comparison (spark-sim01..03 at once)",
         "playbooks/health.yml's verdict per unit (spark-sim03 is slow on purpose: older driver, ~8 % slower) and "
         "the report's fleet comparison of the same run (each host against its peers, with a verdict)",
         "the fleet compares the reference variant nvidia-bare (the health canary: 5 single-stream requests per "
         "unit), not the whole matrix", 75, lambda out, ctx: fleet.fleet(out, ctx.rid("fleet"))),
    Step("bridge", "the version bridge: emulated vLLM 0.24.0 → 0.25.0 (spark-sim01)",
         "nvidia-bare re-measured on v0.24.0 against step 1's on v0.25.0, and the verdict against the article's "
         "2.5 % bridge tolerance",
         "one reference variant, single stream (5 requests), as the article bridged with one model; no bandwidth "
         "probe (step 1 probed the unit)",
         45, lambda out, ctx: fleet.bridge(out, ctx.rid("bridge-v0.24.0"), ctx.rid("matrix"))),
    Step("pair", "two simulated Sparks over a real two-node Ray cluster (spark-sim11 + spark-sim12)",
         "gpt-oss-120b on each unit alone, then across both (TP=2 and PP=2, --distributed-executor-backend ray): "
         "the cluster rows beside the single-unit rows, with the cluster-vs-one-unit verdicts",
         "the measurement as inventory/group_vars/sim_pair sets it (128 tokens, single stream and 8 parallel); "
         "nodes may take 90 s to join the Ray head instead of 30 (a loaded 2-core machine)", 210,
         lambda out, ctx: units.pair(out, ctx.rid("pair")), needs=("ray-image",), beside=True),
    Step("real", "the same pipeline on REAL vLLM 0.32.0 (its CPU build) on this machine (cpu-real01)",
         "a tiny model served by real vLLM, bf16 against fp32: measured, not simulated, no Spark roofline; the "
         "report's comparison of the two configurations",
         "two configurations of the real_cpu matrix (bf16, fp32), each started with --enforce-eager (no "
         "torch.compile at start: 60–90 s less per server; make test and BENCHMARKS.md's compile-cache table "
         "cover the compiled start)", 120, lambda out, ctx: units.real(out, ctx.rid("real-cpu")), needs=("vllm-cpu-image",)),
)


def select(keys: list[str] | None) -> list[Step]:
    """The steps to run (all by default), by key or by number, in the demo's order."""
    if not keys:
        return list(STEPS)
    wanted = set()
    for k in keys:
        if k.isdigit() and 1 <= int(k) <= len(STEPS):
            wanted.add(STEPS[int(k) - 1].key)
        elif any(s.key == k for s in STEPS):
            wanted.add(k)
        else:
            raise ValueError(f"unknown step {k!r}: use 1-{len(STEPS)} or {', '.join(s.key for s in STEPS)}")
    return [s for s in STEPS if s.key in wanted]


def number(step: Step) -> str:
    """``k/N`` with N the demo's fixed number of steps."""
    return f"{STEPS.index(step) + 1}/{len(STEPS)}"


def _first_builds(step: Step) -> list:
    """The pieces a step needs whose image is missing (built before the step, once)."""
    return [PIECES[k] for k in step.needs if not present(PIECES[k].image)]


def _runs_beside(step: Step, steps: list[Step], serial: bool) -> bool:
    return step.beside and not serial and step is not steps[0]


def total_s(steps: list[Step], serial: bool) -> int:
    """The plan's estimate in all: the main lane's steps (with their first builds), plus the time
    by which a step run beside outlasts the main-lane steps it runs beside (from step 2 to it)."""
    cost = {s.key: s.estimate_s + sum(p.first_build_s for p in _first_builds(s)) for s in steps}
    main = sum(cost[s.key] for s in steps if not _runs_beside(s, steps, serial))
    extra = 0
    for i, s in enumerate(steps):
        if _runs_beside(s, steps, serial):
            overlapped = sum(cost[x.key] for x in steps[1:i] if not _runs_beside(x, steps, serial))
            extra = max(extra, cost[s.key] - overlapped)
    return main + extra


def plan_lines(steps: list[Step], serial: bool) -> list[str]:
    """The plan printed up front: each step with its estimate and the first builds it waits for."""
    lines = []
    pad = max(len(minutes(s.estimate_s)) for s in steps)
    for s in steps:
        note = "".join(f" + {minutes(p.first_build_s)} to build {p.image} first (once)" for p in _first_builds(s))
        if _runs_beside(s, steps, serial):
            note += " (runs beside the steps before it)"
        lines.append(f"  step {number(s)}  {minutes(s.estimate_s):<{pad}}  {s.title}{note}")
    return lines + [f"  in all {minutes(total_s(steps, serial))} here (2 cores, one taken by other work; images built "
                    f"unless said above); every figure is SIMULATED except step {len(STEPS)}'s"]


def _header(out: Printer, step: Step) -> None:
    out.line()
    out.line(f"step {number(step)} · {step.title} · {minutes(step.estimate_s)}")
    out.line(f"  shows: {step.shows}")
    out.line(f"  shortened for the demo: {step.shortened}")


def _run_one(step: Step, out: Printer, ctx: Context, clock: Clock) -> int:
    """The step's pieces, then the step; its exit status."""
    _header(out, step)
    started = clock.elapsed()
    for key in step.needs:
        rc = ensure(PIECES[key], out)
        if rc != 0:
            return rc
    rc = step.run(out, ctx)
    took = clock.elapsed() - started
    out.line(f"  step {number(step)} {'done' if rc == 0 else f'ended with exit status {rc}'} in {mmss(took)} "
             f"(estimate {minutes(step.estimate_s)}; the demo at {clock.stamp()})")
    return rc


def run(steps: list[Step], ctx: Context, clock: Clock, serial: bool = False) -> dict[str, int]:
    """Run ``steps``; returns each step's exit status by key."""
    status: dict[str, int] = {}
    side: dict[str, tuple[threading.Thread, Printer]] = {}
    for i, step in enumerate(steps):
        if step.key in side:  # started earlier beside the main lane: show it, wait for it
            thread, printer = side[step.key]
            printer.go_live()
            thread.join()
            continue
        status[step.key] = _run_one(step, Printer(clock), ctx, clock)
        if i == 0 and not serial:
            for later in steps[1:]:
                if later.beside:
                    printer = Printer(clock, buffered=True)
                    printer.line()
                    printer.line(f"(step {number(later)} started at {clock.stamp()}, beside the steps before it)")

                    def lane(step=later, printer=printer) -> None:
                        status[step.key] = _run_one(step, printer, ctx, clock)

                    thread = threading.Thread(target=lane, name=f"demo-{later.key}", daemon=True)
                    side[later.key] = (thread, printer)
                    thread.start()
    return status
