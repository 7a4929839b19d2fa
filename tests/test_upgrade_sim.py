"""``playbooks/upgrade.yml`` on three simulated units (real Docker, the simulator's images), one run.

Each unit first measures ``nvidia-bare`` on the emulated vLLM v0.24.0 image (bench.yml) and deploys
it as its resident (serve.yml); then one ``scripts/sparkbench upgrade`` over the three (its rounds
until every gate is decided), each unit with its own candidate image (a host variable):

- ``up-sim01``: a candidate slowed by a fixed factor (an image of the v0.25.0 simulator whose
  efficiency is 0.8): refused with a "differs by" verdict; the resident still runs v0.24.0 and answers;
- ``up-sim02``: the v0.25.0 image (the simulator's version bridge: 0.24.0 decodes at 0.9759 of
  0.25.0): passed, deployed through serve.yml's steps; the resident then runs v0.25.0 and answers;
- ``up-sim03``: a candidate that never becomes healthy (its engine exits at start): refused; the
  resident still runs v0.24.0 and answers.

Then ``--check`` names what it would measure and starts nothing, and an upgrade to the image the
resident already runs is refused before anything starts (the candidate's parser refusing a flag:
the unit layer, tests/test_upgrade_units.py). Ports 19800-19899 by process id; containers and the derived
images carry a per-session prefix and are removed at teardown.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest
import yaml

from conftest import image_present
from helpers import BIN, REPO, ansible_env, containers, playbook_cmd

OLD, NEW = "sparkbench/vllm-sim:v0.24.0", "sparkbench/vllm-sim:v0.25.0"
VARIANT = "nvidia-bare"
SLOW, DEAD, BRIDGE = "up-sim01", "up-sim03", "up-sim02"
HOSTS = [SLOW, BRIDGE, DEAD]
_BASE = 19800 + 12 * (os.getpid() % 8)  # 19800-19895: 4 ports a unit
PORTS = {h: {"bench": _BASE + 4 * i, "serve": _BASE + 4 * i + 1, "candidate": _BASE + 4 * i + 2}
         for i, h in enumerate(HOSTS)}

pytestmark = [pytest.mark.skipif(not (image_present(OLD) and image_present(NEW)),
                                 reason=f"Docker engine or {OLD}/{NEW} missing: run make setup"),
              pytest.mark.sim, pytest.mark.ansible]


def _derived(tag: str, env: dict[str, str]) -> None:
    """An image of the v0.25.0 simulator with ``env`` baked in (no network: FROM a local image)."""
    dockerfile = f"FROM {NEW}\n" + "".join(f"ENV {k}={v}\n" for k, v in env.items())
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("upgrade")
    prefix = f"sbtest-up{os.getpid()}"
    slow_image, dead_image = f"{prefix}/vllm-sim:slow", f"{prefix}/vllm-sim:dead"
    _derived(slow_image, {"VLLM_SIM_EFFICIENCY": "0.8"})
    _derived(dead_image, {"VLLM_SIM_FAULT_CRASH_AT_START": "1"})
    candidates = {SLOW: slow_image, BRIDGE: NEW, DEAD: dead_image}
    hosts = {h: {"vllm_server_port": p["bench"], "serve_port": p["serve"], "serve_candidate_port": p["candidate"],
                 "upgrade_image": candidates[h]} for h, p in PORTS.items()}
    inv = {"all": {"children": {"sparks": {"children": {"sim_sparks": {"hosts": hosts}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    matrix = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())
    common = {
        "bench_results_dir": str(tmp / "results"), "spark_host_hf_cache": str(tmp / "hf"),
        "spark_host_vllm_cache": str(tmp / "vllm"), "spark_host_flashinfer_cache": str(tmp / "flashinfer"),
        # no jitter: the verdicts separate a 2.5 % step with a few requests
        "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_SPEEDUP": "2", "VLLM_SIM_JITTER": "0"},
        "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
        "serve_container_prefix": f"{prefix}-resident-{{{{ inventory_hostname }}}}",
        "serve_candidate_prefix": f"{prefix}-candidate-{{{{ inventory_hostname }}}}",
        "serve_unit_dir": str(tmp / "unit-records-{{ inventory_hostname }}"), "vllm_server_ready_timeout_s": 60,
        "vllm_server_container_prefix": prefix, "bench_bandwidth_probe": False,
        "spark_host_probe_container": prefix + "-probe-{{ inventory_hostname }}",
        "spark_host_download_container": prefix + "-download-{{ inventory_hostname }}",
        "bench_common_args": {**matrix["bench_common_args"], "gpu-memory-utilization": 0.4},
        "llm_bench_output_tokens": 64, "llm_bench_runs": 5, "llm_bench_warmup": 0, "llm_bench_concurrency": [],
        "llm_bench_quality": False, "llm_bench_image": False,
    }
    (tmp / "common.yml").write_text(yaml.safe_dump(common))

    def play(playbook: str, *args: str, limit: str = ",".join(HOSTS)) -> subprocess.CompletedProcess:
        cmd = playbook_cmd(playbook, "-e", f"@{tmp / 'common.yml'}", *args, limit=limit,
                           inventories=[REPO / "inventory/hosts.yml", tmp / "inventory.yml"])
        return subprocess.run(cmd, cwd=REPO, env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=900)

    try:
        proc = play("bench.yml", "-e", "bench_run_id=R1", "-e", f"bench_image={OLD}", "-e", "bench_bracket=false",
                    "-e", json.dumps({"bench_select": [VARIANT]}))
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        proc = play("playbooks/serve.yml", "-e", f"serve_variant={VARIANT}", "-e", "serve_run=R1")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        before = {h: _resident(tmp, prefix, h) for h in HOSTS}
        t0 = time.monotonic()
        # through scripts/sparkbench: its rounds go on where a gate cannot tell yet (a loaded machine)
        upgrade = sparkbench(tmp, "upgrade", "-l", ",".join(HOSTS), "--run-id", "U1")
        seconds = time.monotonic() - t0
        yield {"tmp": tmp, "prefix": prefix, "play": play, "upgrade": upgrade, "before": before,
               "seconds": seconds, "candidates": candidates}
    finally:
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        subprocess.run(["docker", "rmi", "-f", slow_image, dead_image], capture_output=True)


def sparkbench(tmp, *args: str) -> subprocess.CompletedProcess:
    """``scripts/sparkbench ARGS`` over the test inventory (each unit's candidate: its upgrade_image)."""
    cmd = [str(BIN / "python"), str(REPO / "scripts" / "sparkbench"), *args,
           "-i", str(REPO / "inventory/hosts.yml"), "-i", str(tmp / "inventory.yml"),
           "-e", f"@{tmp / 'common.yml'}", "--results-dir", str(tmp / "results")]
    return subprocess.run(cmd, cwd=REPO, env=ansible_env(SPARKBENCH_RUNNER_DIR=str(tmp / "runner")),
                          capture_output=True, text=True, timeout=900)


def _resident(tmp, prefix: str, host: str) -> dict:
    """The resident container of ``host`` as Docker inspects it."""
    name = f"{prefix}-resident-{host}-{VARIANT}"
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (name, out.stderr)
    return json.loads(out.stdout)[0]


def _answers(host: str) -> bool:
    """The resident on ``host``'s serve port answers /v1/models."""
    with urllib.request.urlopen(f"http://127.0.0.1:{PORTS[host]['serve']}/v1/models", timeout=10) as r:
        return r.status == 200


def _decision(fleet, host: str) -> dict:
    path = fleet["tmp"] / "results" / "U1" / host / f"{VARIANT}.upgrade.json"
    assert path.is_file(), fleet["upgrade"].stdout[-6000:] + fleet["upgrade"].stderr[-2000:]
    return json.loads(path.read_text())


def test_a_slowed_candidate_is_refused_and_the_resident_serves_as_before(fleet):
    d = _decision(fleet, SLOW)
    assert d["state"] == "refused", d
    fig = d["figures"][0]
    assert fig["verdict"]["kind"] == "differs" and fig["verdict"]["pct"] < -2.5 and fig["outcome"] == "fall", fig
    assert "differs by" in d["reason"] and "beyond the 2.5 % bridge tolerance" in d["reason"]
    now = _resident(fleet["tmp"], fleet["prefix"], SLOW)
    assert now["Config"]["Image"] == OLD and now["State"]["Running"] and _answers(SLOW)
    assert now["Id"] == fleet["before"][SLOW]["Id"]  # the same container, started again
    # the drift of the current image across the run (its bracket), and the run failed (exit 1)
    assert d["drift"] is not None and fleet["upgrade"].returncode == 1, fleet["upgrade"].stdout[-3000:]


def test_the_version_bridge_passes_and_the_resident_runs_the_new_image(fleet):
    d = _decision(fleet, BRIDGE)
    assert d["state"] == "passed", (d, fleet["upgrade"].stdout[-4000:])
    assert d["change"]["image"] == [OLD, NEW] and d["candidate_vllm_version"] == "0.25.0"
    fig = d["figures"][0]
    assert fig["candidate_median"] > fig["current_median"] and fig["outcome"] == "pass", fig
    now = _resident(fleet["tmp"], fleet["prefix"], BRIDGE)
    assert now["Config"]["Image"] == NEW and now["State"]["Running"] and _answers(BRIDGE)
    record = json.loads((fleet["tmp"] / "results" / ".deployments" / BRIDGE / f"{VARIANT}.json").read_text())
    assert record["state"] == "deployed" and record["source"]["run"] == "U1" and record["source"]["image"] == NEW


def test_a_candidate_that_never_becomes_healthy_is_refused_and_the_resident_serves(fleet):
    d = _decision(fleet, DEAD)
    assert d["state"] == "refused" and "did not become healthy" in d["reason"], d
    assert d["kernels"] == [] and d["kernels_text"].startswith("not compared"), d  # no startup to compare
    now = _resident(fleet["tmp"], fleet["prefix"], DEAD)
    assert now["Config"]["Image"] == OLD and now["State"]["Running"] and _answers(DEAD)


def test_the_upgrade_report_leads_with_the_decisions(fleet):
    md = (fleet["tmp"] / "results" / "U1" / "upgrade.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "# Upgrade — run U1" and "SIMULATED" in lines[2]
    decisions = [line for line in lines if line.startswith("- **")]
    assert len(decisions) == 3 and sum("PASSED" in line for line in decisions) == 1, decisions
    assert "What changed inside (the startup logs)" in md
    out = fleet["upgrade"].stdout
    assert f"{BRIDGE} {VARIANT}: PASSED" in out and f"{SLOW} {VARIANT}: REFUSED" in out, out[-4000:]
    print(f"\nupgrade (simulated, 3 units in one run): {fleet['seconds']:.0f} s")


def test_check_names_what_it_would_measure_and_starts_nothing(fleet):
    since = time.time()
    proc = sparkbench(fleet["tmp"], "upgrade", "-l", SLOW, "--run-id", "U2", "--check", "--plain")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())  # the YAML callback folds long lines
    assert f"upgrade {VARIANT}: measuring {OLD} ({VARIANT}.current) and the candidate" in out, out[-3000:]
    created = subprocess.run(["docker", "events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}",
                              "--filter", "type=container", "--filter", "event=create", "--format",
                              "{{.Actor.Attributes.name}}"], capture_output=True, text=True, timeout=60).stdout
    assert fleet["prefix"] not in created, created
    assert not (fleet["tmp"] / "results" / "U2" / SLOW).exists()


def test_an_upgrade_to_the_image_the_resident_runs_is_refused_before_anything_starts(fleet):
    """Bad input (the candidate is the current image) fails naming the variable, no container
    created; the candidate's parser refusing a resident's flag is tested over a recorded schema
    (tests/test_upgrade_units.py): no simulator release lacks one of the seed's flags."""
    since = time.time()
    tmp = fleet["tmp"]
    proc = sparkbench(tmp, "upgrade", OLD, "-l", DEAD, "--run-id", "U3")
    # the resident already runs that image: nothing to upgrade, said before anything starts (exit 4)
    assert proc.returncode == 4 and "already runs" in proc.stdout and "upgrade_image" in proc.stdout, \
        proc.stdout[-3000:] + proc.stderr[-2000:]
    created = subprocess.run(["docker", "events", "--since", f"{since:.0f}", "--until", f"{time.time():.0f}",
                              "--filter", "type=container", "--filter", "event=create", "--format",
                              "{{.Actor.Attributes.name}}"], capture_output=True, text=True, timeout=60).stdout
    assert f"{fleet['prefix']}-{DEAD}" not in created, created


def test_a_resident_an_interrupted_upgrade_left_stopped_is_started_by_the_next_serve_run(fleet):
    """The state an upgrade leaves when the unit is lost after it stopped the resident and before it
    started it again: the controller's note (written before the stop) and the stopped container. The
    next serve.yml run on the unit (here: listing its residents) starts it again and forgets the note.
    (Losing the SSH connection itself at that moment is not reproduced here.)"""
    tmp, prefix = fleet["tmp"], fleet["prefix"]
    name = f"{prefix}-resident-{SLOW}-{VARIANT}"
    note = tmp / "results" / ".deployments" / SLOW / "upgrade" / "stopped.json"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(json.dumps([{"variant": VARIANT, "container": name, "health_url": None}]))
    subprocess.run(["docker", "stop", name], check=True, capture_output=True, timeout=120)
    proc = fleet["play"]("playbooks/serve.yml", limit=SLOW)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _resident(tmp, prefix, SLOW)["State"]["Running"] and not note.exists()
    deadline = time.monotonic() + 60
    while True:  # the engine loads again (1 s in the simulator)
        try:
            assert _answers(SLOW)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    # an upgrade round wrote and removed its own note: none left behind by the run above
    assert not (tmp / "results" / ".deployments" / BRIDGE / "upgrade" / "stopped.json").exists()
