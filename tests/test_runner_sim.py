"""The runner drives the real simulated fleet: scripts/sparkbench bench on bench.yml against a
simulator container (real Docker, real ansible-playbook through ansible-runner), one healthy
variant and one that crashes at start → exit code 1, both states right, the report written.
Inventory: tests/fixtures/runner/sim_inventory (ports 18800-18809, containers sparkbench-runnertest-*)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

INV = REPO / "tests" / "fixtures" / "runner" / "sim_inventory"

pytestmark = pytest.mark.skipif(
    subprocess.run(["docker", "image", "inspect", "sparkbench/vllm-sim:v0.25.0"], capture_output=True).returncode != 0,
    reason="simulator image missing: run make setup")
pytestmark = [pytestmark, pytest.mark.ansible]


@pytest.fixture()
def cleanup_containers():
    yield
    names = subprocess.run(["docker", "ps", "-aq", "--filter", "name=sparkbench-runnertest-"],
                           capture_output=True, text=True).stdout.split()
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)


def test_runner_drives_simulated_host(tmp_path: Path, cleanup_containers):
    hf = tmp_path / "hf"
    hf.mkdir()
    env = {**os.environ, "SPARKBENCH_RUNNER_TEST_HF_CACHE": str(hf), "SPARKBENCH_RUNNER_DIR": str(tmp_path / "runner"),
           "COLUMNS": "100", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    # unsloth-bare beside nvidia-bare, 5 requests each: a build comparison with a verdict
    extra = '{"bench_select": ["nvidia-bare", "unsloth-bare", "crash-start"], "llm_bench_runs": 5}'
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "sparkbench"), "bench",
                           "-i", str(REPO / "inventory"), "-i", str(INV), "-l", "runner-sim01", "-e", extra,
                           "--results-dir", str(tmp_path / "results"), "--run-id", "sim"],
                          capture_output=True, text=True, env=env, timeout=500)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # bench.yml itself failed the run too (after its report): the two exit statuses agree.
    assert "ansible-playbook failed (rc 2)" in out, out[-2000:]
    assert "runner-sim01 nvidia-bare: measuring" in out and "runner-sim01 nvidia-bare: done" in out
    assert "runner-sim01 crash-start: launching" in out and "runner-sim01 crash-start: failed" in out
    # nvidia-bare, the host's reference, is bracketed at the end: its own entry in the live view
    assert "runner-sim01 nvidia-bare.bracket: measuring" in out and "runner-sim01 nvidia-bare.bracket: done" in out
    assert "runner-sim01: 3/4 done, failed: crash-start" in out
    run = tmp_path / "results" / "sim"
    assert f"report: {run / 'report.html'}" in out
    # The closing lines: the compact table and the answer with its verdict, each within COLUMNS=100
    # (a "label: PATH" line whose temporary path alone is longer excepted: a path is never broken).
    closing = out[out.index("SIMULATED: figures come from the vLLM simulator"):].splitlines()
    wide = [x for x in closing if len(x) > 100 and not (len(x.split()) == 2 and x.split()[1].startswith("/"))]
    assert not wide, wide
    header = closing[1].split()
    assert header[:3] == ["variant", "tok/s", "×"] and "nvidia" in header and "2×" in header  # 2 parallel only
    assert any(x.startswith("unsloth-bare ") and ("differs by" in x or "no difference" in x) for x in closing)
    answer = " ".join(" ".join(closing).split())
    assert "- runner-sim01 · Qwen3.6-35B-A3B-NVFP4 — single stream: " in answer
    assert "unsloth vs nvidia — single-stream" in answer and closing[-1] == "exit code 1"
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "**SIMULATED**" in md and "runner-sim01/crash-start: failed at launch" in md
    assert (run / "runner-sim01" / "nvidia-bare.json").is_file()
    assert (run / "runner-sim01" / "nvidia-bare.bracket.json").is_file() and "## Drift (bracketing)" in md
    # Ansible's facts stay in memory under ansible-runner (no JSON file per host decoded at every
    # task), and the module payloads are kept for the next run (strategy_plugins/sparkbench_linear.py).
    assert not list((tmp_path / "runner").glob("*/artifacts/*/fact_cache")), "ansible-runner kept a fact cache file"
    kept = list((tmp_path / "cache" / "sparkbench" / "ansiballz").glob("*/*docker_container-*"))
    assert kept and not any(p.name.endswith("-part") for p in kept), kept
    shutil.rmtree(hf, ignore_errors=True)
