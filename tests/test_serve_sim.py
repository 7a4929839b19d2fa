"""``playbooks/serve.yml`` on a simulated unit (real Docker, real simulator image), end to end.

One bench.yml run measures ``nvidia-bare`` (the baseline), then serve.yml, in order:

- ``--check`` prints the resident's command and starts nothing; a run that names no result fails
  before the unit is touched, naming ``serve_run`` and the fix;
- a deploy whose canary passes: ``sparkbench-resident``-style container on ``serve_port`` with its
  restart policy, health check and labels, the deployment record on the controller and on the unit;
- listing the unit's residents;
- health.yml on the unit: its canary is the resident (measured with its record's health_argv, not
  restarted), judged against the deployment's canary: healthy; after a restart on a slowed unit:
  slow against its deployment; ``bench.yml --check`` names the resident and leaves it running;
- bench.yml with ``bench_interference`` on that unit: the variant alone (the resident stopped for
  it and started again, the same container), beside the resident idle and under its steady load,
  verdicts against alone, slower under the load; the report's "Co-residence" section;
- a slowed unit (the simulator's hardware profile, read from the unit's mounted cache folder, at
  a third of its bandwidth: the launch spec and so the configuration hash are unchanged) with
  ``serve_beside=false``: the previous resident is stopped, the candidate's canary "differs" and is
  slower by more than 5 %, the deploy fails, the previous resident is started again (same
  container), a failure record says why;
- an unhealthy start beside the previous resident (the candidate's port is held, so it cannot
  bind): the previous resident is never stopped, the candidate is removed;
- a unit that does not answer (SSH to a closed port): the deploy fails at stage ``unreachable`` and
  the controller's failure record says what may be left there;
- undeploy.

Ports 19400-19499 by process id; containers carry a per-session prefix and are removed at teardown.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sparkbench import history as history_mod

from conftest import image_present
from helpers import REPO, ansible_env, containers, playbook_cmd

IMAGE = "sparkbench/vllm-sim:v0.25.0"
HOST = "srv-sim01"
FAR = "srv-far01"
VARIANT = "nvidia-bare"
_BASE = 19400 + 4 * (os.getpid() % 25)  # 19400-19499
BENCH_PORT, SERVE_PORT, CANDIDATE_PORT = _BASE, _BASE + 1, _BASE + 2

pytestmark = [pytest.mark.skipif(not image_present(IMAGE), reason=f"Docker engine or {IMAGE} missing: run make setup"),
              pytest.mark.sim, pytest.mark.ansible]


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    prefix = f"sbtest-sv{os.getpid()}"
    # The simulator reads its own profiles from the unit's Hugging Face cache folder (mounted; the
    # built-in ones copied there), so the test can slow the "unit" without touching the launch spec.
    shutil.copytree(REPO / "sparkbench/data/profiles", tmp / "hf" / "sim-profiles")
    inv = {"all": {"children": {"sparks": {"children": {"sim_sparks": {"hosts": {
        HOST: {"vllm_server_port": BENCH_PORT},
        FAR: {"vllm_server_port": BENCH_PORT, "ansible_connection": "ssh", "ansible_host": "127.0.0.1",
              "ansible_port": 1, "ansible_user": "nobody", "ansible_python_interpreter": "/usr/bin/python3"}}}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    # Two engines share the simulated unit's memory account (sparkbench_sim_unit_dir): at 0.4 each the
    # resident and a candidate (or a bench variant) fit beside each other (8 + 2 x 51.2 of 128 GB).
    matrix = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())
    common = {
        "bench_results_dir": str(tmp / "results"), "spark_host_hf_cache": str(tmp / "hf"),
        "spark_host_vllm_cache": str(tmp / "vllm"), "spark_host_flashinfer_cache": str(tmp / "flashinfer"),
        "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_SPEEDUP": "2",
                                      "VLLM_SIM_PROFILES_DIR": "/root/.cache/huggingface/sim-profiles"},
        "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
        "serve_port": SERVE_PORT, "serve_candidate_port": CANDIDATE_PORT,
        "serve_container_prefix": f"{prefix}-resident", "serve_candidate_prefix": f"{prefix}-candidate",
        "serve_unit_dir": str(tmp / "unit-records"), "vllm_server_ready_timeout_s": 60,
        "bench_common_args": {**matrix["bench_common_args"], "gpu-memory-utilization": 0.4},
    }
    bench = {**common, "bench_run_id": "R1", "bench_bracket": False, "bench_bandwidth_probe": False,
             "vllm_server_container_prefix": prefix,
             "spark_host_probe_container": prefix + "-probe-{{ inventory_hostname }}",
             "spark_host_download_container": prefix + "-download-{{ inventory_hostname }}",
             "bench_select": [VARIANT], "llm_bench_output_tokens": 64, "llm_bench_runs": 5, "llm_bench_warmup": 0,
             "llm_bench_concurrency": [], "llm_bench_quality": False, "llm_bench_image": False}
    (tmp / "common.yml").write_text(yaml.safe_dump(common))
    (tmp / "bench.yml").write_text(yaml.safe_dump(bench))

    def play(playbook: str, *args: str, limit: str = HOST) -> subprocess.CompletedProcess:
        cmd = playbook_cmd(playbook, "-e", f"@{tmp / 'common.yml'}", *args, limit=limit,
                           inventories=[REPO / "inventory/hosts.yml", tmp / "inventory.yml"])
        return subprocess.run(cmd, cwd=REPO, env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=600)

    try:
        proc = play("bench.yml", "-e", f"@{tmp / 'bench.yml'}")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        subprocess.run(["docker", "rm", "-f", f"{prefix}-{HOST}"], capture_output=True)
        # The unreachable unit's result: the same document under its name (the hash holds no host).
        src = tmp / "results" / "R1" / HOST / f"{VARIANT}.json"
        (tmp / "results" / "R1" / FAR).mkdir()
        shutil.copy(src, tmp / "results" / "R1" / FAR / f"{VARIANT}.json")
        yield {"tmp": tmp, "prefix": prefix, "play": play, "source": json.loads(src.read_text())}
    finally:
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def serve(unit, *args: str, limit: str = HOST) -> subprocess.CompletedProcess:
    return unit["play"]("playbooks/serve.yml", *args, limit=limit)


def deployments(unit) -> Path:
    return unit["tmp"] / "results" / ".deployments" / HOST


def history(unit, state: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((deployments(unit) / "history").glob(f"*-{state}.json"))]


def test_check_prints_the_command_and_the_memory_plan_and_starts_nothing(unit):
    """--check prints the resident's command and the unit's memory plan; a plan that cannot fit (a
    declared 80 GB tenant beside the resident's 51.2 GB share) fails the play before the unit is
    touched, naming the numbers, vLLM's own message and the fix."""
    proc = serve(unit, "-e", f"serve_variant={VARIANT}", "--check", "-e",
                 json.dumps({"bench_tenants": [{"name": "comfyui", "gb": 80}]}))
    assert proc.returncode != 0, proc.stdout[-4000:]
    out = " ".join(proc.stdout.replace("''", "'").split())
    name = f"{unit['prefix']}-resident-{VARIANT}"
    assert f"docker run -d --name {name} --restart unless-stopped" in out, out[-3000:]
    assert f"--port {SERVE_PORT}" in out and "config hash " + unit["source"]["config_hash"][:12] in out
    # The simulated unit's shared account is mounted, outside the configuration hash.
    assert "-e VLLM_SIM_UNIT_DIR=/run/sparkbench-unit" in out and f"sparkbench-units/{HOST}:/run/sparkbench-unit" in out
    assert f"memory plan of {HOST}: 128 GB" in out and "residents from the controller's deployment records" in out
    assert "TASK [Serve | refuse a memory plan that cannot fit]" in out
    assert (f"the unit's memory plan does not fit: {name} takes 51.2 GB (--gpu-memory-utilization 0.4 x 128 GB) "
            "beside reserve system 8.0 GB, tenant comfyui 80.0 GB: 139.2 GB of 128 GB, 11.2 GB over") in out
    assert "less than desired GPU memory utilization (0.4, 47.68 GiB)" in out and "fix: lower" in out
    assert containers(unit["prefix"]) == {} and not deployments(unit).exists()


def test_a_result_that_cannot_be_found_fails_before_the_unit(unit):
    proc = serve(unit, "-e", f"serve_variant={VARIANT}", "-e", "serve_run=NOPE")
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "serve_run=NOPE: no result" in out and "runs where nvidia-bare is complete on srv-sim01: R1" in out, out[-3000:]
    # Failed at the plan: no task touched the unit, nothing started, nothing recorded.
    assert "Serve | list the unit's residents" not in proc.stdout
    assert containers(unit["prefix"]) == {} and not deployments(unit).exists()


def test_deploy_with_a_passing_canary(unit):
    proc = serve(unit, "-e", f"serve_variant={VARIANT}")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "→ fits: 59.2 of 128 GB, 68.8 GB free" in " ".join(proc.stdout.split()), proc.stdout[-5000:]
    name = f"{unit['prefix']}-resident-{VARIANT}"
    found = containers(unit["prefix"])
    assert list(found) == [name], list(found)
    c = found[name]
    assert c["State"]["Running"] and c["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert c["Config"]["Healthcheck"]["Test"][0] == "CMD"
    assert c["Config"]["Labels"]["sparkbench.config_hash"] == unit["source"]["config_hash"]
    argv = c["Config"]["Cmd"]
    src_argv = unit["source"]["launch"]["argv"]
    # Exactly as measured but for the port: same flags, image and environment.
    assert argv[argv.index("--port") + 1] == str(SERVE_PORT) and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert [a for a in argv if a != str(SERVE_PORT)] == [a for a in src_argv if a != str(BENCH_PORT)]
    assert c["Config"]["Image"] == unit["source"]["manifest"]["image"]
    rec = json.loads((deployments(unit) / f"{VARIANT}.json").read_text())
    assert rec["state"] == "deployed" and rec["source"]["run"] == "R1" and rec["port"] == SERVE_PORT
    assert rec["canary"]["passed"] and rec["canary"]["requests"] >= 5 and rec["previous"] is None
    assert rec["canary"]["text"].startswith(("no difference detectable above", "differs by"))
    on_unit = json.loads((unit["tmp"] / "unit-records" / f"{VARIANT}.json").read_text())
    assert on_unit == rec
    unit["started"] = c["State"]["StartedAt"]
    unit["id"] = c["Id"]


def test_list_residents(unit):
    proc = serve(unit)
    assert proc.returncode == 0, proc.stdout[-3000:]
    out = " ".join(proc.stdout.split())
    assert f"{HOST}: {unit['prefix']}-resident-{VARIANT} — {VARIANT} from run R1 on port {SERVE_PORT}" in out, out[-2000:]


def health(unit, run_id: str) -> tuple[subprocess.CompletedProcess, dict]:
    """health.yml on the unit (bench.yml's prefixes, no bandwidth probe) and its health.json entry."""
    proc = unit["play"]("playbooks/health.yml", "-e", f"@{unit['tmp'] / 'bench.yml'}", "-e", f"bench_run_id={run_id}")
    path = unit["tmp"] / "results" / run_id / "health.json"
    assert path.is_file(), proc.stdout[-5000:] + proc.stderr[-2000:]
    return proc, json.loads(path.read_text())["units"][0]


def wait_healthy(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def slowed_profile(unit):
    """The simulator's hardware profile at a third of its bandwidth; returns (its path, the text to
    write back)."""
    hw = unit["tmp"] / "hf" / "sim-profiles" / "hardware" / "dgx-spark.json"
    original = hw.read_text()
    profile = json.loads(original)
    profile["memory_bandwidth_gbps"] = profile["memory_bandwidth_gbps"] / 3
    hw.write_text(json.dumps(profile))
    return hw, original


def test_health_measures_the_resident_against_its_deployment(unit):
    name = f"{unit['prefix']}-resident-{VARIANT}"
    rec = json.loads((deployments(unit) / f"{VARIANT}.json").read_text())
    proc, u = health(unit, "H1")
    assert proc.returncode == 0, proc.stdout[-5000:]
    # The canary was the resident: no canary container was launched, the resident was not restarted.
    assert f"canary: resident {name} ({VARIANT} from run R1" in " ".join(proc.stdout.split()), proc.stdout[-4000:]
    found = containers(unit["prefix"])
    assert list(found) == [name] and found[name]["State"]["StartedAt"] == unit["started"]
    assert u["verdict"] == "healthy", u
    assert u["resident"] == {"name": name, "variant": VARIANT, "deployed_at": rec["when"], "run": "R1",
                             "port": SERVE_PORT}
    dep = u["figures"]["deployment"]
    assert u["figures"]["history"] is None and dep["deployed_at"] == rec["when"]
    assert dep["text"].startswith(("no difference detectable above", "differs by")), dep
    assert f"resident {name} ({VARIANT}, deployed {rec['when']}): {dep['text']} vs its deployment" in u["line"]
    # A normal result document of the resident at its port, in the run and in the history index.
    doc = json.loads((unit["tmp"] / "results" / "H1" / HOST / f"{VARIANT}.json").read_text())
    assert doc["status"] == "complete" and len(doc["single"]["runs"]) >= 5
    assert doc["launch"]["argv"][doc["launch"]["argv"].index("--port") + 1] == str(SERVE_PORT)
    assert doc["config_hash"] != unit["source"]["config_hash"]  # the canary's settings, not the bench run's
    rows = {r["run_id"]: r for r in history_mod.rows(unit["tmp"] / "results", host=HOST, variant=VARIANT)}
    assert rows["H1"]["health"] == "healthy" and rows["R1"]["health"] is None


def test_health_of_a_resident_that_slowed_down_is_slow_against_its_deployment(unit):
    name = f"{unit['prefix']}-resident-{VARIANT}"
    hw, original = slowed_profile(unit)
    try:  # the resident reads the profile at its start: weeks later, after a restart, it serves slower
        subprocess.run(["docker", "restart", name], capture_output=True, check=True)
        wait_healthy(SERVE_PORT)
        proc, u = health(unit, "H2")
    finally:
        hw.write_text(original)
        subprocess.run(["docker", "restart", name], capture_output=True, check=True)
        wait_healthy(SERVE_PORT)
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert u["verdict"] == "slow", u
    assert u["figures"]["deployment"]["text"].startswith("differs by −"), u["figures"]
    assert f"resident {name} ({VARIANT}, deployed " in u["line"] and "vs its deployment: differs by −" in u["line"]
    unit["started"] = containers(unit["prefix"])[name]["State"]["StartedAt"]


def test_bench_check_names_the_resident_and_leaves_it_running(unit):
    name = f"{unit['prefix']}-resident-{VARIANT}"
    proc = unit["play"]("bench.yml", "-e", f"@{unit['tmp'] / 'bench.yml'}", "-e", "bench_run_id=C1", "--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = " ".join(proc.stdout.split())
    assert f"{HOST}: {name} — {VARIANT} from run R1 on port {SERVE_PORT}" in out, out[-3000:]
    found = containers(unit["prefix"])
    assert list(found) == [name] and found[name]["State"]["Running"]
    assert found[name]["State"]["StartedAt"] == unit["started"]


TRUST = re.compile(r"^(differs by [−+]\d+\.\d % \[[−+]?\d+\.\d, [−+]?\d+\.\d\]|no difference detectable above "
                   r"\d+\.\d %|not enough requests for a verdict)$")


def test_interference_measures_the_variant_alone_idle_and_under_the_residents_load(unit):
    """bench.yml with bench_interference on a unit with the resident: the variant alone (the
    resident stopped and started again, the same container), beside it idle, beside it under its
    steady load (a background process against the resident's port); verdicts against alone in the
    Trust contract's words; under the load the variant is slower (the simulated unit's shared
    memory bus: a ratio of medians, never a wall-clock bound)."""
    name = f"{unit['prefix']}-resident-{VARIANT}"
    proc = unit["play"]("bench.yml", "-e", f"@{unit['tmp'] / 'bench.yml'}", "-e", "bench_run_id=I1", "-e",
                        json.dumps({"bench_interference": {"load_rps": 2}}))
    assert proc.returncode == 0, proc.stdout[-6000:]
    out = " ".join(proc.stdout.replace("''", "'").split())
    assert f"the residents {name} are stopped for its measurement and started again afterwards" in out, out[-4000:]
    doc = json.loads((unit["tmp"] / "results" / "I1" / HOST / f"{VARIANT}.json").read_text())
    assert doc["status"] == "complete" and doc["config_hash"] == unit["source"]["config_hash"]
    co = doc["coresidence"]
    assert co["residents"] == [{"name": name, "variant": VARIANT, "port": SERVE_PORT}] and co["load_rps"] == 2
    alone, idle, load = co["conditions"]
    assert [c["condition"] for c in co["conditions"]] == ["alone", "idle", "load"], co
    assert all(c["requests"] >= 5 and c["error"] is None for c in co["conditions"]), co
    assert TRUST.match(idle["text"]) and TRUST.match(load["text"]), co
    # The shared memory bus: under the resident's load every step of the variant stretches.
    assert load["decode_tok_s_median"] < 0.9 * alone["decode_tok_s_median"], co
    # (whether five requests make the −33 % a "differs" depends on how evenly a loaded machine paced
    # them: r19 drew "no difference detectable above 37.5 %" at load 10; the median is the check)
    # The load's own record: it served requests and was stopped after the measurement.
    assert co["load"][0]["resident"] == name and co["load"][0]["completed"] >= 1, co["load"]
    assert "interrupted by SIGTERM" in str(co["load"][0]["stopped"]), co["load"]
    # The same resident container serves again; the report has the section.
    found = containers(unit["prefix"])
    assert list(found) == [name] and found[name]["Id"] == unit["id"] and found[name]["State"]["Running"]
    report = (unit["tmp"] / "results" / "I1" / "report.md").read_text()
    assert "Co-residence" in report and load["text"] in report and f"under {name}'s 2 req/s load" in report
    unit["started"] = found[name]["State"]["StartedAt"]
    unit["interference"] = {c["condition"]: (c["decode_tok_s_median"], c["text"]) for c in co["conditions"]}
    print("co-residence:", unit["interference"])


def test_a_slowed_unit_fails_the_canary_and_the_previous_resident_is_started_again(unit):
    hw, original = slowed_profile(unit)
    try:
        # From R1, bench.yml's own measurement: I1 (the interference run, newer) measured the
        # variant beside the resident's load on a loaded machine, too spread for a verdict.
        proc = serve(unit, "-e", f"serve_variant={VARIANT}", "-e", "serve_run=R1", "-e", "serve_beside=false")
    finally:
        hw.write_text(original)
    assert proc.returncode != 0
    assert "replace: serve_beside=false" in " ".join(proc.stdout.split()), proc.stdout[-5000:]
    failed = history(unit, "failed")
    assert len(failed) == 1, proc.stdout[-5000:]
    f = failed[0]
    assert f["failure"]["stage"] == "canary", f["failure"]
    assert f["canary"]["text"].startswith("differs by −") and f["canary"]["verdict"]["pct"] < -5, f["canary"]
    assert "slower by more than 5 %" in f["failure"]["reason"]
    assert "started again" in f["left"]
    # The same container serves again on its port; the candidate is gone; the record is unchanged.
    found = containers(unit["prefix"])
    name = f"{unit['prefix']}-resident-{VARIANT}"
    assert list(found) == [name] and found[name]["Id"] == unit["id"] and found[name]["State"]["Running"]
    assert found[name]["State"]["StartedAt"] != unit["started"]
    rec = json.loads((deployments(unit) / f"{VARIANT}.json").read_text())
    assert rec["state"] == "deployed" and rec["source"]["run"] == "R1"
    unit["started"] = found[name]["State"]["StartedAt"]


def test_an_unhealthy_start_beside_the_resident_rolls_back(unit):
    with socket.socket() as held:  # the candidate's port is taken: the server cannot bind it
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", CANDIDATE_PORT))
        held.listen(1)
        # The simulator retries a taken port until the ready timeout: a short one.
        proc = serve(unit, "-e", f"serve_variant={VARIANT}", "-e", "serve_run=R1", "-e",
                     "vllm_server_ready_timeout_s=15")
    assert proc.returncode != 0
    # The unit's memory plan holds both at 0.4 (the simulated unit's shared account): beside.
    assert ("beside: the unit's memory plan holds the candidate beside the previous resident (110.4 of 128 GB)"
            in " ".join(proc.stdout.replace("''", "'").split())), proc.stdout[-5000:]
    f = history(unit, "failed")[-1]
    assert f["failure"]["stage"] == "start", f["failure"]
    assert f["failure"]["log_excerpt"], f["failure"]
    assert "kept serving" in f["left"], f["left"]
    found = containers(unit["prefix"])
    name = f"{unit['prefix']}-resident-{VARIANT}"
    # The previous resident was never stopped.
    assert list(found) == [name] and found[name]["State"]["StartedAt"] == unit["started"]


def test_an_unreachable_unit_fails_the_deploy_and_says_what_may_be_left(unit):
    proc = serve(unit, "-e", f"serve_variant={VARIANT}", limit=FAR)
    assert proc.returncode != 0
    failed = [json.loads(p.read_text()) for p in
              (unit["tmp"] / "results" / ".deployments" / FAR / "history").glob("*-failed.json")]
    assert len(failed) == 1, proc.stdout[-4000:]
    assert failed[0]["failure"]["stage"] == "unreachable" and "stopped answering" in failed[0]["left"], failed[0]


def test_undeploy(unit):
    proc = serve(unit, "-e", f"serve_variant={VARIANT}", "-e", "serve_state=absent")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert containers(unit["prefix"]) == {}
    assert not (unit["tmp"] / "unit-records" / f"{VARIANT}.json").exists()
    rec = json.loads((deployments(unit) / f"{VARIANT}.json").read_text())
    assert rec["state"] == "undeployed" and rec["source"]["run"] == "R1"
