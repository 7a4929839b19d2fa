"""Clusters in the plan (pure functions, no Ansible run; the end-to-end run is
tests/test_sim_pair_playbook.py): which host plans a cluster variant, how it is launched, what a
worker provisions, and what a host without a cluster says about a TP=2 variant."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkbench import plan
from sparkbench.errors import InputError

from helpers import REPO

pytestmark = pytest.mark.unit

HEAD, WORKER = "spark-sim11", "spark-sim12"


def pair_vars(tmp: Path, host: str, **extra) -> dict:
    """A sim_pair member's variables (group_vars all + sim_pair + its host vars), results under ``tmp``."""
    out: dict = {}
    for f in ("inventory/group_vars/all/bench.yml", "inventory/group_vars/all/matrix.yml",
              "inventory/group_vars/sim_pair/main.yml"):
        out.update(yaml.safe_load((REPO / f).read_text()))
    inv = yaml.safe_load((REPO / "inventory/hosts.yml").read_text())
    out.update(inv["all"]["children"]["sparks"]["children"]["sim_pair"]["hosts"][host])
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp), "vllm_server_env": {"VLLM_SIM_LOAD_SECONDS": "3"}})
    out.update(extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


def members(tmp: Path, **extra) -> list[tuple[str, dict]]:
    return [(h, pair_vars(tmp, h, **extra)) for h in (HEAD, WORKER)]


def test_cluster_variants_are_planned_on_the_head_only(tmp_path):
    ms = members(tmp_path)
    head = plan.plan_host(dict(ms[0][1]), HEAD, members=ms)
    worker = plan.plan_host(dict(ms[1][1]), WORKER, members=ms)
    assert head["names"] == ["gptoss-single"] and worker["names"] == ["gptoss-single"]
    assert head["cluster_names"] == ["gptoss-tp2", "gptoss-pp2"] and worker["cluster_names"] == []
    assert head["cluster_role"] == "head" and worker["cluster_role"] == "worker"
    assert head["cluster"]["members"] == [HEAD, WORKER] and head["cluster"]["head"] == HEAD
    tp2 = head["cluster_variants"][0]
    assert tp2["cluster"] == {"name": "sim_pair", "tensor_parallel_size": 2, "pipeline_parallel_size": 1}
    assert head["cluster_variants"][1]["cluster"]["pipeline_parallel_size"] == 2
    # Written under the head host.
    assert tp2["result_path"] == str(tmp_path / "T" / HEAD / "gptoss-tp2.json")
    # The worker provisions the cluster's image and model too.
    assert worker["images"] == ["sparkbench/vllm-sim-ray:v0.25.0"]
    assert [m["model"] for m in worker["models"]] == ["openai/gpt-oss-120b"]


def test_a_cluster_variant_runs_vllm_serve_in_the_heads_ray_container(tmp_path):
    ms = members(tmp_path)
    tp2 = plan.plan_host(dict(ms[0][1]), HEAD, members=ms)["cluster_variants"][0]
    launch = tp2["launch"]
    assert launch["exec"]["container"] == f"sparkbench-ray-{HEAD}"
    assert launch["exec"]["log_file"].endswith("gptoss-tp2.log")
    assert launch["command"].startswith("docker exec -d ") and f"sparkbench-ray-{HEAD} vllm serve" in launch["command"]
    # Inside the bridge-network container it listens on 0.0.0.0:8000; the host reaches it on the
    # port published on loopback (ray_cluster_serve_port).
    argv = launch["argv"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8000"
    assert launch["base_url"] == "http://127.0.0.1:8110"
    m = tp2["measure_argv"]
    assert m[m.index("--base-url") + 1] == "http://127.0.0.1:8110"
    # GPU telemetry from the head's container (the simulator's nvidia-smi stand-in).
    assert m[m.index("--nvidia-smi") + 1] == f"docker exec sparkbench-ray-{HEAD} nvidia-smi"
    assert "--tensor-parallel-size" in argv and "--distributed-executor-backend" in argv


def test_cluster_variants_change_the_hash_of_nothing_else(tmp_path):
    ms = members(tmp_path)
    head = plan.plan_host(dict(ms[0][1]), HEAD, members=ms)
    hashes = [e["config_hash"] for e in head["variants"] + head["cluster_variants"]]
    assert len(set(hashes)) == 3


def test_a_host_without_a_cluster_refuses_tp2_in_preflight(tmp_path):
    v = pair_vars(tmp_path, HEAD)
    v.pop("bench_cluster")
    p = plan.plan_host(v, HEAD)
    assert p["cluster_variants"] == [] and p["cluster"] is None
    tp2 = next(e for e in p["variants"] if e["name"] == "gptoss-tp2")
    assert tp2["preflight"]["verdict"] == "fail"
    fail = next(f for f in tp2["preflight"]["failures"] if f["id"] == "cluster_needed")
    assert "needs 2 GPUs" in fail["reason"] and "bench_cluster" in fail["remedy"]
    single = next(e for e in p["variants"] if e["name"] == "gptoss-single")
    assert single["preflight"]["verdict"] == "pass"


def test_a_cluster_of_one_host_is_an_input_error(tmp_path):
    ms = members(tmp_path)[:1]
    with pytest.raises(InputError, match="at least 2"):
        plan.plan_host(dict(ms[0][1]), HEAD, members=ms)


def test_a_simulated_host_needs_no_disk_for_the_weights(tmp_path):
    ms = members(tmp_path)
    head = plan.plan_host(dict(ms[0][1]), HEAD, members=ms)
    assert head["model_sizes"]["openai/gpt-oss-120b"] == plan.SIMULATED_DOWNLOAD_GB
    real = plan.plan_host({**ms[0][1], "sparkbench_simulated": False}, HEAD, members=ms)
    assert real["model_sizes"]["openai/gpt-oss-120b"] > 60
