"""sparkbench.host_failure: why a host failed as a whole, from the failed task's name and its whole
registered result (the probe's stderr, a loop's first failed item, an unreachable host), with the
remedy from the known host pitfalls (sparkbench/data/host_issues.yml) and no secret; the failure
document it makes (stage host); the launch diagnosis from the log command's stdout and stderr."""
from __future__ import annotations

import re

import pytest

from sparkbench import host_failure, preflight, result
from sparkbench.host_failure import DEFAULT_REMEDY, explain

pytestmark = pytest.mark.unit

GPU_TASK = "Spark host | probe GPU and driver"
# The registered result of gpu.yml's probe on a machine without the NVIDIA driver (bash, pipefail).
GPU_RESULT = {"changed": False, "failed": True, "rc": 127, "msg": "non-zero return code",
              "cmd": "set -o pipefail; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1",
              "stdout": "", "stdout_lines": [],
              "stderr": "/bin/bash: line 1: nvidia-smi: command not found\n/bin/bash: line 1: nvidia-smi: command not found",
              "invocation": {"module_args": {"_raw_params": "nvidia-smi", "HF_TOKEN": "hf_ShouldNeverAppear123"}}}


def test_a_failed_gpu_probe_keeps_its_stderr_and_gets_the_driver_remedy():
    f = explain(GPU_TASK, GPU_RESULT, "spark01")
    assert f["reason"] == ("Spark host | probe GPU and driver: non-zero return code (rc 127): "
                           "/bin/bash: line 1: nvidia-smi: command not found")
    assert f["issue"] == "nvidia_smi_missing" and f["task"] == GPU_TASK
    assert "install the NVIDIA driver on spark01" in f["remedy"] and "DGX OS" in f["remedy"]
    assert "sparkbench_gpu_less: true" in f["remedy"] and "spark_host_gpu_probe: none" in f["remedy"]
    assert f["log_excerpt"].count("nvidia-smi: command not found") == 2 and not f["log_excerpt"].endswith("\n")
    assert f["summary"] == f"{f['reason']}; remedy: {f['remedy']}" and "\n" not in f["summary"]
    # the module's arguments (where a secret could sit) are never read
    assert "hf_ShouldNeverAppear123" not in str(f) and "invocation" not in str(f)


def test_a_loop_reports_its_first_failed_item():
    res = {"failed": True, "msg": "One or more items failed", "results": [
        {"failed": False, "item": "sparkbench/vllm-sim:v0.25.0", "msg": "ok"},
        {"failed": True, "item": "vllm/vllm-openai:v9", "msg": "Error pulling image vllm/vllm-openai:v9 - "
                                                               "pull access denied for vllm/vllm-openai"},
        {"failed": True, "item": "other:v1", "msg": "second failure"}]}
    f = explain("Spark host | pull missing images", res, "spark01")
    assert "Error pulling image vllm/vllm-openai:v9" in f["reason"] and "[item: vllm/vllm-openai:v9]" in f["reason"]
    assert "second failure" not in f["reason"] and "One or more items" not in f["reason"]
    assert f["issue"] == "image_pull_denied" and "docker login" in f["remedy"]


def test_stdout_stands_in_for_an_empty_stderr_and_an_unmatched_failure_gets_the_default_remedy():
    res = {"failed": True, "rc": 3, "msg": "non-zero return code", "stdout": "step 1\nstep 2 broke\n", "stderr": ""}
    f = explain("Spark host | something new", res)
    assert f["reason"] == "Spark host | something new: non-zero return code (rc 3): step 2 broke"
    assert f["issue"] is None and f["remedy"] == DEFAULT_REMEDY
    assert f["log_excerpt"] == "step 1\nstep 2 broke"


def test_an_assert_message_is_the_reason_and_a_module_crash_shows_its_stderr():
    a = explain("Spark host | require a Docker engine", {"failed": True, "assertion": "x", "evaluated_to": False,
                "msg": "Docker engine not reachable on s1 (Error while fetching server API version: "
                       "('Connection aborted.', PermissionError(13, 'Permission denied'))); install Docker"}, "s1")
    assert a["reason"].startswith("Spark host | require a Docker engine: Docker engine not reachable on s1")
    assert a["issue"] == "docker_permission_denied" and "usermod -aG docker" in a["remedy"]
    down = explain("Spark host | require a Docker engine", {"failed": True, "msg": "Docker engine not reachable "
                   "(Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, "
                   "'No such file or directory')))"})
    assert down["issue"] == "docker_not_running" and "systemctl enable --now docker" in down["remedy"]
    crash = explain("Spark host | probe Docker engine", {"failed": True, "msg": "MODULE FAILURE",
                    "module_stderr": "Traceback …\nModuleNotFoundError: No module named 'requests'\n", "rc": 1})
    assert crash["reason"].endswith(": ModuleNotFoundError: No module named 'requests'")
    assert crash["issue"] == "python_requests_missing" and "python3-requests" in crash["remedy"]


def test_an_unreachable_host_gets_the_connection_remedy_only():
    res = {"unreachable": True, "changed": False,
           "msg": "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 18799: Connection refused"}
    f = explain("connection", res, "spark02")
    assert f["reason"] == ("unreachable: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 "
                           "port 18799: Connection refused")
    assert f["issue"] == "ssh_no_connection" and "spark02" in f["remedy"] and f["task"] == "connection"
    # Ansible's words when ssh exits before it took the module (a refused connection on a busy controller)
    pipe = explain("connection", {"unreachable": True, "msg": "Task failed: Data could not be sent to remote host "
                                  "'127.0.0.1'. Make sure this host can be reached over SSH: [Errno 32] Broken pipe"},
                   "spark02")
    assert pipe["issue"] == "ssh_no_connection" and "check that spark02 is on and reachable" in pipe["remedy"]
    key = explain("connection", {"unreachable": True, "msg": "Host key verification failed."}, "spark02")
    assert key["issue"] == "ssh_host_key" and "StrictHostKeyChecking=accept-new" in key["remedy"]
    # a reachable host's "timed out" is not a connection problem
    assert explain("Spark host | download models", {"failed": True, "msg": "Read timed out."})["issue"] is None


def test_no_secret_gets_into_the_failure():
    res = {"failed": True, "msg": "download failed for HF_TOKEN=hf_AbCdEfGh12345678 --api-key sk-abc",
           "stderr": "401 Unauthorized, token hf_ZyXwVuTs98765432 rejected"}
    f = explain("Spark host | download models", res, secret_values=["sk-abc"])
    text = str(f)
    assert "hf_AbCdEfGh12345678" not in text and "hf_ZyXwVuTs98765432" not in text and "sk-abc" not in text
    assert "<redacted>" in f["reason"] and "<redacted>" in f["log_excerpt"]
    hidden = explain("Spark host | log in", {"failed": True, "censored": "the output has been hidden due to the fact "
                                              "that 'no_log: true' was specified for this result"})
    assert hidden["reason"].endswith("'no_log: true' was specified for this result") and hidden["log_excerpt"] == ""


def test_the_pitfalls_file_is_well_formed_and_each_entry_matches_its_own_example():
    entries = host_failure.load_pitfalls()
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)) and "nvidia_smi_missing" in ids and "docker_permission_denied" in ids
    examples = {"nvidia_smi_missing": "sh: 1: nvidia-smi: not found",
                "nvidia_driver_not_loaded": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
                "docker_permission_denied": "permission denied while trying to connect to the Docker daemon socket at "
                                            "unix:///var/run/docker.sock",
                "sudo_password": "Missing sudo password",
                "disk_full": "write /var/lib/docker/tmp: No space left on device"}
    for pid, text in examples.items():
        got = host_failure.match_pitfall(text, entries)
        assert got is not None and got["id"] == pid, (pid, got)
    for e in entries:  # every remedy names the host where it says {host}; no other placeholder
        assert re.compile(e["signature"]) and not re.search(r"\{(?!host\})", e["remedy"]), e


def test_collect_reads_the_recorded_failures_of_the_hosts():
    f = explain(GPU_TASK, GPU_RESULT, "a")
    hv = {"a": {"bench_host_failure": f}, "b": {"other": 1}}
    assert host_failure.collect(["a", "b", "c"], hv) == {"a": f}
    assert host_failure.collect(["a", "b"], hv, field="summary") == {"a": f["summary"]}


def _entry() -> dict:
    launch = {"argv": ["vllm", "serve", "m"], "command": "docker run m", "env": {}, "secret_env": []}
    return {"name": "nvidia-bare", "variant": {"name": "nvidia-bare", "build": "nvidia", "config": "bare",
                                               "model": "nvidia/Qwen3.6-35B-A3B-NVFP4", "image": "img", "args": {}},
            "launch": launch, "config_hash": "0" * 64, "settings": {}, "preflight": {"verdict": "pass", "failures": []},
            "result_path": "unused"}


def test_the_host_failure_document_carries_reason_remedy_excerpt_and_issue():
    f = explain(GPU_TASK, GPU_RESULT, "spark01")
    fail, measured = result.stage_failure(_entry(), "host", reason=f)
    assert measured is None
    assert fail == {"stage": "host", "reason": f["reason"], "remedy": f["remedy"], "log_excerpt": f["log_excerpt"],
                    "issues": ["nvidia_smi_missing"]}
    doc = result.failure_document(result.context_fields(_entry(), {"name": "spark01"}), fail)
    assert doc["failure"]["remedy"].startswith("install the NVIDIA driver") and doc["status"] == "failed"
    # a plain text reason still works (the default remedy)
    assert result.stage_failure(_entry(), "host", reason="down")[0]["remedy"] == result.DEFAULT_REMEDY["host"]


def test_the_launch_diagnosis_joins_the_log_commands_stdout_and_stderr_in_python():
    """The log command's registered result: stdout and stderr joined without a stray newline or
    escape at either end (the old Jinja join left a literal backslash-n)."""
    log = {"rc": 0, "stdout": "", "stderr": "INFO loading\nAssertionError: In Mamba cache align mode, block_size (2096) "
                                            "must be <= max_num_batched_tokens (2048).\n"}
    got = preflight.explain_launch(log)
    assert got["issue"] == "mamba_align_block_size"
    assert got["log_excerpt"] == log["stderr"].strip()
    both = preflight.explain_launch({"stdout": "out line\n", "stderr": "ValueError: bad flag\n"})
    assert both["log_excerpt"] == "out line\nValueError: bad flag" and both["reason"] == "ValueError: bad flag"
    assert preflight.explain_launch({"skipped": True}, "", "task failed")["log_excerpt"] == "task failed"
    assert preflight.log_text_of("plain text") == "plain text"
