"""A deployment's place in the unit's memory plan (``sparkbench.memory``), before the unit is touched.

The residents it leaves running — every resident of the unit but the one it replaces (the same
variant's, or the one on ``serve_port``) —, the declared tenants (``bench_tenants``) and the
deployed engine, reckoned from the result it serves as measured. Before the unit has answered
(``serve.yml --check``) the residents are the controller's deployment records; once the unit's
listing is read, its running containers. A plan that cannot fit carries its ``refusal``: the
numbers, vLLM's own message for the case and the fix.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import memory as memory_mod
from ..plan import load_profiles

if TYPE_CHECKING:
    from ..memory.engine import MemoryRow
    from ..memory.resident_rows import PresentResident
    from ..memory.unit import MemoryPlan
    from ..residents import Resident
    from .shapes import Deployment, ServeSettings


def _replaced(found: PresentResident, dep: Deployment) -> bool:
    """Whether a resident is the one this deployment replaces (or one of its own containers)."""
    return (found.get("name") in set((dep.get("names") or {}).values()) or found.get("variant") == dep["variant"]
            or str(found.get("port")) == str(dep["port"]))


def deploy_plan(dep: Deployment, s: ServeSettings, host: str, results_dir: str,
                listing: Sequence[Resident] | None = None, beside: bool = False) -> MemoryPlan:
    """The unit's memory plan with ``dep`` (``sparkbench.serve.deploy_plan.deployment``) deployed;
    ``listing``: the unit's residents (``sparkbench.residents.residents``) once read; ``beside``:
    the resident it replaces kept too (the candidate tried beside it: ``deploy_plan.placement``)."""
    hardware, _ = load_profiles([], str(s["bench_hardware_profile_name"]), s["bench_profiles_dir"])
    ctx = memory_mod.context(host, hardware, s)
    found, where = memory_mod.present(results_dir, host, listing)
    kept = [f for f in found if beside or not _replaced(f, dep)]
    if len(kept) < len(found):
        where += f" (less {len(found) - len(kept)} this deploy replaces)"
    residents = memory_mod.rows(kept, hardware, s["bench_profiles_dir"], ctx["total_gb"])
    engine: MemoryRow = {**memory_mod.row_from_result("engine", dep["names"]["resident"], dep["source"]["path"],
                                                      hardware, s["bench_profiles_dir"], ctx["total_gb"]),
                         "variant": dep["variant"]}
    plan = memory_mod.plan(ctx, residents, engine, where)
    plan["refusal"] = memory_mod.refusal(plan) if plan["fits"] is False else ""
    return plan
