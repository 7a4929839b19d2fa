"""The suite's real parts: each started once per ``make test`` and read by many tests.

A test that needs real vLLM, a Ray pair, an SSH unit or a playbook run reads one of the runs
below (adding the variant or step it needs to that run) instead of starting its own. Every real
vLLM start costs 20-60 CPU-s on 2 cores, a playbook run on simulated units about 0.2 CPU-s per
task; the budget per part is in BENCHMARKS.md ("First half hour": "CPU per part").

=================================  =========================================  ==========================================
run (where it is defined)           what it starts                             read by
=================================  =========================================  ==========================================
``real_vllm`` (tests/conftest.py)   real vLLM, the plain ``docker run``         test_vllm_cpu_image, test_sim_conformance,
                                    command with the unit's cache folders      test_compile_cache (first start; one
                                                                               relaunch over its cache),
                                                                               test_tpot_truth
``real_run`` (test_real_vllm_e2e)   two real_cpu hosts: bench.yml with a       test_real_vllm_e2e (and the tune's real
                                    launch failure and a plan-time refusal,    test); ``make fixtures`` adds the
                                    then ``sparkbench tune`` over two points   failures that take a whole engine start
                                    (the two measured configurations)          and records them for
                                                                               test_recorded_failures (unit layer)
``real_residents`` (this module)    serve.yml with real vLLM: a resident and   test_serve_real (deploy, rollback, two
                                    its canary, a refused candidate beside     residents, the refused upgrade),
                                    it, a second resident with tool flags      test_real_vllm_serving (tools, rates,
                                    and its own KV budget; upgrade.yml to an   prefix and multi-turn phases on the
                                    image that cannot start a server           second resident; a tool request
                                                                               refused by the first)
``full_run`` (test_sim_pair_...)    two simulated Sparks over Ray              test_sim_pair_playbook
``walkthrough`` (test_ssh_units)    the README over SSH: provision, check,     test_ssh_units
                                    bench, serve, teardown
``first_run`` (test_playbook_bench) bench.yml on the simulated fleet           test_playbook_bench
``fleet`` (test_upgrade_sim)        three simulated units: bench.yml, serve.yml test_upgrade_sim (refused, passed and
                                    and one upgrade.yml run, each unit with     deployed, never healthy; --check; bad
                                    its own candidate                          input through sparkbench upgrade)
=================================  =========================================  ==========================================

The real-vLLM runs are in two pytest-xdist groups (tests/conftest.py ``SHARED_GROUPS``): ``real_vllm``
(the session's server and the e2e run) and ``real_residents`` (serve.yml's residents), each on
one worker that starts its servers in turn, so that each session fixture is set up once and at
most two real-vLLM starts share the 2 cores.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkbench.launch import launch_spec

from helpers import REPO, ansible_env, containers, deployable_result, playbook_cmd, serve_source_settings

REAL_IMAGE = "sparkbench/vllm-cpu:v0.32.0"
#: an image without vLLM (the simulator images' Debian base): a candidate that cannot start a server
NO_VLLM_IMAGE = "sparkbench/debian-base:bookworm"
RESIDENT_HOST = "srv-cpu01"
#: The first resident (eager, KV budget 1 GiB) and the second (tool flags, KV budget 2 GiB).
RESIDENT, SECOND = "tiny-eager", "tiny-tools"
#: The second resident's tool flags (tests/test_real_vllm_serving.py says why each is there).
TOOL_ARGS = {"enable-auto-tool-choice": True, "tool-call-parser": "hermes",
             "structured-outputs-config": json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})}
TOOL_ENV = {"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"}
_BASE = 19500 + 4 * (os.getpid() % 25)  # 19500-19599
BENCH_PORT, SERVE_PORT, CANDIDATE_PORT, SECOND_PORT = _BASE, _BASE + 1, _BASE + 2, _BASE + 3


def resident_document(image_id: str, run: str, args: dict, name: str = RESIDENT, kv_gib: int = 1,
                      env: dict | None = None) -> dict:
    """A complete result of ``name`` with ``args``, ``env`` and a KV budget of ``kv_gib`` GiB as
    bench.yml would record it on ``RESIDENT_HOST``: what serve.yml deploys from. Its per-request
    rates are taken from nothing real: a shared 2-core machine's speed moves between runs, so the
    canary's verdict is not what the real layer tests (``serve_slower_pct: 95``;
    tests/test_serve_sim.py tests the verdict)."""
    variant = {"name": name, "build": "tiny", "config": "eager", "model": "sparkbench/tiny-llama",
               "revision": None, "image": REAL_IMAGE, "env": dict(env or {}), "args": args}
    launch = launch_spec(variant, {"host": "127.0.0.1", "port": BENCH_PORT, "container_name": f"x-{RESIDENT_HOST}",
                                   "gpus": False, "env": {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib)},
                                   "hf_cache": "/x/hf", "vllm_cache": "/x/vllm", "flashinfer_cache": "/x/fi"})
    settings = serve_source_settings(120.0, 60.0)
    rates = [200.0, 205.0, 198.0, 202.0, 201.0]
    return deployable_result(variant, launch, settings, host=RESIDENT_HOST, run=run, image_id=image_id, rates=rates,
                             median=201.0, simulated=False, backend="vllm-cpu", hardware="x86-cpu",
                             startup={"time_to_ready_s": 60.0, "model_memory_gib": 0.01})


@pytest.fixture(scope="session")
def real_residents(tmp_path_factory):
    """serve.yml on ``RESIDENT_HOST`` with real vLLM, three steps in order, each step's playbook
    result and the containers after it kept for the tests: ``deploy`` (``RESIDENT`` from run R1 on
    ``SERVE_PORT``, its canary), ``rollback`` (the same variant from R2, whose ``--dtype float17``
    real vLLM refuses, started beside the resident), ``second`` (``SECOND`` from R1 on
    ``SECOND_PORT``: tool flags, its own KV budget). Yields ``{tmp, prefix, steps: {name: {proc,
    containers}}, resident_url, second_url}``; the residents are removed at the end of the session."""
    inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", REAL_IMAGE], capture_output=True,
                             text=True, timeout=60)
    if inspect.returncode != 0:
        pytest.fail(f"{REAL_IMAGE} is missing: run make setup (scripts/build_vllm_cpu_image.sh)")
    tmp = tmp_path_factory.mktemp("serve-real")
    prefix = f"sbtest-svr{os.getpid()}"
    results = tmp / "results"
    args = {"max-model-len": 2048, "max-num-seqs": 8, "enforce-eager": True, "dtype": "bfloat16"}
    image_id = inspect.stdout.strip()
    for run, a in (("R1", args), ("R2", {**args, "dtype": "float17"})):
        (results / run / RESIDENT_HOST).mkdir(parents=True)
        (results / run / RESIDENT_HOST / f"{RESIDENT}.json").write_text(json.dumps(resident_document(image_id, run, a)))
    (results / "R1" / RESIDENT_HOST / f"{SECOND}.json").write_text(json.dumps(
        resident_document(image_id, "R1", {**args, **TOOL_ARGS}, SECOND, 2, TOOL_ENV)))
    hosts = {RESIDENT_HOST: {"vllm_server_port": BENCH_PORT}}
    inv = {"all": {"children": {"sparks": {"children": {"real_cpu": {"hosts": hosts}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    extra = {"bench_results_dir": str(results), "spark_host_hf_cache": str(tmp / "hf"),
             "spark_host_vllm_cache": str(tmp / "vllm"), "spark_host_flashinfer_cache": str(tmp / "fi"),
             "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
             "serve_port": SERVE_PORT, "serve_candidate_port": CANDIDATE_PORT, "serve_slower_pct": 95,
             "serve_container_prefix": f"{prefix}-resident", "serve_candidate_prefix": f"{prefix}-candidate",
             "serve_unit_dir": str(tmp / "unit-records"), "vllm_server_ready_timeout_s": 420}
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))

    def serve(*a: str, playbook: str = "playbooks/serve.yml") -> subprocess.CompletedProcess:
        cmd = playbook_cmd(playbook, "-e", f"@{tmp / 'extra.yml'}", *a, limit=RESIDENT_HOST,
                           inventories=[REPO / "inventory/hosts.yml", tmp / "inventory.yml"])
        return subprocess.run(cmd, cwd=REPO, env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=900)

    steps = {}
    try:
        for step, a in (("deploy", ("-e", f"serve_variant={RESIDENT}", "-e", "serve_run=R1")),
                        ("rollback", ("-e", f"serve_variant={RESIDENT}", "-e", "serve_run=R2",
                                      "-e", "serve_beside=true")),
                        ("second", ("-e", f"serve_variant={SECOND}", "-e", "serve_run=R1",
                                    "-e", f"serve_port={SECOND_PORT}"))):
            proc = serve(*a)
            steps[step] = {"proc": proc, "containers": containers(prefix)}
        # An upgrade of the first resident to an image that cannot start a server (it runs no vllm):
        # refused before anything starts, the resident untouched.
        proc = serve("-e", f"upgrade_image={NO_VLLM_IMAGE}", "-e", f"upgrade_variant={RESIDENT}",
                     "-e", "bench_run_id=U1", playbook="playbooks/upgrade.yml")
        steps["upgrade"] = {"proc": proc, "containers": containers(prefix)}
        yield {"tmp": tmp, "prefix": prefix, "steps": steps, "resident_url": f"http://127.0.0.1:{SERVE_PORT}",
               "second_url": f"http://127.0.0.1:{SECOND_PORT}"}
    finally:
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def resident_records(residents: dict, state: str) -> list[dict]:
    """The unit's deployment records of ``state`` (deployed, failed, ...), oldest first."""
    base = Path(residents["tmp"]) / "results" / ".deployments" / RESIDENT_HOST / "history"
    return [json.loads(p.read_text()) for p in sorted(base.glob(f"*-{state}.json"))]
