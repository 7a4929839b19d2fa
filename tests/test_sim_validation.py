"""vLLM's start-up validation as the simulator reproduces it: exact exception line, exit 1, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SIM_DIR

pytestmark = pytest.mark.sim

N35 = "nvidia/Qwen3.6-35B-A3B-NVFP4"
U35 = "unsloth/Qwen3.6-35B-A3B-NVFP4"
D27 = "nvidia/Qwen3.6-27B-NVFP4"
SEED_FLAGS = ["--quantization", "modelopt", "--kv-cache-dtype", "fp8", "--max-model-len", "65536",
              "--max-num-seqs", "8", "--gpu-memory-utilization", "0.85", "--reasoning-parser", "qwen3",
              "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
              "--enable-prefix-caching", "--trust-remote-code"]
MAMBA = "AssertionError: In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)."
B12X = ("ValueError: --linear-backend=flashinfer_b12x was requested but no 'flashinfer_b12x' kernel exists for "
        "this layer type.")


def run_sim(model: str, args: list[str], env: dict | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run the simulator to completion (validation failures exit at once; port 9 is never bound)."""
    e = {**os.environ, "VLLM_SIM_LOAD_SECONDS": "0", **(env or {})}
    return subprocess.run([sys.executable, str(SIM_DIR), "serve", model, "--host", "127.0.0.1", "--port", "9", *args],
                          capture_output=True, text=True, env=e, timeout=timeout)


CASES = [
    ("mamba-default-budget", N35, SEED_FLAGS, {}, MAMBA),
    ("mamba-explicit-2048", N35, SEED_FLAGS + ["--max-num-batched-tokens", "2048"], {}, MAMBA),
    ("mamba-0.26", N35, ["--max-num-batched-tokens", "2k"], {"VLLM_SIM_VERSION": "0.26.0"},
     "AssertionError: In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2000)."),
    ("b12x-linear-backend", U35, ["--max-num-batched-tokens", "4096", "--moe-backend", "flashinfer_b12x",
                                  "--linear-backend", "flashinfer_b12x"], {}, B12X),
    ("unknown-quantization", N35, ["--quantization", "fp5", "--max-num-batched-tokens", "4096"], {},
     "ValueError: Unknown quantization method: fp5. Must be one of ["),
    ("quantization-mismatch", U35, ["--quantization", "modelopt", "--max-num-batched-tokens", "4096"], {},
     "ValueError: Quantization method specified in the model config (compressed-tensors) does not match the "
     "quantization method specified in the `quantization` argument (modelopt)."),
    ("quantization-mismatch-nvidia", N35, ["--quantization", "compressed-tensors", "--max-num-batched-tokens", "4096"],
     {}, "ValueError: Quantization method specified in the model config (modelopt_fp4) does not match the "
         "quantization method specified in the `quantization` argument (compressed-tensors)."),
    ("bad-reasoning-parser", N35, ["--reasoning-parser", "qwen9", "--max-num-batched-tokens", "4096"], {},
     "KeyError: 'invalid reasoning parser: qwen9 (chose from {"),
    ("unsupported-spec-method", N35, ["--speculative-config", '{"method":"medusa2"}', "--max-num-batched-tokens", "4096"],
     {}, "ValueError: Unsupported speculative method: 'medusa2'"),
    ("no-profile", "acme/unknown-model", [], {}, "ValueError: vllm_sim: no model profile for 'acme/unknown-model'"),
    ("bad-knob", N35, ["--max-num-batched-tokens", "4096"], {"VLLM_SIM_RATE": "fast"},
     "ValueError: VLLM_SIM_RATE='fast' is not a number"),
]


@pytest.mark.parametrize("name,model,args,env,expected", CASES, ids=[c[0] for c in CASES])
def test_validation_error(name, model, args, env, expected):
    p = run_sim(model, args, env)
    assert p.returncode == 1, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(expected), p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_bad_speculative_json_is_an_argparse_error():
    p = run_sim(N35, ["--speculative-config", "{bad json", "--max-num-batched-tokens", "4096"])
    assert p.returncode == 2 and "argument --speculative-config/-sc: invalid loads value: '{bad json'" in p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_flag_is_an_argparse_error():
    p = run_sim(N35, ["--frobnicate", "3"])
    assert p.returncode == 2 and "unrecognized arguments: --frobnicate 3" in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_choice_moe_backend():
    p = run_sim(N35, ["--moe-backend", "warp_drive"])
    assert p.returncode == 2 and "argument --moe-backend: invalid choice: 'warp_drive'" in p.stderr


@pytest.mark.parametrize("args,env", [
    (SEED_FLAGS + ["--max-num-batched-tokens", "4096"], {}),                      # the seed's working command
    (SEED_FLAGS + ["--no-enable-prefix-caching"], {}),                            # fix 2: prefix caching off
    (SEED_FLAGS, {"VLLM_SIM_VERSION": "0.27.0"}),                                 # assertion removed in 0.27
    (["--max-num-batched-tokens", "4096", "--linear-backend", "flashinfer_b12x"], {"VLLM_SIM_FLAVOR": "community"}),
    (["--linear-backend", "flashinfer_b12x", "--max-num-batched-tokens", "4096"], {"VLLM_SIM_VERSION": "0.32.0"}),
    (["--moe-backend", "marlin", "--max-num-batched-tokens", "4096"], {}),
], ids=["seed-command", "no-prefix-caching", "v0.27", "community-b12x", "v0.32-b12x-falls-back", "marlin"])
def test_accepted_configurations_start(sim_factory, args, env):
    sim = sim_factory(model=N35 if "--linear-backend" not in args else U35, args=args, env=env)
    assert sim.proc.poll() is None


def test_27b_and_nano_do_not_hit_the_mamba_assertion(sim_factory):
    assert sim_factory(model=D27, args=SEED_FLAGS).proc.poll() is None
    nano = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"
    assert sim_factory(model=nano, args=["--quantization", "modelopt"]).proc.poll() is None


def test_gated_model_needs_a_token_or_the_cache(tmp_path, sim_factory):
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": ""}
    p = run_sim("google/gemma-3-4b-it", [], env)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1].startswith(
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo google/gemma-3-4b-it")
    # After a download with a token, the cached snapshot serves without one.
    import os
    d = subprocess.run([sys.executable, str(SIM_DIR), "hf", "download", "google/gemma-3-4b-it", "--quiet"],
                       env={**os.environ, **env, "HF_TOKEN": "hf_test_token", "VLLM_SIM_DOWNLOAD_SECONDS": "0"},
                       capture_output=True, text=True, timeout=30)
    assert d.returncode == 0 and "hf_test_token" not in d.stdout + d.stderr
    sim = sim_factory(model="google/gemma-3-4b-it", env=env)
    assert sim.proc.poll() is None
