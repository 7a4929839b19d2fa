"""Every entry's memory plan checked again against the residents the unit lists
(``with_residents``: its containers labelled ``sparkbench.resident``, ``sparkbench.residents``), and
with ``bench_interference`` on, each variant's interference steps against them
(``sparkbench.interference.steps``). Before the unit has answered the residents come from the
controller's deployment records (``memory_residents``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, cast

from .. import memory as memory_mod
from .. import residents as residents_mod
from ..interference import steps as interference_steps
from ..result_files import json_object
from .entries import summary, with_memory

if TYPE_CHECKING:
    from .. import plan_types as pt
    from ..memory.engine import MemoryRow
    from ..residents import DockerContainer, Resident
    from ..result_shapes import StoredResult


def memory_residents(plan: pt.HostPlan, listing: list[Resident] | None) -> tuple[list[MemoryRow], str]:
    """The unit's residents as plan rows: its ``listing`` when read, else the controller's records."""
    mem = plan["memory"]
    found, where = memory_mod.present(mem["results_dir"], plan["host"], listing)
    return memory_mod.rows(found, plan["hardware"], mem["profiles_dir"], mem["total_gb"]), where


def _interference_residents(plan: pt.HostPlan, listing: list[Resident]) -> list[pt.CoResident]:
    """The unit's running residents with what a background load needs: the address they listen on
    and the model they serve (from the result each was deployed from)."""
    found, _ = memory_mod.present(plan["memory"]["results_dir"], plan["host"], listing)
    listen = {r["name"]: r.get("listen") for r in listing}
    docs = [cast("StoredResult", json_object(f["path"])) for f in found]  # each result as it lies
    return [{**f, "listen": listen.get(f["name"]), "model": (doc.get("variant") or {}).get("model")}
            for f, doc in zip(found, docs)]


def with_residents(plan: pt.HostPlan, containers: list[DockerContainer] | None) -> pt.HostPlan:
    """The plan with every entry's memory plan checked again against the residents the unit
    lists (``containers``: community.docker.docker_host_info's verbose list, label
    ``sparkbench.resident``), its summary lines rebuilt; with ``bench_interference`` on, each
    variant's interference steps against those residents (``sparkbench.interference``)."""
    if not plan.get("memory") or plan["memory"].get("residents_off"):
        return dict(plan)
    # Simulated units of one machine share its Docker engine: this unit's residents mount its account.
    listing = residents_mod.on_unit(residents_mod.residents(containers or []), (plan.get("sim_unit") or {}).get("dir"))
    residents, where = memory_residents(plan, listing)
    coresident = _interference_residents(plan, listing) if plan.get("interference") else []

    def again(entry: pt.PlanEntry) -> pt.PlanEntry:
        new = with_memory(entry, plan["memory"], residents, where)
        new["interference"] = interference_steps.entry_block(new, coresident, plan.get("interference"), plan["remote_dir"])
        head = list(itertools.takewhile(lambda line: not line.startswith("command: "), entry.get("summary") or []))
        new["summary"] = head + summary(new, bool(plan.get("check_mode"))) + (
            new["interference"]["lines"] if new["interference"] else [])
        return new

    out = dict(plan)
    out["variants"] = [again(e) for e in plan.get("variants") or []]
    out["cluster_variants"] = [again(e) for e in plan.get("cluster_variants") or []]
    if plan.get("bracket"):
        out["bracket"] = again(plan["bracket"])
    return out
