"""``ansible-playbook bench.yml -l sim_pair`` end to end: two simulated Sparks form a real Ray
cluster (containers sparkbench-ray-spark-sim11 / -12 on the Docker network sparkbench-pair, each a
Ray 2.60 node declaring one logical GPU), the simulator serves gpt-oss-120b across both with
``--tensor-parallel-size 2`` / ``--pipeline-parallel-size 2 --distributed-executor-backend ray``,
and the results are written under the head host with a ``cluster`` block.

Two runs (real Docker, real Ray, real ansible-playbook):

1. the pair's whole matrix, with the worker-kill case on the same cluster: each unit alone
   (gptoss-single on both hosts), then TP=2 on the cluster, then ``gptoss-lost`` (TP=2 again, its
   server told apart by ``--max-num-seqs 7``) during whose measurement the worker's container is
   killed: it fails at ``measure`` with the lost-worker diagnosis; PP=2 after it starts the cluster
   again and completes. The report compares them with one unit;
2. a worker started against a wrong head address: the cluster variant fails in ``preflight`` within
   the join timeout, before a model loads.

The simulated pair's Ray containers and ports are the inventory's (8110-8112, 172.31.250.0/24):
``flock /tmp/sim_pair.lock`` keeps two of these runs apart. The file sorts after
tests/test_real_vllm_e2e.py on purpose: that test's TPOT truth check, which needs a quiet 2-core
machine, failed twice when it ran right after these Docker-heavy runs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from sparkbench.twin.pacing import PacingModel

from conftest import REPO_ROOT, image_present

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / ".venv" / "bin"
IMAGE = "sparkbench/vllm-sim-ray:v0.25.0"
HW = json.loads((REPO_ROOT / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
GPTOSS = json.loads((REPO_ROOT / "sparkbench/data/profiles/models/openai__gpt-oss-120b.json").read_text())
HEAD, WORKER = "spark-sim11", "spark-sim12"
HEAD_CTR, WORKER_CTR = f"sparkbench-ray-{HEAD}", f"sparkbench-ray-{WORKER}"
SERVE = "http://127.0.0.1:8110"


def docker_ok() -> bool:
    return image_present(IMAGE)


pytestmark = pytest.mark.skipif(not docker_ok() or not shutil.which("flock"),
                                reason=f"Docker engine, {IMAGE} or flock missing: run make setup")
pytestmark = [pytestmark, pytest.mark.ansible]

# Short runs: the figures' size matters here, not their precision (the demo runs the defaults);
# a 1 s simulated load and a 1 s link test, and no memory-bandwidth probe (tests/test_playbook_bench.py
# runs it; here it would add three module runs and a container before and after each host's variants).
# The join deadline is a wait, not a speed check: Ray nodes start slower on a loaded machine (a
# head took over 180 s beside the suite with one core taken by a CPU-burning process).
FAST = {"llm_bench_output_tokens": 64, "llm_bench_runs": 5, "ray_cluster_iperf3_seconds": 1,
        "ray_cluster_join_timeout_s": 600, "bench_bandwidth_probe": False,
        "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_PG_TIMEOUT_S": "60"}}


def play(results: Path, run_id: str, extra: dict, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    cmd = ["flock", "/tmp/sim_pair.lock", str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory/hosts.yml"),
           str(REPO / "bench.yml"), "-l", "sim_pair",
           "-e", json.dumps({"bench_results_dir": str(results), "bench_run_id": run_id, **extra})]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    (results / f"{run_id}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return proc


def doc(results: Path, run_id: str, host: str, variant: str) -> dict:
    return json.loads((results / run_id / host / f"{variant}.json").read_text(encoding="utf-8"))


def containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
    return [n for n in out.stdout.split() if n in (HEAD_CTR, WORKER_CTR)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pair-results")


#: The killed variant: TP=2 again, its server told apart by --max-num-seqs (/sim/info).
LOST, LOST_SEQS = "gptoss-lost", 7


def pair_configs() -> list[dict]:
    """The sim_pair group's configurations with ``lost`` (tp2's flags and ``--max-num-seqs 7``) after tp2."""
    import yaml

    configs = yaml.safe_load((REPO / "inventory/group_vars/sim_pair/main.yml").read_text(encoding="utf-8"))["bench_configs"]
    tp2 = next(c for c in configs if c["name"] == "tp2")
    lost = {"name": "lost", "args": {**tp2["args"], "max-num-seqs": LOST_SEQS}}
    at = configs.index(tp2) + 1
    return [*configs[:at], lost, *configs[at:]]


def _kill_worker_while_lost_is_measured(stop: threading.Event, killed: dict) -> None:
    """Wait for the lost variant's server (``max_num_seqs`` 7 in /sim/info) to have served two
    requests (its measurement is under way), then kill the worker's container."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(SERVE + "/sim/info", timeout=2) as r:
                lost = json.loads(r.read()).get("max_num_seqs") == LOST_SEQS
            if lost:
                with urllib.request.urlopen(SERVE + "/sim/requests", timeout=2) as r:
                    rows = json.loads(r.read())["requests"]
                if len([x for x in rows if x.get("finish_reason")]) >= 2:
                    killed["at"] = time.time()
                    subprocess.run(["docker", "kill", WORKER_CTR], capture_output=True)
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)


@pytest.fixture(scope="module")
def full_run(results):
    stop, killed = threading.Event(), {}
    t = threading.Thread(target=_kill_worker_while_lost_is_measured, args=(stop, killed), daemon=True)
    t.start()
    try:
        proc = play(results, "pair-full", {**FAST, "bench_configs": pair_configs()})
    finally:
        stop.set()
        t.join(5)
    proc.killed = killed
    return proc


def test_every_variant_completes_cluster_variants_under_the_head(full_run, results):
    # Every variant but the lost one (below) completed; the run fails only when the lost one
    # failed outright (it may instead be incomplete: measured until the worker went).
    lost = doc(results, "pair-full", HEAD, LOST)["status"]
    assert (full_run.returncode != 0) == (lost == "failed"), (lost, full_run.stdout[-4000:])
    for host, variant in ((HEAD, "gptoss-single"), (WORKER, "gptoss-single"), (HEAD, "gptoss-tp2"),
                          (HEAD, "gptoss-pp2")):
        d = doc(results, "pair-full", host, variant)
        assert d["status"] == "complete", (host, variant, d.get("failure"))
        assert d["simulated"] is True
    # A cluster variant is measured once, on the head: never under the worker.
    assert not (results / "pair-full" / WORKER / "gptoss-tp2.json").exists()
    assert not (results / "pair-full" / WORKER / "gptoss-pp2.json").exists()
    assert not (results / "pair-full" / WORKER / f"{LOST}.json").exists()
    # The Ray containers are gone after the run.
    assert containers() == []


def test_tp2_result_has_the_cluster_block(full_run, results):
    d = doc(results, "pair-full", HEAD, "gptoss-tp2")
    c = d["cluster"]
    assert c["tensor_parallel_size"] == 2 and c["pipeline_parallel_size"] == 1
    assert c["nodes_alive"] == 2
    hosts = {n["host"]: n for n in c["nodes"]}
    assert set(hosts) == {HEAD, WORKER}
    assert hosts[HEAD]["address"] == "172.31.250.11" and hosts[WORKER]["address"] == "172.31.250.12"
    assert all(n["alive"] for n in c["nodes"])
    assert all(n["image_id"] and n["image_id"].startswith("sha256:") for n in c["nodes"])
    assert all(n["driver"] for n in c["nodes"])
    # The placement group held both GPUs while the model served, one worker actor per node.
    assert c["placement_group_id"]
    assert c["gpus_in_use"] == 2.0 and c["gpus_total"] == 2.0
    assert sorted(c["worker_actor_node_ids"]) == sorted(n["node_id"] for n in c["nodes"])
    # The launch ran vllm serve inside the head's Ray container.
    assert d["launch_command"].startswith("docker exec -d") and HEAD_CTR in d["launch_command"]
    assert "--tensor-parallel-size 2" in d["launch_command"]
    assert "--distributed-executor-backend ray" in d["launch_command"]
    # The link was measured and said what it measured (no CX-7 link between two containers).
    assert c["link"]["method"] == "iperf3" and c["link"]["gbps"] > 0
    assert "container network" in c["link"]["note"]


def test_every_variant_paces_no_faster_than_the_pacing_model(full_run, results):
    """A paced server is never early: each measured single-stream median stays at or below the
    pacing model's rate for its topology (the simulator sleeps at least the modelled step; on a
    loaded machine it can only be later). Whether TP=2 beats one unit is the model's claim
    (tests/test_sim_cluster_pacing.py, against the published two-Spark figures) and, measured,
    BENCHMARKS.md's "Two Sparks" table: the Ray round trip of every step makes the measured ratio
    follow the machine's load, so it is not asserted here."""
    for variant, tp, pp in (("gptoss-single", 1, 1), ("gptoss-tp2", 2, 1), ("gptoss-pp2", 1, 2)):
        measured = doc(results, "pair-full", HEAD, variant)["single"]["decode_tok_s_median"]
        model = 1.0 / PacingModel(HW, GPTOSS, tensor_parallel_size=tp, pipeline_parallel_size=pp).raw_step(1, 0, 0.0)
        assert 0 < measured <= 1.05 * model, (variant, measured, model)


def test_report_shows_the_cluster_as_one_unit(full_run, results):
    md = (results / "pair-full" / "report.md").read_text(encoding="utf-8")
    assert f"sim_pair ({HEAD} + {WORKER})" in md
    assert "TP=2" in md and "PP=2" in md


def test_worker_killed_mid_measurement_fails_that_variant_and_the_next_completes(full_run, results):
    assert full_run.killed, "the lost variant's measurement never started: " + full_run.stdout[-3000:]
    lost = doc(results, "pair-full", HEAD, LOST)
    assert lost["status"] in ("failed", "incomplete"), lost.get("failure")
    fail = lost["failure"]
    assert fail["stage"] == "measure", (fail, full_run.stdout[-4000:])
    assert "ray_worker_lost" in (fail.get("issues") or []), fail
    assert "lost node" in fail["remedy"] and "start the cluster again" in fail["remedy"], fail["remedy"]
    # The next cluster variant starts the cluster again and completes.
    pp2 = doc(results, "pair-full", HEAD, "gptoss-pp2")
    assert pp2["status"] == "complete", pp2.get("failure")
    assert pp2["cluster"]["nodes_alive"] == 2


def test_worker_that_cannot_join_fails_in_preflight(results):
    t0 = time.monotonic()
    proc = play(results, "pair-nojoin", {**FAST, "bench_select": ["gptoss-tp2"],
                                         "ray_cluster_join_address": "172.31.250.99:6379",
                                         "ray_cluster_join_timeout_s": 30})
    assert "ray_worker_not_joined" in proc.stdout
    took = time.monotonic() - t0
    d = doc(results, "pair-nojoin", HEAD, "gptoss-tp2")
    assert d["status"] == "failed"
    fail = d["failure"]
    assert fail["stage"] == "preflight", fail
    assert "ray_worker_not_joined" in (fail.get("issues") or []), fail
    assert fail["remedy"]
    # The worker is named with its container's state and the last line of its log (Ray's own words
    # on the head address it cannot reach: within 30 s its `ray start` has said something).
    assert "spark-sim12 (172.31.250.12) did not join" in fail["reason"] and "its log ends: " in fail["reason"], fail
    # The worker never joined; the head itself may not be listed yet when the 30 s deadline passes
    # on a loaded machine (its own start is not what this run checks).
    assert d["cluster"]["nodes_alive"] < 2, d["cluster"]
    # Failed on the join deadline (30 s here), not on vLLM's own 1800 s wait.
    assert took < 900, took
    assert containers() == []
