"""Serving workloads against real vLLM (CPU): measure.py's phases held against the real server.

Fixtures for the tests of this file (others append theirs at its end):

- ``real_server``: the tool-flag server: the second resident of the session's serve.yml run
  (tests/shared_runs.py ``real_residents``, variant ``tiny-tools``: the real_cpu model, eager, the
  tool flags and variable below, ``VLLM_CPU_KVCACHE_SPACE=2``); ``measure(args, out)`` runs
  scripts/measure.py against a server and returns (exit status, schema-validated document, stderr).
- ``bare_server``: a server without tool flags: the first resident of the same serve.yml run
  (variant ``tiny-eager``).

Tool calls on vLLM 0.32 (measured here; docs/MEASUREMENT.md "Tool calls"): every tool_choice but
"none" needs ``--enable-auto-tool-choice --tool-call-parser`` (0.32 loads a parser only with the
first flag, and "required"/named without one get HTTP 400 ``tool_choice="required" requires
--tool-call-parser to be set``). With the hermes parser's structural tag (the default,
VLLM_ENFORCE_STRICT_TOOL_CALLING=1) the arguments of a call are pinned only for ``strict`` tools
and JSON whitespace is free, so the random-weight model fills the arguments object with ``\\r``
until max_tokens; the server therefore runs forced tool choice through the JSON-schema path
(VLLM_ENFORCE_STRICT_TOOL_CALLING=0) with xgrammar and ``disable_any_whitespace``: calls come out
schema-valid, their values are noise (param_value_error), and a number or array the model never
ends is cut at max_tokens (unparsed, finish_reason length).
"""
from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from sparkbench import measure as M

from conftest import docker_available, run_measure
from helpers import REPO

SCHEMA = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
TOOLS = json.loads((REPO / "sparkbench/data/prompts/tools.json").read_text(encoding="utf-8"))
# The tool flags of the server: tests/shared_runs.py (TOOL_ARGS, TOOL_ENV).
# measure.py's speed phases kept to one short request: these tests are about the other phases.
QUICK = ["--output-tokens", "8", "--runs", "1", "--warmup", "0", "--concurrency", "none",
         "--telemetry", "off", "--kernel-log", "off", "--request-timeout", "120", "--stall-timeout", "60"]
AUTO_MSG = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'

_DOCKER_OK, _DOCKER_WHY = docker_available()
pytestmark = pytest.mark.skipif(not _DOCKER_OK, reason=f"real vLLM needs Docker: {_DOCKER_WHY}")
pytestmark = [pytestmark, pytest.mark.real]


@dataclass
class RealServer:
    """A real vLLM this file measures against (``.base_url``)."""

    base_url: str


@pytest.fixture(scope="module")
def real_server(real_residents) -> RealServer:
    """The tool-flag server: the second resident of the session's serve.yml run (tests/shared_runs.py
    ``real_residents``, variant ``tiny-tools``), deployed from a result with the tool flags above."""
    step = real_residents["steps"]["second"]
    assert step["proc"].returncode == 0, step["proc"].stdout[-6000:]
    return RealServer(real_residents["second_url"])


@pytest.fixture(scope="module")
def bare_server(real_residents) -> RealServer:
    """A real vLLM without tool flags: the first resident of the session's serve.yml run (still
    serving after the refused candidate beside it)."""
    step = real_residents["steps"]["deploy"]
    assert step["proc"].returncode == 0, step["proc"].stdout[-6000:]
    return RealServer(real_residents["resident_url"])


def measure(args: list[str], out: Path, timeout: float = 300) -> tuple[int, dict | None, str]:
    """Run measure.py; returns (exit status, schema-validated document or None, stderr)."""
    return run_measure(args, out, timeout)


# ---- tool calls ---------------------------------------------------------------------------------


def test_tools_auto_without_tool_flags_is_a_request_error(bare_server, tmp_path: Path) -> None:
    code, doc, err = measure(["--base-url", bare_server.base_url, *QUICK, "--tools"], tmp_path / "auto.json")
    assert code == 3, err
    assert doc["status"] == "incomplete" and doc["simulated"] is False
    t = doc["tools"]
    assert t["total"] == len(TOOLS["prompts"]) and t["by_bucket"] == {"request_error": t["total"]}
    for p in t["prompts"]:
        assert p["verdict"] == "fail" and p["bucket"] == "request_error"
        assert p["reason"] == f"HTTP 400: {AUTO_MSG}", p["reason"]   # vLLM's own message


def _check_forced(doc: dict, choice: str) -> None:
    """Forced tool choice on random weights: every complete call is schema-valid; values may be
    wrong (param_value_error), the count may be (wrong_tool, required only), and an output cut at
    max_tokens is unparsed; never param_type_error."""
    t = doc["tools"]
    print(f"\nreal vLLM tools {choice}: passed {t['passed']}/{t['total']}, skipped {t['skipped']}, "
          f"by_bucket {t['by_bucket']}, finish {[p['finish_reason'] for p in t['prompts']]}")
    assert t["tool_choice"] == choice and doc["simulated"] is False
    assert t["skipped"] == sum(1 for p in TOOLS["prompts"] if not p["expected"])
    allowed = {"param_value_error", "unparsed"} | ({"wrong_tool"} if choice == "required" else set())
    assert set(t["by_bucket"]) <= allowed, t["by_bucket"]
    schemas = {x["function"]["name"]: x["function"]["parameters"] for x in TOOLS["tools"]}
    by_id = {p["id"]: p for p in TOOLS["prompts"]}
    complete = 0
    for p in t["prompts"]:
        if p["verdict"] == "skipped":
            assert "forces a call" in p["reason"]
            continue
        if p["bucket"] == "unparsed":
            assert p["finish_reason"] == "length", p   # only an output cut at max_tokens
            continue
        assert p["finish_reason"] in ("stop", "tool_calls"), p
        offered = {x["function"]["name"] for x in M.prompt_tools(by_id[p["id"]], TOOLS["tools"])}
        for c in p["calls"]:
            assert c["name"] in offered
            if choice == "named":
                assert c["name"] == p["expected"][0]["name"]
            assert isinstance(c["arguments"], dict) and M.schema_errors(c["arguments"], schemas[c["name"]]) == [], c
        complete += 1
    if choice == "named":   # one call of a known function: random weights finish most of them
        assert complete >= 1, t   # structured outputs work on this CPU build


def test_tools_named_calls_are_schema_valid(real_server: RealServer, tmp_path: Path) -> None:
    code, doc, err = measure(["--base-url", real_server.base_url, *QUICK, "--tools", "--tool-choice", "named",
                              "--tools-max-tokens", "128"], tmp_path / "named.json")
    assert code == 0, err
    _check_forced(doc, "named")
    assert all(p["finish_reason"] in ("stop", "length") for p in doc["tools"]["prompts"] if p["verdict"] != "skipped")


def test_tools_required_calls_are_schema_valid(real_server: RealServer, tmp_path: Path) -> None:
    code, doc, err = measure(["--base-url", real_server.base_url, *QUICK, "--tools", "--tool-choice", "required",
                              "--tools-max-tokens", "128"], tmp_path / "required.json")
    assert code == 0, err
    _check_forced(doc, "required")


# ---- arrival rates (helper B) ----------------------------------------------------------------------


def _e2e_count(base_url: str) -> float:
    """vLLM's own count of finished requests (vllm:e2e_request_latency_seconds, all label sets),
    read once the server holds no request (one an earlier test's client gave up on may still be
    running or waiting, and would be counted when it ends)."""
    deadline = time.monotonic() + 300
    while True:
        samples = M.parse_prometheus(urllib.request.urlopen(base_url + "/metrics", timeout=30).read().decode())
        busy = sum(v for name, _labels, v in samples
                   if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"))
        if busy == 0 or time.monotonic() > deadline:
            return sum(v for name, _labels, v in samples if name == "vllm:e2e_request_latency_seconds_count")
        time.sleep(0.5)


def test_rate_phase_completes_every_request_with_consistent_goodput(real_server: RealServer, tmp_path: Path) -> None:
    """--rate 2 --rate-requests 6 (Poisson, seed 0) with an SLO a CPU run meets: every request
    completes with its forced length; goodput and slo_met_share follow from per_request exactly as
    docs/MEASUREMENT.md defines them; the schedule is the seeded one; real vLLM's own e2e histogram
    counts exactly measure.py's requests (the single-stream attempts, one unless a run gave no decode
    figure and was re-run, + 6)."""
    slo = {"ttft": 30.0, "tpot": 5.0, "e2e": 60.0}
    before = _e2e_count(real_server.base_url)
    code, doc, err = measure(["--base-url", real_server.base_url, *QUICK, "--rate", "2", "--rate-requests", "6",
                              "--slo", ",".join(f"{k}={v:g}" for k, v in slo.items())], tmp_path / "rate.json")
    assert code == 0, err
    assert _e2e_count(real_server.base_url) - before == doc["single"]["attempted_runs"] + 6
    assert doc["status"] == "complete" and doc["simulated"] is False
    (e,) = doc["rates"]
    assert e["rate"] == 2.0 and e["requests"] == 6 == e["completed"] and e["failed"] == 0 and e["slo"] == slo
    per = e["per_request"]
    assert [p["scheduled_s"] for p in per] == pytest.approx(M.rate_schedule(6, 2.0, 1.0, 0))
    for p in per:
        assert p["error"] is None and p["output_tokens"] == 8
        assert 0 < p["ttft_s"] <= p["e2e_s"]
        assert p["tpot_s"] == pytest.approx(M.request_tpot(p["e2e_s"], p["ttft_s"], p["output_tokens"]))
        assert p["good"] == M.meets_slo(slo, p["ttft_s"], p["tpot_s"], p["e2e_s"])
        assert p["sent"] <= p["end"] and p["schedule_error_ms"] >= 0
    good = sum(p["good"] for p in per)
    assert e["duration_s"] == pytest.approx(e["end"] - e["start"])
    assert e["start"] == pytest.approx(min(p["sent"] for p in per)) and e["end"] == pytest.approx(max(p["end"] for p in per))
    assert e["goodput"] == pytest.approx(good / e["duration_s"]) and e["slo_met_share"] == pytest.approx(good / 6)
    assert e["achieved_rate"] == pytest.approx(6 / e["duration_s"])
    assert e["output_tok_s"] == pytest.approx(8 * 6 / e["duration_s"])
    print(f"\nreal vLLM (CPU) rate 2: achieved {e['achieved_rate']:.2f} req/s, goodput {e['goodput']:.2f} req/s, "
          f"TTFT p50 {e['ttft_s']['p50'] * 1000:.0f} ms, schedule error p99 {e['schedule_error_ms']['p99']:.3f} ms")


# ---- prefix caching and multi-turn (helper P) ------------------------------------------------------


def test_prefix_cache_and_multi_turn_phases(real_server: RealServer, tmp_path: Path) -> None:
    """--prefix-tokens and --turns against real vLLM 0.32 (CPU build, prefix caching on: vLLM's
    default): vLLM's own counters (Δvllm:prefix_cache_hits / Δvllm:prefix_cache_queries) give a hit
    rate > 0 over the phase, every request completes, the multi-turn context grows turn by turn
    with decode and TTFT figures at every depth. CPU figures (simulated: false), not a Spark's; the
    server has no --enable-prompt-tokens-details, so per-request cached_tokens are null."""
    code, doc, err = measure(["--base-url", real_server.base_url, *QUICK,
                              "--prefix-tokens", "1000", "--prefix-requests", "4", "--prefix-suffix-tokens", "48",
                              "--prefix-output-tokens", "8", "--turns", "3", "--conversations", "2",
                              "--turn-tokens", "160", "--turn-output-tokens", "32"], tmp_path / "prefix.json")
    assert code == 0, err
    assert doc["status"] == "complete" and doc["simulated"] is False
    pre = doc["prefix_cache"]
    assert (pre["completed"], pre["failed"]) == (4, 0), pre
    assert pre["reason"] is None and pre["hit_rate"] is not None and 0 < pre["hit_rate"] < 1, pre
    # every prompt token of the phase was queried (the cold request's too), only the shared part hit
    prompts = sum(r["prompt_tokens"] for r in pre["per_request"])
    assert pre["query_tokens"] >= prompts and 0 < pre["hit_tokens"] <= prompts - pre["per_request"][0]["prompt_tokens"]
    assert all(r["cached_tokens"] is None for r in pre["per_request"])
    assert pre["cold_ttft_s"] > 0 and pre["ttft_s"]["p50"] > 0 and pre["prefill_tok_s"] > 0
    mt = doc["multi_turn"]
    assert (mt["completed"], mt["failed"]) == (6, 0), mt
    ctx = [t["context_tokens"] for t in mt["per_turn"]]
    assert ctx[0] < ctx[1] < ctx[2], ctx
    # A turn's decode rate is None only where the server delivered each of its answers in one chunk
    # (vLLM merges the pending tokens of a request when its API server falls behind: a busy 2-core
    # machine); at least one turn has a figure.
    assert all(t["requests"] == 2 and t["ttft_s"] > 0 for t in mt["per_turn"]), mt["per_turn"]
    assert all(t["decode_tok_s"] is None or t["decode_tok_s"] > 0 for t in mt["per_turn"]), mt["per_turn"]
    assert any(t["decode_tok_s"] for t in mt["per_turn"]), mt["per_turn"]
    print(f"\nreal vLLM (CPU) prefix {pre['per_request'][0]['prompt_tokens']} prompt tokens: hit rate "
          f"{pre['hit_rate']:.3f} ({pre['hit_tokens']}/{pre['query_tokens']} tokens), cold TTFT "
          f"{pre['cold_ttft_s'] * 1000:.1f} ms, warm TTFT p50 {pre['ttft_s']['p50'] * 1000:.1f} ms; multi-turn "
          f"context {ctx}, TTFT {[round(t['ttft_s'] * 1000, 1) for t in mt['per_turn']]} ms, decode "
          f"{[t['decode_tok_s'] and round(t['decode_tok_s'], 1) for t in mt['per_turn']]} tok/s")
