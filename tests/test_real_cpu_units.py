"""Real vLLM on a CPU, the parts that need no server: the real_cpu plan (model in the image), the
backend and simulated flags of a document, the roofline skipped for CPU figures, and the known
issues against lines copied from real vLLM 0.32.0 logs (tests/test_real_vllm_e2e.py checks the
same against live containers)."""
from __future__ import annotations

import pytest
import yaml

from sparkbench import plan as plan_mod
from sparkbench import preflight, result
from sparkbench.report import numbers

from helpers import REPO

pytestmark = pytest.mark.unit

# Lines as real vLLM 0.32.0 (image sparkbench/vllm-cpu) printed them.
ARGPARSE = ("api_server.py: error: argument --dtype: invalid choice: 'float17' (choose from 'auto', 'bfloat16', "
            "'float', 'float16', 'float32', 'half')")
NO_MODEL = ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for "
            "the specified revision on the local disk and outgoing traffic has been disabled. To enable repo "
            "look-ups and downloads online, pass 'local_files_only=False' as input.")
KV = ("ValueError: To serve at least one request with the model's max seq len (2000000), (1.91 GiB KV cache is "
      "needed, which is larger than the available KV cache memory (1.0 GiB). Based on the available memory, the "
      "estimated maximum model length is 1048448. Try increasing `gpu_memory_utilization` (which also controls CPU "
      "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine.")
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}"
SHM = ("RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 64 MiB free. "
       "Increase /dev/shm (e.g. --shm-size or --ipc=host).")
DEAD = ("(EngineCore pid=30) ERROR 12-01 14:25:36 [core.py:1512] TimeoutError: RPC call to execute_model timed out.\n"
        "(APIServer pid=1) ERROR 12-01 14:25:36 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")


def real_cpu_vars(**extra):
    v = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())
    v.update(yaml.safe_load((REPO / "inventory/group_vars/real_cpu/main.yml").read_text()))
    v.update({"bench_run_id": "T", "bench_results_dir": "/nonexistent-results"}, **extra)
    return v


def test_real_cpu_plan_ships_the_model_in_the_image_and_has_two_real_configurations():
    p = plan_mod.plan_host(real_cpu_vars(), "cpu-real01")
    assert p["models"] == [{"model": "sparkbench/tiny-llama", "revision": "639e1d6249a71093809b261dc28c8806fb7f4f49",
                            "image": "sparkbench/vllm-cpu:v0.32.0", "in_image": True}]
    assert p["names"][:2] == ["tiny-bf16", "tiny-fp32"]
    argv = {e["name"]: e["launch"]["argv"] for e in p["variants"]}
    assert "bfloat16" in argv["tiny-bf16"] and "float32" in argv["tiny-fp32"]
    for e in p["variants"]:
        assert e["preflight"]["verdict"] == "pass", e["preflight"]
        assert e["launch"]["container"]["device_requests"] is None
        assert "--kv-cache-dtype" not in e["launch"]["argv"] and "--reasoning-parser" not in e["launch"]["argv"]
        assert e["hardware_profile"]["name"] == "x86-cpu"


def test_backend_and_simulated_come_from_the_host_variables():
    assert result.host_facts({"sparkbench_gpu_less": True}, "h")["backend"] == "simulator"
    assert result.host_facts({}, "h")["backend"] == "vllm"
    facts = result.host_facts({"sparkbench_gpu_less": True, "sparkbench_simulated": False,
                               "sparkbench_backend": "vllm-cpu"}, "h")
    assert facts["simulated"] is False and facts["backend"] == "vllm-cpu"


def test_roofline_is_skipped_with_a_reason_for_cpu_figures():
    spark = {"name": "dgx-spark", "memory_bandwidth_gbps": 273}
    model = {"active_params_b": 3.0, "weight_bits": 4.5}
    on_spark = {"profile": {"hardware": spark, "model": model}, "manifest": {"backend": "vllm", "gpu": "NVIDIA GB10"}}
    assert numbers.roofline(on_spark)["tok_s"] > 0 and numbers.roofline(on_spark)["skipped"] is None
    cpu_profile = {"profile": {"hardware": {"name": "x86-cpu", "roofline": False, "device": "cpu"}, "model": model},
                   "manifest": {"backend": "vllm-cpu"}}
    roof = numbers.roofline(cpu_profile)
    assert roof["tok_s"] is None and roof["skipped"].startswith("no Spark roofline: the figures come from a CPU")
    # Figures from a CPU held against a Spark profile: no roofline either.
    wrong = {"profile": {"hardware": spark, "model": model}, "manifest": {"backend": "vllm-cpu", "gpu": "none (CPU: x)"}}
    assert numbers.roofline(wrong)["tok_s"] is None and "not on the dgx-spark" in numbers.roofline(wrong)["skipped"]


def test_known_issues_explain_the_real_logs():
    known = preflight.load_known_issues()
    cases = {ARGPARSE: "vllm_invalid_flag_choice", NO_MODEL: "model_not_found",
             KV: "kv_cache_too_small_for_max_model_len", SHM: "dev_shm_too_small", DEAD: "execute_model_timeout"}
    for line, issue in cases.items():
        got = preflight.explain_launch("INFO starting\n" + line + "\n" + WRAPPER, issues=known)
        assert got["issue"] == issue, (issue, got)
    kv = preflight.explain_launch(KV, issues=known)
    assert "lower --max-model-len to 1048448 or less" in kv["remedy"]
    shm = preflight.explain_launch(SHM, issues=known)
    assert "64 MiB free" in shm["reason"] and "--ipc host" in shm["remedy"]


def test_error_line_is_vllms_own_not_the_wrapper():
    assert preflight.error_line("usage: ...\n" + ARGPARSE + "\n") == ARGPARSE
    assert preflight.error_line(KV + "\n" + WRAPPER + "\n") == KV
    assert preflight.error_line(WRAPPER) == WRAPPER


def test_measure_failure_takes_the_container_logs_diagnosis():
    server = preflight.explain_launch(DEAD)
    fail, _ = result.measure_failure(1, "", "[measure] failed", server=server)
    assert fail["stage"] == "measure" and fail["issues"] == ["execute_model_timeout"]
    assert "EngineDeadError" in fail["reason"] and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in fail["remedy"]
    plain, _ = result.measure_failure(1, "", "[measure] failed: no single-stream request succeeded",
                                      server={"issue": None, "line": "ValueError: boom"})
    assert plain["issues"] == [] and plain["reason"].endswith("server log: ValueError: boom")
