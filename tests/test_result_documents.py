"""The result document has one owner (sparkbench.result): every kind of document it writes —
complete, incomplete, and a failure at each stage — is built here from a real plan entry and
validated against schema/result.schema.json, as the writer itself does before writing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from sparkbench import plan, result, settings

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "schema/result.schema.json").read_text())


def inventory_vars(tmp: Path, **extra) -> dict:
    """The simulated fleet's variables as a host sees them (group_vars all + sim_sparks), with a token set."""
    out: dict = {}
    for f in ("inventory/group_vars/all/bench.yml", "inventory/group_vars/all/matrix.yml"):
        out.update(yaml.safe_load((REPO / f).read_text()))
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp), "sparkbench_gpu_less": True,
                "vllm_server_env": {"VLLM_SIM_LOAD_SECONDS": "1"}, "spark_host_hf_token": "hf_secret_value",
                "spark_host_hf_cache": "/cache", "vllm_server_port": 8101})
    out.update(extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


HOST = {"name": "spark-sim01", "gpu": {"name": "NVIDIA GB10 (simulated)", "driver": "580.95.05", "cuda": "13.0",
                                       "os": "Debian 12", "kernel": "6.1", "hostname": "h", "docker_version": "26"},
        "images": {"sparkbench/vllm-sim:v0.25.0": {"id": "sha256:abc", "digest": None}},
        "sparkbench_version": "deadbeef", "simulated": True}


@pytest.fixture
def host_plan(tmp_path):
    return plan.plan_host(inventory_vars(tmp_path), "spark-sim01")


def entry(host_plan, name="nvidia-bare"):
    return next(e for e in host_plan["variants"] if e["name"] == name)


_MEASURED: dict = {}


@pytest.fixture
def measured(sim_factory):
    """A real measured block: measure.py (short settings) against the simulator."""
    if not _MEASURED:
        sim = sim_factory(args=["--quantization", "modelopt", "--max-num-batched-tokens", "4096"],
                          env={"VLLM_SIM_RATE": "2000"})
        proc = subprocess.run([sys.executable, str(REPO / "scripts/measure.py"), "--base-url", sim.base_url,
                               "--output-tokens", "16", "--runs", "1", "--warmup", "0", "--concurrency", "2",
                               "--telemetry", "off", "--out", "-"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        _MEASURED.update(json.loads(proc.stdout))
    return json.loads(json.dumps(_MEASURED))


def measured_block() -> dict:
    return json.loads(json.dumps(_MEASURED))


def written(rec: dict) -> dict:
    doc = json.loads(Path(rec["path"]).read_text())
    jsonschema.validate(doc, SCHEMA)  # the schema itself, not only the builder's own check
    assert "hf_secret_value" not in Path(rec["path"]).read_text()
    return doc


@pytest.mark.sim
def test_complete_document_is_measured_block_plus_context(host_plan, measured):
    e = entry(host_plan)
    rec = result.record(e, HOST, "measure", True, measure={"rc": 0, "stdout": json.dumps(measured_block()), "stderr": ""},
                        startup={"time_to_ready_s": 3.2, "model_memory_gib": 21.0})
    doc = written(rec)
    assert rec["status"] == doc["status"] == "complete" and "failure" not in doc
    assert doc["host"] == "spark-sim01" and doc["variant"]["name"] == "nvidia-bare"
    # one shape for variant.args (the flag mapping) and the launch argv in launch.argv
    assert isinstance(doc["variant"]["args"], dict) and doc["launch"]["argv"][0] == "nvidia/Qwen3.6-35B-A3B-NVFP4"
    assert doc["launch_command"] == doc["manifest"]["launch_command"] == e["launch"]["command"]
    assert "HF_TOKEN=<redacted>" in doc["launch_command"] and doc["launch"]["secret_env"] == ["HF_TOKEN"]
    assert doc["config_hash"] == e["config_hash"] and doc["manifest"]["settings"] == e["settings"]
    assert doc["manifest"]["vllm_version"] == doc["server"]["version"] and doc["manifest"]["image_id"] == "sha256:abc"
    assert doc["server_startup"] == {"time_to_ready_s": 3.2, "model_memory_gib": 21.0}


@pytest.mark.sim
def test_incomplete_measurement_keeps_its_figures_and_says_why(host_plan, measured):
    block = measured_block() | {"status": "incomplete",
                                "errors": [{"phase": "parallel", "request": 3, "message": "stream stalled 60 s"}]}
    doc = written(result.record(entry(host_plan), HOST, "measure", True,
                                measure={"rc": 3, "stdout": json.dumps(block), "stderr": "progress..."}))
    assert doc["status"] == "incomplete" and doc["single"] == block["single"]
    assert doc["failure"]["stage"] == "measure" and doc["failure"]["reason"] == "stream stalled 60 s"


@pytest.mark.sim
def test_engine_death_mid_run_names_the_known_issue_on_an_incomplete_result(host_plan, measured):
    # Some requests served, then the engine died: measure.py exits 3 and the container log,
    # read after it (vllm_server collect), explains the rest as it would a failed run.
    block = measured_block() | {"status": "incomplete",
                                "errors": [{"phase": "single", "request": 2, "message": "HTTP 500: EngineCore encountered an issue"}]}
    server = {"issue": "execute_model_timeout", "reason": "the engine died: EngineDeadError",
              "remedy": "raise VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "line": "TimeoutError: RPC call to execute_model timed out",
              "log_excerpt": "... EngineDeadError ..."}
    doc = written(result.record(entry(host_plan), HOST, "measure", True, launch_failure=server,
                                measure={"rc": 3, "stdout": json.dumps(block), "stderr": "progress..."}))
    f = doc["failure"]
    assert doc["status"] == "incomplete" and doc["single"] == block["single"]
    assert f["stage"] == "measure" and f["issues"] == ["execute_model_timeout"] and f["remedy"] == server["remedy"]
    assert "EngineDeadError" in f["reason"] and "TimeoutError: RPC call" in f["reason"]
    assert "(measure.py: HTTP 500: EngineCore encountered an issue)" in f["reason"]


@pytest.mark.unit
def test_preflight_refusal(tmp_path):
    p = plan.plan_host(inventory_vars(tmp_path, bench_extra_variants=[
        {"name": "nvidia-mnbt2048", "build": "nvidia", "config": "bare", "args": {"max-num-batched-tokens": 2048}}]),
        "spark-sim01")
    e = entry(p, "nvidia-mnbt2048")
    assert e["preflight"]["verdict"] == "fail"
    doc = written(result.record(e, HOST, "preflight", False, failed={"msg": "preflight: ..."}))
    assert doc["failure"]["stage"] == "preflight" and doc["failure"]["issues"] == ["mamba_align_block_size"]
    assert doc["failure"]["log_excerpt"] == "" and "max-num-batched-tokens" in doc["failure"]["remedy"]


@pytest.mark.unit
def test_launch_failure_and_readiness_timeout(host_plan):
    crashed = {"issue": "flashinfer_b12x_linear", "reason": "flashinfer_b12x is not a linear backend",
               "remedy": "drop --linear-backend", "log_excerpt": "ValueError: ..."}
    doc = written(result.record(entry(host_plan), HOST, "launch", False, launch_failure=crashed,
                                failed={"msg": "container exited with status 1 before /health answered"}))
    assert doc["failure"] | {} == {"stage": "launch", "reason": crashed["reason"], "remedy": crashed["remedy"],
                                   "log_excerpt": "ValueError: ...", "issues": ["flashinfer_b12x_linear"]}
    timeout = {"issue": None, "reason": "/health did not answer within 900 s (container still running)",
               "remedy": None, "log_excerpt": "Loading weights..."}
    doc = written(result.record(entry(host_plan), HOST, "launch", False, launch_failure=timeout))
    assert doc["failure"]["stage"] == "launch" and "did not answer within 900 s" in doc["failure"]["reason"]
    assert doc["failure"]["remedy"] == result.DEFAULT_REMEDY["launch"] and doc["failure"]["issues"] == []


@pytest.mark.ansible
@pytest.mark.parametrize("run, reason", [
    ({"rc": 2, "stdout": "", "stderr": "measure.py: http://127.0.0.1:8101 unreachable: connection refused"},
     "measure.py: http://127.0.0.1:8101 unreachable: connection refused"),
    ({"rc": 1, "stdout": json.dumps({"schema_version": "1", "status": "failed", "simulated": True,
                                     "errors": [{"phase": "single", "request": 0, "message": "HTTP 500"}]}),
      "stderr": "x"}, "HTTP 500"),
    ({"rc": -9, "stdout": "{not json", "stderr": ""}, "measure.py exited with status -9"),
])
def test_measurement_failures(host_plan, run, reason):
    doc = written(result.record(entry(host_plan), HOST, "measure", False, measure=run))
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "measure" and doc["failure"]["reason"] == reason
    assert doc["errors"] and all(isinstance(e, dict) for e in doc["errors"])


NOT_REQUESTED = {"requested": False, "done": False, "reason": "not requested (bench_drop_caches: false)"}
READ_ONLY = "/bin/sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only file system"


@pytest.mark.ansible
@pytest.mark.unit
@pytest.mark.parametrize("requested, run, outcome", [
    # bench_drop_caches false: the drop task was skipped (or is an earlier variant's), never read.
    (False, {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}, NOT_REQUESTED),
    (False, {"rc": 0}, NOT_REQUESTED),
    ("false", None, NOT_REQUESTED),
    (True, {"rc": 0, "stdout": "", "stderr": ""}, {"requested": True, "done": True, "reason": None}),
    ("yes", {"rc": 0}, {"requested": True, "done": True, "reason": None}),
    (True, {"rc": 2, "stderr": READ_ONLY + "\n", "msg": "non-zero return code"},
     {"requested": True, "done": False, "reason": "could not drop the page cache: " + READ_ONLY}),
    # A become that cannot happen (no sudo) or an unreachable host: no rc, Ansible's message.
    (True, {"failed": True, "msg": " Missing sudo password "},
     {"requested": True, "done": False, "reason": "could not drop the page cache: Missing sudo password"}),
    (True, {"unreachable": True, "msg": "Failed to connect to the host via ssh"},
     {"requested": True, "done": False, "reason": "could not drop the page cache: Failed to connect to the host via ssh"}),
    (True, {"rc": 1, "stderr": " ", "msg": ""},
     {"requested": True, "done": False, "reason": "could not drop the page cache: no message"}),
    (True, None, {"requested": True, "done": False, "reason": "could not drop the page cache: no message"}),
])
def test_drop_caches_outcome_from_the_drop_task(requested, run, outcome):
    assert result.drop_caches_outcome(requested, run) == outcome


@pytest.mark.unit
@pytest.mark.unit
def test_drop_caches_outcome_reaches_the_document(host_plan):
    crashed = {"issue": None, "reason": "container exited", "remedy": None, "log_excerpt": ""}
    outcome = result.drop_caches_outcome(True, {"rc": 1, "stderr": READ_ONLY})
    doc = written(result.record(entry(host_plan), HOST, "launch", False, launch_failure=crashed, drop_caches=outcome))
    assert doc["protocol"] == {"drop_caches": outcome, "flags": []}
    # No outcome (a cluster variant, a host failure): no protocol block from the controller.
    assert "protocol" not in written(result.record(entry(host_plan), HOST, "launch", False, launch_failure=crashed))


@pytest.mark.unit
def test_host_failure_is_recorded_for_every_planned_variant(host_plan):
    recs = [result.record(e, HOST, "host", False, reason="Spark host | require a Docker engine: not reachable")
            for e in host_plan["variants"]]
    assert len(recs) == 6
    for rec in recs:
        doc = written(rec)
        assert doc["failure"]["stage"] == "host" and doc["simulated"] is True and "Docker engine" in doc["failure"]["reason"]


@pytest.mark.sim
def test_an_invalid_document_is_never_written(tmp_path, host_plan, measured):
    e = entry(host_plan)
    bad = measured_block() | {"schema_version": 1}  # an integer, as an old builder wrote
    with pytest.raises(result.DocumentError, match="schema_version"):
        result.complete_document(result.context_fields(e, HOST), bad)
    # record() falls back to a valid failure document naming the problem
    doc = written(result.record(e, HOST, "measure", True, measure={"rc": 0, "stdout": json.dumps(bad)}))
    assert doc["failure"]["stage"] == "measure" and "schema_version" in doc["failure"]["reason"]


@pytest.mark.unit
def test_settings_and_variable_defaults_have_one_value(tmp_path):
    """sparkbench.settings.DEFAULTS equal the run-wide llm_bench_* values in the inventory, and the
    plan's variable defaults equal the roles' literal defaults: no second, drifting copy."""
    inv = yaml.safe_load((REPO / "inventory/group_vars/all/bench.yml").read_text())
    assert {k: inv[f"llm_bench_{k}"] for k in settings.DEFAULTS} == settings.DEFAULTS
    role = yaml.safe_load((REPO / "roles/vllm_server/defaults/main.yml").read_text())
    for name, default in plan.VARIABLES.items():
        if name in role and not (isinstance(role[name], str) and "{{" in role[name]):
            assert role[name] == default, name
    argv = plan.plan_host(inventory_vars(tmp_path), "spark-sim01")["variants"][0]["measure_argv"]
    assert argv[argv.index("--output-tokens") + 1] == "256" and argv[argv.index("--concurrency") + 1] == "2,4,8"
    assert argv[argv.index("--stall-timeout") + 1] == "60" and argv[argv.index("--out") + 1] == "-"
    assert "--quality" in argv and "--image" in argv
