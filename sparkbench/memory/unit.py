"""The unit's memory plan: what lives in one unit's memory when a new engine starts, and whether
it fits, checked on the controller before any container starts.

The rows: the system's reserve, the residents already on the unit (``sparkbench.memory.resident_rows``),
the declared non-vLLM tenants (``bench_tenants: [{name, gb}]`` per host: a RAG store, ComfyUI), and
the new engine (``sparkbench.memory.engine``). The plan fits when their sum is at most the unit's
total: vLLM refuses to start an engine whose share is more than what is free ("Free memory on
device ... is less than desired GPU memory utilization ...", ``vllm/v1/worker/utils.py``; on GB10
"free" is MemAvailable, shared/reference/vllm-logs-and-telemetry.md §5.2 and §5.4).

The total: ``bench_unit_memory_gb`` when set, else the hardware profile's ``unified_memory_gb``
(128 GB for dgx-spark; a real GB10 shows the OS about 121.7 GiB, §5.4, and vLLM takes its share of
that). A CPU host's profile gives none: its plan lists the needs and checks each engine alone.

The reserve (``bench_memory_reserve_gb``, default ``RESERVE_GB``): the OS, Docker and the page
cache's floor — a GB10 at rest used 5.8 GiB (121.69 − 115.85 GiB MemAvailable, §5.4) — plus a
margin of about 2 GB. It is stated, not measured, and cannot be checked on a real Spark here.
"""
from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ..errors import InputError
from .engine import GB, GIB
from .table import lines as table_lines

if TYPE_CHECKING:
    from ..cluster.shapes import HostVars
    from ..plan_types import HardwareProfile
    from .engine import MemoryProblem, MemoryRow


class TenantEntry(TypedDict):
    """One of ``bench_tenants`` as the inventory writes it: a non-vLLM tenant of the unit and its GB."""

    name: str
    gb: float | int | str


class MemoryVariables(TypedDict):
    """The host variables of the unit's memory plan (``VARIABLES``), as the inventory writes them."""

    bench_tenants: list[TenantEntry] | None
    bench_memory_reserve_gb: float | int | str | None
    bench_unit_memory_gb: float | int | str | None


class UnitMemory(TypedDict):
    """What every memory plan of a host shares (``context``): the unit's total and where it comes
    from (None: unknown), the system's reserve and why, the declared tenants as plan rows."""

    host: str
    total_gb: float | None
    total_source: str
    reserve_gb: float
    reserve_note: str
    tenants: list[MemoryRow]


class _MemoryPlanRequired(TypedDict):
    host: str
    total_gb: float | None
    total_source: str
    reserve_gb: float
    reserve_note: str
    residents_from: str
    rows: list[MemoryRow]
    used_gb: float
    free_gb: float | None
    fits: bool | None
    problems: list[MemoryProblem]
    lines: list[str]


class MemoryPlan(_MemoryPlanRequired, total=False):
    """The unit's memory plan for one engine (``plan``; a plan entry's ``memory``): its rows, the sum,
    whether it fits (None: the total is unknown), what vLLM would refuse, the table ``--check``
    prints; ``refusal`` (``refusal``'s text) where sparkbench.serve adds it."""

    refusal: str


#: The host variables the plan reads, with their defaults.
VARIABLES: MemoryVariables = {"bench_tenants": [], "bench_memory_reserve_gb": None, "bench_unit_memory_gb": None}
RESERVE_GB = 8.0
RESERVE_NOTE = ("the OS, Docker and the page cache's floor (a GB10 at rest: 5.8 GiB in use) plus about 2 GB of "
                "margin; stated, not measured: it cannot be checked on a real Spark here "
                "(bench_memory_reserve_gb sets it)")
VLLM_FREE = ("ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup is less than desired "
             "GPU memory utilization ({util}, {want:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory "
             "used by other processes.", "vllm/v1/worker/utils.py, the startup memory check")


def _number(value: Any, field: str, fix: str) -> float:
    """A number of GB at or above 0 (a bool is none), else ``InputError`` naming ``field`` and ``fix``."""
    out = None
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            out = float(value)
    if out is None or out < 0:
        raise InputError(f"{field} is {value!r}, not a number of GB at or above 0; {fix}")
    return out


def tenants(value: Any) -> list[MemoryRow]:
    """``bench_tenants`` checked: ``[{kind: tenant, name, gb}]``; a bad entry raises naming the field and the fix."""
    shape = "bench_tenants: [{name: rag-store, gb: 20}]"
    if value in (None, ""):
        return []
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise InputError(f"bench_tenants is {value!r}; write a list of the unit's non-vLLM tenants: {shape}")
    out, seen = [], set()
    for i, item in enumerate(value):
        where = f"bench_tenants[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"name", "gb"}:
            raise InputError(f"{where} is {item!r}; each tenant is {{name, gb}} and nothing else: {shape}")
        name = str(item.get("name") or "").strip()
        if not name or name in seen:
            raise InputError(f"{where}.name is {item.get('name')!r}; give each tenant its own name: {shape}")
        seen.add(name)
        gb = _number(item.get("gb"), f"{where}.gb", f"set the GB {name} keeps in the unit's memory, e.g. gb: 20")
        out.append({"kind": "tenant", "name": name, "gb": gb, "share": "bench_tenants", "share_short": "bench_tenants"})
    return out


def context(host: str, hardware: HardwareProfile, variables: MemoryVariables | HostVars) -> UnitMemory:
    """What every plan of the host shares: the total and its source, the reserve, the tenants."""
    v = {k: (variables.get(k) if variables.get(k) not in (None, "") else d) for k, d in VARIABLES.items()}
    fix_total = "set the unit's memory in GB, e.g. bench_unit_memory_gb: 128 (or leave it unset)"
    if v["bench_unit_memory_gb"] is not None:
        total, source = _number(v["bench_unit_memory_gb"], "bench_unit_memory_gb", fix_total), "bench_unit_memory_gb"
    elif hardware.get("unified_memory_gb"):
        total = float(hardware["unified_memory_gb"])
        source = f"hardware profile {hardware.get('name')}, unified_memory_gb"
    else:
        total, source = None, f"hardware profile {hardware.get('name')} gives none; bench_unit_memory_gb sets it"
    reserve = (RESERVE_GB if v["bench_memory_reserve_gb"] is None else _number(
        v["bench_memory_reserve_gb"], "bench_memory_reserve_gb", "set the GB the system keeps, e.g. 8"))
    return {"host": host, "total_gb": total, "total_source": source, "reserve_gb": reserve,
            "reserve_note": RESERVE_NOTE, "tenants": tenants(v["bench_tenants"])}


def plan(ctx: UnitMemory, residents: Sequence[MemoryRow], engine: MemoryRow, residents_from: str) -> MemoryPlan:
    """The unit's plan for ``engine`` beside ``residents`` and the tenants: ``{host, total_gb, rows,
    used_gb, free_gb, fits, problems, lines}`` (``fits`` None when the total is unknown)."""
    reserve: MemoryRow = {"kind": "reserve", "name": "system", "gb": ctx["reserve_gb"], "share": "stated margin",
               "share_short": "stated margin"}
    rows = [reserve, *residents, *ctx["tenants"], engine]
    used = sum(float(r["gb"]) for r in rows if r.get("gb") is not None)
    total = ctx["total_gb"]
    problems = list(engine.get("problems") or [])
    if total is not None and used > total + 1e-9:
        problems.append(_overcommit(ctx, rows, engine, used))
    out: MemoryPlan = {"host": ctx["host"], "total_gb": total, "total_source": ctx["total_source"],
           "reserve_gb": ctx["reserve_gb"], "reserve_note": ctx["reserve_note"], "residents_from": residents_from,
           "rows": rows, "used_gb": used, "free_gb": None if total is None else total - used,
           "fits": False if problems else (None if total is None else True), "problems": problems}
    out["lines"] = table_lines(out)
    return out


def _overcommit(ctx: UnitMemory, rows: Sequence[MemoryRow], engine: MemoryRow, used: float) -> MemoryProblem:
    """The refusal of a plan whose sum is beyond the unit's total, with the numbers and the fix."""
    total = float(ctx["total_gb"])
    others = used - float(engine.get("gb") or 0.0)
    free = total - others
    named = ", ".join(f"{r['kind']} {r['name']} {float(r['gb']):.1f} GB" for r in rows
                      if r is not engine and r.get("gb") is not None)
    reason = (f"the unit's memory plan does not fit: {engine['name']} takes {float(engine['gb']):.1f} GB "
              f"({engine['share']}) beside {named}: {used:.1f} GB of {total:g} GB, {used - total:.1f} GB over")
    if engine.get("utilization") is not None:
        most = free / total
        fix = (f"lower {engine['name']}'s --gpu-memory-utilization to {max(most, 0.0):.2f} or less ({max(free, 0.0):.1f} GB "
               "are left for it) and its --max-model-len with it" if most > 0.05 else
               f"nothing is left for {engine['name']}")
    else:
        fix = f"give {engine['name']} less (VLLM_CPU_KVCACHE_SPACE) — {max(free, 0.0):.1f} GB are left for it"
    remedy = (f"{fix}; or make room: undeploy a resident (playbooks/serve.yml -e serve_variant=NAME -e "
              "serve_state=absent), shrink bench_tenants, or lower bench_memory_reserve_gb if the unit keeps less")
    text, src = VLLM_FREE
    vllm = text.format(free=max(free, 0.0) * GB / GIB, total=total * GB / GIB, util=engine.get("utilization") or "-",
                       want=float(engine["gb"]) * GB / GIB)
    return {"id": "memory_plan", "reason": reason, "remedy": remedy, "vllm": vllm, "source": src}


def refusal(p: MemoryPlan) -> str:
    """One text for a plan that cannot fit: every problem's reason, vLLM's own message, the fix."""
    return " | ".join(f"{x['reason']} — vLLM's own message for this case ({x['source']}): \"{x['vllm']}\" — "
                      f"fix: {x['remedy']}" for x in p.get("problems") or [])
