#!/usr/bin/env python3
"""Table 10 — arrival schedule and goodput: measure.py's rate phase against the simulator's truth,
beside `vllm bench serve --goodput` on the same simulator at the same rates.

Method:

- Server: the simulator as a local process (`scripts/vllm_sim serve nvidia/Qwen3.6-35B-A3B-NVFP4`,
  simulated DGX Spark pacing, ``VLLM_SIM_LOAD_SECONDS=0``) on 127.0.0.1:19100 (or a free port).
  One simulator for the whole table; each tool's requests are told apart by their request ids.
- measure.py: `--rate 1,2,4,8 --rate-duration 20 --output-tokens 64 --slo ttft=…,tpot=…,e2e=…`
  (Poisson arrivals, seed 0; `--runs 1 --warmup 0 --concurrency none`, the one single-stream
  request is not part of the rate phase). Its requests carry ``X-Request-Id: sb-<nonce>-<i>``, the
  simulator's rows are ``chatcmpl-sb-<nonce>-<i>``.
- Truth: the simulator's own timeline (`GET /sim/requests`: ``arrival`` stamped when the request
  reached the engine, ``first_token`` / ``last_token`` when its engine steps ended). Per request

      ttft = first_token − arrival,  e2e = last_token − arrival,
      tpot = (e2e − ttft) / (completion_tokens − 1)        (vLLM's definition)

  good = completed and every SLO met; truth goodput = good / (max last_token − min arrival).
- Schedule error per request: measure.py's recorded send − its scheduled time (``schedule_error_ms``),
  checked against the simulator's arrival stamps: send → arrival = arrival − recorded send (≥ 0:
  no send recorded late; its size is the simulator's front end: connect, HTTP parse, tokenisation),
  and arrival − (T0 + scheduled_i), T0 = measure.py's schedule origin in epoch seconds (its
  ``sent − scheduled_s − schedule_error_ms``), the two together.
  Also the inter-arrival error |(a_i − a_{i−1}) − (s_i − s_{i−1})|, free of any constant offset.
- `vllm bench serve` (vLLM 0.32.0 from `sparkbench/vllm-cpu:v0.32.0`, `docker run --rm --network
  host`, `flock /tmp/real_vllm.lock`): `--backend openai-chat --endpoint /v1/chat/completions
  --dataset-name random --random-input-len 48 --random-output-len 64 --ignore-eos --request-rate R
  --num-prompts round(20 R) --seed 0 --goodput ttft:… tpot:… e2el:…` (ms) with the image's tiny
  model's tokenizer (offline). Its requests carry ``x-request-id: sbvb-r<R>-<i>``; truth as above
  over exactly those rows. Its ``request_goodput`` = good / ``duration``, where its duration starts
  when its schedule starts (before the first request's gap), not at the first send.

Goal: measure.py's schedule error (recorded send − schedule) p99 < 1 ms at the rates the simulated
Spark serves (achieved ≥ 80 % of the asked rate), no recorded send after the simulator's arrival
stamp, measure.py's goodput within 1 % of truth at every rate.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from typing import Any

from perf import common
from perf.common import RESULTS, WORK, PerfError, Section, fmt, http_json, md_table, median, pct, rel_err

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
BASE_FLAGS = ["--max-num-batched-tokens", "4096"]
IMAGE = "sparkbench/vllm-cpu:v0.32.0"
TOKENIZER = "/opt/sparkbench/hf-cache/models--sparkbench--tiny-llama/snapshots"
PORT = 19100
RATES = [1.0, 2.0, 4.0, 8.0]
DURATION = 20.0
OUTPUT_TOKENS = 64
INPUT_LEN = 48
SLO = {"ttft": 0.5, "tpot": 0.08, "e2e": 8.0}  # seconds: near rate 4's median TPOT, so goodput is partial there
GOAL_SCHED_MS = 1.0
GOAL_GOODPUT = 0.01
SERVED = 0.8  # a rate is served when the achieved rate is at least 80 % of the asked one
LOCK = "/tmp/real_vllm.lock"
JSON_OUT = RESULTS / "serving.json"


class Sim(common.SimProcess):
    """The simulator as a child process (simulated Spark pacing: no ``VLLM_SIM_RATE``)."""

    def __init__(self, port: int) -> None:
        super().__init__(port, MODEL, BASE_FLAGS, {"VLLM_SIM_LOAD_SECONDS": "0", "VLLM_SIM_LOG_INTERVAL": "3600",
                                                   "VLLM_SIM_RATE": None}, f"serving_sim_{port}.log")

    def rows(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in http_json(self.url + "/sim/requests", timeout=30)["requests"]}


def port_in_range(lo: int, hi: int) -> int:
    """The first free port on 127.0.0.1 in [lo, hi) (this table's range: 19100–19199)."""
    for port in range(lo, hi):
        if common.free_port(port) == port:
            return port
    raise PerfError(f"no free port in {lo}–{hi - 1} for the simulator; stop what holds them")


# ---- truth ------------------------------------------------------------------------------------

def meets(slo: dict[str, float], ttft: float | None, tpot: float | None, e2e: float | None) -> bool:
    got = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
    return all(got[k] is not None and got[k] <= v for k, v in slo.items())


def truth_of(rows: list[dict[str, Any]], slo: dict[str, float],
             sent: dict[str, float] | None = None) -> dict[str, Any]:
    """Per-request truth flags and the truth goodput over the rows of one run. ``sent`` (row id →
    epoch s): measure the request from the client's recorded send instead of the engine's arrival
    (the engine's token stamps, the simulator's front end counted as the user sees it)."""
    good = 0
    flags: dict[str, bool] = {}
    for r in rows:
        a, ft, lt, n = r.get("arrival"), r.get("first_token"), r.get("last_token"), r.get("completion_tokens") or 0
        if sent is not None:
            a = sent.get(r["id"])
        ok = False
        if a is not None and ft is not None and lt is not None:
            ttft, e2e = ft - a, lt - a
            tpot = 0.0 if n <= 1 else (e2e - ttft) / (n - 1)
            ok = meets(slo, ttft, tpot, e2e)
        flags[r["id"]] = ok
        good += ok
    done = [r for r in rows if r.get("last_token") is not None]
    span = (max(r["last_token"] for r in done) - min(r["arrival"] for r in rows)) if done else None
    return {"requests": len(rows), "good": good, "span_s": span, "flags": flags,
            "goodput": good / span if span else None,
            "prompt_tokens_median": median(r.get("prompt_tokens") for r in rows)}


def pcts_ms(values: list[float]) -> dict[str, float | None]:
    vals = sorted(values)
    if not vals:
        return {"p50": None, "p99": None, "max": None}

    def q(p: float) -> float:
        k = (len(vals) - 1) * p / 100.0
        f = int(k)
        return vals[f] + (vals[min(f + 1, len(vals) - 1)] - vals[f]) * (k - f)
    return {"p50": q(50), "p99": q(99), "max": vals[-1]}


# ---- measure.py ---------------------------------------------------------------------------------

def slo_arg(slo: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in slo.items())


def run_measure_py(sim: Sim, rates: list[float], duration: float) -> list[dict[str, Any]]:
    out = WORK / "serving_measure.json"
    out.unlink(missing_ok=True)
    extra = ["--rate", ",".join(f"{r:g}" for r in rates), "--rate-duration", f"{duration:g}",
             "--slo", slo_arg(SLO), "--telemetry", "off", "--kernel-log", "off"]
    mr = common.run_measure(sim.url, OUTPUT_TOKENS, 1, 0, "none", out, extra=extra, timeout=900)
    rates_doc = mr.result.get("rates") or []
    if mr.returncode not in (0, 3) or not rates_doc:
        last = (mr.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfError(f"measure.py's rate phase failed against the simulator (exit {mr.returncode}): {last}")
    rows = sim.rows()
    res = []
    for e in rates_doc:
        per = e["per_request"]
        mine = [rows.get("chatcmpl-" + p["id"]) for p in per]
        missing = sum(1 for m in mine if m is None)
        found = [m for m in mine if m is not None]
        tr = truth_of(found, SLO)
        tr_sent = truth_of(found, SLO, {"chatcmpl-" + p["id"]: p["sent"] for p in per if p.get("sent") is not None})
        sched_srv, lag, latency, gaps = [], [], [], []
        t0s = [p["sent"] - p["scheduled_s"] - p["schedule_error_ms"] / 1000.0
               for p in per if p.get("sent") is not None and p.get("schedule_error_ms") is not None]
        t0 = median(t0s)
        pairs = []
        for p, m in zip(per, mine):
            if m is None or p.get("sent") is None:
                continue
            sched_srv.append((m["arrival"] - (t0 + p["scheduled_s"])) * 1000.0)
            lag.append(p["schedule_error_ms"])
            latency.append((m["arrival"] - p["sent"]) * 1000.0)
            pairs.append((p["scheduled_s"], m["arrival"]))
        pairs.sort()
        for (s0, a0), (s1, a1) in zip(pairs, pairs[1:]):
            gaps.append(abs((a1 - a0) - (s1 - s0)) * 1000.0)
        flips = sum(1 for p in per if ("chatcmpl-" + p["id"]) in tr["flags"]
                    and bool(p.get("good")) != tr["flags"]["chatcmpl-" + p["id"]])
        flips_sent = sum(1 for p in per if ("chatcmpl-" + p["id"]) in tr_sent["flags"]
                         and bool(p.get("good")) != tr_sent["flags"]["chatcmpl-" + p["id"]])
        good = sum(1 for p in per if p.get("good"))
        res.append({
            "rate": e["rate"], "requests": e["requests"], "completed": e["completed"],
            "achieved_rate": e["achieved_rate"], "missing_rows": missing,
            "arrival_minus_schedule_ms": pcts_ms(sched_srv), "schedule_error_ms": pcts_ms(lag),
            "send_to_arrival_ms": pcts_ms(latency), "interarrival_error_ms": pcts_ms(gaps),
            "goodput": e["goodput"], "slo_met_share": e["slo_met_share"], "good": good,
            "duration_s": e["duration_s"], "truth_good": tr["good"], "truth_goodput": tr["goodput"],
            "truth_span_s": tr["span_s"], "flag_disagreements": flips,
            "truth_from_send_good": tr_sent["good"], "flag_disagreements_from_send": flips_sent,
            "send_to_arrival_min_ms": min(latency) if latency else None,
            "late_over_1ms": sum(1 for x in lag if x > 1.0),
            "late_sends": [{"schedule_error_ms": x, "send_to_arrival_ms": y}
                           for x, y in zip(lag, latency) if x > 1.0],
            "goodput_err": rel_err(e["goodput"], tr["goodput"]) if tr["goodput"] else None,
            "ttft_p50_s": e["ttft_s"]["p50"], "tpot_p50_s": e["tpot_s"]["p50"],
            "e2e_p50_s": e["e2e_s"]["p50"], "prompt_tokens_median": tr["prompt_tokens_median"]})
    return res


# ---- vllm bench serve -------------------------------------------------------------------------

WRAPPER = r"""
import argparse, glob, json, sys
from vllm.benchmarks.serve import add_cli_args, main
p = argparse.ArgumentParser(); add_cli_args(p)
args = p.parse_args(sys.argv[1:])
main(args)
f = sorted(glob.glob('/tmp/vbres/*.json'))[-1]
print('@@RESULT@@' + open(f).read().replace('\n', ' '))
"""


def _docker_ok() -> str | None:
    try:
        r = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "docker is not installed here"
    except subprocess.TimeoutExpired:
        return "docker did not answer within 60 s"
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"image {IMAGE} not available ({tail}); `make setup` builds it"
    return None


def run_vllm_bench(sim: Sim, rate: float, duration: float) -> dict[str, Any]:
    n = max(1, round(rate * duration))
    prefix = f"sbvb-r{rate:g}-{int(time.time())}-"
    goodput = [f"ttft:{SLO['ttft'] * 1000:g}", f"tpot:{SLO['tpot'] * 1000:g}", f"e2el:{SLO['e2e'] * 1000:g}"]
    tok = f"$(ls -d {TOKENIZER}/*/ | head -1)"
    args = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", sim.url,
            "--model", MODEL, "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
            "--random-output-len", str(OUTPUT_TOKENS), "--ignore-eos", "--request-rate", f"{rate:g}",
            "--num-prompts", str(n), "--seed", "0", "--goodput", *goodput, "--save-result",
            "--save-detailed", "--result-dir", "/tmp/vbres", "--result-filename", "r.json",
            "--request-id-prefix", prefix, "--percentile-metrics", "ttft,tpot,e2el",
            "--metric-percentiles", "50,99", "--disable-tqdm"]
    script = ("mkdir -p /tmp/vbres && exec python3 -c \"$0\" --tokenizer " + tok + " \"$@\"")
    cmd = ["docker", "run", "--rm", "--network", "host", "--entrypoint", "sh", IMAGE, "-c", script,
           WRAPPER, *args]
    t0 = time.monotonic()
    with open(LOCK, "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 6 + 240)
        except subprocess.TimeoutExpired:
            return {"rate": rate, "error": "vllm bench serve did not finish in time"}
        finally:
            fcntl.flock(lockf, fcntl.LOCK_UN)
    wall = time.monotonic() - t0
    (WORK / f"serving_vllm_r{rate:g}.log").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    line = next((l for l in r.stdout.splitlines() if l.startswith("@@RESULT@@")), None)
    if r.returncode != 0 or line is None:
        tail = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["no output"])[-1]
        return {"rate": rate, "error": f"vllm bench serve exit {r.returncode}: {tail[:200]}"}
    d = json.loads(line[len("@@RESULT@@"):])
    rows = sim.rows()
    mine = [v for k, v in rows.items() if k.startswith("chatcmpl-" + prefix)]
    tr = truth_of(mine, SLO)
    vg = d.get("request_goodput")
    good = round(vg * d["duration"]) if vg is not None and d.get("duration") else None
    return {"rate": rate, "requests": n, "completed": d.get("completed"), "rows": len(mine),
            "request_goodput": vg, "duration_s": d.get("duration"), "good": good,
            "request_throughput": d.get("request_throughput"),
            "truth_good": tr["good"], "truth_goodput": tr["goodput"], "truth_span_s": tr["span_s"],
            "goodput_err": rel_err(vg, tr["goodput"]) if vg is not None and tr["goodput"] else None,
            "goodput_err_own_span": (rel_err(good / tr["span_s"], tr["goodput"])
                                     if good is not None and tr["span_s"] and tr["goodput"] else None),
            "median_ttft_ms": d.get("median_ttft_ms"), "median_tpot_ms": d.get("median_tpot_ms"),
            "prompt_tokens_median": tr["prompt_tokens_median"], "wall_s": wall}


# ---- the benchmark ------------------------------------------------------------------------------

def run(quick: bool = False) -> Section:
    """Measure table 10 and return its section."""
    common.require(common.MEASURE, "scripts/measure.py")
    WORK.mkdir(parents=True, exist_ok=True)
    duration = 10.0 if quick else DURATION
    load0 = os.getloadavg()
    t_start = time.monotonic()
    docker_reason = _docker_ok()
    vb: list[dict[str, Any]] = []
    with Sim(port_in_range(PORT, PORT + 100)) as sim:
        ours = run_measure_py(sim, RATES, duration)
        load_mid = os.getloadavg()
        if docker_reason is None:
            for rate in RATES:
                vb.append(run_vllm_bench(sim, rate, duration))
    load1 = os.getloadavg()
    data = {"rates": RATES, "duration_s": duration, "output_tokens": OUTPUT_TOKENS, "slo": SLO,
            "model": MODEL, "measure": ours, "vllm_bench": vb, "vllm_bench_reason": docker_reason,
            "load": {"before": load0, "after_measure": load_mid, "after": load1},
            "wall_s": time.monotonic() - t_start, "machine": common.machine_facts(),
            "measured_at": common.utc_now(), "quick": quick}
    RESULTS.mkdir(parents=True, exist_ok=True)
    JSON_OUT.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return render(data)


def _ms(d: dict[str, Any] | None, digits: int = 3) -> str:
    if not d or d.get("p50") is None:
        return "—"
    return f"{d['p50']:.{digits}f} / {d['p99']:.{digits}f} / {d['max']:.{digits}f}"


def render(data: dict[str, Any]) -> Section:
    ours, vb = data["measure"], data["vllm_bench"]
    served = [r for r in ours if r["achieved_rate"] and r["achieved_rate"] >= SERVED * float(r["rate"])]
    own = [r["schedule_error_ms"]["p99"] for r in served if r["schedule_error_ms"]["p99"] is not None]
    sched_ok = bool(own) and max(own) < GOAL_SCHED_MS and all(
        (r.get("send_to_arrival_min_ms") or 0) >= 0 for r in ours)
    gp_ok = all(r["goodput_err"] is not None and abs(r["goodput_err"]) <= GOAL_GOODPUT
                or (r["truth_good"] == 0 and r["good"] == 0) for r in ours)
    goal_met = sched_ok and gp_ok
    sched = md_table(
        ["rate (req/s)", "requests", "achieved req/s", "served", "**schedule error** (recorded send − schedule), "
         "ms p50 / p99 / max", "sends > 1 ms late", "send → arrival (simulator front end), ms p50 / p99 / max", "min send → arrival, ms",
         "arrival − schedule, ms", "inter-arrival error, ms"],
        [[fmt(float(r["rate"]), 0), r["requests"], fmt(r["achieved_rate"], 2),
          "yes" if r in served else "no (saturated)", _ms(r["schedule_error_ms"]),
          f"{r['late_over_1ms']} of {r['requests']}" if "late_over_1ms" in r else "—", _ms(r["send_to_arrival_ms"]),
          fmt(r.get("send_to_arrival_min_ms"), 3), _ms(r["arrival_minus_schedule_ms"]), _ms(r["interarrival_error_ms"])]
         for r in ours])
    byrate = {float(v["rate"]): v for v in vb}

    def vcell(rate: float, key: str, f) -> str:
        v = byrate.get(rate)
        if v is None:
            return "—"
        if v.get("error"):
            return "n/a¹"
        return f(v.get(key))
    gp = md_table(
        ["rate (req/s)", "truth: good / requests", "truth goodput req/s", "measure.py good", "measure.py goodput",
         "error", "flags ≠ truth", "flags ≠ engine stamps from the send",
         "vllm bench good / its truth good", "vllm bench `request_goodput`", "error", "error on the truth span"],
        [[fmt(float(r["rate"]), 0), f"{r['truth_good']} / {r['requests']}", fmt(r["truth_goodput"], 3),
          r["good"], fmt(r["goodput"], 3), pct(r["goodput_err"], 2), r["flag_disagreements"],
          r.get("flag_disagreements_from_send", "—"),
          (lambda v: "—" if v is None or v.get("error") else f"{v['good']} / {v['truth_good']}")(
              byrate.get(float(r["rate"]))),
          vcell(float(r["rate"]), "request_goodput", lambda x: fmt(x, 3)),
          vcell(float(r["rate"]), "goodput_err", lambda x: pct(x, 2)),
          vcell(float(r["rate"]), "goodput_err_own_span", lambda x: pct(x, 2))] for r in ours])
    lat = md_table(
        ["rate (req/s)", "measure.py TTFT p50", "TPOT p50", "e2e p50", "prompt tokens (sim)",
         "vllm bench TTFT p50", "TPOT p50", "prompt tokens (sim)"],
        [[fmt(float(r["rate"]), 0), f"{r['ttft_p50_s'] * 1000:.0f} ms" if r["ttft_p50_s"] else "—",
          f"{r['tpot_p50_s'] * 1000:.1f} ms" if r["tpot_p50_s"] else "—",
          f"{r['e2e_p50_s']:.2f} s" if r["e2e_p50_s"] else "—", fmt(r["prompt_tokens_median"], 0),
          vcell(float(r["rate"]), "median_ttft_ms", lambda x: f"{x:.0f} ms" if x else "—"),
          vcell(float(r["rate"]), "median_tpot_ms", lambda x: f"{x:.1f} ms" if x else "—"),
          vcell(float(r["rate"]), "prompt_tokens_median", lambda x: fmt(x, 0))] for r in ours])
    errs = [v["error"] for v in vb if v.get("error")]
    foot = ""
    if data.get("vllm_bench_reason"):
        foot = f"\n¹ `vllm bench serve` not run: {data['vllm_bench_reason']}.\n"
    elif errs:
        foot = f"\n¹ `vllm bench serve` failed: {errs[0]}\n"
    ld = data["load"]
    load_line = (f"1-min load average {ld['before'][0]:.2f} before, {ld['after_measure'][0]:.2f} after "
                 f"measure.py's run, {ld['after'][0]:.2f} at the end (the 2-core machine was shared with "
                 "four other sessions running tests, simulators and real-vLLM containers meanwhile)")
    worst = max(own) if own else None
    served_s = ", ".join(fmt(float(r["rate"]), 0) for r in served) or "none"
    verdict_s = (f"measure.py's schedule error p99 ≤ {worst:.3f} ms at every rate the simulated Spark serves "
                 f"({served_s} req/s; goal < 1 ms), no recorded send after its arrival" if sched_ok else
                 f"measure.py's schedule error p99 up to {worst:.3f} ms at a served rate ({served_s} req/s; "
                 "goal < 1 ms)" if worst is not None else "no schedule error measured")
    gerr = [abs(r["goodput_err"]) for r in ours if r["goodput_err"] is not None]
    verdict_g = (f"its goodput within {max(gerr) * 100:.2f} % of the simulator's truth at every rate "
                 f"(goal ≤ 1 %)" if gerr and gp_ok else
                 f"its goodput off the simulator's truth by up to {max(gerr) * 100:.2f} % (goal ≤ 1 %)"
                 if gerr else "no goodput compared")
    late = [(float(r["rate"]), x) for r in served for x in r.get("late_sends", [])]
    late_line = ""
    if late:
        late_line = ("\n\nSends more than 1 ms late at the served rates: " + "; ".join(
            f"{rt:g} req/s: {x['schedule_error_ms']:.2f} ms late, its send → arrival {x['send_to_arrival_ms']:.2f} ms"
            for rt, x in late) + f" (out of {sum(r['requests'] for r in served)} sends; the median send → arrival "
            f"is {median(r['send_to_arrival_ms']['p50'] for r in served):.2f} ms). measure.py sends from one "
            "thread and waits for the due time by polling its last 1.5 ms, so a late send is one where that "
            "thread was not running at the due time: on these 2 shared cores the simulator's engine thread, the "
            "other sessions' processes and measure.py compete for the CPU.")
    slo = data["slo"]
    body = f"""**How:** `perf/serving.py`{' (--quick)' if data.get('quick') else ''} → `perf/results/serving.json`.
One simulator process (`scripts/vllm_sim`, `{data['model']}`, simulated DGX Spark pacing, continuous
batching) on loopback. measure.py runs its arrival-rate phase at {', '.join(f'{r:g}' for r in data['rates'])}
req/s, {data['duration_s']:g} s of Poisson arrivals each (seed 0), {data['output_tokens']} forced output tokens,
SLO ttft ≤ {slo['ttft']:g} s, tpot ≤ {slo['tpot']:g} s, e2e ≤ {slo['e2e']:g} s (the TPOT bound sits near the
median TPOT at 4 req/s, so goodput there is partial and every misjudged request would show); then
`vllm bench serve` (vLLM 0.32.0 from `{IMAGE}`, `--network host`, offline with the image's tiny-llama
tokenizer, `--backend openai-chat --dataset-name random --random-input-len {INPUT_LEN} --random-output-len
{OUTPUT_TOKENS} --ignore-eos --seed 0 --goodput ttft:{slo['ttft'] * 1000:g} tpot:{slo['tpot'] * 1000:g}
e2el:{slo['e2e'] * 1000:g}`) at the same rates and durations against the same simulator.
Truth is the simulator's own timeline (`/sim/requests`), matched to each tool's requests by their
request ids (`X-Request-Id` → `chatcmpl-<id>`): `arrival` when the request reached the engine (after
the simulator's HTTP parse and tokenisation), first and last token when the engine steps that made
them ended; truth TTFT = first_token − arrival, e2e = last_token − arrival, TPOT = (e2e − TTFT)/(tokens − 1),
goodput = requests meeting every SLO / (last token − first arrival).

The **schedule error** is measure.py's recorded send − the request's scheduled time (its
`rates[].per_request[].schedule_error_ms`); the simulator's arrival stamps check the recorded sends:
send → arrival = arrival − recorded send is never negative (no send recorded after the request
arrived) and is the simulator's front end (connect, HTTP parse, tokenisation in a Python thread
that shares the GIL with the engine and every open stream), which the client cannot remove;
arrival − schedule is their sum; the inter-arrival error compares consecutive gaps at the server.
A rate is "served" when the achieved rate is ≥ {SERVED:.0%} of the asked one; above that the Spark's
queue grows and every tool sees the backlog, not its own schedule. Machine: {data['machine']};
{load_line}. Wall time {data['wall_s']:.0f} s.{late_line}

{sched}

{gp}

{lat}
{foot}
**Reading:** measure.py's latencies are client timestamps at `recv()` from its recorded send, the
truth's are engine stamps from the arrival; "flags ≠ truth" counts requests whose good/bad verdict
differs, "flags ≠ engine stamps from the send" re-judges the truth with the engine's token stamps
measured from measure.py's recorded send (the simulator's front end counted, as a user waits for
it): where the front end delayed a request past an SLO, measure.py calls it bad (the user did wait)
and the engine-side truth good. The remaining goodput difference is the window: measure.py divides
by first send → last byte, the truth by first arrival → last token. `vllm bench serve`'s
`request_goodput` divides by its benchmark duration, which starts at its schedule's origin (before
the first inter-arrival gap and the first request's front end) rather than at the first send, so at
{data['duration_s']:g} s runs it reads low by about one gap over the duration; its good count against the truth
of its own requests, and its figure recomputed over the truth span (last column), separate the count
from that choice of window. Its prompts are random token ids of another tokenizer, so the
simulator's prompt-token counts differ from measure.py's; TTFT and TPOT differ with them and with
its own schedule.

**Verdict:** {'**Goal met**' if goal_met else '**Goal missed**'}: {verdict_s}; {verdict_g}.
The schedule error depends on how busy the machine is: three earlier full runs of measure.py's part
on 2026-12-01, while other sessions started real-vLLM containers and ran tests on the same 2 cores,
each had a served rate with p99 above 1 ms: 1.9 ms at 4 req/s (another SLO); 25 ms and 2.7 ms at 1 and
2 req/s (the busiest, 1-min load 3.2–3.4); 2.2 ms at 1 req/s (one send of 20, 2.65 ms late); p50 stayed
0.002–0.003 ms. In the busiest run the simulator's own front end (send → arrival) reached 440–540 ms
p99 and measure.py's goodput at 1 and 2 req/s was 10 % and 5 % below the engine-side truth (2 requests
at each rate judged past the 0.5 s TTFT bound), consistent with the front end's delay counting in
measure.py's TTFT and not in the engine's (that run predates the "engine stamps from the send" column).
"""
    # The summary (BENCHMARKS.md's section): the worst served p99 and goodput error, vllm bench's goodput.
    figure = (f"Schedule error p99 ≤ {worst:.3f} ms at every rate the simulated Spark serves ({served_s} req/s)"
              if worst is not None else "No schedule error measured")
    figure += f", and goodput within {max(gerr) * 100:.2f} % of the truth." if gerr else "."
    vb_ok = [v for v in vb if not v.get("error") and v.get("goodput_err") is not None]
    if vb_ok:
        errs_vb = [v["goodput_err"] for v in vb_ok]
        span = [v.get("goodput_err_own_span") for v in vb_ok]
        window = all(x is not None and abs(x) < 0.001 for x in span)
        figure += (f" `vllm bench serve`'s `request_goodput` read {pct(min(errs_vb), 2)} to {pct(max(errs_vb), 2)}"
                   + (", from its choice of window (over the truth's span its figures match)." if window else "."))
    load = (f"One simulator process (`{data['model']}`, continuous batching) at "
            f"{', '.join(f'{r:g}' for r in data['rates'])} req/s, {data['duration_s']:g} s of Poisson arrivals "
            f"each, {data['output_tokens']} forced tokens. SLO: TTFT ≤ {slo['ttft']:g} s, TPOT ≤ {slo['tpot']:g} s, "
            f"e2e ≤ {slo['e2e']:g} s.")
    today = (f"p99 ≤ {worst:.3f} ms" if worst is not None else "no schedule error") + (
        f", within {max(gerr) * 100:.2f} %" if gerr else "") + f": {'met' if goal_met else 'missed'}"
    return Section("serving", "Arrival schedule and goodput", body, goal_met, data,
                   figure=figure, load=load, today=today)


if __name__ == "__main__":
    if "--render-only" in sys.argv:
        sec = render(json.loads(JSON_OUT.read_text()))
    else:
        sec = run(quick="--quick" in sys.argv)
    print(sec.body)
