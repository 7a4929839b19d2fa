"""ansible-playbook playbooks/health.yml end to end on the simulated fleet (real Docker, the
simulator image, the sim_sparks hosts on ports 8101-8103), with spark-sim03's clock capped at
850 MHz by an extra inventory file (tests/fixtures/health/clock_capped.yml): the capped unit is
judged slow with the clock as the cause, the others healthy, the play exits non-zero, and
health.md / health.json / the history index are written. One run, tiny canary (64 tokens, 5
requests). The sim_sparks hosts are shared with other suites and helpers: the run holds
``flock /tmp/sim_sparks.lock``."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkbench import result as result_mod

from conftest import image_present

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
IMAGE = "sparkbench/vllm-sim:v0.25.0"
HOSTS = ("spark-sim01", "spark-sim02", "spark-sim03")


def docker_ok() -> bool:
    return image_present(IMAGE)


pytestmark = pytest.mark.skipif(not docker_ok() or not shutil.which("flock"),
                                reason=f"Docker engine, {IMAGE} or flock missing: run make setup")
pytestmark = [pytestmark, pytest.mark.ansible]


@pytest.fixture(scope="module")
def health_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health")
    extra = {
        "bench_results_dir": str(tmp / "results"),
        "spark_host_hf_cache": str(tmp / "hf"),
        "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "1"},
        "llm_bench_output_tokens": 64, "llm_bench_warmup": 1,
        "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
    }
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    cmd = ["flock", "/tmp/sim_sparks.lock", str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory/hosts.yml"),
           "-i", str(REPO / "tests/fixtures/health/clock_capped.yml"), "-l", "sim_sparks",
           "-e", f"@{tmp / 'extra.yml'}", "-e", "bench_run_id=H1", "playbooks/health.yml"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    return proc, tmp / "results"


def test_capped_unit_is_slow_with_the_clock_named_and_the_play_fails(health_run):
    proc, results = health_run
    out = proc.stdout
    assert (results / "H1" / "health.json").is_file(), out[-4000:] + proc.stderr[-2000:]
    doc = json.loads((results / "H1" / "health.json").read_text())
    units = {u["host"]: u for u in doc["units"]}
    assert set(units) == set(HOSTS)
    capped = units["spark-sim03"]
    assert capped["verdict"] == "slow", capped["line"]
    assert capped["causes"][0] == "clock 850 of 3003 MHz under load", capped["causes"]
    assert "unplug the unit's power brick" in capped["remedy"]
    assert capped["figures"]["peers"]["verdict"] == "differs" and capped["figures"]["peers"]["deviation_pct"] < -30
    for host in ("spark-sim01", "spark-sim02"):
        assert units[host]["verdict"] == "healthy", units[host]["line"]
        assert units[host]["figures"]["clock_under_load_mhz"] > 2000
    # The exit status cron and CI read, and the one-line verdicts in the play's output.
    assert proc.returncode != 0
    assert "spark-sim03: slow — clock 850 of 3003 MHz under load" in out
    assert "1 unit(s) slow or failed" in out
    md = (results / "H1" / "health.md").read_text()
    assert "SIMULATED" in md and "- spark-sim03: slow — clock 850 of 3003 MHz under load" in md


def test_the_bandwidth_probe_reads_the_capped_unit_far_lower(health_run):
    """The probes before and after each canary (sparkbench.bandwidth, the simulator's stand-in):
    spark-sim03, capped at 850 MHz with efficiency 0.89, streams far less than its peers, the same
    before and after (a steady state, no drop)."""
    _, results = health_run
    probes = {}
    for host in HOSTS:
        (path,) = [p for p in (results / "H1" / host).glob("*.json")]
        bw = result_mod.stored(path)["protocol"]["bandwidth"]  # with the probe after it (its own file)
        assert bw["method"] == "simulated" and bw["after"]["gbps"] > 0 and bw["drop"] is None, bw
        probes[host] = bw["gbps"]
    assert probes["spark-sim03"] < 0.5 * min(probes["spark-sim01"], probes["spark-sim02"]), probes


def test_the_canary_is_short_single_stream_and_a_normal_result(health_run):
    _, results = health_run
    for host in HOSTS:
        doc = json.loads((results / "H1" / host / "nvidia-bare.json").read_text())
        assert doc["status"] == "complete" and doc["simulated"] is True
        assert len(doc["single"]["runs"]) == 5 and not doc.get("parallel")
        s = doc["manifest"]["settings"]
        assert (s["runs"], s["concurrency"], s["quality"], s["image"]) == (5, [], False, False)
    with sqlite3.connect(results / "index.sqlite") as db:
        got = dict(db.execute("SELECT host, health FROM results WHERE run_id = 'H1'").fetchall())
    assert got == {"spark-sim01": "healthy", "spark-sim02": "healthy", "spark-sim03": "slow"}
