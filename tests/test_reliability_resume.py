"""The controller interrupted (SIGINT to ansible-playbook, as Ctrl-C sends it) after the first
variant's result is written, then the run resumed with the same bench_run_id: the complete
result is skipped (file untouched); the other variant, whose result file the test left corrupt
(half-written JSON), is measured again and its file replaced, without failing the host.

The interrupt lands at a known step, not after a guessed delay: the second variant's simulator
loads for SLOW_LOAD_S seconds, and the signal is sent once that variant's server container runs
(its plan line in the output, then the container seen running with its load setting), so the play
is waiting for /health however loaded the machine is. It lands inside one long task on purpose:
ansible-core 2.19 can raise "process object is closed" from its own signal handler when Ctrl-C
arrives while it is replacing a finished task's worker process, between two tasks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from reliability import REPO, base_env, bench_cmd, remove_containers, run_playbook

pytestmark = pytest.mark.ansible

HOST = "rel-a"
SLOW = "slow-mtp2"
SLOW_LOAD_S = 15
SERVER = f"sparkbench-vllm-{HOST}"
SELECT = json.dumps({"bench_select": ["nvidia-bare", SLOW],
                     "bench_extra_variants": [{"name": SLOW, "build": "nvidia", "config": "mtp2",
                                               "env": {"VLLM_SIM_LOAD_SECONDS": str(SLOW_LOAD_S)}}]})


def _wait_for(predicate, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _slow_server_runs() -> bool:
    """The slow variant's server container runs (it loads for SLOW_LOAD_S: the play waits for /health)."""
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{json .Config.Env}}", SERVER],
                         capture_output=True, text=True, timeout=60).stdout
    return out.startswith("true") and f"VLLM_SIM_LOAD_SECONDS={SLOW_LOAD_S}" in out


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    results, hf = tmp / "results", tmp / "hf"
    results.mkdir()
    hf.mkdir()
    first = results / "relresume" / HOST / "nvidia-bare.json"
    lines: list[str] = []
    try:
        proc = subprocess.Popen(bench_cmd(HOST, "relresume", "-e", SELECT), cwd=REPO, env=base_env(results, hf),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        # Read the output as it comes (a full pipe would stall the play) and see where it is.
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        reached = (_wait_for(first.exists, proc, 300)
                   and _wait_for(lambda: any(f"Bench variant | plan {SLOW}" in ln for ln in lines), proc, 300)
                   and _wait_for(_slow_server_runs, proc, 300))
        time.sleep(1.0)  # the wait for /health has begun; the server needs SLOW_LOAD_S to answer it
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
        reader.join(timeout=30)
        out1 = "".join(lines)
        snapshot = {p.name: p.read_bytes() for p in (results / "relresume" / HOST).glob("*.json")}
        # A half-written result file (as a disk-full or a killed copy would leave): corrupt JSON.
        (results / "relresume" / HOST / f"{SLOW}.json").write_text('{"status": "compl', encoding="utf-8")
        second = run_playbook(tmp, HOST, "relresume", "-e", SELECT)
        yield {"reached": reached, "rc1": proc.returncode, "out1": out1, "snapshot": snapshot,
               "first_bytes": snapshot.get(first.name), "second": second, "dir": results / "relresume" / HOST}
    finally:
        remove_containers([HOST])


def test_interrupt_stops_the_run_and_keeps_the_finished_result(resumed) -> None:
    assert resumed["reached"], "the play never reached the second variant: " + resumed["out1"][-4000:]
    assert resumed["rc1"] != 0, resumed["out1"][-4000:]
    assert "User interrupted execution" in resumed["out1"], resumed["out1"][-4000:]
    assert "Traceback" not in resumed["out1"]
    assert json.loads(resumed["first_bytes"])["status"] == "complete"
    assert set(resumed["snapshot"]) == {"nvidia-bare.json"}


def test_resume_skips_the_complete_result_and_remeasures_the_corrupt_one(resumed) -> None:
    second = resumed["second"]
    assert second.rc == 0, second.output[-3000:]
    assert (resumed["dir"] / "nvidia-bare.json").read_bytes() == resumed["first_bytes"]
    assert "skip: complete result with the same configuration hash" in second.output
    for v in ("nvidia-bare", SLOW):
        assert second.result(HOST, v)["status"] == "complete"
    # the skipped variant's server was never started again
    labels = subprocess.run(["docker", "ps", "-a", "--filter", f"name=sparkbench-vllm-{HOST}"],
                            capture_output=True, text=True).stdout
    assert "Up" not in labels
