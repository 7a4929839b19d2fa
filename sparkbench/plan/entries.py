"""One variant's plan entry (``variant_entry``): its launch spec, configuration hash, result path,
skip or measure, preflight verdict (known issues, the flags against the image's vLLM version, a
cluster variant on a host without a cluster) and measure's command line; its unit's memory plan
(``with_memory``), its summary lines (``summary``), and a failed model download added to it
(``provisioned``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import flags as flags_mod
from .. import measure_bundle
from .. import memory as memory_mod
from .. import preflight as preflight_mod
from .. import settings as settings_mod
from ..launch import config_hash, launch_spec
from ..paths import result_path
from ..result_files import json_object
from ..values import as_bool
from .variables import measure_command, probe_commands

if TYPE_CHECKING:
    from .. import plan_types as pt
    from ..cluster.shapes import ServeSpec
    from ..launch import ServerSettings
    from ..matrix import Variant
    from ..memory.engine import MemoryRow
    from ..preflight import KnownIssues, Preflight
    from ..settings import Settings


def summary(entry: pt.PlanEntry, check_mode: bool) -> list[str]:
    """The entry's summary lines: its command, preflight verdict (with the fix), refused checks, action."""
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


@dataclass(frozen=True)
class HostContext:
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


def _preflight(hp: HostContext, variant: Variant, model_profile: pt.ModelProfile,
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


def variant_entry(hp: HostContext, variant: Variant, model_profile: pt.ModelProfile,
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
    previous = json_object(path) if path.is_file() else {}
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


def with_memory(entry: pt.PlanEntry, mem: pt.PlanMemory, residents: list[MemoryRow],
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
        entry["summary"] = summary(entry, False)
        return entry

    out["variants"] = [with_download(e) for e in plan["variants"]]
    out["cluster_variants"] = [with_download(e) for e in plan.get("cluster_variants") or []]
    if plan.get("bracket"):
        out["bracket"] = with_download(plan["bracket"])
    return out
