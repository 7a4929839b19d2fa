"""The unit's cache folders (Hugging Face, vLLM's compile cache, FlashInfer's JIT cache) come from
the unit, never from the controller (issue 22, items 1 and 3).

Unit layer: the plan holds ``<unit home>/…`` until the unit's home is put in
(``sparkbench.unit_home.with_unit``): every launch spec, summary line, the bracket and each cluster
node, with the configuration hash unchanged; a spec with the placeholder says why it is refused.
Ansible layer: ``bench.yml --check`` on a local unit whose controller HOME differs from the unit
user's home shows the unit's path; ``teardown.yml`` finds the cache folders of a unit whose
remote user is not root from the unit's facts (no variable set) and removes the root-owned files
the containers wrote there, with sudo, saying what it removed — or that it kept them, and where.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkbench import cluster, launch, plan, unit_home
from sparkbench.errors import InputError

from helpers import REPO, ansible_env, run_playbook

HOST = "spark-sim01"
HEAD, WORKER = "spark-sim11", "spark-sim12"
SPARK_HOME = "/home/spark"


def _host_vars(tmp: Path, group: str, host: str, **extra) -> dict:
    """A host's variables as the plan reads them: group_vars all + the group's + its host vars
    (templated ones left out), results under ``tmp``."""
    out: dict = {}
    for f in ("all/bench.yml", "all/matrix.yml", f"{group}/main.yml"):
        out.update(yaml.safe_load((REPO / "inventory/group_vars" / f).read_text()))
    out.update(yaml.safe_load((REPO / "inventory/hosts.yml").read_text())
               ["all"]["children"]["sparks"]["children"][group]["hosts"][host] or {})
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp)}, **extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


def inventory_vars(tmp: Path, **extra) -> dict:
    """spark-sim01's, its group's cache folders left out but the Hugging Face cache at /cache."""
    v = _host_vars(tmp, "sim_sparks", HOST)
    for c in launch.UNIT_CACHES:
        v.pop(c.variable, None)
    return {**v, "spark_host_hf_cache": "/cache", **extra}


def members(tmp: Path) -> list[tuple[str, dict]]:
    """The sim_pair cluster's members (head first) and their variables."""
    return [(h, _host_vars(tmp, "sim_pair", h)) for h in (HEAD, WORKER)]


def _all_entries(p: dict) -> list[dict]:
    return list(p["variants"]) + list(p["cluster_variants"]) + ([p["bracket"]] if p.get("bracket") else [])


@pytest.mark.unit
def test_the_plan_never_reads_the_controllers_home(tmp_path, monkeypatch):
    """Unset cache variables: the plan holds <unit home>/…, whatever the controller's HOME is."""
    controller_home = tmp_path / "controller-home"
    monkeypatch.setenv("HOME", str(controller_home))
    v = inventory_vars(tmp_path)
    v.pop("spark_host_hf_cache")
    p = plan.plan_host(v, HOST)
    assert str(controller_home) not in json.dumps(p)
    assert p["unit"] == {"home": None, "hf_cache": "<unit home>/.cache/huggingface",
                         "vllm_cache": "<unit home>/.cache/vllm", "flashinfer_cache": "<unit home>/.cache/flashinfer",
                         "unresolved": p["unit"]["unresolved"]}
    for e in _all_entries(p):
        assert e["launch"]["container"]["volumes"] == [
            "<unit home>/.cache/huggingface:/root/.cache/huggingface", "<unit home>/.cache/vllm:/root/.cache/vllm",
            "<unit home>/.cache/flashinfer:/root/.cache/flashinfer"]
        # The dry run shows the marked placeholder; the launch would be refused with the reason.
        assert "'<unit home>/.cache/huggingface:/root/.cache/huggingface'" in e["summary"][-3]
        assert "spark_host_hf_cache=<unit home>/.cache/huggingface" in e["launch"]["unresolved"]
        assert "ansible_facts.user_dir" in e["launch"]["unresolved"]


@pytest.mark.unit
def test_with_unit_resolves_every_launch_spec_and_summary_and_keeps_the_hash(tmp_path):
    v = inventory_vars(tmp_path, spark_host_vllm_cache="~/compile/vllm")
    v.pop("spark_host_hf_cache")
    before = plan.plan_host(v, HOST)
    after = unit_home.with_unit(before, SPARK_HOME)
    assert after["unit"] == {"home": SPARK_HOME, "hf_cache": f"{SPARK_HOME}/.cache/huggingface",
                             "vllm_cache": f"{SPARK_HOME}/compile/vllm",
                             "flashinfer_cache": f"{SPARK_HOME}/.cache/flashinfer", "unresolved": ""}
    assert after["bracket"] is not None
    for old, new in zip(_all_entries(before), _all_entries(after), strict=True):
        # The hash leaves the mounts out (a bracket carries its reference's, over the reference's settings).
        assert new["config_hash"] == old["config_hash"]
        if "bracket" not in new:
            assert new["config_hash"] == launch.config_hash(new["launch"], new["settings"])
        assert new["launch"]["container"]["volumes"] == [
            f"{SPARK_HOME}/.cache/huggingface:/root/.cache/huggingface",
            f"{SPARK_HOME}/compile/vllm:/root/.cache/vllm", f"{SPARK_HOME}/.cache/flashinfer:/root/.cache/flashinfer"]
        assert new["launch"]["unresolved"] == "" and "<unit home>" not in json.dumps(new)
        # The recorded docker run line is the one a fresh spec with the home gives, and the summary shows it.
        fresh = launch.launch_spec(new["variant"], {**plan.server_settings(plan.host_variables(v), HOST),
                                                     "unit_home": SPARK_HOME})
        assert new["launch"]["command"] == fresh["command"]
        assert f"command: {fresh['command']}" in new["summary"]
        assert [line for line in new["summary"] if not line.startswith("command:")] == \
               [line for line in old["summary"] if not line.startswith("command:")]
    # Absolute paths stay as set; no home read (a unit that did not answer) changes nothing.
    absolute = plan.plan_host(inventory_vars(tmp_path), HOST)
    assert unit_home.with_unit(absolute, SPARK_HOME)["variants"][0]["launch"]["container"]["volumes"][0] == \
           "/cache:/root/.cache/huggingface"
    assert unit_home.with_unit(before, None) == before


@pytest.mark.unit
def test_cache_paths_accept_absolute_and_home_relative_forms_only():
    hf = launch.UNIT_CACHES[0]
    assert launch.unit_path("", hf) == "<unit home>/.cache/huggingface"
    assert launch.unit_path("~/x/", hf) == "<unit home>/x"
    assert launch.unit_path("/data/hf/", hf) == "/data/hf"
    with pytest.raises(InputError, match="spark_host_hf_cache is 'models/hf': not an absolute path"):
        launch.unit_path("models/hf", hf)
    with pytest.raises(InputError, match="not an absolute path"):
        launch.resolve_unit_path("<unit home>/.cache/vllm", "relative/home")
    assert launch.resolve_unit_path("<unit home>/.cache/vllm", "/home/spark/") == "/home/spark/.cache/vllm"


@pytest.mark.unit
def test_a_cluster_head_resolves_each_node_with_its_own_members_home(tmp_path):
    ms = members(tmp_path)
    head_plan = plan.plan_host(dict(ms[0][1]), HEAD, members=ms)
    spec = head_plan["cluster"]
    assert [n["caches"]["vllm_cache"] for n in spec["nodes"]] == ["<unit home>/.cache/sparkbench/vllm"] * 2
    assert f"Ray node {HEAD}" in spec["unresolved_caches"] and f"Ray node {WORKER}" in spec["unresolved_caches"]
    done = unit_home.with_unit(head_plan, "/home/head", {WORKER: "/home/worker"})
    assert [n["volumes"] for n in done["cluster"]["nodes"]] == [
        [f"/home/{who}/.cache/sparkbench/{d}:/root/.cache/{c}"
         for d, c in (("huggingface", "huggingface"), ("vllm", "vllm"), ("flashinfer", "flashinfer"))]
        for who in ("head", "worker")]
    assert done["cluster"]["unresolved_caches"] == ""
    # The address completion keeps them; a worker whose home was not read is named, never guessed.
    assert cluster.with_addresses(done["cluster"], {})["nodes"][1]["caches"] == done["cluster"]["nodes"][1]["caches"]
    partial = unit_home.with_unit(head_plan, "/home/head", {})
    assert partial["cluster"]["nodes"][0]["caches"]["hf_cache"] == "/home/head/.cache/sparkbench/huggingface"
    assert partial["cluster"]["unresolved_caches"].startswith(f"Ray node {WORKER}: ")
    # The cluster variants run in the head's Ray container: their launch spec mounts nothing itself.
    assert all(e["launch"]["unresolved"] == "" for e in done["cluster_variants"])


@pytest.mark.unit
def test_a_cluster_spec_from_members_with_facts_is_resolved_at_once(tmp_path):
    """The ray_cluster role on its own builds the spec from hostvars: gathered facts resolve it."""
    ms = [(h, {**v, "ansible_facts": {"user_dir": f"/home/{h}"}}) for h, v in members(tmp_path)]
    spec = cluster.cluster_spec("sim_pair", ms)
    assert spec["nodes"][1]["caches"]["hf_cache"] == f"/home/{WORKER}/.cache/sparkbench/huggingface"
    assert spec["unresolved_caches"] == ""


@pytest.mark.unit
def test_teardown_cache_folders_need_the_units_home():
    with pytest.raises(InputError, match="not resolved on the unit"):
        unit_home.unit_cache_folders({}, None)
    folders = unit_home.unit_cache_folders({"spark_host_flashinfer_cache": "/srv/fi"}, "/home/spark")
    assert [(f["variable"], f["path"]) for f in folders] == [
        ("spark_host_hf_cache", "/home/spark/.cache/huggingface"), ("spark_host_vllm_cache", "/home/spark/.cache/vllm"),
        ("spark_host_flashinfer_cache", "/srv/fi")]


# ---- Ansible: the unit's facts, not the controller's environment ---------------------------------

def _local_unit_inventory(tmp: Path, host: str, port: int, **host_vars) -> Path:
    """One local-connection simulated unit in the sparks group (not sim_sparks: none of its cache
    settings), the simulator image, one variant."""
    hv = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
          "sparkbench_gpu_less": True, "vllm_server_port": port, "bench_select": ["nvidia-bare"],
          "vllm_server_env": {"VLLM_SIM_LOAD_SECONDS": "1"}, "llm_bench_remote_dir": str(tmp / "work"), **host_vars}
    inv = tmp / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"sparks": {"hosts": {host: hv}}}}}))
    return inv


@pytest.mark.ansible
def test_dry_run_mounts_the_units_cache_not_the_controllers(tmp_path):
    """The controller's HOME is a folder of its own; the unit's remote user (root here, local
    connection) has its home in passwd: the dry run's docker run line mounts the latter's."""
    unit_home = pwd.getpwuid(os.getuid()).pw_dir
    controller_home = tmp_path / "controller-home"
    controller_home.mkdir()
    inv = _local_unit_inventory(tmp_path, "cc-paths01", 8250)
    proc = run_playbook("bench.yml", "--check", "-e", f"bench_results_dir={tmp_path / 'results'}",
                        inventories=[REPO / "inventory/hosts.yml", inv], limit="cc-paths01",
                        env=ansible_env(HOME=str(controller_home)), timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert f"-v {unit_home}/.cache/huggingface:/root/.cache/huggingface" in out, out[-3000:]
    assert f"-v {unit_home}/.cache/vllm:/root/.cache/vllm" in out
    assert f"-v {unit_home}/.cache/flashinfer:/root/.cache/flashinfer" in out
    assert str(controller_home) not in out


@pytest.fixture
def non_root_unit_user(tmp_path):
    """A user of this machine whose home is a temporary folder: the unit's remote user as the
    unit's facts see it (a local connection run with USER/LOGNAME set to it; its tasks still run
    as this process's user, and become goes through sudo)."""
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("sudo"):
        pytest.skip("needs root, useradd and sudo (make setup installs sudo)")
    name = f"sbcc{os.environ.get('PYTEST_XDIST_WORKER', 'gw0')[2:] or '0'}"
    home = tmp_path / "unit-home"
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    try:
        yield name, home
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.mark.ansible
def test_teardown_purges_the_units_cache_folders_from_its_facts(tmp_path, non_root_unit_user):
    name, home = non_root_unit_user
    folders = {d: home / ".cache" / d for d in ("huggingface", "vllm", "flashinfer")}
    for folder in folders.values():  # what the containers left: root-owned files
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "model-00001.safetensors").write_text("x")
    os.chmod(home, 0o755)
    inv = _local_unit_inventory(tmp_path, "cc-paths02", 8251, vllm_server_container_prefix="cc-bench-vllm",
                                ray_cluster_container_prefix="cc-bench-ray")
    env = ansible_env(USER=name, LOGNAME=name)

    def teardown(*args: str) -> subprocess.CompletedProcess:
        proc = run_playbook("playbooks/teardown.yml", *args, inventories=[REPO / "inventory/hosts.yml", inv],
                            limit="cc-paths02", env=env, timeout=300)
        proc.stdout = " ".join(proc.stdout.split())  # the YAML callback folds long messages at spaces
        return proc

    kept = teardown()
    assert kept.returncode == 0, kept.stdout[-3000:]
    for folder in folders.values():
        assert folder.is_dir()
        assert f"{folder} kept (-e teardown_purge_cache=true removes it)" in kept.stdout
    purged = teardown("-e", "teardown_purge_cache=true")
    assert purged.returncode == 0, purged.stdout[-3000:]
    for folder in folders.values():
        assert not folder.exists()
        assert f"{folder} removed" in purged.stdout
    assert "Hugging Face cache (model weights):" in purged.stdout
    again = teardown("-e", "teardown_purge_cache=true")
    assert f"{folders['vllm']} not there (nothing to remove)" in again.stdout
