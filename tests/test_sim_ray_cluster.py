"""The simulator on a real Ray cluster: two containers of sparkbench/vllm-sim-ray (head + worker,
each `ray start --num-gpus=1`) on the Docker network sparkbench-simtest, `vllm serve ... -tp 2
--distributed-executor-backend ray` exec'd in the head.

Checks: the placement group and one worker actor per node in /sim/info, `ray status` 2.0/2.0 GPU
while serving, a streamed completion, `ray stop` in the worker kills the engine within 30 s with
vLLM's lines (the worker's container killed mid-measurement: tests/test_sim_pair_playbook.py); a
one-node cluster asked for TP=2 warns, waits for the placement group and fails at VLLM_SIM_PG_TIMEOUT_S. Skips (with the reason) without Docker or without the image
(scripts/build_sim_ray_image.sh builds it).
"""
from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import docker_available, health_ok, port_in

IMAGE = "sparkbench/vllm-sim-ray:v0.25.0"
NETWORK, SUBNET = "sparkbench-simtest", "172.31.251.0/24"
HEAD_IP, WORKER_IP = "172.31.251.11", "172.31.251.12"
PREFIX = "sparkbench-simtest-ray"
MODEL = "openai/gpt-oss-120b"
OBJECT_STORE = "80000000"   # bytes: small (Ray's minimum is 75 MB), two nodes fit in a few hundred MB

OK, WHY = docker_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)
pytestmark = [pytestmark, pytest.mark.sim]


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def ray_start(role: str, ip: str) -> list[str]:
    """The node command the ray_cluster role runs (contract: head / worker)."""
    common = ["--block", f"--node-ip-address={ip}", "--num-gpus=1", "--num-cpus=1",
              f"--object-store-memory={OBJECT_STORE}", "--disable-usage-stats"]
    if role == "head":
        return ["ray", "start", "--head", "--port=6379", "--include-dashboard=false", *common]
    return ["ray", "start", f"--address={HEAD_IP}:6379", *common]


def _cleanup() -> None:
    for name in (f"{PREFIX}-head", f"{PREFIX}-worker"):
        docker("rm", "-f", name, check=False)
    docker("network", "rm", NETWORK, check=False)


@pytest.fixture
def ray_nodes():
    """Factory: start the head (and optionally the worker) and wait until every node is active;
    everything is removed at teardown."""
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.skip(f"{IMAGE} is missing: run scripts/build_sim_ray_image.sh (after scripts/build_sim_image.sh)")
    _cleanup()
    docker("network", "create", "--subnet", SUBNET, NETWORK)
    port = port_in(18800, 18900)

    def start(nodes: int) -> str:
        # AUTOSCALER_UPDATE_INTERVAL_S=1 (Ray's default 5): `ray status` sees joins and GPU use sooner
        for role, ip in [("head", HEAD_IP), ("worker", WORKER_IP)][:nodes]:
            pub = ["-p", f"127.0.0.1:{port}:8000"] if role == "head" else []
            docker("run", "-d", "--name", f"{PREFIX}-{role}", "--network", NETWORK, "--ip", ip, *pub,
                   "--shm-size", "256m", "-e", f"VLLM_HOST_IP={ip}", "-e", "VLLM_SIM_LOAD_SECONDS=0.3",
                   "-e", "VLLM_SIM_LOG_INTERVAL=60", "-e", "AUTOSCALER_UPDATE_INTERVAL_S=1",
                   "--entrypoint", "ray", IMAGE, *ray_start(role, ip)[1:])
        deadline = time.monotonic() + 180  # a wait, not a speed check
        while True:
            st = docker("exec", f"{PREFIX}-head", "ray", "status", check=False, timeout=30).stdout
            if len(re.findall(r"^\s*1 node_[0-9a-f]+", st, re.M)) == nodes and f"/{nodes}.0 GPU" in st:
                return f"http://127.0.0.1:{port}"
            assert time.monotonic() < deadline, f"the Ray cluster did not form:\n{st}"
            time.sleep(1)

    try:
        yield start
    finally:
        _cleanup()


def serve(*flags: str, env: dict | None = None) -> None:
    """`vllm serve` in the head, detached; its output and exit status go to /tmp/serve.log."""
    envs = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    cmd = (f"{envs} vllm serve {MODEL} --port 8000 {' '.join(flags)} > /tmp/serve.log 2>&1; "
           "echo \"exit=$?\" >> /tmp/serve.log")
    docker("exec", "-d", f"{PREFIX}-head", "sh", "-c", cmd)


def serve_log() -> str:
    return docker("exec", f"{PREFIX}-head", "cat", "/tmp/serve.log", check=False).stdout


def wait_exit(timeout: float) -> tuple[str, float]:
    """(log, seconds) once the serve process has exited; fails after ``timeout``."""
    t0 = time.monotonic()
    while True:
        log = serve_log()
        if re.search(r"^exit=\d+$", log, re.M):
            return log, time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"vllm serve still running after {timeout} s:\n{log[-3000:]}"
        time.sleep(0.25)


def get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


def test_tp2_across_two_nodes_then_worker_lost(ray_nodes):
    base = ray_nodes(2)
    serve("--tensor-parallel-size", "2", "--distributed-executor-backend", "ray")
    deadline = time.monotonic() + 180  # a wait, not a speed check
    while not health_ok(base, timeout=1):
        log = serve_log()
        assert "exit=" not in log, log
        assert time.monotonic() < deadline, f"no /health within 180 s:\n{log}"
        time.sleep(0.3)

    cluster = get(base, "/sim/info")["cluster"]
    assert cluster["backend"] == "ray"
    assert (cluster["tensor_parallel_size"], cluster["pipeline_parallel_size"]) == (2, 1)
    assert re.fullmatch(r"[0-9a-f]{16,}", cluster["placement_group_id"])
    workers = cluster["workers"]
    assert [w["rank"] for w in workers] == [0, 1]
    assert len({w["node_id"] for w in workers}) == 2
    assert [w["node_ip"] for w in workers] == [HEAD_IP, WORKER_IP]   # driver's node first, as vLLM sorts

    deadline = time.monotonic() + 120   # `ray status` reads the autoscaler's view: it lags a few seconds
    while "2.0/2.0 GPU" not in (status := docker("exec", f"{PREFIX}-head", "ray", "status").stdout):
        assert time.monotonic() < deadline, status
        time.sleep(1)
    active = set(re.findall(r"^\s*1 node_([0-9a-f]+)", status, re.M))
    assert {w["node_id"] for w in workers} == active

    log = serve_log()
    assert f"Placement group {cluster['placement_group_id']} is ready" in log
    for w in workers:
        assert f"placed on node {w['node_id']} ip {w['node_ip']}" in log

    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 24,
                       "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        events = [ln[6:] for ln in r.read().decode().splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert any(json.loads(e)["choices"] and json.loads(e)["choices"][0].get("finish_reason") for e in events[:-1])

    # `ray stop` ends the node's `ray start --block`, the worker container's own process: the
    # container may exit before `ray stop` returns, and Docker then kills the exec'd command (137).
    stop = docker("exec", f"{PREFIX}-worker", "ray", "stop", timeout=60, check=False)
    if stop.returncode != 0:
        running = docker("inspect", "-f", "{{.State.Running}}", f"{PREFIX}-worker", check=False).stdout.strip()
        assert (stop.returncode, running) == (137, "false"), (stop.returncode, running, stop.stderr[-2000:])
    log, _ = wait_exit(300)
    # Causality, not speed: the server exits because the worker's node went away.
    assert "EngineCore encountered a fatal error." in log
    assert re.search(r"ray\.exceptions\.(ActorDiedError|RayActorError|ActorUnavailableError)", log), log[-3000:]
    assert "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue." in log
    assert "AsyncLLMEngine has failed, terminating server process" in log
    assert re.search(r"^exit=1$", log, re.M)


def test_one_node_cluster_tp2_waits_then_fails(ray_nodes):
    ray_nodes(1)
    serve("--tensor-parallel-size", "2", "--distributed-executor-backend", "ray", env={"VLLM_SIM_PG_TIMEOUT_S": "5"})
    log, took = wait_exit(40)
    assert "Total GPU requirement (world_size=2) exceeds locally visible GPUs (1)." in log
    assert "WARNING" in log and ("The number of required GPUs exceeds the total number of available GPUs in the "
                                 "placement group.") in log
    assert re.search(r"Waiting for creating a placement group of specs for \d+ seconds\. specs=\[\{'GPU': 1\.0", log)
    assert ("ValueError: Cannot provide a placement group requiring 2.0 GPUs (placement_group_specs=" in log
            and "within 5 seconds." in log), log
    assert re.search(r"^exit=1$", log, re.M)
    assert "Starting vLLM server" not in log
