"""What a failed host or variant leaves behind, and the run's exit status (issue 22, items 4–7).

Playbook runs (real ansible-playbook, real Docker, the simulator image) on hosts of this file's
own temporary inventory (local connection, ports 8150–8199, containers named sbtest-pf<pid>-*):

- ``pf-gpu<n>``: a simulated host whose GPU is probed on the host itself (``spark_host_gpu_probe:
  host``) on this machine, which has no nvidia-smi. Its only run fails the GPU probe: every
  planned variant's failure document carries the probe's stderr and the remedy, the report is
  written with the host under "Hosts without results", the playbook exits non-zero. The same host
  under ``--check`` prints every variant's command and verdict, then what is wrong with the host.
- ``pf-sim<n>``: a healthy simulated host with one variant that fails at launch: the log excerpt
  has no stray newline escape, the report is written, the playbook exits non-zero.
- ``pf-down<n>``: an SSH host on a loopback port where nothing listens (unreachable): no result
  file, no report, the run fails naming the host with its reason and fix.

Unit tests: the run's outcome (``sparkbench.runner.outcome``), the runner's exit code from it, and
the live view's reading of the host failure and of the report play's verdict.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import jsonschema
import pytest
import yaml

from sparkbench.runner import outcome as outcome_mod
from sparkbench.runner.api import EXIT_HOST_FAILED, EXIT_OK, EXIT_PLAYBOOK_ERROR, EXIT_VARIANT_FAILED, exit_code
from sparkbench.runner.progress import Progress

from conftest import image_present
from helpers import REPO, ansible_env, run_playbook

IMAGE = "sparkbench/vllm-sim:v0.25.0"
_N = os.getpid() % 20  # two sessions running this file at once get their own hosts and ports
GPU_HOST, SIM_HOST, DOWN_HOST = f"pf-gpu{_N:02d}", f"pf-sim{_N:02d}", f"pf-down{_N:02d}"
PORTS = {GPU_HOST: 8150 + 2 * _N, SIM_HOST: 8151 + 2 * _N}
DOWN_SSH_PORT = 8190 + _N % 10  # nothing listens there: SSH to it is refused
PREFIX = f"sbtest-pf{os.getpid()}"
GPU_VARIANTS = ["nvidia-bare", "unsloth-mtp2"]

needs_docker = pytest.mark.skipif(not image_present(IMAGE), reason=f"Docker engine or {IMAGE} missing: run make setup")


# --------------------------------------------------------------------------- playbook runs
class Runs:
    """The test inventory, the extra vars and a runner of bench.yml, in one temp dir."""

    def __init__(self, tmp) -> None:
        self.tmp, self.results = tmp, tmp / "results"
        hosts = {GPU_HOST: {"vllm_server_port": PORTS[GPU_HOST], "spark_host_gpu_probe": "host"},
                 SIM_HOST: {"vllm_server_port": PORTS[SIM_HOST]}}
        down = {DOWN_HOST: {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": DOWN_SSH_PORT,
                            "ansible_python_interpreter": "/usr/bin/python3",
                            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no "
                                                       "-o UserKnownHostsFile=/dev/null"}}
        inv = {"all": {"children": {"sparks": {"hosts": down, "children": {"sim_sparks": {"hosts": hosts}}}}}}
        (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
        extra = {
            "bench_results_dir": str(self.results),
            "spark_host_hf_cache": str(tmp / "hf"),
            "vllm_server_container_prefix": PREFIX,
            "spark_host_probe_container": PREFIX + "-probe-{{ inventory_hostname }}",
            "spark_host_download_container": PREFIX + "-download-{{ inventory_hostname }}",
            "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "0.5", "VLLM_SIM_RATE": "1500",
                                          "VLLM_SIM_SHORT_THINKING": "1"},
            "bench_bracket": False, "bench_bandwidth_probe": False,
            "bench_extra_variants": [{"name": "nvidia-mnbt2048-nopf", "build": "nvidia", "config": "bare",
                                      "args": {"max-num-batched-tokens": 2048}, "preflight": False}],
            "llm_bench_output_tokens": 16, "llm_bench_runs": 1, "llm_bench_warmup": 0,
            "llm_bench_concurrency": [2], "llm_bench_quality": False, "llm_bench_image": False,
            "llm_bench_telemetry": "off", "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
        }
        (tmp / "extra.yml").write_text(yaml.safe_dump(extra))

    def run(self, host: str, run_id: str, variants: list[str], *args: str) -> subprocess.CompletedProcess:
        return run_playbook(REPO / "bench.yml", "-e", f"@{self.tmp / 'extra.yml'}", "-e", f"bench_run_id={run_id}",
                            "-e", json.dumps({"bench_select": variants}), *args,
                            inventories=[REPO / "inventory", self.tmp / "inventory.yml"], limit=host,
                            env=ansible_env(), timeout=400)

    def doc(self, run_id: str, host: str, variant: str) -> dict:
        return json.loads((self.results / run_id / host / f"{variant}.json").read_text(encoding="utf-8"))


def _containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"name={PREFIX}", "--format", "{{.Names}}"],
                         capture_output=True, text=True).stdout
    return [n for n in out.split() if n.startswith(PREFIX)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    r = Runs(tmp_path_factory.mktemp("failures"))
    yield r
    names = _containers()
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)
    shutil.rmtree(r.tmp / "hf", ignore_errors=True)


@pytest.fixture(scope="module")
def gpu_run(runs):
    """The only host of the run fails its GPU probe (no nvidia-smi here)."""
    return runs.run(GPU_HOST, "GPU", GPU_VARIANTS)


def _hosts_without_results(report_md: str) -> dict[str, str]:
    section = report_md.split("## Hosts without results", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| host ")]
    return {cells[0]: cells[1] for cells in rows}


@needs_docker
@pytest.mark.ansible
@pytest.mark.sim
def test_failed_gpu_probe_keeps_its_cause_and_remedy_in_every_failure_document(runs, gpu_run):
    """Item 4: the probe's stderr (nvidia-smi: command not found) and the remedy from the known
    host pitfalls, not only Ansible's 'non-zero return code'."""
    schema = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
    for variant in GPU_VARIANTS:
        doc = runs.doc("GPU", GPU_HOST, variant)
        jsonschema.validate(doc, schema)
        f = doc["failure"]
        assert doc["status"] == "failed" and f["stage"] == "host", f
        assert "probe GPU and driver" in f["reason"] and "nvidia-smi: command not found" in f["reason"], f
        assert "NVIDIA driver" in f["remedy"] and "sparkbench_gpu_less: true" in f["remedy"], f
        assert "spark_host_gpu_probe: none" in f["remedy"], f
        assert f["issues"] == ["nvidia_smi_missing"] and "nvidia-smi" in f["log_excerpt"], f
        assert not f["log_excerpt"].endswith(("\n", "\\n")), f
    # The play says it too, with the fix.
    assert "nvidia-smi: command not found; remedy: install the NVIDIA driver" in gpu_run.stdout


@needs_docker
@pytest.mark.ansible
@pytest.mark.sim
def test_the_only_host_failing_still_gets_a_report_and_a_nonzero_exit(runs, gpu_run):
    """Items 5 and 7: the report is written with the failed host under "Hosts without results"
    (its reason and remedy), and the run exits non-zero after it."""
    assert gpu_run.returncode != 0, gpu_run.stdout[-3000:]
    run = runs.results / "GPU"
    for name in ("report.md", "report.html", "results.json", "results.csv"):
        assert (run / name).is_file(), name
    rows = _hosts_without_results((run / "report.md").read_text(encoding="utf-8"))
    assert set(rows) == {GPU_HOST}, rows
    assert "nvidia-smi: command not found" in rows[GPU_HOST] and "sparkbench_gpu_less" in rows[GPU_HOST], rows
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert [x["host"] for x in doc["hosts_without_results"]] == [GPU_HOST]
    out = gpu_run.stdout
    # The report play ran: the table's closing lines, then the run's verdict as the last failure.
    assert f"Report: {run}/report.html" in out
    verdict = out[out.rindex("TASK [Bench | fail the run when a variant or a host failed]"):]
    assert "1 host(s) failed:" in verdict and GPU_HOST in verdict and "nvidia-smi" in verdict
    assert out.index(f"Report: {run}/report.html") < out.rindex("TASK [Bench | fail the run when")


@pytest.mark.ansible
def test_the_only_host_unreachable_fails_the_run_with_its_reason_and_remedy(runs):
    """Items 5 and 7: an unreachable host writes no result file; the report play still runs,
    says why there is no report, and fails the run naming the host, its reason and the fix."""
    proc = runs.run(DOWN_HOST, "DOWN", ["nvidia-bare"])
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert f"No report: no result file under {runs.results / 'DOWN'}" in " ".join(out.split())
    # The YAML callback folds long lines where the reason's length puts them: compared unfolded.
    verdict = " ".join(out[out.rindex("TASK [Bench | fail the run when a variant or a host failed]"):].split())
    assert "1 host(s) failed:" in verdict and f"{DOWN_HOST}: unreachable:" in verdict, verdict
    assert f"remedy: check that {DOWN_HOST} is on and reachable" in verdict, verdict
    assert not list((runs.results / "DOWN").glob("*/*.json"))


@needs_docker
@pytest.mark.ansible
@pytest.mark.sim
def test_the_runner_agrees_a_failed_host_fails_the_run(runs):
    """Item 7: scripts/sparkbench on the same failing host exits 2 (a host failed), with the host's
    reason and remedy in its summary; bench.yml under it exited non-zero as well."""
    env = ansible_env(SPARKBENCH_RUNNER_DIR=str(runs.tmp / "runner"))
    proc = subprocess.run([str(REPO / "scripts" / "sparkbench"), "bench", "-i", str(REPO / "inventory"),
                           "-i", str(runs.tmp / "inventory.yml"), "-l", GPU_HOST,
                           "-e", f"@{runs.tmp / 'extra.yml'}", "-e", json.dumps({"bench_select": GPU_VARIANTS}),
                           "--run-id", "GPU-RUNNER", "--results-dir", str(runs.results), "--plain"],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=400)
    out = proc.stdout
    assert proc.returncode == EXIT_HOST_FAILED, out[-3000:] + proc.stderr[-2000:]
    assert "ansible-playbook failed (rc 2)" in out and "exit code 2" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"  {GPU_HOST}: 0/{len(GPU_VARIANTS)} done"))
    # the host's line, wrapped to the width: its continuation lines are indented deeper
    end = next((i for i, x in enumerate(lines[first + 1:], first + 1) if not x.startswith("      ")), len(lines))
    host_line = " ".join(x.strip() for x in lines[first:end])
    assert "nvidia-smi: command not found; remedy: install the NVIDIA driver" in host_line, host_line
    assert all(len(x) <= 100 for x in lines[first:end]), lines[first:end]
    assert (runs.results / "GPU-RUNNER" / "report.html").is_file()


@needs_docker
@pytest.mark.ansible
@pytest.mark.sim
def test_dry_run_prints_the_plan_then_what_is_wrong_with_the_host(runs):
    """Item 6: --check on a host whose check fails prints every variant's command and preflight
    verdict, then the host's reason and remedy; nothing is written or started; exit non-zero."""
    proc = runs.run(GPU_HOST, "DRY", GPU_VARIANTS, "--check")
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    for v in GPU_VARIANTS:
        assert f"TASK [Bench variant | plan {v}]" in out, out[-3000:]
    assert out.count("command: docker run -d --name") == len(GPU_VARIANTS)
    assert out.count("preflight: pass") == len(GPU_VARIANTS) and "action: dry run (--check)" in out
    wrong = out.index("The host check failed, so a real run would stop here for this host")
    assert wrong > out.rindex(f"TASK [Bench variant | plan {GPU_VARIANTS[-1]}]")
    tail = out[wrong:]
    assert "nvidia-smi: command not found" in tail and "sparkbench_gpu_less: true" in tail
    assert "Dry run (--check): nothing was started or measured" in tail and "1 host(s) failed the host check:" in tail
    assert not (runs.results / "DRY").exists()
    assert not [n for n in _containers() if n.endswith(GPU_HOST)]


@needs_docker
@pytest.mark.ansible
@pytest.mark.sim
def test_a_failed_variant_fails_the_run_after_the_report_and_its_excerpt_is_clean(runs):
    """Item 7: a variant that fails at launch makes the playbook exit non-zero (after the report,
    which is written); its log excerpt ends with the log, not with a newline escape."""
    proc = runs.run(SIM_HOST, "LAUNCH", ["nvidia-mnbt2048-nopf"])
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    doc = runs.doc("LAUNCH", SIM_HOST, "nvidia-mnbt2048-nopf")
    f = doc["failure"]
    assert doc["status"] == "failed" and f["stage"] == "launch" and f["issues"] == ["mamba_align_block_size"]
    excerpt = f["log_excerpt"]
    assert "AssertionError: In Mamba cache align mode" in excerpt
    assert "\\n" not in excerpt and excerpt == excerpt.strip(), repr(excerpt[:80] + " … " + excerpt[-80:])
    run = runs.results / "LAUNCH"
    assert (run / "report.md").is_file() and f"Report: {run}/report.html" in out
    verdict = out[out.rindex("TASK [Bench | fail the run when a variant or a host failed]"):]
    assert "1 variant(s) failed:" in verdict and f"{SIM_HOST}/nvidia-mnbt2048-nopf: launch:" in verdict
    assert "host(s) failed" not in verdict


# --------------------------------------------------------------------------- the policy (unit)
def _report(failures=(), missing=(), drift=None) -> dict:
    return {"failures": list(failures), "hosts_without_results": list(missing), "drift": drift or {}}


FAILED = {"host": "s1", "variant": "v1", "status": "failed", "stage": "launch", "reason": "boom"}
INCOMPLETE = {"host": "s1", "variant": "v2", "status": "incomplete", "stage": "measure", "reason": "stall"}


@pytest.mark.unit
def test_outcome_fails_if_and_only_if_a_variant_or_a_host_failed():
    ok = outcome_mod.outcome(_report([INCOMPLETE]))
    assert ok["failed"] is False and ok["failed_variants"] == [] and ok["failed_hosts"] == {}
    assert ok["message"] == "No variant and no host failed."
    assert outcome_mod.outcome(None)["failed"] is False
    v = outcome_mod.outcome(_report([FAILED, INCOMPLETE]))
    assert v["failed"] and v["failed_variants"] == ["s1/v1: launch: boom"] and not v["failed_hosts"]
    h = outcome_mod.outcome(_report(missing=[{"host": "s2", "reason": "unreachable: refused"}]))
    assert h["failed"] and h["failed_hosts"] == {"s2": "unreachable: refused"}
    assert "1 host(s) failed:" in h["message"] and "  s2: unreachable: refused" in h["lines"]
    # a failed bracket run is a failed variant; a recorded host failure counts without a report
    b = outcome_mod.outcome(_report(drift={"s1": {"variant": "v1", "bracket_status": "failed", "reason": "x"}}))
    assert b["failed_variants"] == ["s1/v1.bracket: x"]
    r = outcome_mod.outcome({}, {"s3": {"reason": "probe", "summary": "probe; remedy: fix"}})
    assert r["failed"] and r["failed_hosts"] == {"s3": "probe; remedy: fix"}
    # only the hosts the run targeted count (a run id shared with another -l)
    both = _report([FAILED], [{"host": "s2", "reason": "down"}])
    assert outcome_mod.outcome(both, hosts=["s3"])["failed"] is False
    assert outcome_mod.outcome(both, hosts=["s2"])["failed_hosts"] == {"s2": "down"}


@pytest.mark.unit
def test_dry_run_outcome_reads_only_the_host_checks():
    clean = outcome_mod.outcome(_report([FAILED]), {}, check=True)
    assert clean["failed"] is False and clean["lines"] == [outcome_mod.DRY_RUN_LINE]
    bad = outcome_mod.outcome(None, {"g1": {"summary": "nvidia-smi missing; remedy: install"}}, check=True)
    assert bad["failed"] and bad["lines"][1:] == ["1 host(s) failed the host check:",
                                                  "  g1: nvidia-smi missing; remedy: install"]


@pytest.mark.unit
def test_runner_exit_code_agrees_with_the_outcome():
    done = {"s1": {"v1": "done"}}
    assert exit_code(done, {}, 0, _report()) == EXIT_OK
    # bench.yml failed the run (rc 2) because the report shows a failed variant: the runner says 1
    assert exit_code(done, {}, 2, _report([FAILED])) == EXIT_VARIANT_FAILED
    assert exit_code({"s1": {"v1": "failed"}}, {}, 2, None) == EXIT_VARIANT_FAILED
    assert exit_code(done, {}, 2, _report(missing=[{"host": "s1", "reason": "down"}])) == EXIT_HOST_FAILED
    # another host's documents in the same run id (not targeted by this run) do not count
    other = dict(FAILED, host="s9")
    assert exit_code(done, {}, 0, _report([other], [{"host": "s8", "reason": "down"}])) == EXIT_OK
    assert exit_code(done, {"s2": "unreachable"}, 2, _report()) == EXIT_HOST_FAILED
    # non-zero without a failure to show for it: the playbook itself went wrong
    assert exit_code(done, {}, 2, _report()) == EXIT_PLAYBOOK_ERROR
    assert exit_code({}, {}, 0, None) == EXIT_PLAYBOOK_ERROR


def _ev(kind: str, host: str, facts: dict | None = None, task: str = "t", **data) -> dict:
    res = {"ansible_facts": facts} if facts else {"msg": "failed"}
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res, **data}}


@pytest.mark.unit
def test_progress_reads_the_recorded_host_failure_and_not_the_verdict_as_a_host_failure():
    p = Progress()
    plan = {"bench_plan": {"names": ["v1"], "variants": [{"name": "v1", "action": "measure"}]}}
    for h in ("a", "b"):
        p.handle(_ev("runner_on_ok", h, plan))
    # b: provisioning failed, recorded and ended (not failed in Ansible's eyes)
    p.handle(_ev("runner_on_failed", "b", task="Spark host | probe GPU and driver"))
    p.handle(_ev("runner_on_ok", "b", {"bench_host_failure": {"reason": "probe: rc 127",
                                                                "summary": "probe: rc 127; remedy: install"}}))
    p.handle(_ev("runner_on_ok", "a", {"bench_stage": {"variant": "v1", "stage": "done"}}))
    # the report play's verdict: decided on a, then a's failing task fails the run
    p.handle(_ev("runner_on_ok", "a", {"bench_run_outcome": {"failed": True}}))
    p.handle(_ev("runner_on_failed", "a", task="Bench | fail the run"))
    p.handle({"event": "playbook_on_stats", "event_data": {"failures": {"a": 1}}})
    assert p.failed_hosts() == {"b": "failed: probe: rc 127; remedy: install"}
    assert p.snapshot() == {"a": {"v1": "done"}, "b": {"v1": "failed"}}
