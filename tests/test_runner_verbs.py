"""The playbook verbs of scripts/sparkbench beside bench: provision, serve, teardown (and bench
--check) run their playbooks through ansible-runner on a simulated unit with live progress, say
what the playbook said, keep every closing line within COLUMNS, and exit with the runner's codes
(2 for an unreachable unit). Dry runs and read-only verbs only: nothing is started on the unit."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbench.runner import EXIT_HOST_FAILED, EXIT_OK, EXIT_USAGE

from helpers import REPO

pytestmark = pytest.mark.ansible

CLI = REPO / "scripts" / "sparkbench"
#: a simulated unit of these tests' own (no other test names its containers): the project's
#: inventory plus this host in sim_sparks
UNIT = "verbs-sim01"
UNIT_INVENTORY = f"""
all:
  children:
    sparks:
      children:
        sim_sparks:
          hosts:
            {UNIT}: {{vllm_server_port: 18951}}
"""


def cli(*args: str, columns: int = 100, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "SPARKBENCH_RUNNER_DIR": str(tmp / "runner")}
    inv = tmp / "verbs-inventory.yml"
    inv.write_text(UNIT_INVENTORY)
    unit = ["-i", str(REPO / "inventory"), "-i", str(inv)] if "-l" in args else []
    return subprocess.run([sys.executable, str(CLI), *args, *unit], capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)


def closing(out: str) -> list[str]:
    """The lines after the progress lines (from the first blank line on)."""
    lines = out.splitlines()
    return lines[lines.index(""):] if "" in lines else lines


def fits(out: str, width: int = 100) -> list[str]:
    """The lines wider than ``width``, but for "label: PATH" lines whose path alone is that long (the
    runner's artifacts under the test's temporary folder): a path is never broken."""
    return [line for line in out.splitlines() if len(line) > width
            and not (len(line.split()) == 2 and line.split()[1].startswith("/"))]


def test_provision_check_probes_and_says_what_the_unit_has(tmp_path: Path) -> None:
    proc = cli("provision", "--check", "-l", UNIT, tmp=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{UNIT}: Provision | summary" in proc.stdout  # a progress line per task the unit starts
    said = "\n".join(closing(proc.stdout))
    assert "images: sparkbench/vllm-sim:v0.25.0" in said and "Docker" in said
    assert said.rstrip().endswith("provision: ansible-playbook rc 0; exit code 0")
    assert not fits(proc.stdout), fits(proc.stdout)


def test_bench_check_prints_the_plan_and_memory_plan_without_starting_anything(tmp_path: Path) -> None:
    before = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=sparkbench-vllm-{UNIT}"],
                            capture_output=True, text=True).stdout
    proc = cli("bench", "--check", "-l", UNIT, tmp=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stdout[-3000:] + proc.stderr[-2000:]
    said = "\n".join(closing(proc.stdout))
    assert "Dry run (--check): nothing was started or measured" in said and "docker run -d --name" in said
    assert not fits(proc.stdout), fits(proc.stdout)
    after = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=sparkbench-vllm-{UNIT}"],
                           capture_output=True, text=True).stdout
    assert before == after


def test_serve_list_and_teardown_check_read_and_touch_nothing(tmp_path: Path) -> None:
    listed = cli("serve", "list", "-l", UNIT, tmp=tmp_path)
    assert listed.returncode == EXIT_OK, listed.stdout[-3000:] + listed.stderr[-2000:]
    assert f"{UNIT}: no resident" in listed.stdout or f"{UNIT}: " in "\n".join(closing(listed.stdout))
    torn = cli("teardown", "--check", "-l", UNIT, tmp=tmp_path, columns=80)
    assert torn.returncode == EXIT_OK, torn.stdout[-3000:] + torn.stderr[-2000:]
    said = " ".join(" ".join(closing(torn.stdout)).split())
    # the per-folder lines of a debug task with a loop, not Ansible's "All items completed"
    assert "Hugging Face cache (model weights):" in said and "kept" in said and "All items completed" not in said
    assert not fits(torn.stdout, 80), fits(torn.stdout, 80)


def test_an_unreachable_unit_exits_2_naming_it(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("sparks:\n  hosts:\n    unit-down:\n      ansible_connection: ssh\n      ansible_host: 127.0.0.1\n"
                   "      ansible_port: 1\n      ansible_ssh_common_args: >-\n"
                   "        -o ConnectTimeout=3 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null\n")
    proc = cli("teardown", "-i", str(inv), tmp=tmp_path)
    assert proc.returncode == EXIT_HOST_FAILED, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "✘ unit-down: unreachable" in proc.stdout and proc.stdout.rstrip().endswith("exit code 2")


@pytest.mark.parametrize("args, message", [
    (["serve", "deploy"], "the following arguments are required: variant"),
    (["serve", "list", "-e", "serve_state=absent"], "serve list takes no serve_variant/serve_state"),
    (["teardown", "-e", "hf_token=x"], "secrets are not passed as extra vars"),
    (["health", "--run-id", "../x"], "--run-id '../x': use letters"),
])
def test_bad_command_lines_exit_4_before_any_playbook_runs(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli(*args, tmp=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runner").exists()


@pytest.mark.unit
@pytest.mark.parametrize("verdicts, code", [(["healthy", "healthy"], EXIT_OK), (["healthy", "slow"], 1),
                                            (["slow", "failed"], EXIT_HOST_FAILED)])
def test_health_exit_code_comes_from_health_json(tmp_path: Path, verdicts: list[str], code: int) -> None:
    from test_health import canary

    from sparkbench import health
    from sparkbench.runner.playbooks import _health_outcome

    # health.write's document: a measured unit per verdict but failed (judged alone: healthy; its
    # verdict then set to slow where the case says so), a unit without a canary result for failed
    units = [{"host": f"u{i}", "doc": None if v == "failed" else canary(f"u{i}"), "reason": "unreachable"}
             for i, v in enumerate(verdicts)]
    judged = health.judge(units)
    for u, v in zip(judged["units"], verdicts):
        u["verdict"] = v
    health.write(tmp_path, judged, "H1")
    rc, doc = _health_outcome(tmp_path)
    assert rc == code and [(u.host, u.verdict) for u in doc.units] == [(f"u{i}", v) for i, v in enumerate(verdicts)]
    assert _health_outcome(tmp_path / "nowhere") == (None, None)


@pytest.mark.unit
def test_the_health_verdicts_failing_task_is_not_a_failure_of_the_host_it_ran_on() -> None:
    from sparkbench.runner.progress import Progress

    p = Progress()
    ok = {"event": "runner_on_ok", "event_data": {"host": "u1", "res": {
        "ansible_facts": {"bench_health_verdict": {"unhealthy": 1}}}}}
    failed = {"event": "runner_on_failed", "event_data": {"host": "u1", "task": "Health | fail", "res": {"msg": "1"}}}
    for ev in (ok, failed, {"event": "playbook_on_stats", "event_data": {"failures": {"u1": 1}}}):
        p.handle(ev)
    assert p.failed_hosts() == {}
