"""The deployment of one result: serve settings, the resident's container, the canary, placement.

``settings(variables)`` reads the serve variables (``VARIABLES``: name → default) and refuses bad
input naming the variable and the fix. ``deployment(src, settings, host)`` builds, from the checked
source (``sparkbench.serve.source``), before the unit is touched:

* ``resident``: the container that keeps serving, ``<serve_container_prefix>-<variant>``
  (``sparkbench-resident-<variant>``): the recorded argv with ``--host``/``--port`` set to
  ``serve_listen``/``serve_port``, the recorded image and environment (the configuration hash is
  unchanged but for the address), host network and IPC, the unit's cache folders, restart policy
  ``unless-stopped``, a health check, labels that name the variant, run, hash and port; its
  ``docker run`` line (secrets ``<redacted>``) is what ``--check`` prints;
* ``candidate``: the same container, restart policy ``no``, under ``<serve_candidate_prefix>-<variant>`` on
  ``serve_candidate_port`` (started beside a previous resident) or on ``serve_port``;
* the canary's settings: the source's measurement settings, single stream only, ``serve_canary_runs``
  (≥ ``verdict.MIN_REQUESTS``) requests, no target precision.

``on_unit(dep, home, residents, meminfo)`` completes it once the unit has answered: the cache folders
below the unit's home, the previous resident (``residents``: the unit's containers labelled
``sparkbench.resident``), where the candidate starts (``placement``) and the canary's measure
command line against it.

Placement: without a previous resident the candidate starts on ``serve_port`` (``fresh``); with one,
``beside`` it on ``serve_candidate_port`` when the unit's available memory holds the candidate's
need plus ``HEADROOM_GIB`` (``serve_beside: auto``; ``true`` / ``false`` force either), else in its
place (``replace``: the previous resident is stopped first and started again when the deploy fails).
The need: a simulator ``SIMULATOR_GIB``; a GPU unit ``--gpu-memory-utilization`` (vLLM's default
0.9) × the hardware profile's ``unified_memory_gb``; a CPU unit the measured model memory plus
``VLLM_CPU_KVCACHE_SPACE`` (GiB, default ``CPU_KV_DEFAULT_GIB``) plus ``CPU_OVERHEAD_GIB``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from .. import measure_bundle
from .. import settings as settings_mod
from .. import verdict as verdict_mod
from ..errors import InputError
from ..launch import (
    UNIT_HOME,
    cache_volumes,
    docker_run_line,
    port_number,
    reach_address,
    resolve_unit_path,
    sim_unit_mount,
    sim_unit_path,
    sim_unit_unresolved,
    unit_caches,
    unresolved_message,
)
from ..measure.figures import MODEL_MEMORY, SINGLE_DECODE
from ..plan import BRACKET_SETTINGS, LOOPBACK, measure_command, probe_commands
from ..plan import VARIABLES as BENCH_VARIABLES
from ..residents import RESIDENT_LABEL
from ..unit_home import sim_unit_block
from ..values import as_bool

if TYPE_CHECKING:
    from ..cluster.shapes import HostVars
    from ..launch import ContainerArgs
    from ..memory.unit import MemoryPlan
    from ..residents import Resident
    from ..settings import Settings, SettingsInput
    from .shapes import (
        ContainerNames,
        Deployment,
        Placement,
        PlacementNumbers,
        PlanNumbers,
        PreviousResident,
        ServeContainer,
        ServeSettings,
        ServeVariables,
        Source,
        SourceFacts,
    )

#: The serve variables and their defaults (inventory/group_vars/all/serve.yml sets the same).
VARIABLES: ServeVariables = {
    "serve_variant": "",
    "serve_run": "",
    "serve_port": 8080,
    "serve_state": "present",
    "serve_listen": "127.0.0.1",
    "serve_api_key": "",
    "serve_candidate_port": "",
    "serve_beside": "auto",
    "serve_canary_runs": verdict_mod.MIN_REQUESTS,
    "serve_slower_pct": 5.0,
    "serve_container_prefix": "sparkbench-resident",
    "serve_candidate_prefix": "sparkbench-candidate",
    "serve_unit_dir": "",
    "bench_results_dir": "",
    # The server's, the host's and measure's variables serve.yml reads: bench.yml's defaults.
    "vllm_server_port": BENCH_VARIABLES["vllm_server_port"],
    "vllm_server_ready_timeout_s": BENCH_VARIABLES["vllm_server_ready_timeout_s"],
    "vllm_server_api_key": BENCH_VARIABLES["vllm_server_api_key"],
    "spark_host_hf_token": BENCH_VARIABLES["spark_host_hf_token"],
    "sparkbench_hf_token": BENCH_VARIABLES["sparkbench_hf_token"],
    "spark_host_hf_cache": BENCH_VARIABLES["spark_host_hf_cache"],
    "spark_host_vllm_cache": BENCH_VARIABLES["spark_host_vllm_cache"],
    "spark_host_flashinfer_cache": BENCH_VARIABLES["spark_host_flashinfer_cache"],
    "sparkbench_sim_unit_dir": BENCH_VARIABLES["sparkbench_sim_unit_dir"],
    "sparkbench_gpu_less": BENCH_VARIABLES["sparkbench_gpu_less"],
    "spark_host_gpu_probe": BENCH_VARIABLES["spark_host_gpu_probe"],
    "llm_bench_python": BENCH_VARIABLES["llm_bench_python"],
    "llm_bench_remote_dir": BENCH_VARIABLES["llm_bench_remote_dir"],
    # the unit's memory plan (sparkbench.serve.memory)
    "bench_hardware_profile_name": BENCH_VARIABLES["bench_hardware_profile_name"],
    "bench_profiles_dir": BENCH_VARIABLES["bench_profiles_dir"],
    "bench_tenants": BENCH_VARIABLES["bench_tenants"],
    "bench_memory_reserve_gb": BENCH_VARIABLES["bench_memory_reserve_gb"],
    "bench_unit_memory_gb": BENCH_VARIABLES["bench_unit_memory_gb"],
}
STATES = ("present", "absent")
SIMULATOR_GIB = 0.5
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
CPU_KV_DEFAULT_GIB = 4.0
CPU_OVERHEAD_GIB = 2.0
HEADROOM_GIB = 2.0
RESTART_POLICY = "unless-stopped"
#: Where a unit keeps its deployment records, below the remote user's home.
UNIT_DIR_BELOW_HOME = ".sparkbench/residents"


def settings(variables: HostVars) -> ServeSettings:
    """The serve settings, checked (see ``VARIABLES``)."""
    # every variable of VARIABLES, as the inventory writes it (its default where unset or null)
    v = cast("ServeVariables", {k: (variables.get(k) if variables.get(k) is not None else d)
                                for k, d in VARIABLES.items()})
    state = str(v["serve_state"] or "present").strip()
    if state not in STATES:
        raise InputError(f"serve_state is {state!r}; set it to present (deploy) or absent (undeploy)")
    port = port_number(v["serve_port"], "serve_port", 8080)
    bench_port = port_number(v["vllm_server_port"])
    candidate = port_number(v["serve_candidate_port"] or port + 1, "serve_candidate_port", 8081)
    if port == bench_port:
        raise InputError(f"serve_port {port} is the port bench.yml serves variants on (vllm_server_port): a bench "
                         "run would collide with the resident; choose another serve_port")
    if candidate in (port, bench_port):
        raise InputError(f"serve_candidate_port {candidate} is serve_port or vllm_server_port; choose a free port")
    listen = str(v["serve_listen"] or "127.0.0.1").strip()
    api_key = str(v["serve_api_key"] or v["vllm_server_api_key"] or "")
    if listen not in LOOPBACK and not api_key:
        raise InputError(f"serve_listen is {listen}: the API would answer beyond this unit without a key; set "
                         "serve_api_key (a vault variable: vault_serve_api_key in an ansible-vault file) or keep "
                         "serve_listen=127.0.0.1")
    beside = str(v["serve_beside"]).strip().lower()
    if beside not in ("auto", "true", "false", "yes", "no"):
        raise InputError(f"serve_beside is {beside!r}; set it to auto, true or false")
    try:
        runs = int(v["serve_canary_runs"])
        slower = float(v["serve_slower_pct"])
    except (TypeError, ValueError):
        raise InputError("serve_canary_runs must be a whole number and serve_slower_pct a number of percent") from None
    if runs < verdict_mod.MIN_REQUESTS:
        raise InputError(f"serve_canary_runs is {runs}; the canary's verdict needs {verdict_mod.MIN_REQUESTS} "
                         f"requests: set serve_canary_runs: {verdict_mod.MIN_REQUESTS}")
    secret_env = []
    if str(v["spark_host_hf_token"] or v["sparkbench_hf_token"] or ""):
        secret_env.append("HF_TOKEN")
    if api_key:
        secret_env.append("VLLM_API_KEY")
    return {**v, "serve_state": state, "serve_port": port, "serve_candidate_port": candidate, "serve_listen": listen,
            "serve_beside": "auto" if beside == "auto" else ("true" if as_bool(beside) else "false"),
            "serve_canary_runs": runs, "serve_slower_pct": slower, "api_key": bool(api_key), "secret_env": secret_env,
            "serve_variant": str(v["serve_variant"] or "").strip(), "serve_run": str(v["serve_run"] or "").strip()}


def with_address(argv: Sequence[str], host: str, port: int) -> list[str]:
    """``argv`` with the values of ``--host`` and ``--port`` replaced (added when missing)."""
    out = [str(a) for a in argv]
    for flag, value in (("--host", host), ("--port", str(port))):
        if flag in out[:-1]:
            out[out.index(flag) + 1] = value
        else:
            out[1:1] = [flag, value]
    return out


def container(src: Source, s: ServeSettings, name: str, port: int, role: str,
              caches: Mapping[str, str], sim_unit: str = "") -> ServeContainer:
    """One container of the deployment (resident or candidate) with its ``docker run`` line;
    ``sim_unit``: a simulated unit's shared account, mounted as bench.yml mounts it (sparkbench.launch)."""
    reach = reach_address(s["serve_listen"])
    sim_volumes, sim_env = sim_unit_mount(sim_unit)
    spec: ContainerArgs = {
        "name": name, "image": src["image"], "command": with_address(src["argv"], s["serve_listen"], port),
        "network_mode": "host", "ipc_mode": "host", "volumes": cache_volumes(caches) + sim_volumes,
        "env": {**src["env"], **sim_env},
        "device_requests": (None if as_bool(s["sparkbench_gpu_less"])
                            else [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]),
        # A candidate is not restarted: a start that fails must show as an exit, not a restart loop.
        "restart_policy": RESTART_POLICY if role == "resident" else "no",
        "labels": {RESIDENT_LABEL: src["variant"], "sparkbench.role": role, "sparkbench.run": src["run"],
                   "sparkbench.config_hash": src["config_hash"], "sparkbench.port": str(port),
                   "sparkbench.listen": s["serve_listen"]},
        "healthcheck": {"test": ["CMD", "python3", "-c",
                                 f"import urllib.request; urllib.request.urlopen('http://{reach}:{port}/health', timeout=5)"],
                        "interval": "30s", "timeout": "10s", "retries": 3,
                        "start_period": f"{int(float(s['vllm_server_ready_timeout_s']))}s"},
    }
    return {"container": spec, "port": port, "base_url": f"http://{reach}:{port}",
            "health_url": f"http://{reach}:{port}/health", "command": docker_run_line(spec, s["secret_env"]),
            "unresolved": unresolved_message(caches, f"container {name}") or sim_unit_unresolved(sim_unit, f"container {name}")}


def canary_settings(src: Source, s: ServeSettings) -> Settings:
    """The source's measurement settings, single stream only, ``serve_canary_runs`` requests."""
    out: SettingsInput = {**src["settings"], **BRACKET_SETTINGS}
    out["runs"] = max(int(s["serve_canary_runs"]), verdict_mod.MIN_REQUESTS)
    out["target_precision_pct"] = None
    out["max_runs"] = None
    return settings_mod.normalize(out)


def names(s: ServeSettings, variant: str) -> ContainerNames:
    """The deployment's container names: resident, candidate, and where a previous resident of the
    same variant waits while its successor is tried (``stash``)."""
    return {"resident": f"{s['serve_container_prefix']}-{variant}",
            "candidate": f"{s['serve_candidate_prefix']}-{variant}",
            "stash": f"{s['serve_container_prefix']}-previous-{variant}"}


def deployment(src: Source, s: ServeSettings, host: str) -> Deployment:
    """The deployment before the unit has answered (cache folders below ``<unit home>``)."""
    caches = unit_caches(s)
    sim_unit = sim_unit_path(s["sparkbench_sim_unit_dir"])
    n = names(s, src["variant"])
    resident = container(src, s, n["resident"], s["serve_port"], "resident", caches, sim_unit)
    return {
        "host": host, "variant": src["variant"],
        "source": cast("SourceFacts", {k: v for k, v in src.items() if k != "samples"}),  # the source less its samples
        "baseline": list(src["samples"]), "names": n, "port": s["serve_port"], "listen": s["serve_listen"],
        "candidate_port": s["serve_candidate_port"], "api_key": s["api_key"], "caches": caches, "sim_unit": sim_unit,
        "resident": resident, "canary_settings": canary_settings(src, s), "slower_pct": s["serve_slower_pct"],
        "summary": [f"deploy {src['variant']} on {host} from run {src['run']} ({src['path']}; config hash "
                    f"{src['config_hash'][:12]}, measured {float(src[SINGLE_DECODE.field] or 0):.1f} tok/s single stream)",
                    f"command: {resident['command']}",
                    f"restart policy {RESTART_POLICY}; listens on {s['serve_listen']}:{s['serve_port']}"
                    + ("; API key required" if s["api_key"] else "")],
    }


def need_gib(src: SourceFacts) -> tuple[float, str]:
    """The candidate's memory need in GiB and how it was reckoned (see the module docstring)."""
    if src.get("simulated"):
        return SIMULATOR_GIB, "a simulator"
    hw = src.get("hardware") or {}
    argv = list(src.get("argv") or [])
    unified_gb = hw.get("unified_memory_gb")
    if unified_gb and hw.get("device") != "cpu":
        share = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
        if "--gpu-memory-utilization" in argv[:-1]:
            share = float(argv[argv.index("--gpu-memory-utilization") + 1])
        return share * float(unified_gb), f"--gpu-memory-utilization {share:g} of {unified_gb} GB"
    env: dict[str, str] = src.get("env") or {}
    kv = float(env.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_DEFAULT_GIB)
    model = float(src.get(MODEL_MEMORY.field) or 0.0)
    return model + kv + CPU_OVERHEAD_GIB, f"model {model:g} GiB + KV cache {kv:g} GiB + {CPU_OVERHEAD_GIB:g} GiB"


def available_gib(meminfo: str) -> float | None:
    """MemAvailable of ``/proc/meminfo`` in GiB, None when it is not there."""
    for line in str(meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1024 * 1024)
    return None


def previous_resident(residents: Sequence[Resident], s: ServeSettings, variant: str) -> PreviousResident | None:
    """The resident this deployment replaces: the one of the same variant or on ``serve_port``
    (``residents``: ``{name, variant, port, run, config_hash, running}`` of the unit's containers)."""
    prefix = f"{s['serve_container_prefix']}-"
    ours = [r for r in residents if str(r.get("name", "")).startswith(prefix)
            and not str(r.get("name", "")).startswith(prefix + "previous-")]
    hits = {r["name"]: r for r in ours if r.get("variant") == variant or str(r.get("port")) == str(s["serve_port"])}
    if len(hits) > 1:
        raise InputError(f"serve_port {s['serve_port']} is held by {', '.join(sorted(hits))}, and {variant} runs as "
                         "another of them: undeploy one (serve_state=absent) or choose the port the variant runs on")
    if not hits:
        return None
    previous: PreviousResident = {**next(iter(hits.values()))}
    return previous


def placement(dep: Deployment, previous: Resident | None, meminfo: str, beside: str,
              beside_plan: MemoryPlan | None = None) -> Placement:
    """Where the candidate starts: ``fresh`` / ``beside`` / ``replace`` with the numbers that decided.
    With ``beside_plan`` (a simulated unit's shared account) the unit's memory plan with the
    previous resident kept decides ``auto``, not the machine's MemAvailable."""
    if beside_plan is not None and previous is not None and beside == "auto":
        return plan_placement(beside_plan)
    need, how = need_gib(dep["source"])
    avail = available_gib(meminfo)
    out: PlacementNumbers = {"need_gib": round(need, 2), "need": how,
                             "available_gib": None if avail is None else round(avail, 2), "headroom_gib": HEADROOM_GIB}
    if previous is None:
        return {**out, "mode": "fresh", "reason": "no resident to replace: the candidate starts on serve_port"}
    if beside == "false":
        return {**out, "mode": "replace", "reason": "serve_beside=false: the previous resident is stopped first"}
    if beside == "true":
        return {**out, "mode": "beside", "reason": "serve_beside=true: the candidate starts beside the previous resident"}
    if avail is not None and need + HEADROOM_GIB <= avail:
        return {**out, "mode": "beside", "reason": f"{need:.1f} GiB needed ({how}) + {HEADROOM_GIB:g} GiB headroom "
                                                    f"fit in {avail:.1f} GiB available: beside the previous resident"}
    shown = "unknown" if avail is None else f"{avail:.1f} GiB"
    return {**out, "mode": "replace", "reason": f"{need:.1f} GiB needed ({how}) + {HEADROOM_GIB:g} GiB headroom do not "
                                                f"fit in {shown} available: the previous resident is stopped first"}


def plan_placement(both: MemoryPlan) -> Placement:
    """``beside`` when the unit's memory plan holds the candidate beside every resident (the
    previous one too), else ``replace``; the plan's numbers in the reason."""
    used, total = float(both["used_gb"]), f"{both['total_gb']:g}" if both.get("total_gb") else "an unknown total of"
    out: PlanNumbers = {"need_gib": None, "need": "the unit's memory plan", "available_gib": None, "headroom_gib": None,
           "memory_plan_gb": round(used, 1)}
    if both["fits"] is not False:
        return {**out, "mode": "beside", "reason": f"the unit's memory plan holds the candidate beside the previous "
                                                   f"resident ({used:.1f} of {total} GB): beside it"}
    return {**out, "mode": "replace", "reason": f"the unit's memory plan cannot hold the candidate beside the previous "
                                                f"resident ({used:.1f} of {total} GB): the previous resident is "
                                                "stopped first"}


def unit_records_dir(s: ServeSettings, home: Any) -> str:
    """Where the unit keeps its deployment records: ``serve_unit_dir`` (absolute, or ``~/…`` below
    the remote user's home), default ``~/.sparkbench/residents``."""
    raw = str(s["serve_unit_dir"] or "").strip() or f"~/{UNIT_DIR_BELOW_HOME}"
    if raw == "~" or raw.startswith("~/"):
        raw = UNIT_HOME + raw[1:]
    if not raw.startswith("/") and not raw.startswith(UNIT_HOME):
        raise InputError(f"serve_unit_dir is {raw!r}: set an absolute path on the unit or ~/… below its home")
    return resolve_unit_path(raw, home)


def image_problem(src: SourceFacts, image_id: Any) -> str:
    """Why the unit's image is not the measured one ("" when it is, or when no id was recorded)."""
    want = src.get("image_id")
    if not want:
        return ""
    if not image_id:
        return (f"image {src['image']} is not on the unit (measured as {want}): pull or build that image there "
                "(bench.yml provisions it), then deploy again")
    if str(image_id) != str(want):
        return (f"image {src['image']} on the unit is {image_id}, not the measured {want}: the tag moved since the "
                "measurement; put the measured image back (docker pull by digest) or re-measure the variant")
    return ""


def on_unit(dep: Deployment, s: ServeSettings, home: Any, residents: Sequence[Resident],
            meminfo: str, image_id: Any = None, beside_plan: MemoryPlan | None = None) -> Deployment:
    """The deployment completed with what the unit answered (see the module docstring); the unit's
    image id of the source's image (``image_id``) must be the measured one. ``beside_plan``: the
    unit's memory plan with the previous resident kept (``sparkbench.serve.memory.deploy_plan``),
    which decides the placement on a simulated unit with a shared account."""
    problem = image_problem(dep["source"], image_id)
    if problem:
        raise InputError(problem)
    caches = {k: resolve_unit_path(str(p), home) for k, p in dep["caches"].items()}
    sim_unit = sim_unit_path(dep.get("sim_unit"), home)
    src: Source = {**dep["source"], "samples": dep["baseline"]}
    n = dep["names"]
    previous = previous_resident(residents, s, dep["variant"])
    place = placement(dep, previous, meminfo, s["serve_beside"], beside_plan if sim_unit else None)
    cand_port = s["serve_candidate_port"] if place["mode"] == "beside" else s["serve_port"]
    candidate = container(src, s, n["candidate"], cand_port, "candidate", caches, sim_unit)
    resident = container(src, s, n["resident"], s["serve_port"], "resident", caches, sim_unit)
    for c in (candidate, resident):
        if c["unresolved"]:
            raise InputError(c["unresolved"])
    remote_dir = str(s["llm_bench_remote_dir"] or f"/tmp/sparkbench-{dep['host']}")
    unit_dir = unit_records_dir(s, home)
    probes = probe_commands(s, n["candidate"])
    argv = settings_mod.measure_argv(
        dep["canary_settings"], python=measure_command(s, remote_dir), base_url=candidate["base_url"],
        model=src["model"], quality_file=measure_bundle.on_unit(remote_dir, "quality.json"),
        tools_file=measure_bundle.on_unit(remote_dir, "tools.json"),
        sandbox_image=src["image"], **probes)
    # health.yml's canary of the resident (the same settings against serve_port).
    health_argv = settings_mod.measure_argv(
        dep["canary_settings"], python=measure_command(s, remote_dir), base_url=resident["base_url"],
        model=src["model"], quality_file=measure_bundle.on_unit(remote_dir, "quality.json"),
        tools_file=measure_bundle.on_unit(remote_dir, "tools.json"),
        sandbox_image=src["image"], **probe_commands(s, n["resident"]))
    if previous is not None:
        previous["stash"] = n["stash"] if previous["name"] == n["resident"] else previous["name"]
        previous["health_url"] = f"http://{reach_address(previous.get('listen'))}:{previous['port']}/health"
    return {**dep, "caches": caches, "sim_unit": sim_unit, "candidate": candidate, "resident": resident,
            "previous": previous, "sim_unit_block": sim_unit_block(sim_unit, s["bench_tenants"]),
            "placement": place, "promote": "restart" if place["mode"] == "beside" else "rename",
            "canary_argv": argv, "health_argv": health_argv, "remote_dir": remote_dir, "unit_dir": unit_dir,
            "unit_record": f"{unit_dir}/{dep['variant']}.json"}
