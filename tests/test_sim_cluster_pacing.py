"""Cluster pacing (pure Python, no Ray): the gpt-oss-120b calibration against the published
two-Spark figures, the held-out 8-stream figures, and the shape of TP / PP.

Published (kubis.ai gpt-oss-120b topology benchmark, vLLM, llama-benchy pp1024/tg128; see
shared/reference/multispark.md section 9): one Spark c1 57.5, c8 153.5; TP=2 c1 69.0, c8 231.0 tok/s.
c1 is one stream's decode rate; c8 is read as the AGGREGATE of 8 streams (llama-benchy's
concurrency figure is the sum: 231.0 per stream would be 3.3x TP=2's own single stream, beyond
any bandwidth bound of a decode that reads the weights once per step). Also the start-up checks
that need no cluster (world > the node's GPUs without Ray, a bad backend, Ray missing).
"""
from __future__ import annotations

import json
import sys

import pytest

from sparkbench.twin.pacing import PacingModel

from conftest import REPO_ROOT

HW = json.loads((REPO_ROOT / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
GPTOSS = json.loads((REPO_ROOT / "sparkbench/data/profiles/models/openai__gpt-oss-120b.json").read_text())
CTX = 1024 + 64            # pp1024/tg128: the mean context while the 128 tokens decode
HELD_OUT_BAND = 0.12       # held-out figures: within 12 % (measured: +1.5 % one Spark, +9.6 % TP=2)


def rate(n: int, tp: int = 1, pp: int = 1, model: dict = GPTOSS) -> float:
    """Aggregate decode tok/s of n streams (the per-stream rate x n)."""
    pm = PacingModel(HW, model, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    return n / pm.raw_step(n, 0, CTX * n)


@pytest.mark.unit
@pytest.mark.parametrize("tp,published", [(1, 57.5), (2, 69.0)])
def test_calibration_single_stream_within_2_percent(tp, published):
    assert rate(1, tp) == pytest.approx(published, rel=0.02)


@pytest.mark.unit
@pytest.mark.parametrize("tp,published", [(1, 153.5), (2, 231.0)])
def test_held_out_eight_streams_aggregate_within_band(tp, published):
    err = rate(8, tp) / published - 1
    assert abs(err) <= HELD_OUT_BAND, f"TP={tp} c8: predicted {rate(8, tp):.1f} vs {published} ({err:+.1%})"


@pytest.mark.unit
def test_pipeline_parallel_single_stream_is_about_one_unit():
    one, pp2 = rate(1), rate(1, pp=2)
    assert pp2 < one                       # hand-offs cost a little ...
    assert pp2 == pytest.approx(one, rel=0.03)   # ... but a single stream is still one unit's pace
    assert rate(8, pp=2) > rate(8)         # micro-batches interleave: batched decode gains


@pytest.mark.unit
@pytest.mark.parametrize("n", [1, 8, 32])
def test_tensor_parallel_never_doubles(n):
    assert rate(n) < rate(n, tp=2) < 2 * rate(n)


@pytest.mark.unit
def test_single_unit_path_unchanged_by_the_interconnect():
    """TP = PP = 1 never reads the interconnect block: the other models' calibration holds."""
    hw = json.loads(json.dumps(HW))
    hw["interconnect"]["allreduce_latency_us"] = 1e6
    m = json.loads((REPO_ROOT / "sparkbench/data/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json").read_text())
    a = PacingModel(HW, m).raw_step(4, 0, 4000)
    b = PacingModel(hw, m).raw_step(4, 0, 4000)
    assert a == b


@pytest.mark.unit
def test_allreduce_formula_units():
    """AR(x) = latency + x * hidden * 2 B * 2 (t-1)/t / (link_gbps * 1e9 / 8 * efficiency)."""
    pm = PacingModel(HW, GPTOSS, tensor_parallel_size=2)
    ic = HW["interconnect"]
    bw = ic["link_gbps"] * 1e9 / 8 * ic["efficiency"]
    assert pm.allreduce_s(8) == pytest.approx(ic["allreduce_latency_us"] * 1e-6 + 8 * 2880 * 2 * 1.0 / bw)
    assert pm.handoff_s(8) == pytest.approx(ic["allreduce_latency_us"] * 1e-6 + 8 * 2880 * 2 / bw)
    # per-GPU traffic counters split the step's bytes over the world
    one = PacingModel(HW, GPTOSS).step_traffic(1, 0, CTX)[0]
    assert pm.step_traffic(1, 0, CTX)[0] == pytest.approx(one / 2)


# --------------------------------------------------------------------------- start-up checks (no cluster)
def _serve(*flags: str, env: dict | None = None):
    import os
    import subprocess
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts/vllm_sim"), "serve", "openai/gpt-oss-120b",
                           "--port", "0", *flags], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "VLLM_SIM_LOAD_SECONDS": "0.1", **(env or {})})


@pytest.mark.sim
@pytest.mark.parametrize("flags", [["-tp", "2"], ["-pp", "2", "--distributed-executor-backend", "mp"]])
def test_world_over_the_node_gpus_without_ray_fails_as_vllm(flags):
    p = _serve(*flags)
    assert p.returncode == 1
    assert "World size (2) is larger than the number of available GPUs (1) in this node." in p.stderr
    assert "- ray, set '--distributed-executor-backend ray'." in p.stderr


@pytest.mark.sim
def test_bad_backend_and_missing_ray_fail_at_start():
    p = _serve("--distributed-executor-backend", "dask")
    assert p.returncode == 1 and "Input should be 'ray', 'mp', 'uni' or 'external_launcher'" in p.stderr
    try:
        import ray  # noqa: F401
    except ImportError:
        p = _serve("-tp", "2", "--distributed-executor-backend", "ray")
        assert p.returncode == 1 and "ValueError: Failed to import Ray: No module named 'ray'." in p.stderr
