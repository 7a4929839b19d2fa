"""The controller interrupted (SIGINT to ansible-playbook, as Ctrl-C sends it) after the first
variant's result is written, then the run resumed with the same bench_run_id: the complete
result is skipped (file untouched); the other variant, whose result file the test left corrupt
(half-written JSON), is measured again and its file replaced, without failing the host."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from test_reliability_common import REPO, base_env, playbook_cmd, remove_containers, run_playbook

HOST = "rel-a"
SELECT = '{"bench_select": ["nvidia-bare", "nvidia-mtp2"]}'


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    results, hf = tmp / "results", tmp / "hf"
    results.mkdir()
    hf.mkdir()
    first = results / "relresume" / HOST / "nvidia-bare.json"
    try:
        proc = subprocess.Popen(playbook_cmd(HOST, "relresume", "-e", SELECT), cwd=REPO, env=base_env(results, hf),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + 300
        while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.3)  # the copy has finished writing
        os.killpg(proc.pid, signal.SIGINT)
        out1, _ = proc.communicate(timeout=120)
        snapshot = {p.name: p.read_bytes() for p in (results / "relresume" / HOST).glob("*.json")}
        # A half-written result file (as a disk-full or a killed copy would leave): corrupt JSON.
        (results / "relresume" / HOST / "nvidia-mtp2.json").write_text('{"status": "compl', encoding="utf-8")
        second = run_playbook(tmp, HOST, "relresume", "-e", SELECT)
        yield {"rc1": proc.returncode, "out1": out1, "snapshot": snapshot, "first_bytes": snapshot.get(first.name),
               "second": second, "dir": results / "relresume" / HOST}
    finally:
        remove_containers([HOST])


def test_interrupt_stops_the_run_and_keeps_the_finished_result(resumed) -> None:
    assert resumed["rc1"] != 0
    assert "Traceback" not in resumed["out1"]
    assert json.loads(resumed["first_bytes"])["status"] == "complete"
    assert set(resumed["snapshot"]) == {"nvidia-bare.json"}


def test_resume_skips_the_complete_result_and_remeasures_the_corrupt_one(resumed) -> None:
    second = resumed["second"]
    assert second.rc == 0, second.output[-3000:]
    assert (resumed["dir"] / "nvidia-bare.json").read_bytes() == resumed["first_bytes"]
    assert "skip: complete result with the same configuration hash" in second.output
    for v in ("nvidia-bare", "nvidia-mtp2"):
        assert second.result(HOST, v)["status"] == "complete"
    # the skipped variant's server was never started again
    labels = subprocess.run(["docker", "ps", "-a", "--filter", f"name=sparkbench-vllm-{HOST}"],
                            capture_output=True, text=True).stdout
    assert "Up" not in labels
