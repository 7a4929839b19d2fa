"""Per plan entry, what the interference measurement runs (bench.yml, ``playbooks/tasks/interference.yml``).

The conditions, in order: *alone* — the unit's residents are stopped before the variant starts and
its normal measurement runs (its result document as ever), then they are started again (also when
the variant fails); *idle* — the residents present, serving nothing: the variant single stream;
*load* — each resident under a steady request rate (measure's arrival-rate phase against its port,
a background process on the unit started before and stopped after the measurement, its own JSON
kept), the variant single stream again. Memory: the variant and the residents must fit together;
the unit's memory plan (``sparkbench.memory``) checks that in the variant's preflight.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from .. import measure_bundle
from .. import settings as settings_mod
from ..launch import reach_address

if TYPE_CHECKING:
    from ..plan_types import CoResident, PlanEntry, ProbeCommands
    from ..settings import Settings
    from .variable import InterferenceSettings

#: Seconds the background load's schedule spans at most (it is stopped when the measurement ends;
#: playbooks/tasks/interference.yml gives its async job this and 120 s).
LOAD_SPAN_S = 3600
#: The measurement's single-stream settings (the rest as the variant's).
SINGLE = {"concurrency": [], "context": [0], "quality": False, "image": False, "rates": [], "rate_search": None,
          "prefix_tokens": 0, "turns": 0, "tools": False, "target_precision_pct": None, "max_runs": None}
#: measure's command line from the start of an entry's argv up to its first option.
FIRST_OPTION = "--base-url"


class _ResidentRequired(TypedDict):
    name: str
    variant: str
    port: int
    base_url: str
    model: str


class InterferenceResident(_ResidentRequired, total=False):
    """A running resident an entry is measured beside (``entry_block``): where the unit reaches it,
    the model it serves, its health URL."""

    health_url: str


class BackgroundLoad(TypedDict):
    """One resident's background load (``_load``): its measure command line in a shell that records
    its pid, the command that stops it, its output, pid and log files, measure's line when it sends."""

    resident: str
    out: str
    pid_file: str
    log: str
    sending: str
    start_argv: list[str]
    stop_argv: list[str]


class InterferenceBlock(TypedDict):
    """A plan entry's ``interference`` (``entry_block``): the settings, the residents, their loads, the
    single-stream measure command line beside them and the lines the plan's summary shows."""

    load_rps: float
    runs: int
    load_output_tokens: int
    residents: list[InterferenceResident]
    loads: list[BackgroundLoad]
    measure_argv: list[str]
    lines: list[str]


def _probes(argv: Sequence[str]) -> ProbeCommands:
    """The entry's ``--nvidia-smi`` / ``--kernel-log`` (None: measure's defaults)."""
    out: ProbeCommands = {"nvidia_smi": None, "kernel_log": None}
    for key, flag in (("nvidia_smi", "--nvidia-smi"), ("kernel_log", "--kernel-log")):
        if flag in argv[:-1]:
            out[key] = str(argv[argv.index(flag) + 1])
    return out


def _argv(entry: PlanEntry, settings: Settings, base_url: str, model: str,
          remote_dir: str, probes: ProbeCommands) -> list[str]:
    """measure's command line with ``settings`` against ``base_url`` (the entry's python and probes)."""
    argv = list(entry["measure_argv"])
    return settings_mod.measure_argv(settings, python=argv[:argv.index(FIRST_OPTION)], base_url=base_url, model=model,
                                     quality_file=measure_bundle.on_unit(remote_dir, "quality.json"), sandbox_image=entry["variant"]["image"],
                                     **probes)


def _load(entry: PlanEntry, r: InterferenceResident, s: InterferenceSettings, remote_dir: str) -> BackgroundLoad:
    """One resident's background load: its command line in a shell that records its pid, the
    command that stops it (SIGTERM: measure records the requests sent so far) and its output file."""
    settings = settings_mod.normalize({**entry["settings"], **SINGLE, "runs": 1, "warmup": 0,
                                       "output_tokens": s["load_output_tokens"], "rates": [s["load_rps"]],
                                       "rate_duration_s": LOAD_SPAN_S})
    argv = _argv(entry, settings, r["base_url"], r["model"], remote_dir, {"nvidia_smi": "none", "kernel_log": None})
    base = f"{remote_dir}/load-{entry['name']}-{r['name']}"
    return {"resident": r["name"], "out": f"{base}.json", "pid_file": f"{base}.pid", "log": f"{base}.log",
            # measure's line when the arrival-rate phase starts sending (phases/rates.py)
            "sending": f"rate {s['load_rps']:g} req/s: [0-9]+ requests over",
            "start_argv": ["sh", "-c", 'echo $$ > "$0.pid"; exec "$@" > "$0.json" 2> "$0.log"', base] + argv,
            "stop_argv": ["sh", "-c", 'kill -TERM "$(cat "$0.pid")" 2>/dev/null || true', base]}


def entry_block(entry: PlanEntry, residents: Sequence[CoResident], s: InterferenceSettings | None,
                remote_dir: str) -> InterferenceBlock | None:
    """The entry's ``interference`` block, None when off (``s`` None), without residents, or for a
    bracket or cluster entry. ``residents``: the unit's running residents ``{name, variant, port,
    listen, model}``."""
    running = [r for r in residents if r.get("model")]
    if s is None or not running or entry.get("bracket") or entry.get("cluster"):
        return None
    rows: list[InterferenceResident] = [
        {"name": str(r["name"]), "variant": str(r.get("variant")), "port": int(r["port"]),
         "base_url": f"http://{reach_address(r.get('listen'))}:{int(r['port'])}", "model": str(r["model"])}
        for r in running]
    for r in rows:
        r["health_url"] = f"{r['base_url']}/health"
    single = settings_mod.normalize({**entry["settings"], **SINGLE, "runs": s["runs"]})
    names = ", ".join(r["name"] for r in rows)
    return {"load_rps": s["load_rps"], "runs": s["runs"], "load_output_tokens": s["load_output_tokens"],
            "residents": rows, "loads": [_load(entry, r, s, remote_dir) for r in rows],
            "measure_argv": _argv(entry, single, entry["launch"]["base_url"], entry["variant"]["model"], remote_dir,
                                  _probes(entry["measure_argv"])),
            "lines": [f"interference (bench_interference): {entry['name']} alone — the residents {names} are stopped "
                      "for its measurement and started again afterwards (also when it fails) —, then beside them "
                      f"idle, then beside them under {s['load_rps']:g} req/s each (a background load on the unit), "
                      f"{s['runs']} single-stream requests per co-resident condition; the memory plan holds them together"]}
