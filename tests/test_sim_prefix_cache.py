"""The simulator's prefix cache (vllm_sim/prefix_cache.py): block hashing of the rendered
prompt, hits that cut prefill, LRU bounded by the KV blocks it reports, vLLM's counters
(``vllm:prefix_cache_queries`` / ``_hits`` in tokens, read with prometheus_client),
``usage.prompt_tokens_details.cached_tokens`` under ``--enable-prompt-tokens-details``, the log's
``Prefix cache hit rate`` line, ``--no-enable-prefix-caching``, and hybrid models' large blocks.
Truth: ``/sim/requests`` (``cached_tokens``, ``arrival``, ``first_token``) and the block keys
computed here from the same token stream.
"""
from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_sim import prefix_cache as PC
from vllm_sim.server import read_messages

from conftest import port_in

GPT_OSS = "openai/gpt-oss-120b"   # a plain-attention model: 16-token blocks
WORDS = ("The harbour town woke slowly while fishing boats came in with the tide and gulls followed "
         "them in long loops over the quay. ")


def doc(tag: str, repeat: int) -> str:
    return f"Document {tag}. " + WORDS * repeat


def chat(base: str, model: str, msgs: list, stream: bool = True, max_tokens: int = 4) -> dict:
    body = {"model": model, "messages": msgs, "max_tokens": max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read().decode()
    if not stream:
        return json.loads(raw)
    usage = None
    for line in raw.splitlines():
        if line.startswith("data: {"):
            obj = json.loads(line[6:])
            usage = obj.get("usage") or usage
    return {"usage": usage}


def rows(base: str) -> list[dict]:
    data = json.loads(urllib.request.urlopen(base + "/sim/requests", timeout=10).read())["requests"]
    return sorted(data, key=lambda r: r["arrival"])


def counters(base: str) -> dict[str, float]:
    """Prefix-cache figures through prometheus_client (samples summed over label sets)."""
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            key = s.name + (f"[{s.labels['source']}]" if "source" in s.labels else "")
            if key.startswith(("vllm:prefix_cache", "vllm:prompt_tokens")):
                out[key] = out.get(key, 0.0) + s.value
            if s.name == "vllm:cache_config_info":
                out["block_size"] = float(s.labels["block_size"])
                out["enable_prefix_caching"] = s.labels["enable_prefix_caching"] == "True"
                out["num_gpu_blocks"] = float(s.labels["num_gpu_blocks"])
    return out


def expected_hit(cached_msgs: list[list], msgs: list, block: int) -> int:
    """Hit tokens the cache must give ``msgs`` after ``cached_msgs`` were prefilled."""
    known = set()
    for m in cached_msgs:
        known.update(PC.block_hashes(PC.render_stream(m), block))
    keys = PC.block_hashes(PC.render_stream(msgs), block)
    n_prompt = read_messages(msgs, False)[2]
    n = 0
    for k in keys[:(n_prompt - 1) // block]:
        if k not in known:
            break
        n += 1
    return n * block


@pytest.mark.unit
def test_stream_matches_prompt_count_and_chains_blocks() -> None:
    msgs = [{"role": "system", "content": doc("a", 20)}, {"role": "user", "content": "One question?"}]
    stream = PC.render_stream(msgs)
    assert len(stream) == read_messages(msgs, False)[2]
    other = [msgs[0], {"role": "user", "content": "Another question?"}]
    ka, kb = PC.block_hashes(stream, 16), PC.block_hashes(PC.render_stream(other), 16)
    first_diff = next(i for i, (a, b) in enumerate(zip(ka, kb)) if a != b)
    assert all(a == b for a, b in zip(ka[:first_diff], kb[:first_diff])) and first_diff > 10
    assert all(a != b for a, b in zip(ka[first_diff:], kb[first_diff:]))   # a chain: once apart, always apart
    c = PC.PrefixCache(16, 4)
    c.insert(ka, len(stream))
    assert len(c.blocks) == 4 and c.evictions == len(ka) - 4   # LRU bound


@pytest.mark.sim
def test_hits_cut_prefill_counters_usage_and_log(sim_factory) -> None:
    s = sim_factory(model=GPT_OSS, args=["--enable-prompt-tokens-details"],
                    env={"VLLM_SIM_LOG_INTERVAL": "0.2"}, port=port_in(19300, 19400))
    a = [{"role": "system", "content": doc("x1", 60)}, {"role": "user", "content": "First question about it?"}]
    b = [a[0], {"role": "user", "content": "A second, different question?"}]
    c = [{"role": "system", "content": doc("y2", 60)}, {"role": "user", "content": "First question about it?"}]
    ua = chat(s.base_url, GPT_OSS, a)["usage"]
    ub = chat(s.base_url, GPT_OSS, b)["usage"]
    uc = chat(s.base_url, GPT_OSS, c, stream=False)["usage"]
    ud = chat(s.base_url, GPT_OSS, b, stream=False)["usage"]   # the same prompt again
    ra, rb, rc, rd = rows(s.base_url)
    assert ra["cached_tokens"] == 0 and rc["cached_tokens"] == 0
    assert rb["cached_tokens"] == expected_hit([a], b, 16) > 0.8 * rb["prompt_tokens"]
    # the whole prompt cached: the last token is still computed, so hits stop one block short at most
    assert rd["cached_tokens"] == 16 * ((rd["prompt_tokens"] - 1) // 16)
    # usage details as vLLM: present only when some tokens were cached
    assert "prompt_tokens_details" not in ua and uc["prompt_tokens_details"] is None
    assert ub["prompt_tokens_details"] == {"cached_tokens": rb["cached_tokens"]}
    assert ud["prompt_tokens_details"] == {"cached_tokens": rd["cached_tokens"]}
    # prefill only on the uncached part, on the prefill the engine planned (its timeline adds how
    # late a loaded machine runs it: c21's server put one of two equal cold prefills 0.23 s late);
    # each cached request against the cold one before it. The timeline is never early.
    planned = [r["paced_prefill_s"] for r in (ra, rb, rc, rd)]
    assert planned[1] < 0.25 * planned[0] and planned[3] < 0.25 * planned[2], planned
    assert all(r["first_token"] - r["arrival"] >= r["paced_prefill_s"] - 0.005 for r in (ra, rb, rc, rd))
    m = counters(s.base_url)
    prompts = sum(r["prompt_tokens"] for r in (ra, rb, rc, rd))
    hits = sum(r["cached_tokens"] for r in (ra, rb, rc, rd))
    assert m["vllm:prefix_cache_queries_total"] == prompts and m["vllm:prefix_cache_hits_total"] == hits
    assert m["vllm:prompt_tokens_total"] == prompts
    assert m["vllm:prompt_tokens_by_source_total[local_cache_hit]"] == hits
    assert m["vllm:prompt_tokens_by_source_total[local_compute]"] == prompts - hits
    assert m["vllm:prompt_tokens_cached_total"] == hits
    assert m["block_size"] == 16 and m["enable_prefix_caching"] is True
    time.sleep(0.5)
    rates = re.findall(r"Prefix cache hit rate: ([0-9.]+)%", s.log())
    assert rates and float(rates[-1]) == round(100.0 * hits / prompts, 1)


@pytest.mark.sim
def test_caching_off_counts_nothing_and_prefills_everything(sim_factory) -> None:
    s = sim_factory(model=GPT_OSS, args=["--no-enable-prefix-caching", "--enable-prompt-tokens-details"],
                    env={"VLLM_SIM_LOG_INTERVAL": "0.2"}, port=port_in(19300, 19400))
    a = [{"role": "system", "content": doc("x1", 60)}, {"role": "user", "content": "First question about it?"}]
    u1 = chat(s.base_url, GPT_OSS, a)["usage"]
    u2 = chat(s.base_url, GPT_OSS, a)["usage"]
    r1, r2 = rows(s.base_url)
    assert r1["cached_tokens"] == r2["cached_tokens"] == 0
    assert "prompt_tokens_details" not in u1 and "prompt_tokens_details" not in u2
    # the same prompt prefilled in full twice: the same planned prefill (1 % step jitter), and
    # neither first token early
    p1, p2 = (r["paced_prefill_s"] for r in (r1, r2))
    assert p1 > 0 and abs(p1 - p2) < 0.1 * p1, (p1, p2)
    assert all(r["first_token"] - r["arrival"] >= r["paced_prefill_s"] - 0.005 for r in (r1, r2))
    m = counters(s.base_url)
    assert m["vllm:prefix_cache_queries_total"] == 0 and m["vllm:prefix_cache_hits_total"] == 0
    assert m["enable_prefix_caching"] is False
    time.sleep(0.5)
    assert "Engine 000:" in s.log() and "Prefix cache hit rate" not in s.log()


@pytest.mark.sim
def test_lru_bounded_by_kv_blocks(sim_factory) -> None:
    # 200 blocks of 16 tokens: room for about two of these ~1300-token prompts
    s = sim_factory(model=GPT_OSS, args=["--num-gpu-blocks-override", "200"],
                    env={"VLLM_SIM_RATE": "400"}, port=port_in(19300, 19400))
    assert counters(s.base_url)["num_gpu_blocks"] == 200
    docs = {t: [{"role": "system", "content": doc(t, 50)}, {"role": "user", "content": "Question?"}]
            for t in ("p", "q", "r")}
    for t in ("p", "q", "r", "r", "p"):
        chat(s.base_url, GPT_OSS, docs[t])
    got = [r["cached_tokens"] for r in rows(s.base_url)]
    assert got[0] == got[1] == got[2] == 0
    assert got[3] == 16 * ((rows(s.base_url)[3]["prompt_tokens"] - 1) // 16)   # r: most recent, kept
    assert got[4] == 0   # p: least recently used, evicted when q and r came in
    info = json.loads(urllib.request.urlopen(s.base_url + "/sim/info", timeout=10).read())["prefix_cache"]
    assert info["enabled"] and info["num_blocks"] == 200 and 0 < info["cached_blocks"] <= 200 and info["evictions"] > 0


@pytest.mark.sim
def test_history_hits_through_the_answer_and_hybrid_blocks(sim_factory) -> None:
    s = sim_factory(model=GPT_OSS, env={"VLLM_SIM_RATE": "400"}, port=port_in(19300, 19400))
    t1 = [{"role": "user", "content": doc("conv", 8)}]
    body = chat(s.base_url, GPT_OSS, t1, stream=False, max_tokens=40)
    answer = body["choices"][0]["message"]["content"]
    t2 = t1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    chat(s.base_url, GPT_OSS, t2)
    r1, r2 = rows(s.base_url)
    # the generated answer's blocks were cached too: hits reach past the first prompt
    assert r2["cached_tokens"] >= 16 * ((r1["prompt_tokens"] + r1["completion_tokens"] - 1) // 16) - 16
    assert r2["cached_tokens"] > r1["prompt_tokens"]
    # a hybrid GDN model caches in its large attention blocks (mamba_block_size 2096 with fp8 KV)
    h = sim_factory(args=["--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "4096"], env={"VLLM_SIM_RATE": "400"}, port=port_in(19300, 19400))
    assert counters(h.base_url)["block_size"] == 2096
    short = [{"role": "user", "content": doc("short", 60)}]    # under 2096 tokens: never a hit
    long = [{"role": "user", "content": doc("long", 200)}]     # over two blocks
    for m in (short, short, long, long):
        chat(h.base_url, h.model, m)
    got = [(r["prompt_tokens"], r["cached_tokens"]) for r in rows(h.base_url)]
    assert got[0][1] == got[1][1] == 0 and got[1][0] < 2096
    assert got[2][1] == 0 and got[3][1] == 2096 * ((got[3][0] - 1) // 2096) > 0
