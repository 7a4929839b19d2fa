"""The host variables a plan reads (``VARIABLES``: each one with its default; nothing else reads
them), checked (``host_variables``), and what follows from them alone: the profiles
(``load_profiles``), the server's launch settings (``server_settings``), measure's command line on
the unit (``measure_command``) and how the unit's GPU is read (``gpu_probe``, ``probe_commands``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from .. import measure_bundle
from .. import memory as memory_mod
from ..errors import InputError
from ..interference import variable as interference_variable
from ..launch import unit_caches
from ..package_data import hardware_profile_file, model_profile_file
from ..paths import DEFAULT_RESULTS_DIR, PROFILES_DIR
from ..values import as_bool

if TYPE_CHECKING:
    from .. import plan_types as pt
    from ..cluster.shapes import HostVars
    from ..launch import ServerSettings
    from ..measure.shapes import JSONObject


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
    # a simulated unit's shared account (vllm_sim/unit_account.py); "" = none
    "sparkbench_sim_unit_dir": "",
    "sparkbench_gpu_less": False,
    "spark_host_gpu_probe": "",
    "llm_bench_python": "python3",
    "llm_bench_remote_dir": "",
    # the unit's memory plan (sparkbench.memory): tenants, reserve, total
    **memory_mod.VARIABLES,
    # what co-residence costs (sparkbench.interference): off unless set
    **interference_variable.VARIABLES,
}


def host_variables(variables: HostVars) -> pt.HostVariables:
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
    """The hardware profile and one model profile per model, each the user's (``profiles_dir``) or
    else the built-in one (``sparkbench.package_data``); a missing file names the path and the fix."""
    missing = [str(p) for p in [model_profile_file(m, profiles_dir) for m in models] if not p.is_file()]
    hw_path = hardware_profile_file(hardware, profiles_dir)
    if not hw_path.is_file():
        missing.append(str(hw_path))
    if missing:
        raise InputError(f"missing profile(s): {', '.join(missing)}; add the JSON file (copy a built-in one from "
                         "sparkbench/data/profiles/) or fix the model / bench_hardware_profile_name")
    return (_load_json(hw_path, "hardware"),
            {m: _load_json(model_profile_file(m, profiles_dir), "model") for m in models})


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
