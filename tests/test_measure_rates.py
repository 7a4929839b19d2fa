"""measure.py's arrival-rate phase (--rate, --slo, --rate-search, --replay) against the simulator
as a local process. Oracle: the simulator's own timeline (``GET /sim/requests``: ``arrival``,
``first_token``, ``last_token``, ``completion_tokens`` per request, server ``time.time()``),
matched to measure.py's requests by the ``X-Request-Id`` header it sends (the simulator names the
request ``chatcmpl-<id>``). Every document is validated against schema/result.schema.json.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from sparkbench import measure as M
from sparkbench.measure.phases import rate_search

from conftest import port_in, run_measure
from helpers import REPO

MEASURE = REPO / "scripts" / "measure.py"
SCHEMA = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BARE = ["--max-num-batched-tokens", "4096"]
FAST = {"VLLM_SIM_RATE": "400"}
BASE = ["--output-tokens", "16", "--runs", "1", "--warmup", "0", "--concurrency", "none",
        "--telemetry", "off", "--kernel-log", "off"]


def measure(args: list[str], out: Path, timeout: float = 60) -> tuple[int, dict | None, str]:
    """Run measure.py; returns (exit status, validated document or None, stderr)."""
    return run_measure(args, out, timeout)


def sim_rows(base_url: str) -> dict[str, dict]:
    rows = json.loads(urllib.request.urlopen(base_url + "/sim/requests", timeout=10).read())["requests"]
    return {r["id"]: r for r in rows}


def truth(row: dict) -> tuple[float, float, float]:
    """(ttft, tpot, e2e) on the simulator's timeline, vLLM's definitions."""
    ttft = row["first_token"] - row["arrival"]
    e2e = row["last_token"] - row["arrival"]
    return ttft, M.request_tpot(e2e, ttft, row["completion_tokens"]), e2e


def sim(sim_factory, args: list[str] | None = None):
    return sim_factory(args=[*BARE, *(args or [])], env=FAST, port=port_in(19000, 19100))


# ---- the schedule -----------------------------------------------------------------------------


@pytest.mark.sim
def test_schedule_follows_rate_and_matches_simulator_stamps(sim_factory, tmp_path: Path) -> None:
    s = sim(sim_factory, ["--max-num-seqs", "64"])
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--rate", "10,40", "--rate-duration", "2",
                              "--slo", "ttft=10,tpot=1,e2e=30"], tmp_path / "r.json")
    assert code == 0, err
    rows = sim_rows(s.base_url)
    assert [e["rate"] for e in doc["rates"]] == [10.0, 40.0]
    assert doc["rate_search"] is None
    assert doc["settings"]["rate"] == [10.0, 40.0] and doc["settings"]["rate_duration_s"] == 2.0
    for e in doc["rates"]:
        n = round(e["rate"] * 2)
        assert e["requests"] == n == e["completed"] and e["failed"] == 0
        # the schedule: vLLM's normalisation puts the last send at exactly n / rate
        assert max(p["scheduled_s"] for p in e["per_request"]) == pytest.approx(n / e["rate"], abs=1e-9)
        # How late a loaded machine sends, and how late the server sees it, is BENCHMARKS.md's
        # (perf/serving.py), not a test's: the checks here are the seeded schedule and causality
        # (nothing is sent before its time, seen before it was sent, or read before it happened),
        # with a gross bound on the worst (a phase is 2 s long).
        assert [p["scheduled_s"] for p in e["per_request"]] == pytest.approx(M.rate_schedule(n, e["rate"], 1.0, 0))
        assert e["achieved_rate"] < 1.5 * e["rate"]
        # The summary is the per-request figures' (sent - t0 - scheduled); a send is never early.
        errs = [p["schedule_error_ms"] for p in e["per_request"]]
        assert min(errs) >= 0.0 and e["schedule_error_ms"]["max"] == max(errs) < 5000.0
        assert e["schedule_error_ms"]["p50"] == pytest.approx(statistics.median(errs), abs=1e-6)
        # measure.py's send times against the simulator's arrival stamps (same host, one clock):
        # never before the send
        lag = [(rows["chatcmpl-" + p["id"]]["arrival"] - p["sent"]) * 1000 for p in e["per_request"]]
        assert min(lag) > -1.0 and max(lag) < 5000.0, lag
        # ttft and e2e from the client's reads against the simulator's timeline: the client sees
        # them later (request transfer and parse before arrival, the chunk's delivery after),
        # never earlier
        ttft_late, e2e_late = [], []
        for p in e["per_request"]:
            ttft, tpot, e2e = truth(rows["chatcmpl-" + p["id"]])
            ttft_late.append(p["ttft_s"] - ttft)
            e2e_late.append(p["e2e_s"] - e2e)
            assert p["output_tokens"] == 16 and p["tpot_s"] == pytest.approx((p["e2e_s"] - p["ttft_s"]) / 15)
        assert min(ttft_late) > -0.001 and min(e2e_late) > -0.001, (ttft_late, e2e_late)
        assert max(ttft_late) < 5.0 and max(e2e_late) < 5.0
        # a loose SLO: every request is good, goodput = completed / duration
        assert e["slo_met_share"] == 1.0
        assert e["goodput"] == pytest.approx(n / e["duration_s"])
        assert e["duration_s"] == pytest.approx(e["end"] - e["start"])
        assert set(e["ttft_s"]) == {"p50", "p90", "p99", "mean"}
        assert e["output_tok_s"] == pytest.approx(16 * n / e["duration_s"])


@pytest.mark.sim
def test_goodput_agrees_with_the_simulator_timeline(sim_factory, tmp_path: Path) -> None:
    """One slot (--max-num-seqs 1): requests queue, e2e spreads from 40 ms to a few hundred; a tight
    e2e SLO splits them. measure.py's good/not good per request equals the same SLO applied to the
    simulator's timeline, except where the limit falls between the simulator's e2e and the
    client's (the client reads the last chunk a few ms after the server wrote it; on a loaded
    machine more), and measure.py judges every request by its own e2e."""
    s = sim(sim_factory, ["--max-num-seqs", "1"])
    limit = 0.12
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--rate", "18", "--rate-duration", "2.5",
                              "--slo", f"e2e={limit}"], tmp_path / "g.json")
    assert code == 0, err
    rows = sim_rows(s.base_url)
    e = doc["rates"][0]
    assert e["slo_met_share"] < 1   # the queue makes some requests late on the server already
    ambiguous = 0
    true_good = 0
    for p in e["per_request"]:
        _, _, e2e = truth(rows["chatcmpl-" + p["id"]])
        true_good += e2e <= limit
        assert p["good"] == (p["e2e_s"] <= limit), p
        if p["good"] != (e2e <= limit):
            # only a client-side delay can flip the verdict: truth good, client late past the limit
            assert e2e <= limit < p["e2e_s"], (p, e2e)
            ambiguous += 1
    # how many flip is the machine's load, not measure.py's: every flip loses a good request
    n = e["requests"]
    assert true_good < n
    assert e["slo_met_share"] * n == pytest.approx(true_good - ambiguous)   # in requests: 9/45 vs 8/45 is one
    # goodput on the simulator's timeline: good / (last completion - first arrival)
    first = min(rows["chatcmpl-" + p["id"]]["arrival"] for p in e["per_request"])
    last = max(rows["chatcmpl-" + p["id"]]["last_token"] for p in e["per_request"])
    true_goodput = true_good / (last - first)
    assert abs(e["goodput"] - true_goodput) <= (ambiguous + 0.5) / (last - first) + 0.02 * true_goodput


# ---- schedule generation ------------------------------------------------------------------------


@pytest.mark.unit
def test_seed_reproducible_and_burstiness_changes_the_spread() -> None:
    a = M.rate_schedule(400, 5.0, 1.0, 7)
    assert a == M.rate_schedule(400, 5.0, 1.0, 7)
    assert a != M.rate_schedule(400, 5.0, 1.0, 8)
    assert a[-1] == pytest.approx(400 / 5.0)
    assert M.rate_schedule(3, math.inf, 1.0, 0) == [0.0, 0.0, 0.0]
    assert M.rate_schedule(4, 2.0, math.inf, 0) == pytest.approx([0.5, 1.0, 1.5, 2.0])

    def cv(k: float) -> float:
        offs = M.rate_schedule(2000, 10.0, k, 0)
        gaps = [y - x for x, y in zip([0.0, *offs], offs)]
        return statistics.pstdev(gaps) / statistics.mean(gaps)

    # gamma(k) gaps: coefficient of variation 1/sqrt(k) (AIPerf's note; vLLM's --burstiness)
    assert cv(0.25) == pytest.approx(2.0, rel=0.15)
    assert cv(1.0) == pytest.approx(1.0, rel=0.1)
    assert cv(4.0) == pytest.approx(0.5, rel=0.1)


@pytest.mark.sim
def test_rate_requests_replay_search_and_seed_end_to_end(sim_factory, tmp_path: Path) -> None:
    s = sim(sim_factory, ["--max-num-seqs", "1"])
    replay = tmp_path / "w.jsonl"
    replay.write_text("\n".join(json.dumps(x) for x in [
        {"offset_s": 0.0, "prompt": "Say hello.", "output_tokens": 5},
        {"offset_s": 0.1, "prompt_tokens": 300, "output_tokens": 7},
        {"offset_s": 0.3, "prompt": "Count to three."}]) + "\n")
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--rate", "4,80", "--rate-requests", "8",
                              "--rate-seed", "3", "--slo", "e2e=0.3", "--rate-search", "0.9",
                              "--replay", str(replay)], tmp_path / "s.json", timeout=90)
    assert code == 0, err
    rows = sim_rows(s.base_url)
    listed = [e for e in doc["rates"] if not e["search"] and "replay" not in e]
    assert [e["rate"] for e in listed] == [4.0, 80.0]
    assert all(e["requests"] == 8 for e in doc["rates"] if "replay" not in e)
    # the seed fixes the schedule
    assert [p["scheduled_s"] for p in listed[0]["per_request"]] == pytest.approx(M.rate_schedule(8, 4.0, 1.0, 3))
    assert listed[0]["seed"] == 3
    # replay: offsets, output lengths and prompt lengths as the file says
    rep = next(e for e in doc["rates"] if "replay" in e)
    assert rep["replay"] == str(replay) and rep["requests"] == 3 and rep["failed"] == 0
    assert [p["scheduled_s"] for p in rep["per_request"]] == [0.0, 0.1, 0.3]
    assert [p["output_tokens"] for p in rep["per_request"]] == [5, 7, 16]
    assert rows["chatcmpl-" + rep["per_request"][1]["id"]]["prompt_tokens"] == pytest.approx(300, rel=0.25)
    # the search: a best rate that passed, every tried rate run once, bounded extra steps
    rs = doc["rate_search"]
    assert rs["target_share"] == 0.9 and rs["best_rate"] is not None
    share = {e["rate"]: e["slo_met_share"] for e in doc["rates"] if "replay" not in e}
    assert sorted(rs["tried"]) == sorted(share)
    assert share[rs["best_rate"]] >= 0.9
    assert 1 <= len(rs["extra_rates"]) <= M.RATE_SEARCH_STEPS
    assert sum(e["search"] for e in doc["rates"]) == len(rs["extra_rates"])
    assert rs["best_rate"] == max(r for r, sh in share.items() if sh >= 0.9)


@pytest.mark.sim
def test_failed_requests_are_reported_and_exit_3(sim_factory, tmp_path: Path) -> None:
    """30 requests at once on one slot (40 ms each): those still queued after --request-timeout fail."""
    s = sim(sim_factory, ["--max-num-seqs", "1"])
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--rate", "inf", "--rate-requests", "30",
                              "--request-timeout", "0.5", "--slo", "e2e=5"], tmp_path / "f.json")
    assert code == 3, err
    e = doc["rates"][0]
    assert doc["status"] == "incomplete" and e["rate"] == "inf"
    assert e["failed"] > 0 and e["completed"] + e["failed"] == 30
    assert "timed out" in e["failed_reason"]
    bad = [p for p in e["per_request"] if p["error"]]
    assert all(p["e2e_s"] is None and p["good"] is False for p in bad)
    assert e["slo_met_share"] == pytest.approx(e["completed"] / 30)


@pytest.mark.sim
@pytest.mark.parametrize("args,option", [
    (["--slo", "ttft"], "--slo"), (["--slo", "ttl=1"], "--slo"), (["--slo", "ttft=-1"], "--slo"),
    (["--slo", "e2e=soon"], "--slo"), (["--rate", "0"], "--rate"), (["--rate", "1,x"], "--rate"),
    (["--rate", "inf"], "--rate"), (["--rate-search", "0.9", "--rate", "1"], "--rate-search"),
    (["--rate-search", "1.5"], "--rate-search"), (["--burstiness", "0"], "--burstiness"),
])
def test_bad_rate_options_name_the_option(tmp_path: Path, args: list[str], option: str) -> None:
    p = subprocess.run([sys.executable, str(MEASURE), "--base-url", "http://127.0.0.1:9", *args, "--out",
                        str(tmp_path / "x.json")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert f"argument {option}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.sim
def test_max_concurrency_holds_requests(sim_factory, tmp_path: Path) -> None:
    """--rate-max-concurrency 2 with every request due at once: never more than 2 in flight on the
    simulator's timeline, and the wait shows as schedule error."""
    s = sim(sim_factory, ["--max-num-seqs", "64"])
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--rate", "inf", "--rate-requests", "6",
                              "--rate-max-concurrency", "2"], tmp_path / "c.json")
    assert code == 0, err
    rows = sim_rows(s.base_url)
    e = doc["rates"][0]
    assert e["max_concurrency"] == 2 and e["completed"] == 6 and e["goodput"] is None
    spans = [(rows["chatcmpl-" + p["id"]]["arrival"], rows["chatcmpl-" + p["id"]]["last_token"])
             for p in e["per_request"]]
    for a, _ in spans:
        assert sum(1 for x, y in spans if x <= a < y) <= 2
    assert e["schedule_error_ms"]["max"] > 50  # the last pair waited for two streams of 16 tokens


@pytest.mark.sim
def test_bad_replay_file_names_the_option(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"offset_s": 0, "prompt": "hi"}\n{"offset_s": -1, "prompt": "x"}\n')
    p = subprocess.run([sys.executable, str(MEASURE), "--base-url", "http://127.0.0.1:9", "--replay", str(bad),
                        "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "argument --replay" in p.stderr and "line 2" in p.stderr, p.stderr


# ---- --search-by concurrency (closed loop) ---------------------------------------------------------


@pytest.mark.sim
def test_search_by_concurrency_closed_loop_against_the_simulator(sim_factory, tmp_path: Path) -> None:
    """One engine slot, 16 tokens at 25 tok/s: one request in flight never waits (TTFT 0.33 s on the
    simulator's timeline), with two in flight every other request waits for a whole request (TTFT
    1.26 s). SLO TTFT 0.9 s: level 2 fails by causality (a client cannot see a token before the
    server sends it), level 1 passes with 570 ms of delivery slack per request (at 50 tok/s, 200 ms
    was not enough beside the whole suite).
    Levels 1 (pass), 2 (fail): adjacent, so the
    search stops at best 1. Truth: on the simulator's timeline no level ever has more than N of its
    requests between arrival and last token, and no request the client counts good was late on the
    server (a late delivery can only turn a good request bad, never the other way)."""
    slo = 0.9
    s = sim_factory(args=[*BARE, "--max-num-seqs", "1"], env={"VLLM_SIM_RATE": "25"}, port=port_in(19100, 19200))
    code, doc, err = measure(["--base-url", s.base_url, *BASE, "--search-by", "concurrency", "--rate-search", "0.85",
                              "--rate-requests", "8", "--slo", f"ttft={slo}"], tmp_path / "c.json", timeout=90)
    assert code == 0, err
    rs = doc["rate_search"]
    assert rs["by"] == "concurrency" and doc["settings"]["search_by"] == "concurrency"
    assert rs["tried"] == [1, 2] and rs["best_concurrency"] == 1 and rs["best_rate"] is None
    assert rs["max_steps"] == M.CONCURRENCY_SEARCH_STEPS and rs["extra_rates"] == []
    rows = sim_rows(s.base_url)
    by_n = {e["max_concurrency"]: e for e in doc["rates"]}
    assert sorted(by_n) == [1, 2]
    for n, e in by_n.items():
        assert e["rate"] == "inf" and e["search"] and e["requests"] == 8 == e["completed"]
        mine = [rows["chatcmpl-" + p["id"]] for p in e["per_request"]]
        spans = [(r["arrival"], r["last_token"]) for r in mine]
        assert max(sum(1 for x, y in spans if x <= a < y) for a, _ in spans) <= n
        server_good = [r["first_token"] - r["arrival"] <= slo for r in mine]
        assert not any(p["good"] and not ok for ok, p in zip(server_good, e["per_request"]))
    assert by_n[1]["slo_met_share"] >= 0.85 > by_n[2]["slo_met_share"]


def _session(*args: str) -> "M.Session":
    return M.Session(M.build_parser().parse_args(["--base-url", "http://127.0.0.1:9", "--out", "-", *args]), None)


@pytest.mark.unit
def test_concurrency_search_doubles_then_bisects_within_its_bounds() -> None:
    """The search logic with a stub phase (share 1 up to 5 in flight, 0.5 above): 1, 2, 4, 8 (fails),
    6, 5: best 5; a limit that never fails stops at CONCURRENCY_SEARCH_MAX or the step bound."""
    def make(ok_up_to: int, start: list[str]) -> dict:
        s = _session(*start, "--search-by", "concurrency", "--slo", "e2e=1", "--rate-search", "0.9")
        rate_search.by_concurrency(s, 0.9, lambda n: {"slo_met_share": 1.0 if n <= ok_up_to else 0.5})
        return s.doc["rate_search"]
    rs = make(5, [])
    assert rs["tried"] == [1, 2, 4, 8, 6, 5] and rs["best_concurrency"] == 5 and rs["by"] == "concurrency"
    rs = make(10_000, ["--rate-max-concurrency", "3"])
    assert rs["tried"][0] == 3 and len(rs["tried"]) <= M.CONCURRENCY_SEARCH_STEPS
    assert max(rs["tried"]) <= M.CONCURRENCY_SEARCH_MAX and rs["best_concurrency"] == max(rs["tried"])
    rs = make(0, ["--rate-max-concurrency", "4"])
    assert rs["tried"] == [4, 2, 1] and rs["best_concurrency"] is None


@pytest.mark.unit
@pytest.mark.unit
def test_rate_search_records_by_rate() -> None:
    s = _session("--rate", "1", "--slo", "e2e=1", "--rate-search", "0.9")
    rate_search.by_rate(s, 0.9, [(1.0, 1.0)], lambda rate: {"slo_met_share": 1.0 if rate <= 3 else 0.5})
    rs = s.doc["rate_search"]
    assert rs["by"] == "rate" and rs["best_concurrency"] is None and rs["best_rate"] == 3.0
    assert rs["tried"][:4] == [1.0, 2.0, 4.0, 3.0] and len(rs["extra_rates"]) <= M.RATE_SEARCH_STEPS
    assert s.doc["settings"]["search_by"] == "rate"
    # the next level is a pure function of the levels tried: within 5 % the search stops
    assert M.next_rate([(3.0, 1.0), (3.1, 0.5)], 0.9) is None and M.next_rate([(2.0, 0.2)], 0.9) == 1.0


@pytest.mark.sim
@pytest.mark.parametrize("args", [["--search-by", "concurrency", "--slo", "e2e=1"],
                                  ["--search-by", "concurrency", "--rate-search", "0.9"],
                                  ["--search-by", "latency"]])
def test_bad_search_by_names_the_option(tmp_path: Path, args: list[str]) -> None:
    p = subprocess.run([sys.executable, str(MEASURE), "--base-url", "http://127.0.0.1:9", *args, "--out",
                        str(tmp_path / "x.json")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "argument --search-by" in p.stderr, p.stderr
