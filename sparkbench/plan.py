"""A host's plan: the variables of one inventory host → every variant it will serve, complete.

``plan_host(variables)`` reads the host's variables (the table ``VARIABLES`` names each one and
its default; nothing else reads them), loads the profiles, expands the matrix, checks the
measurement settings, and returns for each variant::

    {name, variant, launch, config_hash, result_path, action, preflight, model_profile,
     measure_argv, summary}

so the playbook only puts steps in order and passes these objects along. ``action`` is
``measure``, or ``skip`` when a complete result with the same configuration hash is stored (and
``bench_force`` is off).

``bracket`` (``bench_bracket``, default true) is one more entry of the same shape, or None: the
host's *reference* variant — the first variant of the plan whose action is ``measure`` and whose
preflight verdict is not ``fail`` (the first one this run really launches, so the bracket spans
the whole measured sequence) — measured again at the end of the sequence, single stream only
(no parallel, context depth 0, no quality, no image: drift shows in the decode rate, and the
extra minutes stay small). Same launch spec and configuration hash as the reference; name
``<variant>.bracket``, result ``<variant>.bracket.json`` (the main result and resume never read
it); ``bracket: {of: <variant>, position: end}`` goes into its document. bench.yml runs it only
when the reference's own result of this run is complete. None when no variant is measured.

``probe`` is the bandwidth probe's container (``sparkbench.bandwidth.spec.probe_spec``: a
throw-away container of the image of the first variant this run launches; the simulator's
stand-in on a simulated host, torch on the GPU on a Spark, torch on the CPU on a host without a
GPU), or None when no variant launches or ``bench_bandwidth_probe`` is false. Clusters (``sparkbench.cluster``): a host in a group declared a cluster (``bench_cluster: <group>``)
plans the *single-unit* variants as every host does; a *cluster variant* (tensor-parallel-size x
pipeline-parallel-size above the hardware profile's ``gpus_per_node``) is planned on the head only
(the group's first host), in ``cluster_variants``, with the cluster's spec in ``cluster``: its
launch runs ``vllm serve`` inside the head's Ray container, its result is written under the head
host. The other members plan none (``cluster_role: worker``), but provision the cluster's images
and models. On a host that declares no cluster, a cluster variant is refused by preflight
(``cluster_needed``). ``provisioned(plan, failures)`` adds the models whose download failed to
the preflight verdicts. Bad input raises ``InputError`` naming the variable and the fix, before
any host is touched.

The unit's cache folders (Hugging Face, vLLM's compile cache, FlashInfer's JIT cache;
``sparkbench.launch.UNIT_CACHES``) lie on the unit, below its remote user's home unless a variable
sets an absolute path. The plan is built on the controller before the unit has answered, so it
holds them as ``<unit home>/…`` (``plan["unit"]``, every launch spec, summary line and cluster node);
``unit_home.with_unit(plan, home, member_homes)`` puts the unit's home in once its facts are read
(``sparkbench_plan: {unit: {home: …}}`` in playbooks/tasks/host.yml). A launch spec that still holds
the placeholder is refused (``launch["unresolved"]``), never mounted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import cluster as cluster_mod
from . import flags as flags_mod
from . import interference as interference_mod
from . import measure_bundle
from . import memory as memory_mod
from . import preflight as preflight_mod
from . import result as result_mod
from . import settings as settings_mod
from .bandwidth import spec as bandwidth_spec
from .errors import InputError
from .launch import (
    config_hash,
    launch_spec,
    unit_caches,
)
from .matrix import noprefix_variants, variant_matrix, with_tool_flags
from .paths import DEFAULT_RESULTS_DIR, PROFILES_DIR, hardware_profile_path, model_profile_path, result_path
from .serve import record as record_mod
from .unit_home import sim_unit_block, unit_block

if TYPE_CHECKING:  # the plan's own shapes: sparkbench/plan_types.py (pt.PlanEntry, pt.HostPlan, ...)
    from . import plan_types as pt
    from .cluster.shapes import ClusterSpec, HostVars, ServeSpec
    from .launch import ServerSettings
    from .matrix import Variant
    from .measure.shapes import JSONObject
    from .memory.engine import MemoryRow
    from .preflight import KnownIssues, Preflight
    from .serve.shapes import DockerContainer
    from .settings import Settings, SettingsInput

LOOPBACK = ("127.0.0.1", "localhost", "::1")

#: The host variables a plan reads, with their defaults (roles/*/defaults/main.yml hold the same
#: defaults for standalone role use; tests/test_result_documents.py keeps the two equal).
VARIABLES: pt.HostVariables = {
    "bench_builds": None,
    "bench_configs": [{"name": "default"}],
    "bench_common_args": {},
    "bench_extra_variants": [],
    "bench_backend_comparison": False,
    "bench_backend_variants": [],
    "bench_select": [],
    "bench_image": "sparkbench/vllm-sim:latest",
    "bench_vllm_version": "",
    "bench_hardware_profile_name": "dgx-spark",
    "bench_profiles_dir": str(PROFILES_DIR),
    "bench_results_dir": str(DEFAULT_RESULTS_DIR),
    "bench_run_id": None,
    "bench_force": False,
    "bench_bracket": True,
    "bench_bandwidth_probe": True,
    "bench_cluster": "",
    "bench_workloads": "standard",
    "vllm_server_host": "127.0.0.1",
    "vllm_server_port": 8000,
    "vllm_server_container_prefix": "sparkbench-vllm",
    "vllm_server_env": {},
    "vllm_server_ready_timeout_s": 900,
    "vllm_server_preflight_enabled": True,
    "vllm_server_api_key": "",
    "spark_host_hf_token": "",
    "sparkbench_hf_token": "",
    "sparkbench_api_key": "",
    "spark_host_hf_cache": "",
    "spark_host_vllm_cache": "",
    "spark_host_flashinfer_cache": "",
    # a simulated unit's shared account (scripts/vllm_sim/unit_account.py); "" = none
    "sparkbench_sim_unit_dir": "",
    "sparkbench_gpu_less": False,
    "spark_host_gpu_probe": "",
    "llm_bench_python": "python3",
    "llm_bench_remote_dir": "",
    # the unit's memory plan (sparkbench.memory): tenants, reserve, total
    **memory_mod.VARIABLES,
    # what co-residence costs (sparkbench.interference): off unless set
    **interference_mod.VARIABLES,
}


#: What the simulator's `hf download` stand-in writes per model (GB): config, tokenizer, stubs.
SIMULATED_DOWNLOAD_GB = 0.01


def _simulated(variables: HostVars) -> bool:
    """A simulated host: ``sparkbench_simulated`` when set, else ``sparkbench_gpu_less`` (as the
    result documents decide, sparkbench.result.host_facts)."""
    sim = variables.get("sparkbench_simulated")
    return as_bool(variables.get("sparkbench_gpu_less", False) if sim is None or sim == "" else sim)


def as_bool(value: Any) -> bool:
    """An inventory flag (a bool, or "true"/"yes"/"on"/"1" in any case) as a bool."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _load_json(path: Path, what: str) -> JSONObject:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); fix the {what} profile") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path} must hold a JSON object; copy a neighbour in {path.parent}")
    return doc


def load_profiles(models: list[str], hardware: str,
                  profiles_dir: str | Path) -> tuple[pt.HardwareProfile, dict[str, pt.ModelProfile]]:
    """The hardware profile and one model profile per model; a missing file names the path and the fix."""
    missing = [str(p) for p in [model_profile_path(m, profiles_dir) for m in models] if not p.is_file()]
    hw_path = hardware_profile_path(hardware, profiles_dir)
    if not hw_path.is_file():
        missing.append(str(hw_path))
    if missing:
        raise InputError(f"missing profile(s): {', '.join(missing)}; add the JSON file (copy a neighbour in "
                         "profiles/) or fix the model / bench_hardware_profile_name")
    return (_load_json(hw_path, "hardware"),
            {m: _load_json(model_profile_path(m, profiles_dir), "model") for m in models})


def server_settings(v: pt.HostVariables, host: str) -> ServerSettings:
    """The launch settings of this host (sparkbench.launch's ``server`` argument)."""
    secret_env = []
    if str(v["spark_host_hf_token"] or v["sparkbench_hf_token"] or ""):
        secret_env.append("HF_TOKEN")
    if str(v["vllm_server_api_key"] or v["sparkbench_api_key"] or ""):
        secret_env.append("VLLM_API_KEY")
    # The unit's cache folders as far as the controller knows them: <unit home>/… until with_unit.
    return {"host": str(v["vllm_server_host"]), "port": v["vllm_server_port"],
            "container_name": f"{v['vllm_server_container_prefix']}-{host}", **unit_caches(v),
            "sim_unit_dir": v["sparkbench_sim_unit_dir"],
            "gpus": not as_bool(v["sparkbench_gpu_less"]), "env": dict(v["vllm_server_env"] or {}),
            "secret_env": secret_env, "ready_timeout_s": v["vllm_server_ready_timeout_s"]}


def measure_command(v: pt.HostVariables, remote_dir: str) -> list[str]:
    """How measure starts on the host: its python3, isolated (``-I``), running the zipapp llm_bench
    copied into the host's work directory (docs/ARCHITECTURE.md, "measure on a unit")."""
    return [str(v["llm_bench_python"]), "-I", measure_bundle.on_unit(remote_dir)]


def gpu_probe(v: pt.HostVariables) -> str:
    """How the host's GPU is read: ``spark_host_gpu_probe`` (empty: ``image`` when
    ``sparkbench_gpu_less``, else ``host``, as roles/spark_host's default); bad input raises."""
    probe = str(v.get("spark_host_gpu_probe") or "").strip() or ("image" if as_bool(v["sparkbench_gpu_less"]) else "host")
    if probe not in ("host", "image", "none"):
        raise InputError(f"spark_host_gpu_probe is {probe!r}; set it to host (the host's nvidia-smi), image (the "
                         "simulator image's stand-in) or none (no GPU)")
    return probe


def probe_commands(v: pt.HostVariables, container: str) -> pt.ProbeCommands:
    """measure.py's ``--nvidia-smi`` and ``--kernel-log`` for this host, from ``spark_host_gpu_probe``
    (empty: ``image`` when ``sparkbench_gpu_less``, else ``host``, as roles/spark_host's default):
    ``host`` (a real Spark) → None, None (measure.py's defaults: ``nvidia-smi`` and ``dmesg`` on the
    host); ``image`` (the simulator) → the stand-ins inside the variant's container,
    ``docker exec <container> nvidia-smi`` / ``docker exec <container> dmesg``; ``none`` (no GPU,
    e.g. vLLM on a CPU) → ``--nvidia-smi none`` (telemetry off, "no GPU on this host") and the
    host's ``dmesg``."""
    probe = gpu_probe(v)
    if probe == "image":
        return {"nvidia_smi": f"docker exec {container} nvidia-smi", "kernel_log": f"docker exec {container} dmesg"}
    if probe == "none":
        return {"nvidia_smi": "none", "kernel_log": None}
    return {"nvidia_smi": None, "kernel_log": None}


def _summary(entry: pt.PlanEntry, check_mode: bool) -> list[str]:
    pf = entry["preflight"]
    lines = [f"command: {entry['launch']['command']}"]
    verdict = f"preflight: {pf['verdict']}"
    if pf.get("failures"):
        verdict += (" — " + "; ".join(f["reason"] for f in pf["failures"])
                    + " — fix: " + "; ".join(f["remedy"] for f in pf["failures"]))
    lines.append(verdict)
    for r in pf.get("refused") or []:
        lines.append(f"{r['phase']} check refused: {r['reason']} — fix: {r['remedy']}")
    if check_mode:
        lines.append("action: dry run (--check)")
    elif entry["action"] == "skip":
        lines.append("action: skip: complete result with the same configuration hash (bench_force=true re-measures)")
    else:
        lines.append("action: measure")
    return lines


def _cluster_needed(entry_pf: Preflight, tp: int, pp: int, gpus: int) -> Preflight:
    """Preflight's refusal of a cluster variant on a host that declares no cluster."""
    fail = {"id": "cluster_needed",
            "reason": (f"tensor-parallel-size {tp} x pipeline-parallel-size {pp} needs {tp * pp} GPUs; this host has "
                       f"{gpus} and is not the head of a cluster"),
            "remedy": ("put the hosts in one inventory group whose first host is the head and set bench_cluster: "
                       "<that group> in its group_vars (inventory/group_vars/sim_pair/main.yml shows the shape), or "
                       "drop tensor-parallel-size / pipeline-parallel-size from this host's matrix")}
    return {**entry_pf, "verdict": "fail", "failures": list(entry_pf.get("failures") or []) + [fail]}


def _host_variables(variables: HostVars) -> pt.HostVariables:
    """Every variable of ``VARIABLES`` (its default where unset or null), the ones a plan cannot
    start without checked."""
    v = {name: variables.get(name, default) if variables.get(name) is not None else default
         for name, default in VARIABLES.items()}
    if not v["bench_builds"]:
        raise InputError("bench_builds is not set for this host; list at least one build "
                         "({name, model}) in inventory/group_vars (see docs/ANSIBLE.md)")
    if not v["bench_run_id"]:
        raise InputError("bench_run_id is empty; leave it unset (a UTC time is used) or set -e bench_run_id=ID")
    listen = str(v["vllm_server_host"])
    if listen not in LOOPBACK and not str(v["vllm_server_api_key"] or v["sparkbench_api_key"] or ""):
        raise InputError(f"vllm_server_host is {listen}: a server listening beyond loopback needs an API key; "
                         "export SPARKBENCH_API_KEY (or set vault_vllm_api_key with ansible-vault), or keep "
                         "vllm_server_host: 127.0.0.1")
    return v


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


@dataclass(frozen=True)
class _HostPlan:
    """What every variant of one host's plan shares."""

    v: pt.HostVariables
    host: str
    hardware: pt.HardwareProfile
    settings: Settings
    server: ServerSettings
    known: KnownIssues
    remote_dir: str
    probes: pt.ProbeCommands
    gpus: int


def _preflight(hp: _HostPlan, variant: Variant, model_profile: pt.ModelProfile,
               cluster_needed: tuple[int, int] | None) -> Preflight:
    """The variant's preflight verdict: known issues, the flags against the image's vLLM version,
    and ``cluster_needed`` (``(tp, pp)``) for a cluster variant on a host that declares no cluster."""
    pf = (preflight_mod.vllm_preflight(variant, hp.known, model_profile, hp.hardware, settings=hp.settings)
          if as_bool(hp.v["vllm_server_preflight_enabled"]) else {"verdict": "skipped", "failures": [], "checked": []})
    if pf["verdict"] != "skipped":  # the flags against the argument schema of the image's vLLM version
        wrong = flags_mod.flag_problems(variant.get("args"), pf.get("vllm_version"))
        pf["checked"] = list(pf.get("checked") or []) + [flags_mod.ISSUE_ID]
        if wrong:
            pf = {**pf, "verdict": "fail", "failures": list(pf["failures"]) + wrong}
    if cluster_needed and pf["verdict"] != "skipped":
        pf = _cluster_needed(pf, *cluster_needed, hp.gpus)
    return pf


def _variant_entry(hp: _HostPlan, variant: Variant, model_profile: pt.ModelProfile,
                   serve: ServeSpec | None, cluster_needed: tuple[int, int] | None) -> pt.PlanEntry:
    """One variant's plan entry, without its summary. ``serve``: the cluster's ``serve`` block when
    the variant runs across the cluster this host heads."""
    if serve is not None:
        # vllm serve listens inside the head's container (listen_*); the host reaches it at base_url.
        launch = launch_spec(variant, {**hp.server, "host": serve["listen_host"], "port": serve["listen_port"],
                                       "base_url": serve["base_url"], "exec_in": serve["container"],
                                       "log_file": f"/tmp/sparkbench-vllm-{variant['name']}.log"})
        variant_probes = probe_commands(hp.v, serve["container"])
    else:
        launch = launch_spec(variant, hp.server)
        variant_probes = hp.probes
    digest = config_hash(launch, hp.settings)
    path = result_path(hp.v["bench_results_dir"], hp.v["bench_run_id"], hp.host, variant["name"])
    previous = result_mod.stored(path) if path.is_file() else {}
    action = ("skip" if previous.get("status") == "complete" and previous.get("config_hash") == digest
              and not as_bool(hp.v["bench_force"]) else "measure")
    pf = _preflight(hp, variant, model_profile, cluster_needed)
    # A phase preflight refused (e.g. the tool check without a parser): measure.py skips it with the fix.
    refused = {r["phase"]: f"refused by preflight ({r['id']}): {r['reason']}; fix: {r['remedy']}"
               for r in pf.get("refused") or []}
    return {
        "name": variant["name"], "variant": variant, "launch": launch, "config_hash": digest,
        "result_path": str(path), "action": action, "preflight": pf, "settings": hp.settings,
        "hardware_profile": hp.hardware, "model_profile": model_profile,
        "measure_argv": settings_mod.measure_argv(
            hp.settings, python=measure_command(hp.v, hp.remote_dir),
            base_url=launch["base_url"], model=variant["model"], quality_file=measure_bundle.on_unit(hp.remote_dir, "quality.json"),
            tools_file=measure_bundle.on_unit(hp.remote_dir, "tools.json"), sandbox_image=variant["image"], refused=refused,
            **variant_probes),
    }


def _with_memory(entry: pt.PlanEntry, mem: pt.PlanMemory, residents: list[MemoryRow],
                 where: str) -> pt.PlanEntry:
    """The entry with its unit's memory plan (``memory``: the residents, the tenants and this
    variant's engine, ``sparkbench.memory``) and the plan's problems in its preflight verdict (a
    plan that cannot fit fails preflight, so the variant never starts); earlier memory failures
    are replaced. A preflight that is off (``skipped``) keeps the plan but refuses nothing."""
    engine = memory_mod.engine_row("engine", entry["name"], entry["model_profile"], entry["hardware_profile"],
                                   entry["variant"].get("args"), entry["launch"].get("env"), mem["total_gb"])
    plan = memory_mod.plan(mem, residents, engine, where)
    pf = dict(entry["preflight"])
    if pf.get("verdict") != "skipped":
        kept = [f for f in pf.get("failures") or [] if f.get("id") not in memory_mod.MEMORY_IDS]
        found = [{"id": x["id"], "reason": f"{x['reason']}; vLLM's own message ({x['source']}): \"{x['vllm']}\"",
                  "remedy": x["remedy"]} for x in plan["problems"]]
        pf.update(failures=kept + found, verdict="fail" if kept + found else "pass",
                  checked=list(dict.fromkeys(list(pf.get("checked") or []) + ["memory_plan"])))
    return {**entry, "memory": plan, "preflight": pf}


def _memory_residents(plan: pt.HostPlan, listing: list[record_mod.Resident] | None) -> tuple[list[MemoryRow], str]:
    """The unit's residents as plan rows: its ``listing`` when read, else the controller's records."""
    mem = plan["memory"]
    found, where = memory_mod.present(mem["results_dir"], plan["host"], listing)
    return memory_mod.rows(found, plan["hardware"], mem["profiles_dir"], mem["total_gb"]), where


def _interference_residents(plan: pt.HostPlan, listing: list[record_mod.Resident]) -> list[pt.CoResident]:
    """The unit's running residents with what a background load needs: the address they listen on
    and the model they serve (from the result each was deployed from)."""
    found, _ = memory_mod.present(plan["memory"]["results_dir"], plan["host"], listing)
    listen = {r["name"]: r.get("listen") for r in listing}
    return [{**f, "listen": listen.get(f["name"]), "model": (result_mod.stored(f["path"]).get("variant") or {}).get("model")}
            for f in found]


def with_residents(plan: pt.HostPlan, containers: list[DockerContainer] | None) -> pt.HostPlan:
    """The plan with every entry's memory plan checked again against the residents the unit
    lists (``containers``: community.docker.docker_host_info's verbose list, label
    ``sparkbench.resident``), its summary lines rebuilt; with ``bench_interference`` on, each
    variant's interference steps against those residents (``sparkbench.interference``)."""
    if not plan.get("memory") or plan["memory"].get("residents_off"):
        return dict(plan)
    # Simulated units of one machine share its Docker engine: this unit's residents mount its account.
    listing = record_mod.on_unit(record_mod.residents(containers or []), (plan.get("sim_unit") or {}).get("dir"))
    residents, where = _memory_residents(plan, listing)
    coresident = _interference_residents(plan, listing) if plan.get("interference") else []

    def again(entry: pt.PlanEntry) -> pt.PlanEntry:
        new = _with_memory(entry, plan["memory"], residents, where)
        new["interference"] = interference_mod.entry_block(new, coresident, plan.get("interference"), plan["remote_dir"])
        head = list(itertools.takewhile(lambda line: not line.startswith("command: "), entry.get("summary") or []))
        new["summary"] = head + _summary(new, bool(plan.get("check_mode"))) + (
            new["interference"]["lines"] if new["interference"] else [])
        return new

    out = dict(plan)
    out["variants"] = [again(e) for e in plan.get("variants") or []]
    out["cluster_variants"] = [again(e) for e in plan.get("cluster_variants") or []]
    if plan.get("bracket"):
        out["bracket"] = again(plan["bracket"])
    return out


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
    """The host's plan (see the module docstring). ``members``: when the host is in a cluster
    (``bench_cluster``), every member's ``(host, variables)`` in inventory order (the action plugin
    reads them from hostvars). ``residents``: count the unit's residents in its memory plan (from
    the controller's deployment records until ``with_residents`` has the unit's listing); off for
    health.yml, which measures a unit's resident instead of starting a canary beside it."""
    v = _host_variables(variables)
    hardware, model_profiles, settings, variants = _variants(v, variables)
    server = server_settings(v, host)
    known = preflight_mod.load_known_issues()
    remote_dir = str(v["llm_bench_remote_dir"] or f"/tmp/sparkbench-{host}")
    probes = probe_commands(v, server["container_name"])
    gpus = cluster_mod.gpus_per_node(hardware)
    spec, role = _cluster_of(v, host, members, gpus)
    hp = _HostPlan(v=v, host=host, hardware=hardware, settings=settings, server=server,
                   known=known, remote_dir=remote_dir, probes=probes, gpus=gpus)
    mem = {**memory_mod.context(host, hardware, v), "results_dir": str(v["bench_results_dir"]),
           "profiles_dir": str(v["bench_profiles_dir"]), "residents_off": not residents}
    unit_residents, where = (_memory_residents({"memory": mem, "host": host, "hardware": hardware}, None) if residents
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
        entry = _with_memory(_variant_entry(hp, variant, model_profile, spec["serve"] if head else None,
                                            (tp, pp) if on_cluster and role is None else None),
                             mem, unit_residents, where)
        if head:
            entry["cluster"] = {"name": spec["name"], "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
            entry["summary"] = ([f"cluster variant: across {' + '.join(spec['members'])} (Ray, TP={tp}, PP={pp}); "
                                 f"vllm serve runs in {spec['serve']['container']}"] + _summary(entry, check_mode))
            cluster_entries.append(entry)
            continue
        entry["summary"] = _summary(entry, check_mode)
        entries.append(entry)
    bracket = (bracket_entry(entries, v, host, remote_dir, check_mode) if as_bool(v["bench_bracket"]) else None)
    first = reference_entry(entries + cluster_entries)  # the first variant this run launches
    return {
        "host": host, "run_id": str(v["bench_run_id"]), "remote_dir": remote_dir, "settings": settings,
        "names": [e["name"] for e in entries], "variants": entries, "bracket": bracket,
        # The cluster (sparkbench.cluster.cluster_spec) and, on its head, the variants run across it.
        "cluster": spec, "cluster_role": role,
        "cluster_names": [e["name"] for e in cluster_entries], "cluster_variants": cluster_entries,
        # The bandwidth probe's container (sparkbench.bandwidth.spec), from the first variant this run
        # launches; None when none launches (nothing to probe for) or bench_bandwidth_probe is false.
        "probe": (bandwidth_spec.probe_spec(first, gpu_probe(v), remote_dir)
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
        "interference": interference_mod.settings(v["bench_interference"], settings), "hardware": hardware, "check_mode": bool(check_mode),
    }


BRACKET_SUFFIX = ".bracket"
#: What a bracket run measures: single stream only (the rest of the settings as the reference's).
BRACKET_SETTINGS: SettingsInput = {"concurrency": [], "context": [0], "quality": False, "image": False, "rates": [],
                                   "rate_search": None, "prefix_tokens": 0, "turns": 0, "tools": False}


def reference_entry(entries: list[pt.PlanEntry]) -> pt.PlanEntry | None:
    """The host's reference variant: the first entry to be measured (action ``measure``) that
    preflight does not refuse; None when there is none."""
    return next((e for e in entries if e["action"] == "measure" and e["preflight"].get("verdict") != "fail"), None)


def bracket_entry(entries: list[pt.PlanEntry], v: pt.HostVariables, host: str, remote_dir: str,
                  check_mode: bool = False) -> pt.PlanEntry | None:
    """The bracket plan entry (see the module docstring), or None without a reference."""
    ref = reference_entry(entries)
    if ref is None:
        return None
    name = f"{ref['name']}{BRACKET_SUFFIX}"
    settings = {**ref["settings"], **BRACKET_SETTINGS}
    entry = {**ref, "name": name, "action": "measure", "settings": settings,
             "result_path": str(result_path(v["bench_results_dir"], v["bench_run_id"], host, name)),
             "bracket": {"of": ref["name"], "position": "end"},
             "measure_argv": settings_mod.measure_argv(
                 settings, python=measure_command(v, remote_dir),
                 base_url=ref["launch"]["base_url"], model=ref["variant"]["model"],
                 quality_file=measure_bundle.on_unit(remote_dir, "quality.json"), sandbox_image=ref["variant"]["image"])}
    entry["summary"] = ([f"bracket: {ref['name']} again at the end of the host's sequence, single stream only "
                         f"(drift check; bench_bracket=false turns it off)"] + _summary(entry, check_mode))
    return entry


def provisioned(plan: pt.HostPlan, download_failures: Mapping[str, str] | None) -> pt.HostPlan:
    """The plan with each failed model download added to its variants' preflight verdicts
    (matched against known_issues.yml for the reason and the remedy)."""
    if not download_failures:
        return dict(plan)
    known = preflight_mod.load_known_issues()
    out = dict(plan)

    def with_download(entry: pt.PlanEntry) -> pt.PlanEntry:
        error = (download_failures or {}).get(entry["variant"]["model"])
        if not error:
            return entry
        match = preflight_mod.vllm_log_match(error, known)
        fail = {"id": match["id"] if match else "model_download",
                "reason": match["reason"] if match else f"model download failed: {str(error).strip()[-300:]}",
                "remedy": match["remedy"] if match else "check the model id, revision and network; run hf download by hand"}
        entry = dict(entry)
        entry["preflight"] = {**entry["preflight"], "verdict": "fail",
                              "failures": list(entry["preflight"].get("failures") or []) + [fail]}
        entry["summary"] = _summary(entry, False)
        return entry

    out["variants"] = [with_download(e) for e in plan["variants"]]
    out["cluster_variants"] = [with_download(e) for e in plan.get("cluster_variants") or []]
    if plan.get("bracket"):
        out["bracket"] = with_download(plan["bracket"])
    return out


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
