"""``playbooks/serve.yml`` over SSH, the way a real unit is reached: a unit lost mid-deploy.

One emulated unit (tests/ssh_units.py: an sshd of the tests' own, a normal user with sudo and the
docker group, the unit's own python3) and the simulator image standing in for vLLM. The source
result is written by the test with the owners bench.yml's documents come from
(``sparkbench.launch.launch_spec`` / ``config_hash``, ``sparkbench.settings.normalize``); the canary's
verdict is tested on the simulated unit (tests/test_serve_sim.py), so ``serve_slower_pct`` is wide.
In order:

- a deploy over SSH: the resident serves on serve_port, the unit holds its deployment record;
- a second deploy beside it, and the unit stops answering once the candidate runs (the sshd stops
  and every session of the unit's user ends, as when a unit loses its network): the deploy fails
  at stage ``unreachable``; the controller's failure record says the candidate may be left there
  and that the unit's record is unchanged; on the unit the previous resident still serves,
  untouched, and the candidate is left running (nothing could remove it);
- the unit answers again and the same deploy is run once more: it replaces the leftover candidate
  and deploys, and the unit's record names the new deployment.

Ports 19600-19699 by process id; containers carry a per-session prefix and are removed at teardown.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sparkbench.launch import launch_spec

from conftest import image_present
from helpers import REPO, ansible_env, containers, deployable_result, playbook_cmd, serve_source_settings
from ssh_units import SshUnits, Unit, skip_reason, worker_index

IMAGE = "sparkbench/vllm-sim:latest"
HOST = "spark-ssh-srv01"
VARIANT = "nvidia-bare"
MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
_BASE = 19600 + 4 * (os.getpid() % 25)  # 19600-19699
BENCH_PORT, SERVE_PORT, CANDIDATE_PORT = _BASE, _BASE + 1, _BASE + 2
SIM_ENV = {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_RATE": "1500"}


def _reason() -> str | None:
    return skip_reason() or (None if image_present(IMAGE) else f"Docker engine or {IMAGE} missing: run make setup")


pytestmark = [pytest.mark.ssh, pytest.mark.sim, pytest.mark.ansible,
              pytest.mark.skipif(_reason() is not None, reason=str(_reason()))]


def source_document(image_id: str, run: str) -> dict:
    """A complete simulated result of ``VARIANT`` on ``HOST`` as bench.yml would record it."""
    variant = {"name": VARIANT, "build": "nvidia", "config": "bare", "model": MODEL, "revision": None,
               "image": IMAGE, "env": {}, "args": {"kv-cache-dtype": "fp8", "max-model-len": 65536, "max-num-seqs": 8,
                                                     "max-num-batched-tokens": 4096, "quantization": "modelopt"}}
    launch = launch_spec(variant, {"host": "127.0.0.1", "port": BENCH_PORT, "container_name": f"x-{HOST}",
                                   "gpus": False, "env": SIM_ENV})
    settings = serve_source_settings(60.0, 30.0)
    rates = [1500.0, 1490.0, 1510.0, 1505.0, 1495.0]
    return deployable_result(variant, launch, settings, host=HOST, run=run, image_id=image_id, rates=rates,
                             median=1500.0, simulated=True, backend="simulator", hardware="dgx-spark",
                             startup={"time_to_ready_s": 1.0})


def unit_python_has_requests() -> None:
    """The unit's python3 as provision.yml leaves it: with requests, which the Docker modules need
    (provision installs it with sudo where it lacks: tests/test_ssh_units.py). apt waits for a dpkg
    lock another test's provisioning holds."""
    if subprocess.run(["/usr/bin/python3", "-c", "import requests"], capture_output=True).returncode == 0:
        return
    for attempt in range(3):  # the package lists' lock is not covered by the dpkg lock's timeout
        out = subprocess.run(["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", "python3-requests"],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if out.returncode == 0:
            return
        time.sleep(10)
    pytest.fail(f"apt-get install python3-requests failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve-ssh")
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", IMAGE], capture_output=True,
                              text=True, timeout=60).stdout.strip()
    results = tmp / "results"
    (results / "R1" / HOST).mkdir(parents=True)
    (results / "R1" / HOST / f"{VARIANT}.json").write_text(json.dumps(source_document(image_id, "R1")))
    prefix = f"sbtest-svs{os.getpid()}"
    unit_python_has_requests()
    units = SshUnits(tmp / "ssh", port=2240 + worker_index()).start()
    units.add(Unit(HOST, units.user_name("s"), BENCH_PORT))
    units.serve()
    extra = {"bench_results_dir": str(results), "serve_port": SERVE_PORT, "serve_candidate_port": CANDIDATE_PORT,
             "serve_slower_pct": 95, "serve_container_prefix": f"{prefix}-resident",
             "serve_candidate_prefix": f"{prefix}-candidate", "vllm_server_ready_timeout_s": 60}
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))
    inventory = units.inventory(tmp / "inventory.yml", "ssh_sparks", {"sparkbench_gpu_less": True})

    def serve(*a: str) -> subprocess.CompletedProcess:
        cmd = playbook_cmd("playbooks/serve.yml", "-e", f"@{tmp / 'extra.yml'}", "-e", f"serve_variant={VARIANT}",
                           "-e", "serve_run=R1", *a,
                           limit=HOST, inventories=[REPO / "inventory/hosts.yml", inventory])
        # stdin from /dev/null: ansible-core refuses a non-blocking stdin (an ssh ControlPersist
        # master shares it)
        return subprocess.run(cmd, cwd=REPO, env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=600)
    try:
        yield {"tmp": tmp, "prefix": prefix, "serve": serve, "units": units,
               "home": units.units[HOST].home, "resident": f"{prefix}-resident-{VARIANT}",
               "candidate": f"{prefix}-candidate-{VARIANT}"}
    finally:
        units.stop()
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def history(unit, state: str) -> list[dict]:
    base = unit["tmp"] / "results" / ".deployments" / HOST / "history"
    return [json.loads(p.read_text()) for p in sorted(Path(base).glob(f"*-{state}.json"))]


def unit_record(unit) -> dict:
    """The unit's own deployment record, read over SSH as its user."""
    out = unit["units"].ssh(HOST, f"cat ~/.sparkbench/residents/{VARIANT}.json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def serves(port: int) -> bool:
    body = json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status == 200 and bool(json.loads(resp.read())["choices"])


class CutWhenRunning(threading.Thread):
    """Cuts the units off (``SshUnits.cut``) as soon as container ``name`` runs."""

    def __init__(self, units: SshUnits, name: str, timeout: float = 300) -> None:
        super().__init__(daemon=True)
        self.units, self.name, self.timeout = units, name, timeout
        self.cut_at: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.done.is_set() and time.monotonic() < deadline:
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", self.name], capture_output=True,
                                   text=True, timeout=30).stdout.strip()
            if state == "true":
                self.units.cut()
                self.cut_at = time.monotonic()
                return
            self.done.wait(0.2)


def test_a_deploy_over_ssh_serves_and_records_on_the_unit(unit):
    proc = unit["serve"]()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    found = containers(unit["prefix"])
    assert list(found) == [unit["resident"]] and found[unit["resident"]]["State"]["Running"], list(found)
    assert serves(SERVE_PORT)
    rec = unit_record(unit)
    assert rec["state"] == "deployed" and rec["container"] == unit["resident"], rec
    unit["first"] = {"started": found[unit["resident"]]["State"]["StartedAt"], "when": rec["when"]}


def test_a_unit_lost_after_the_candidate_started_fails_the_deploy_and_leaves_the_resident_serving(unit):
    assert "first" in unit, "needs the first deploy"
    cutter = CutWhenRunning(unit["units"], unit["candidate"])
    cutter.start()
    try:
        proc = unit["serve"]("-e", "serve_beside=true")
    finally:
        cutter.done.set()
        cutter.join(timeout=30)
    assert cutter.cut_at is not None, "the candidate never ran:\n" + proc.stdout[-6000:]
    assert proc.returncode != 0, proc.stdout[-6000:]
    assert "UNREACHABLE" in proc.stdout, proc.stdout[-6000:]
    failed = history(unit, "failed")
    assert len(failed) == 1, proc.stdout[-6000:]
    f = failed[0]
    assert f["failure"]["stage"] == "unreachable", f["failure"]
    # The reason names the step the unit was lost in (the candidate ran: waiting for it, or its
    # canary) and what the connection said.
    reason = f["failure"]["reason"]
    assert re.match(rf"{HOST} stopped answering in the (start|canary) stage: .*(Connection refused|ssh)", reason), reason
    left = f["left"]
    assert "stopped answering" in left and unit["candidate"] in left and "record is unchanged" in left, left
    assert f"previous resident {unit['resident']}" in left and "not stopped" in left, left
    # What the unit holds: the previous resident, never stopped, still serving; the candidate left
    # running (the unit could not be reached to remove it).
    found = containers(unit["prefix"])
    assert sorted(found) == sorted([unit["resident"], unit["candidate"]]), list(found)
    assert found[unit["resident"]]["State"]["StartedAt"] == unit["first"]["started"]
    assert found[unit["candidate"]]["State"]["Running"]
    assert serves(SERVE_PORT)
    unit["units"].serve()
    rec = unit_record(unit)
    assert rec["state"] == "deployed" and rec["when"] == unit["first"]["when"], rec


def test_once_the_unit_answers_the_same_deploy_replaces_the_leftover_candidate(unit):
    assert history(unit, "failed"), "needs the interrupted deploy"
    proc = unit["serve"]("-e", "serve_beside=true")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    found = containers(unit["prefix"])
    assert list(found) == [unit["resident"]] and found[unit["resident"]]["State"]["Running"], list(found)
    assert found[unit["resident"]]["State"]["StartedAt"] != unit["first"]["started"]
    assert serves(SERVE_PORT)
    rec = unit_record(unit)
    assert rec["state"] == "deployed" and rec["when"] != unit["first"]["when"], rec
    assert rec["previous"] and rec["previous"]["variant"] == VARIANT, rec
