"""Pacing: the simulator keeps to its own model within 2 % at one stream and is never early at 8;
bandwidth scales it."""
from __future__ import annotations

import json
import statistics
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from sparkbench.twin.pacing import PacingModel

from conftest import REPO_ROOT

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
D27 = "nvidia/Qwen3.6-27B-NVFP4"
ARGS = ["--max-num-batched-tokens", "4096", "--kv-cache-dtype", "fp8"]


def get(sim, path: str) -> dict:
    return json.loads(urllib.request.urlopen(sim.base_url + path, timeout=30).read())


def run(sim, n: int, tokens: int, model: str = MODEL) -> list[dict]:
    """n parallel forced generations; returns their /sim/requests rows."""
    c = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="x", max_retries=0)
    before = {r["id"] for r in get(sim, "/sim/requests")["requests"]}

    def one(_):
        list(c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Go"}], max_tokens=tokens,
                                       stream=True, extra_body={"ignore_eos": True}))
    with ThreadPoolExecutor(n) as ex:
        list(ex.map(one, range(n)))
    return [r for r in get(sim, "/sim/requests")["requests"] if r["id"] not in before]


def model_at(model_file: str, rate: float) -> PacingModel:
    """The simulator's pacing model for ``model_file`` at the ARGS' fp8 KV cache and a rate override."""
    hw = json.loads((REPO_ROOT / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    pm = PacingModel(hw, json.loads((REPO_ROOT / "sparkbench/data/profiles/models" / model_file).read_text()),
                     kv_cache_dtype="fp8")
    pm.set_rate_override(rate)
    return pm


def expected_rate_as_batched(r: dict, rows: list[dict], rate_at) -> float:
    """The model's per-stream rate for ``r`` given the batch it actually ran in: the time-weighted
    mean of ``rate_at(n)`` over its decode span, n = the requests decoding at each moment. (Clients
    started late by a loaded machine leave the batch below 8 for a while; the model says how fast
    that is, so the check follows the model and not the load.)"""
    start, end = r["first_token"], r["last_token"]
    cuts = sorted({start, end} | {t for o in rows for t in (o["first_token"], o["last_token"]) if start < t < end})
    weighted = 0.0
    for a, b in zip(cuts, cuts[1:]):
        n = sum(1 for o in rows if o["first_token"] <= a and o["last_token"] >= b)
        weighted += (b - a) * rate_at(n)
    return weighted / (end - start)


def decode_rate(r: dict) -> float:
    """(completion_tokens - 1) / (t_last - t_first): decode tok/s of one request."""
    return (r["completion_tokens"] - 1) / (r["last_token"] - r["first_token"])


def planned_rate(r: dict) -> float:
    """(completion_tokens - 1) / the decode steps' planned durations: the rate the engine's pacing
    model set for one request, before any late wake-up of its thread."""
    return (r["completion_tokens"] - 1) / r["paced_decode_s"]


def delivered_rate(r: dict) -> float:
    """(completion_tokens - 1) / (t_last - the first token's deadline): the decode rate delivered on
    the engine's own schedule. Pacing is deadline based: a first token a loaded machine made late is
    followed by steps that catch up, so t_last - t_first can be shorter than planned, while this
    span never is; it is never above ``planned_rate``."""
    return (r["completion_tokens"] - 1) / (r["last_token"] - r["first_token_planned"])


@pytest.mark.sim
def test_single_and_eight_streams_follow_the_model(sim_factory):
    # Spans of 1-2 s, so one late wake-up of the engine thread on a loaded machine stays under 1 %.
    sim = sim_factory(args=ARGS, env={"VLLM_SIM_RATE": "50"})
    info = get(sim, "/sim/info")["pacing"]
    assert abs(info["predicted_bare_tok_s"] - 50) < 1e-6
    single_rows = [r for _ in range(3) for r in run(sim, 1, 60)]
    single = [delivered_rate(r) for r in single_rows]
    # The engine plans each run at the model's rate (the growing context takes under 0.1 %); it
    # delivers within 2 % on a quiet machine (BENCHMARKS.md table 1) and never early; how late a
    # loaded machine makes it is the machine's, so no lower bound here.
    assert all(abs(planned_rate(r) / info["predicted_tok_s_1"] - 1) < 1e-3 for r in single_rows), single_rows
    assert all(delivered_rate(r) <= planned_rate(r) * (1 + 1e-9) for r in single_rows), single_rows
    rows = run(sim, 8, 80)
    assert all(r["completion_tokens"] == 80 for r in rows)
    per_stream = statistics.median(decode_rate(r) for r in rows)
    pm = model_at("nvidia__Qwen3.6-35B-A3B-NVFP4.json", 50)
    assert abs(pm.expected_rate(8) - info["predicted_tok_s_8"]) < 1e-6 * info["predicted_tok_s_8"]
    # Each request against the model at the batch it actually ran in: a paced engine is never early
    # (at most 2 % over), and on a loaded machine its eight SSE writers make it late by what the load
    # takes (0.89-0.95 seen beside the suite, half with one core taken), so below only the
    # never-early side; how close it keeps on a quiet machine is BENCHMARKS.md's table 1.
    ratios = [delivered_rate(r) / expected_rate_as_batched(r, rows, pm.expected_rate) for r in rows]
    assert statistics.median(ratios) < 1.02, (ratios, per_stream, info["predicted_tok_s_8"])
    # batching, in the engine's plan: per-stream slower than single (more experts read), the eight
    # together much faster
    single_plan = statistics.median(map(planned_rate, single_rows))
    assert statistics.median(map(planned_rate, rows)) < single_plan < sum(map(planned_rate, rows)) / 2
    # TPOT histogram mean agrees with the timeline (it is what actually happened)
    body = urllib.request.urlopen(sim.base_url + "/metrics").read().decode()
    vals = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
            if line.startswith("vllm:request_time_per_output_token_seconds_") and "_bucket" not in line and not line.startswith("#")}
    mean_tpot = vals["vllm:request_time_per_output_token_seconds_sum"] / vals["vllm:request_time_per_output_token_seconds_count"]
    timeline = statistics.mean([1 / x for x in single] + [1 / decode_rate(r) for r in rows])
    assert abs(mean_tpot - timeline) / timeline < 0.01


@pytest.mark.sim
def test_halving_bandwidth_halves_the_bare_rate(sim_factory):
    """Dense 27B at real speed: the rate scales with bandwidth except the per-layer launch cost."""
    full = sim_factory(model=D27, args=ARGS, env={"VLLM_SIM_SPEEDUP": "4"})
    half = sim_factory(model=D27, args=ARGS, env={"VLLM_SIM_SPEEDUP": "4", "VLLM_SIM_BANDWIDTH_GBPS": "136.5"})
    rows_full = run(full, 1, 24, D27) + run(full, 1, 24, D27)
    rows_half = run(half, 1, 24, D27) + run(half, 1, 24, D27)
    p_full, p_half = (get(s, "/sim/info")["pacing"]["predicted_bare_tok_s"] for s in (full, half))
    # What the engine planned is the model's rate at its bandwidth, and it delivers that, never early
    # (a loaded machine makes the faster engine later in proportion, so the delivered rates only as
    # never early).
    planned = statistics.median(map(planned_rate, rows_half)) / statistics.median(map(planned_rate, rows_full))
    assert abs(planned - p_half / p_full) < 1e-3, (planned, p_half / p_full)
    assert 0.49 < planned < 0.53, planned      # the 64 x 90 us launch cost does not scale with bandwidth
    for r in rows_full + rows_half:
        assert delivered_rate(r) <= planned_rate(r) * (1 + 1e-9), r


@pytest.mark.sim
def test_prefill_and_context_depth(sim_factory):
    """TTFT grows with the prompt (chunked by --max-num-batched-tokens); deep context decodes slower."""
    sim = sim_factory(model=D27, args=["--max-num-batched-tokens", "2048", "--kv-cache-dtype", "fp8"],
                      env={"VLLM_SIM_RATE": "100"})
    c = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="x", max_retries=0)

    def one(words: int) -> dict:
        prompt = " ".join(["token"] * words)
        list(c.chat.completions.create(model=D27, messages=[{"role": "user", "content": prompt}], max_tokens=30,
                                       stream=True, extra_body={"ignore_eos": True}))
        return get(sim, "/sim/requests")["requests"][-1]

    short, long_ = one(10), one(6000)
    assert long_["prompt_tokens"] > 6000 and short["prompt_tokens"] < 30
    ttft_short = short["first_token"] - short["arrival"]
    ttft_long = long_["first_token"] - long_["arrival"]
    # 6k prompt tokens at 2 x 25.5 GFLOP/token over 20 TFLOPS, scaled by the 100 tok/s override
    info = get(sim, "/sim/info")["pacing"]
    scale = info["time_scale"]
    expected_compute = long_["prompt_tokens"] * 2 * 25.5e9 / 20e12 * scale
    assert ttft_long - ttft_short > 0.8 * expected_compute
    assert long_["steps"] == short["steps"]            # same number of token-emitting steps (30 tokens, bare)
    # KV cache read grows with context: a step at 6k context is slower in the engine's own model (the
    # ~1 % effect is below what one late wake-up on a loaded machine does to a 0.3 s timeline).
    hw = json.loads((REPO_ROOT / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    model = json.loads((REPO_ROOT / "sparkbench/data/profiles/models/nvidia__Qwen3.6-27B-NVFP4.json").read_text())
    pm = PacingModel(hw, model, kv_cache_dtype="fp8")
    assert pm.raw_step(1, 0, long_["prompt_tokens"]) > pm.raw_step(1, 0, short["prompt_tokens"])


@pytest.mark.sim
def test_per_host_efficiency_makes_a_slow_unit(sim_factory):
    normal = sim_factory(model=D27, args=ARGS)
    slow = sim_factory(model=D27, args=ARGS, env={"VLLM_SIM_EFFICIENCY": "0.8", "VLLM_SIM_DRIVER_VERSION": "570.1"})
    p_norm = get(normal, "/sim/info")["pacing"]["predicted_bare_tok_s"]
    p_slow = get(slow, "/sim/info")["pacing"]["predicted_bare_tok_s"]
    assert 0.78 < p_slow / p_norm < 0.82                  # bandwidth-bound: ~ the efficiency ratio
    assert 11.5 < p_norm < 13.0                           # the held-out 27B lands near the seed's 12.43


@pytest.mark.sim
def test_request_noise_knob_draws_one_seeded_factor_per_request(sim_factory):
    """VLLM_SIM_REQUEST_NOISE: each request's step-time factor is exp(N(0, noise)) drawn in arrival
    order from the seeded RNG, and a single stream's decode rate follows it (rate × factor constant)."""
    import math
    import random

    import pytest
    env = {"VLLM_SIM_REQUEST_NOISE": "0.05", "VLLM_SIM_SEED": "7", "VLLM_SIM_JITTER": "0", "VLLM_SIM_SPEEDUP": "4"}
    sim = sim_factory(args=ARGS, env=env)
    rows = [run(sim, 1, 48)[0] for _ in range(5)]
    rng = random.Random("request-noise:7")
    assert [r["noise_factor"] for r in rows] == pytest.approx([math.exp(rng.gauss(0.0, 0.05)) for _ in range(5)])
    # the engine's planned decode time follows the factor and nothing else: rate × factor is one
    # constant (the same 47 steps at the same contexts); judged on the plan, not the wall clock, so a
    # late wake-up of a loaded machine cannot decide it
    planned = [(r["completion_tokens"] - 1) / r["paced_decode_s"] * r["noise_factor"] for r in rows]
    assert max(planned) / min(planned) == pytest.approx(1.0, abs=1e-9), planned
    # and the wall clock is paced by that plan: never early (late wake-ups only lengthen a span)
    assert all(r["last_token"] - r["first_token_planned"] >= r["paced_decode_s"] * (1 - 1e-9) for r in rows), rows
    assert max(r["noise_factor"] for r in rows) / min(r["noise_factor"] for r in rows) > 1.04
    plain = sim_factory(args=ARGS, env={"VLLM_SIM_JITTER": "0", "VLLM_SIM_SPEEDUP": "4"})
    assert run(plain, 1, 16)[0]["noise_factor"] == 1.0  # off by default


@pytest.mark.unit
def test_request_noise_knob_rejects_a_negative_value():
    import pytest

    from vllm_sim.knobs import KnobError, Knobs
    with pytest.raises(KnobError, match="VLLM_SIM_REQUEST_NOISE"):
        Knobs.from_env({"VLLM_SIM_REQUEST_NOISE": "-0.1"})
    assert Knobs.from_env({"VLLM_SIM_REQUEST_NOISE": "0.02"}).request_noise == 0.02


@pytest.mark.unit
def test_a_step_that_takes_in_a_new_request_starts_no_earlier_than_its_arrival():
    """The engine's plan (``vllm_sim.engine.planned_start``): a step starts at the previous step's
    deadline while the engine keeps pace (a late wake-up is caught up), from now after an idle
    period or when over 1 s behind, and never before the arrival of a request it takes in: a
    request that arrived while a late wake-up kept the engine from stepping has its first token
    planned at its arrival plus its prefill, never earlier."""
    from vllm_sim.engine import planned_start

    assert planned_start(None, 100.0, None) == 100.0     # idle: from now
    assert planned_start(98.5, 100.0, None) == 100.0     # over 1 s behind: from now
    assert planned_start(99.8, 100.0, None) == 99.8      # a late wake-up: the deadline, caught up
    assert planned_start(99.8, 100.0, 99.9) == 99.9      # but not before a new request's arrival
    assert planned_start(100.2, 100.0, 99.9) == 100.2    # the deadline when it is after the arrival
    assert planned_start(None, 100.0, 99.9) == 100.0     # idle: now is after any arrival
