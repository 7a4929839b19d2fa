"""``playbooks/serve.yml`` with real vLLM (the CPU image, sparkbench/tiny-llama): the session's
``real_residents`` run (tests/shared_runs.py), its steps read in order.

The source results are written with the owners bench.yml's documents come from
(``sparkbench.launch.launch_spec`` / ``config_hash``, ``sparkbench.settings.normalize``), their image
id the one on this machine, their per-request decode rates taken from nothing real (the canary's
verdict is tested on the simulated unit, tests/test_serve_sim.py). What this file tests on real vLLM:

- a deploy: the recorded argv (eager mode) starts a real resident on serve_port, it answers
  /health and a completion, its canary runs measure against it (≥ 5 valid requests), the record;
- a rollback driven by an unhealthy start: a result whose flags real vLLM refuses (``--dtype
  float17``, vLLM's own argument parser: cheap, no model load) started beside the resident; the
  deploy fails at stage ``start`` with vLLM's error line in the failure record, the resident keeps
  serving, untouched;
- two residents on one host, each with its own KV budget (``VLLM_CPU_KVCACHE_SPACE`` 1 and 2 GiB):
  a second variant (tool flags: tests/test_real_vllm_serving.py measures against it) deployed on
  its own port beside the first, the memory plan naming the first resident, both serving.
"""
from __future__ import annotations

import json
import urllib.request

import pytest
from shared_runs import NO_VLLM_IMAGE, RESIDENT, RESIDENT_HOST, SECOND, SECOND_PORT, SERVE_PORT, resident_records

pytestmark = [pytest.mark.real, pytest.mark.ansible]


def _complete(port: int) -> None:
    body = json.dumps({"model": "sparkbench/tiny-llama", "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and json.loads(resp.read())["choices"]


def test_deploy_real_vllm_with_its_canary(real_residents):
    step = real_residents["steps"]["deploy"]
    proc, found = step["proc"], step["containers"]
    assert proc.returncode == 0, proc.stdout[-6000:]
    name = f"{real_residents['prefix']}-resident-{RESIDENT}"
    assert list(found) == [name] and found[name]["State"]["Running"], list(found)
    assert found[name]["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert "--enforce-eager" in found[name]["Config"]["Cmd"]
    _complete(SERVE_PORT)
    rec = resident_records(real_residents, "deployed")[0]
    assert rec["source"]["run"] == "R1" and rec["canary"]["passed"] and rec["canary"]["requests"] >= 5, rec["canary"]
    assert rec["canary"]["text"], rec["canary"]


def test_a_bad_flag_rolls_back_and_the_resident_keeps_serving(real_residents):
    step = real_residents["steps"]["rollback"]
    proc, found = step["proc"], step["containers"]
    assert proc.returncode != 0
    failed = resident_records(real_residents, "failed")
    assert len(failed) == 1, proc.stdout[-6000:]
    f = failed[0]
    assert f["failure"]["stage"] == "start" and "float17" in f["failure"]["log_excerpt"], f["failure"]
    assert "kept serving" in f["left"]
    name = f"{real_residents['prefix']}-resident-{RESIDENT}"
    started = real_residents["steps"]["deploy"]["containers"][name]["State"]["StartedAt"]
    assert list(found) == [name] and found[name]["State"]["StartedAt"] == started
    with urllib.request.urlopen(f"http://127.0.0.1:{SERVE_PORT}/health", timeout=10) as resp:
        assert resp.status == 200


def test_a_second_resident_with_its_own_kv_budget_serves_beside_the_first(real_residents):
    step = real_residents["steps"]["second"]
    proc, found = step["proc"], step["containers"]
    assert proc.returncode == 0, proc.stdout[-6000:]
    out = " ".join(proc.stdout.split())
    plan = out[out.find(f"memory plan of {RESIDENT_HOST}"):][:1500]
    assert plan and f"resident {RESIDENT}" in plan and f"engine {SECOND}" in plan, out[:6000]
    first, second = (f"{real_residents['prefix']}-resident-{v}" for v in (RESIDENT, SECOND))
    assert sorted(found) == sorted([first, second]), list(found)
    started = real_residents["steps"]["deploy"]["containers"][first]["State"]["StartedAt"]
    assert found[first]["State"]["StartedAt"] == started  # the first resident was left alone
    budgets = {n: [e for e in found[n]["Config"]["Env"] if e.startswith("VLLM_CPU_KVCACHE_SPACE=")] for n in found}
    assert budgets == {first: ["VLLM_CPU_KVCACHE_SPACE=1"], second: ["VLLM_CPU_KVCACHE_SPACE=2"]}, budgets
    assert "--enable-auto-tool-choice" in found[second]["Config"]["Cmd"]
    assert "VLLM_ENFORCE_STRICT_TOOL_CALLING=0" in found[second]["Config"]["Env"]
    for port in (SERVE_PORT, SECOND_PORT):
        _complete(port)


def test_an_upgrade_to_an_image_that_cannot_start_a_server_is_refused_and_the_resident_serves(real_residents):
    """upgrade.yml with a candidate that runs no vllm: refused before anything starts (its own
    `vllm --version` fails), recorded in the run, the run fails; the real resident is untouched
    (the same container, never stopped) and answers."""
    step = real_residents["steps"]["upgrade"]
    proc, found = step["proc"], step["containers"]
    assert proc.returncode != 0, proc.stdout[-4000:]
    doc = json.loads((real_residents["tmp"] / "results" / "U1" / RESIDENT_HOST / f"{RESIDENT}.upgrade.json").read_text())
    assert doc["state"] == "refused" and "cannot start a server" in doc["reason"], doc
    assert f"{NO_VLLM_IMAGE} does not run vllm" in doc["reason"] and doc["figures"] == [], doc
    assert doc["simulated"] is None  # nothing was measured
    name = f"{real_residents['prefix']}-resident-{RESIDENT}"
    started = real_residents["steps"]["deploy"]["containers"][name]["State"]["StartedAt"]
    assert found[name]["State"]["Running"] and found[name]["State"]["StartedAt"] == started
    _complete(SERVE_PORT)
    assert not list((real_residents["tmp"] / "results" / "U1" / RESIDENT_HOST).glob(f"{RESIDENT}*.current*.json"))
