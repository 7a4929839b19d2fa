"""The plan on the unit: the unit's cache folders and a simulated unit's shared account, first as
``<unit home>/…`` (the controller plans before the unit answers), then resolved with the home the
unit reports (``with_unit``: every launch spec, summary line, the bracket and each cluster node).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from . import cluster as cluster_mod
from . import memory as memory_mod
from .launch import resolve_unit_path, sim_unit_path, unit_cache_list, unit_caches, unresolved_message, with_unit_home

if TYPE_CHECKING:
    from .cluster.shapes import HostVars
    from .launch import CacheFolder
    from .plan_types import HostPlan, PlanEntry


class UnitBlock(TypedDict):
    """``plan["unit"]`` (``unit_block``): the unit's home (None until read), the host path of each
    cache folder (``sparkbench.launch.UNIT_CACHES``' keys), whether all are real paths."""

    home: str | None
    hf_cache: str
    vllm_cache: str
    flashinfer_cache: str
    unresolved: str


class SimUnitBlock(TypedDict):
    """``plan["sim_unit"]`` (``sim_unit_block``): a simulated unit's shared account directory and the
    text of its ``tenants.json``."""

    dir: str
    tenants_json: str


def unit_cache_folders(variables: HostVars, home: Any) -> list[CacheFolder]:
    """The unit's cache folders one by one (``{key, variable, path, what}``) from the host's
    variables and its home, without a plan (playbooks/teardown.yml); a path left with the
    placeholder (no home) raises ``InputError``."""
    return unit_cache_list(unit_caches(variables, home))


def unit_block(caches: Mapping[str, str], home: str | None) -> UnitBlock:
    """``plan["unit"]``: the unit's home (None until read), its cache folders, whether all are
    real paths (``unresolved``: "" or why not)."""
    return {"home": home, **caches, "unresolved": unresolved_message(caches)}


def sim_unit_block(directory: Any, tenants: Any, home: Any = None) -> SimUnitBlock | None:
    """A simulated unit's shared account (``sparkbench_sim_unit_dir``; None when unset): the
    directory (``<unit home>/…`` until ``home`` is known) and ``tenants_json``, the text of its
    ``tenants.json`` (``bench_tenants`` as ``[{name, gb}]``, vllm_sim/unit_account.py)."""
    path = sim_unit_path(directory, home)
    if not path:
        return None
    declared = [{"name": t["name"], "gb": t["gb"]} for t in memory_mod.tenants(tenants)]
    return {"dir": path, "tenants_json": json.dumps(declared, indent=1) + "\n"}


def with_unit(plan: HostPlan, home: Any, member_homes: Mapping[str, str | None] | None = None) -> HostPlan:
    """The plan with the unit's ``home`` (its remote user's home, ``ansible_facts.user_dir`` read on
    the unit) put into every cache folder: ``plan["unit"]``, each launch spec (volumes, ``docker
    run`` line; the configuration hash does not change), its summary lines, the bracket; on a
    cluster's head every node of the cluster spec, each with its own member's home
    (``member_homes``: ``{host: home}``; a node whose home is unknown keeps the placeholder and
    ``ray_cluster`` start refuses it)."""
    home_text = str(home or "").strip() or None
    if home_text is None:
        return dict(plan)

    def resolved(entry: PlanEntry) -> PlanEntry:
        launch = with_unit_home(entry["launch"], home_text)
        old, new = entry["launch"]["command"], launch["command"]
        return {**entry, "launch": launch, "summary": [line.replace(old, new) for line in entry.get("summary") or []]}

    out = dict(plan)
    out["variants"] = [resolved(e) for e in plan.get("variants") or []]
    out["cluster_variants"] = [resolved(e) for e in plan.get("cluster_variants") or []]
    if plan.get("bracket"):
        out["bracket"] = resolved(plan["bracket"])
    if plan.get("sim_unit"):
        out["sim_unit"] = {**plan["sim_unit"], "dir": sim_unit_path(plan["sim_unit"]["dir"], home_text)}
    unit = plan.get("unit") or unit_block(unit_caches(), None)
    out["unit"] = unit_block({k: resolve_unit_path(str(unit[k]), home_text) for k in unit_caches()}, home_text)
    if plan.get("cluster"):
        homes = {**{str(h): v for h, v in (member_homes or {}).items() if v}, str(plan["host"]): home_text}
        out["cluster"] = cluster_mod.with_homes(plan["cluster"], homes)
    return out
