"""A host's plan (``plan_host``): its variables → every variant it will serve, complete, with its
cluster, bandwidth probe, provisioning (images, models, disk sizes), unit cache folders and memory
context; and the check that its results folder can be written (``ensure_host_dir``). The package
docstring (``sparkbench.plan``) describes the plan as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .. import cluster as cluster_mod
from .. import memory as memory_mod
from .. import preflight as preflight_mod
from .. import settings as settings_mod
from ..bandwidth import probe_container
from ..errors import InputError
from ..interference import variable as interference_variable
from ..launch import unit_caches
from ..matrix import noprefix_variants, variant_matrix, with_tool_flags
from ..unit_home import sim_unit_block, unit_block
from ..values import as_bool
from .bracket import bracket_entry, reference_entry
from .entries import HostContext, summary, variant_entry, with_memory
from .resident_check import memory_residents
from .variables import gpu_probe, host_variables, load_profiles, probe_commands, server_settings

if TYPE_CHECKING:
    from .. import plan_types as pt
    from ..cluster.shapes import ClusterSpec, HostVars
    from ..matrix import Variant
    from ..settings import Settings


#: What the simulator's `hf download` stand-in writes per model (GB): config, tokenizer, stubs.
SIMULATED_DOWNLOAD_GB = 0.01


def _simulated(variables: HostVars) -> bool:
    """A simulated host: ``sparkbench_simulated`` when set, else ``sparkbench_gpu_less`` (as the
    result documents decide, sparkbench.result.host_facts)."""
    sim = variables.get("sparkbench_simulated")
    return as_bool(variables.get("sparkbench_gpu_less", False) if sim is None or sim == "" else sim)


def _variants(v: pt.HostVariables, variables: HostVars
              ) -> tuple[pt.HardwareProfile, dict[str, pt.ModelProfile], Settings, list[Variant]]:
    """``(hardware profile, model profiles, measurement settings, variants)`` of the host: the
    matrix expanded with its extra variants (the backend comparison's, the serving workload's
    prefix-caching pair) and the tool-call flags when the tool check runs."""
    extra = list(v["bench_extra_variants"] or [])
    if as_bool(v["bench_backend_comparison"]):
        extra += list(v["bench_backend_variants"] or [])
    models = list(dict.fromkeys([b.get("model") for b in v["bench_builds"] if isinstance(b, Mapping) and b.get("model")]
                                + [e["model"] for e in extra if isinstance(e, Mapping) and e.get("model")]))
    hardware, model_profiles = load_profiles(models, str(v["bench_hardware_profile_name"]), v["bench_profiles_dir"])
    raw_settings = settings_mod.from_vars(variables)
    problems = settings_mod.settings_errors(raw_settings, model_profiles, hardware)
    if problems:
        raise InputError("; ".join(problems))
    settings = settings_mod.normalize(raw_settings)
    if "serving" in settings_mod.workloads(variables):  # the prefix-caching pair
        extra += noprefix_variants(v["bench_builds"], v["bench_configs"], extra)
    variants = variant_matrix(v["bench_builds"], v["bench_configs"], common_args=v["bench_common_args"],
                              extra_variants=extra, select=v["bench_select"], image=v["bench_image"],
                              vllm_version=v["bench_vllm_version"] or None, profiles=model_profiles)
    if settings["tools"]:  # the server's parser for the tool-call check (every tool choice on vLLM 0.32)
        variants = [with_tool_flags(variant, model_profiles.get(variant["model"])) for variant in variants]
    return hardware, model_profiles, settings, variants


def _cluster_of(v: pt.HostVariables, host: str, members: list[tuple[str, HostVars]] | None,
                gpus: int) -> tuple[ClusterSpec | None, Literal["head", "worker"] | None]:
    """``(the cluster's spec, this host's role: head | worker)``; ``(None, None)`` without ``bench_cluster``."""
    if not str(v["bench_cluster"] or ""):
        return None, None
    spec = cluster_mod.cluster_spec(str(v["bench_cluster"]), list(members or []), gpus_per_node=gpus)
    role = "head" if spec["head"] == host else ("worker" if host in spec["members"] else None)
    if role is None:
        raise InputError(f"bench_cluster is {v['bench_cluster']!r} but {host} is not in that group; set "
                         "bench_cluster only in the cluster group's group_vars")
    return spec, role


def _provisioning(host: str, spec: ClusterSpec | None, provisioned_entries: list[pt.VariantNeed],
                  model_profiles: Mapping[str, pt.ModelProfile], simulated: bool) -> pt.Provisioning:
    """The images and models the host provisions (its variants', its cluster variants', the ones
    it serves as a cluster worker) and the disk check's sizes."""
    return {
        "images": list(dict.fromkeys([e["variant"]["image"] for e in provisioned_entries]
                                     + ([n["image"] for n in spec["nodes"] if n["host"] == host] if spec else []))),
        # in_image: the model ships inside the image (its profile says so): nothing to download.
        "models": list({(e["variant"]["model"]): {"model": e["variant"]["model"], "revision": e["variant"]["revision"],
                                                  "image": e["variant"]["image"],
                                                  "in_image": bool(e["model_profile"].get("in_image", False))}
                        for e in provisioned_entries}.values()),
        # The disk check's sizes (GB). A simulated host's `hf download` (the simulator image's stand-in)
        # writes a config and stub files of a few kB, not the weights: nothing of the model's size.
        "model_sizes": {m: (SIMULATED_DOWNLOAD_GB if simulated else p.get("download_size_gb", 0))
                        for m, p in model_profiles.items()},
    }


def plan_host(variables: HostVars, host: str, check_mode: bool = False,
              members: list[tuple[str, HostVars]] | None = None, residents: bool = True) -> pt.HostPlan:
    """The host's plan (see the package docstring). ``members``: when the host is in a cluster
    (``bench_cluster``), every member's ``(host, variables)`` in inventory order (the action plugin
    reads them from hostvars). ``residents``: count the unit's residents in its memory plan (from
    the controller's deployment records until ``with_residents`` has the unit's listing); off for
    health.yml, which measures a unit's resident instead of starting a canary beside it."""
    v = host_variables(variables)
    hardware, model_profiles, settings, variants = _variants(v, variables)
    server = server_settings(v, host)
    known = preflight_mod.load_known_issues()
    remote_dir = str(v["llm_bench_remote_dir"] or f"/tmp/sparkbench-{host}")
    probes = probe_commands(v, server["container_name"])
    gpus = cluster_mod.gpus_per_node(hardware)
    spec, role = _cluster_of(v, host, members, gpus)
    hp = HostContext(v=v, host=host, hardware=hardware, settings=settings, server=server,
                     known=known, remote_dir=remote_dir, probes=probes, gpus=gpus)
    mem = {**memory_mod.context(host, hardware, v), "results_dir": str(v["bench_results_dir"]),
           "profiles_dir": str(v["bench_profiles_dir"]), "residents_off": not residents}
    unit_residents, where = (memory_residents({"memory": mem, "host": host, "hardware": hardware}, None) if residents
                             else ([], "none counted (health.yml measures a resident instead of a canary)"))
    entries = []
    cluster_entries = []
    worker_needs: list[pt.VariantNeed] = []
    for variant in variants:
        tp, pp = cluster_mod.world_size(variant.get("args"))
        on_cluster = cluster_mod.is_cluster_variant(variant.get("args"), gpus)
        model_profile = model_profiles[variant["model"]]
        if on_cluster and role == "worker":  # planned and measured on the head; provisioned here too
            worker_needs.append({"variant": variant, "model_profile": model_profile})
            continue
        head = on_cluster and role == "head"
        entry = with_memory(variant_entry(hp, variant, model_profile, spec["serve"] if head else None,
                                          (tp, pp) if on_cluster and role is None else None),
                            mem, unit_residents, where)
        if head:
            entry["cluster"] = {"name": spec["name"], "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
            entry["summary"] = ([f"cluster variant: across {' + '.join(spec['members'])} (Ray, TP={tp}, PP={pp}); "
                                 f"vllm serve runs in {spec['serve']['container']}"] + summary(entry, check_mode))
            cluster_entries.append(entry)
            continue
        entry["summary"] = summary(entry, check_mode)
        entries.append(entry)
    bracket = (bracket_entry(entries, v, host, remote_dir, check_mode) if as_bool(v["bench_bracket"]) else None)
    first = reference_entry(entries + cluster_entries)  # the first variant this run launches
    return {
        "host": host, "run_id": str(v["bench_run_id"]), "remote_dir": remote_dir, "settings": settings,
        "names": [e["name"] for e in entries], "variants": entries, "bracket": bracket,
        # The cluster (sparkbench.cluster.cluster_spec) and, on its head, the variants run across it.
        "cluster": spec, "cluster_role": role,
        "cluster_names": [e["name"] for e in cluster_entries], "cluster_variants": cluster_entries,
        # The bandwidth probe's container (sparkbench.bandwidth.probe_container), from the first variant this run
        # launches; None when none launches (nothing to probe for) or bench_bandwidth_probe is false.
        "probe": (probe_container.probe_spec(first, gpu_probe(v), remote_dir)
                  if first and as_bool(v["bench_bandwidth_probe"]) else None),
        **_provisioning(host, spec, entries + cluster_entries + worker_needs, model_profiles, _simulated(variables)),
        "host_dir": str(Path(v["bench_results_dir"]) / str(v["bench_run_id"]) / host),
        # The unit's cache folders (host paths; <unit home>/… until with_unit has the unit's home).
        "unit": unit_block(unit_caches(v), None),
        # A simulated unit's shared account: the directory made before any container starts, tenants.json.
        "sim_unit": sim_unit_block(v["sparkbench_sim_unit_dir"], v["bench_tenants"]),
        # What every variant's memory plan shares (sparkbench.memory; with_residents reads it again).
        "memory": mem,
        # bench_interference checked (sparkbench.interference; None: off); with_residents plans it per variant.
        "interference": interference_variable.settings(v["bench_interference"], settings), "hardware": hardware, "check_mode": bool(check_mode),
    }


def ensure_host_dir(plan: pt.HostPlan) -> None:
    """Check that ``<results>/<run>/`` can be written on the controller (an unwritable place is an
    input error). The host's own directory appears with its first result."""
    where = Path(plan["host_dir"]).parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / f".write-test-{plan['host']}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"bench_results_dir {where.parent} is not a writable directory ({exc.strerror or exc}); "
                         "set bench_results_dir (scripts/sparkbench --results-dir) to a directory you can write") from None
