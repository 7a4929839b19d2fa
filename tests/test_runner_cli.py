"""scripts/sparkbench and its API driving a real ansible-playbook run (ansible-runner) of a small
fake bench playbook with bench.yml's task names (local connection, no Docker): states, exit
codes, the report at the end, and no secret in the runner's artifacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

FIX = REPO / "tests" / "fixtures" / "runner"
CLI = REPO / "scripts" / "sparkbench"


from sparkbench.runner import EXIT_HOST_FAILED, EXIT_PLAYBOOK_ERROR, EXIT_USAGE, EXIT_VARIANT_FAILED, run_bench  # noqa: E402

TWO = json.dumps({"fake_variants": [{"name": "alpha-bare", "build": "alpha", "config": "bare", "tok": 50.0, "order": 1},
                                    {"name": "beta-bare", "build": "beta", "config": "bare", "tok": 45.0, "order": 2}],
                  "fake_measure_s": 0})


@pytest.fixture(autouse=True)
def runner_dir(tmp_path: Path, monkeypatch) -> Path:
    """ansible-runner's private data dirs go to the test's tmp_path, not the checkout's .cache/."""
    d = tmp_path / "runner"
    monkeypatch.setenv("SPARKBENCH_RUNNER_DIR", str(d))
    return d


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **(env or {})})


@pytest.mark.unit
def test_api_failing_variant_nonzero_and_report(tmp_path: Path, monkeypatch, runner_dir: Path):
    monkeypatch.setenv("SPARKBENCH_TEST_API_KEY", "canary-7f3a9")  # must not survive in artifacts
    changes = []
    result = run_bench(inventory=FIX / "hosts.yml", playbook=FIX / "fake_bench.yml", results_dir=tmp_path,
                       run_id="api-run", extravars={**json.loads(TWO), "fake_fail": ["fake-b/beta-bare"]},
                       on_change=changes.append)
    assert result.rc == EXIT_VARIANT_FAILED and result.ansible_rc == 0
    assert result.states == {"fake-a": {"alpha-bare": "done", "beta-bare": "done"},
                             "fake-b": {"alpha-bare": "done", "beta-bare": "failed"}}
    assert result.failed_variants == ["fake-b/beta-bare"]
    assert [s for h, v, s in changes if (h, v) == ("fake-a", "alpha-bare")] == ["waiting", "launching", "measuring", "done"]
    assert [s for h, v, s in changes if (h, v) == ("fake-b", "beta-bare")] == ["waiting", "launching", "failed"]
    assert result.run_dir == tmp_path / "api-run"
    assert result.report_html == tmp_path / "api-run" / "report.html" and result.report_html.is_file()
    md = (tmp_path / "api-run" / "report.md").read_text(encoding="utf-8")
    assert "launch command failed (fake)" in md and "remove it from fake_fail" in md
    # the runner's private data dir holds no secret: env files suppressed, command artifact scrubbed
    private = result.artifacts_dir.parent
    assert private.parent == runner_dir
    assert not (private / "env").exists()
    for f in private.rglob("*"):
        if f.is_file():
            assert "canary-7f3a9" not in f.read_text(encoding="utf-8", errors="replace"), f


@pytest.mark.ansible
def test_cli_unreachable_host_exit_2(tmp_path: Path):
    proc = cli("bench", "-i", str(FIX / "hosts_unreachable.yml"), "--playbook", str(FIX / "fake_bench.yml"),
               "--results-dir", str(tmp_path), "--run-id", "down", "-e", "fake_measure_s=0")
    assert proc.returncode == EXIT_HOST_FAILED, proc.stdout + proc.stderr
    assert "fake-a alpha-bare: done" in proc.stdout  # plain progress lines (not a TTY)
    assert "fake-down: host unreachable" in proc.stdout
    assert "fake-a: 1/1 done" in proc.stdout
    assert "exit code 2" in proc.stdout
    assert (tmp_path / "down" / "report.html").is_file()


@pytest.mark.ansible
def test_cli_playbook_error_exit_3(tmp_path: Path):
    bad = tmp_path / "bad.yml"
    bad.write_text("- hosts: fake\n  tasks:\n    - name: Bench | plan\n      no_such_module: {}\n")
    proc = cli("bench", "-i", str(FIX / "hosts.yml"), "--playbook", str(bad), "--results-dir", str(tmp_path))
    assert proc.returncode == EXIT_PLAYBOOK_ERROR, proc.stdout + proc.stderr
    assert "before planning any variant" in proc.stdout


@pytest.mark.ansible
@pytest.mark.parametrize("args, message", [
    (["bench", "-e", "hf_token=abc"], "secrets are not passed as extra vars"),
    (["bench", "-e", "novalue"], "expected KEY=VALUE, a JSON object or @file"),
    (["bench", "-i", "no/such/inventory"], "inventory not found"),
    (["bench", "--run-id", "../escape"], "--run-id '../escape': use letters"),
    (["bench", "--playbook", "missing.yml"], "playbook"),
    (["report", "no-such-run"], "run 'no-such-run' not found"),
    (["frobnicate"], "invalid choice"),
])
def test_cli_usage_errors_exit_4(args: list[str], message: str):
    proc = cli(*args)
    assert proc.returncode == EXIT_USAGE
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.ansible
def test_cli_report_subcommand(tmp_path: Path):
    import shutil
    shutil.copytree(REPO / "tests" / "fixtures" / "runs" / "seed-v0.25", tmp_path / "seed-v0.25")
    shutil.copytree(REPO / "tests" / "fixtures" / "runs" / "seed-v0.24", tmp_path / "seed-v0.24")
    proc = cli("report", "seed-v0.25", "--baseline", "seed-v0.24", "--results-dir", str(tmp_path),
               env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= 100 for line in proc.stdout.splitlines()), proc.stdout
    said = " ".join(proc.stdout.split())  # the answer and summary lines, wrapped to the width
    assert "single-stream 16.7 % slower (mtp2)" in said
    assert "figures comparable across the runs" in said
    assert proc.stdout.splitlines()[1].startswith("variant ")  # the compact table under its label
    assert said.endswith(f"report: {tmp_path / 'seed-v0.25' / 'report.html'} (the full table and the charts)")
