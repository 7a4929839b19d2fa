"""/metrics parsed by prometheus_client; spec-decode counters; logs in vLLM's format."""
from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.sim

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
MTP3 = ["--max-num-batched-tokens", "4096", "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']
PROFILE_RATES = [0.865, 0.68, 0.55]


def scrape(sim) -> dict[str, list]:
    """{family name: [samples]} exactly as prometheus_client parses the body."""
    with urllib.request.urlopen(sim.base_url + "/metrics") as r:
        assert r.headers["content-type"].startswith("text/plain; version=1.0.0")
        text = r.read().decode()
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def value(fams, family: str, sample: str, **labels) -> float:
    _type, samples = fams[family]
    for s in samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, sample, labels))


def generate(sim, n_requests: int, tokens: int, parallel: int = 1):
    c = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="x", max_retries=0)

    def one(_):
        s = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Go"}], max_tokens=tokens,
                                      stream=True, extra_body={"ignore_eos": True},
                                      stream_options={"include_usage": True, "continuous_usage_stats": True})
        return list(s)
    with ThreadPoolExecutor(parallel) as ex:
        return list(ex.map(one, range(n_requests)))


def test_metrics_names_types_and_values(sim_factory):
    sim = sim_factory(args=["--max-num-batched-tokens", "4096"], env={"VLLM_SIM_RATE": "200"})
    fams = scrape(sim)
    assert "vllm:spec_decode_num_drafts" not in fams          # only with a speculative config
    assert fams["vllm:prompt_tokens"][0] == "counter"
    assert fams["vllm:time_to_first_token_seconds"][0] == "histogram"
    assert fams["vllm:num_requests_running"][0] == "gauge"
    assert fams["vllm:kv_cache_usage_perc"][0] == "gauge"
    buckets = [s.labels["le"] for s in fams["vllm:inter_token_latency_seconds"][1] if s.name.endswith("_bucket")]
    assert buckets[:3] == ["0.01", "0.025", "0.05"] and buckets[-1] == "+Inf"
    generate(sim, 3, 40)
    fams = scrape(sim)
    labels = {"model_name": MODEL, "engine": "0"}
    assert value(fams, "vllm:generation_tokens", "vllm:generation_tokens_total", **labels) == 120
    assert value(fams, "vllm:request_success", "vllm:request_success_total", finished_reason="length") == 3
    assert value(fams, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count") == 3
    # The TPOT histogram is what happened (the server's own timeline). The engine plans 39 decode
    # steps per request at 200 tok/s (1 % step jitter) and is never early on that plan. Pacing is
    # deadline based, so after a first token a loaded machine made late the steps catch up: the
    # first-to-last-token span can be shorter than planned (c24: 4.80 ms a token at 200 tok/s),
    # while the span from the first token's deadline never is.
    n = value(fams, "vllm:request_time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds_count")
    s = value(fams, "vllm:request_time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds_sum")
    rows = json.loads(urllib.request.urlopen(sim.base_url + "/sim/requests").read())["requests"]
    timeline = sum((r["last_token"] - r["first_token"]) / (r["completion_tokens"] - 1) for r in rows)
    assert n == 3 and len(rows) == 3 and abs(s - timeline) / timeline < 0.01
    for r in rows:
        assert abs((r["completion_tokens"] - 1) / r["paced_decode_s"] / 200 - 1) < 0.02, r
        assert r["last_token"] >= r["first_token_planned"] + r["paced_decode_s"] - 0.002, r
    assert value(fams, "vllm:num_requests_running", "vllm:num_requests_running") == 0


def test_mtp_chunks_and_per_position_acceptance(sim_factory):
    sim = sim_factory(args=MTP3, env={"VLLM_SIM_RATE": "1500", "VLLM_SIM_SEED": "11"})
    fams = scrape(sim)
    for pos in ("0", "1", "2"):     # all positions pre-created at 0
        assert value(fams, "vllm:spec_decode_num_accepted_tokens_per_pos",
                     "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=pos) == 0
    results = generate(sim, 4, 500, parallel=2)
    # With MTP a chunk carries as many tokens as its step accepted (continuous usage shows the jumps).
    jumps = []
    for chunks in results:
        counts = [c.usage.completion_tokens for c in chunks if c.choices]
        jumps += [b - a for a, b in zip(counts[1:], counts[2:])]
    assert max(jumps) == 4 and min(jumps) >= 1 and sum(j > 1 for j in jumps) > len(jumps) / 2
    fams = scrape(sim)
    drafts = value(fams, "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total")
    assert value(fams, "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_draft_tokens_total") == 3 * drafts
    rates = [value(fams, "vllm:spec_decode_num_accepted_tokens_per_pos",
                   "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) / drafts for i in range(3)]
    assert drafts > 500
    for got, want in zip(rates, PROFILE_RATES):     # 4 sigma at ~600 drafts is about 0.08
        assert abs(got - want) < 0.08, rates
    assert rates[0] > rates[1] > rates[2]


def test_log_lines_in_vllm_format(sim_factory):
    sim = sim_factory(args=MTP3, env={"VLLM_SIM_RATE": "400", "VLLM_SIM_LOG_INTERVAL": "0.3"})
    generate(sim, 1, 300)
    time.sleep(0.5)
    log = sim.log()
    assert "Engine 000: Avg prompt throughput:" in log and "GPU KV cache usage:" in log
    spec = [line for line in log.splitlines() if "SpecDecoding metrics: Mean acceptance length:" in line]
    assert spec and "Per-position acceptance rate:" in spec[0] and "Avg Draft acceptance rate:" in spec[0]
    assert "(APIServer pid=" in spec[0] and "Engine 000" not in spec[0]
    info = json.loads(urllib.request.urlopen(sim.base_url + "/sim/info").read())
    assert info["spec_k"] == 3 and info["acceptance"] == PROFILE_RATES
