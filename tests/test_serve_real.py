"""``playbooks/serve.yml`` with real vLLM (the CPU image, sparkbench/tiny-llama): one real server start.

The source result is written by the test with the owners bench.yml's documents come from
(``sparkbench.launch.launch_spec`` / ``config_hash``, ``sparkbench.settings.normalize``), its image
id the one on this machine, its per-request decode rates taken from nothing real: a shared 2-core
machine's CPU speed moves between runs, so the canary's verdict is not what this file tests
(``serve_slower_pct: 95``; the simulated unit tests the verdict, tests/test_serve_sim.py). What it
tests on real vLLM:

- a deploy: the recorded argv (eager mode) starts a real resident on serve_port, it answers
  /health and a completion, its canary runs measure against it (≥ 5 valid requests), the record;
- a rollback driven by an unhealthy start: a result whose flags real vLLM refuses (``--dtype
  float17``, vLLM's own argument parser: cheap, no model load) started beside the resident; the
  deploy fails at stage ``start`` with vLLM's error line in the failure record, the resident keeps
  serving, untouched;
- two residents on one host, each with its own KV budget (``VLLM_CPU_KVCACHE_SPACE`` 1 and 2 GiB):
  a second variant deployed on its own port beside the first, the memory plan naming the first
  resident, both serving.

Ports 19500-19599 by process id; containers carry a per-session prefix and are removed at teardown.
"""
from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from sparkbench import settings as settings_mod
from sparkbench.launch import launch_spec

from conftest import docker_available
from helpers import REPO, ansible_env, containers, deployable_result, playbook_cmd

IMAGE = "sparkbench/vllm-cpu:v0.32.0"
HOST = "srv-cpu01"
VARIANT, SECOND = "tiny-eager", "tiny-kv2"
_BASE = 19500 + 4 * (os.getpid() % 25)  # 19500-19599
BENCH_PORT, SERVE_PORT, CANDIDATE_PORT, SECOND_PORT = _BASE, _BASE + 1, _BASE + 2, _BASE + 3

_DOCKER_OK, _DOCKER_WHY = docker_available()
pytestmark = [pytest.mark.skipif(not _DOCKER_OK, reason=f"real vLLM needs Docker: {_DOCKER_WHY}"),
              pytest.mark.real, pytest.mark.ansible]


def source_document(image_id: str, run: str, args: dict, name: str = VARIANT, kv_gib: int = 1) -> dict:
    """A complete result of ``name`` with ``args`` and a KV budget of ``kv_gib`` GiB as bench.yml
    would record it on ``HOST``."""
    variant = {"name": name, "build": "tiny", "config": "eager", "model": "sparkbench/tiny-llama",
               "revision": None, "image": IMAGE, "env": {}, "args": args}
    launch = launch_spec(variant, {"host": "127.0.0.1", "port": BENCH_PORT, "container_name": f"x-{HOST}",
                                   "gpus": False, "env": {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib)},
                                   "hf_cache": "/x/hf", "vllm_cache": "/x/vllm", "flashinfer_cache": "/x/fi"})
    settings = settings_mod.normalize({**settings_mod.DEFAULTS, "output_tokens": 32, "runs": 5, "warmup": 0,
                                       "concurrency": [], "context": [0], "quality": False, "image": False,
                                       "telemetry": "off", "request_timeout_s": 120.0, "stall_timeout_s": 60.0})
    rates = [200.0, 205.0, 198.0, 202.0, 201.0]
    return deployable_result(variant, launch, settings, host=HOST, run=run, image_id=image_id, rates=rates,
                             median=201.0, simulated=False, backend="vllm-cpu", hardware="x86-cpu",
                             startup={"time_to_ready_s": 60.0, "model_memory_gib": 0.01})


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", IMAGE], capture_output=True,
                             text=True, timeout=60)
    if inspect.returncode != 0:
        pytest.fail(f"{IMAGE} is missing: run make setup (scripts/build_vllm_cpu_image.sh)")
    tmp = tmp_path_factory.mktemp("serve-real")
    prefix = f"sbtest-svr{os.getpid()}"
    results = tmp / "results"
    args = {"max-model-len": 2048, "max-num-seqs": 8, "enforce-eager": True, "dtype": "bfloat16"}
    image_id = inspect.stdout.strip()
    for run, a in (("R1", args), ("R2", {**args, "dtype": "float17"})):
        (results / run / HOST).mkdir(parents=True)
        (results / run / HOST / f"{VARIANT}.json").write_text(json.dumps(source_document(image_id, run, a)))
    (results / "R1" / HOST / f"{SECOND}.json").write_text(json.dumps(source_document(image_id, "R1", args, SECOND, 2)))
    inv = {"all": {"children": {"sparks": {"children": {"real_cpu": {"hosts": {HOST: {"vllm_server_port": BENCH_PORT}}}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    extra = {"bench_results_dir": str(results), "spark_host_hf_cache": str(tmp / "hf"),
             "spark_host_vllm_cache": str(tmp / "vllm"), "spark_host_flashinfer_cache": str(tmp / "fi"),
             "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
             "serve_port": SERVE_PORT, "serve_candidate_port": CANDIDATE_PORT, "serve_slower_pct": 95,
             "serve_container_prefix": f"{prefix}-resident", "serve_candidate_prefix": f"{prefix}-candidate",
             "serve_unit_dir": str(tmp / "unit-records"), "vllm_server_ready_timeout_s": 420}
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))

    def serve(*a: str) -> subprocess.CompletedProcess:
        cmd = playbook_cmd("playbooks/serve.yml", "-e", f"@{tmp / 'extra.yml'}", *a, limit=HOST,
                           inventories=[REPO / "inventory/hosts.yml", tmp / "inventory.yml"])
        return subprocess.run(cmd, cwd=REPO, env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=900)
    try:
        yield {"tmp": tmp, "prefix": prefix, "serve": serve}
    finally:
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def records(unit, state: str) -> list[dict]:
    base = unit["tmp"] / "results" / ".deployments" / HOST / "history"
    return [json.loads(p.read_text()) for p in sorted(Path(base).glob(f"*-{state}.json"))]


def test_deploy_real_vllm_with_its_canary(unit):
    proc = unit["serve"]("-e", f"serve_variant={VARIANT}", "-e", "serve_run=R1")
    assert proc.returncode == 0, proc.stdout[-6000:]
    name = f"{unit['prefix']}-resident-{VARIANT}"
    found = containers(unit["prefix"])
    assert list(found) == [name] and found[name]["State"]["Running"], list(found)
    assert found[name]["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert "--enforce-eager" in found[name]["Config"]["Cmd"]
    body = json.dumps({"model": "sparkbench/tiny-llama", "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{SERVE_PORT}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and json.loads(resp.read())["choices"]
    rec = records(unit, "deployed")[-1]
    assert rec["source"]["run"] == "R1" and rec["canary"]["passed"] and rec["canary"]["requests"] >= 5, rec["canary"]
    assert rec["canary"]["text"], rec["canary"]
    unit["started"] = found[name]["State"]["StartedAt"]


def test_a_bad_flag_rolls_back_and_the_resident_keeps_serving(unit):
    proc = unit["serve"]("-e", f"serve_variant={VARIANT}", "-e", "serve_run=R2", "-e", "serve_beside=true")
    assert proc.returncode != 0
    failed = records(unit, "failed")
    assert len(failed) == 1, proc.stdout[-6000:]
    f = failed[0]
    assert f["failure"]["stage"] == "start" and "float17" in f["failure"]["log_excerpt"], f["failure"]
    assert "kept serving" in f["left"]
    name = f"{unit['prefix']}-resident-{VARIANT}"
    found = containers(unit["prefix"])
    assert list(found) == [name] and found[name]["State"]["StartedAt"] == unit["started"]
    with urllib.request.urlopen(f"http://127.0.0.1:{SERVE_PORT}/health", timeout=10) as resp:
        assert resp.status == 200


def test_a_second_resident_with_its_own_kv_budget_serves_beside_the_first(unit):
    proc = unit["serve"]("-e", f"serve_variant={SECOND}", "-e", "serve_run=R1", "-e", f"serve_port={SECOND_PORT}")
    assert proc.returncode == 0, proc.stdout[-6000:]
    out = " ".join(proc.stdout.split())
    plan = out[out.find(f"memory plan of {HOST}"):][:1500]
    assert plan and f"resident {VARIANT}" in plan and f"engine {SECOND}" in plan, out[:6000]
    found = containers(unit["prefix"])
    first, second = f"{unit['prefix']}-resident-{VARIANT}", f"{unit['prefix']}-resident-{SECOND}"
    assert sorted(found) == sorted([first, second]), list(found)
    assert found[first]["State"]["StartedAt"] == unit["started"]  # the first resident was left alone
    budgets = {n: [e for e in found[n]["Config"]["Env"] if e.startswith("VLLM_CPU_KVCACHE_SPACE=")] for n in found}
    assert budgets == {first: ["VLLM_CPU_KVCACHE_SPACE=1"], second: ["VLLM_CPU_KVCACHE_SPACE=2"]}, budgets
    for port in (SERVE_PORT, SECOND_PORT):
        body = json.dumps({"model": "sparkbench/tiny-llama", "prompt": "Hello", "max_tokens": 4}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 200 and json.loads(resp.read())["choices"]
