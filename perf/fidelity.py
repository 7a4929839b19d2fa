#!/usr/bin/env python3
"""Table 1 — fidelity: measure.py's figures against the simulator's ground truth, beside peers.

Method:

- Server: the simulator (`python3 scripts/vllm_sim serve nvidia/Qwen3.6-35B-A3B-NVFP4`),
  ``VLLM_SIM_RATE`` = the per-stream bare rate, ``VLLM_SIM_LOAD_SECONDS=0``; "bare" = no
  speculative decoding (one token a chunk), "MTP" = ``--speculative-config
  {"method":"mtp","num_speculative_tokens":3}`` (1–4 tokens a chunk, the profile's acceptance).
- Ground truth: the simulator's own timeline (`GET /sim/requests`: arrival, first_token,
  last_token, completion_tokens of every request, stamped when each engine step really ended).
  The first chunk of a request carries one token (prefill step), so per request

      decode_truth = (completion_tokens − 1) / (last_token − first_token)        tok/s
      combined_truth(N) = Σ completion_tokens / (max last_token − min arrival)  tok/s

  and, for single streams, a second truth from the TPOT histogram
  (``vllm:request_time_per_output_token_seconds``): 1 / (Δsum / Δcount).
- Error = (figure − truth) / truth, per request, then the median (single stream: the median of
  the runs' decode figures against the median truth of the same requests).
- Peers: AIPerf and GuideLLM (`perf/peers.py`) on the same server with the same forced length,
  their per-request decode figure (1 / inter-token latency) and output throughput against the
  truth of the requests they sent.

Goal: ≤ 0.5 % single stream, ≤ 1 % at 64 streams, no worse than either peer anywhere.
"""

from __future__ import annotations

import sys
from typing import Any

from perf import common
from perf.common import WORK, PerfError, Section, fmt, http_json, http_text, md_table, median, pct, rel_err

MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
MTP_FLAGS = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']
BASE_FLAGS = ["--max-num-batched-tokens", "4096"]  # the seed's fix for the Mamba align assertion
OUTPUT_TOKENS = 256
AGGREGATE_CAP = 4_000.0  # tok/s: what the 2-core machine serves without the simulator lagging
GOAL_SINGLE = 0.005
GOAL_64 = 0.01
TPOT = "vllm:request_time_per_output_token_seconds"


class Sim(common.SimProcess):
    """The simulator as a child process at a fixed decode rate (``VLLM_SIM_RATE``), MTP on or off."""

    def __init__(self, port: int, rate: float, mtp: bool) -> None:
        super().__init__(port, MODEL, [*BASE_FLAGS, *(MTP_FLAGS if mtp else [])],
                         {"VLLM_SIM_LOAD_SECONDS": "0", "VLLM_SIM_RATE": str(rate), "VLLM_SIM_LOG_INTERVAL": "3600"},
                         f"sim_{port}.log")
        self.rate, self.mtp = rate, mtp

    def requests(self) -> list[dict[str, Any]]:
        """The simulator's per-request timeline rows."""
        return http_json(self.url + "/sim/requests")["requests"]

    def tpot(self) -> tuple[float, float]:
        """(sum, count) of the TPOT histogram, summed over label sets."""
        s = c = 0.0
        for line in http_text(self.url + "/metrics").splitlines():
            if line.startswith(TPOT + "_sum"):
                s += float(line.rsplit(" ", 1)[1])
            elif line.startswith(TPOT + "_count"):
                c += float(line.rsplit(" ", 1)[1])
        return s, c


def truth_decode(row: dict[str, Any]) -> float | None:
    """(completion_tokens − 1) / (last_token − first_token) from one /sim/requests row."""
    ft, lt, n = row.get("first_token"), row.get("last_token"), row.get("completion_tokens") or 0
    if ft is None or lt is None or lt <= ft or n < 2:
        return None
    return (n - 1) / (lt - ft)


def truth_combined(rows: list[dict[str, Any]]) -> float | None:
    """Σ completion_tokens / (max last_token − min arrival) over the rows of one parallel level."""
    if not rows or any(r.get("last_token") is None for r in rows):
        return None
    span = max(r["last_token"] for r in rows) - min(r["arrival"] for r in rows)
    return sum(r["completion_tokens"] for r in rows) / span if span > 0 else None


def new_rows(before: set[str], rows: list[dict[str, Any]], tokens: int) -> list[dict[str, Any]]:
    """Rows not seen before that generated the forced length, in arrival order."""
    fresh = [r for r in rows if r["id"] not in before and r.get("completion_tokens") == tokens]
    return sorted(fresh, key=lambda r: r["arrival"])


def run_single(port: int, rate: float, mtp: bool, runs: int, peers: "Any",
               tokens: int = OUTPUT_TOKENS) -> dict[str, Any]:
    """One single-stream case: measure.py (warm-up 1, ``runs`` runs of ``tokens``), then peers."""
    out = WORK / f"fid_single_{rate:g}_{'mtp' if mtp else 'bare'}_{tokens}.json"
    out.unlink(missing_ok=True)
    with Sim(port, rate, mtp) as sim:
        s0 = sim.tpot()
        mr = common.run_measure(sim.url, tokens, runs, 1, "none", out, timeout=300)
        if mr.returncode not in (0,) or not mr.result.get("single"):
            last = (mr.stderr.strip().splitlines() or ["no output"])[-1]
            raise PerfError(f"measure.py failed against the simulator (exit {mr.returncode}): {last}")
        s1 = sim.tpot()
        rows = new_rows(set(), sim.requests(), tokens)[1:]  # drop the warm-up
        rows = rows[-runs:]
        truths = [truth_decode(r) for r in rows]
        decs = [r["decode_tok_s"] for r in mr.result["single"]["runs"]]
        errs = [rel_err(d, t) for d, t in zip(decs, truths) if d and t]
        dcount = s1[1] - s0[1]
        hist_truth = (dcount / (s1[0] - s0[0])) if dcount > 0 and s1[0] > s0[0] else None
        res: dict[str, Any] = {
            "streams": 1, "rate": rate, "mtp": mtp, "tokens": tokens, "truth": median(truths),
            "hist_truth": hist_truth, "measure": mr.result["single"]["decode_tok_s_median"],
            "measure_err": median(errs), "measure_errs": errs, "peers": {}}
        if peers is not None:
            for name in peers.NAMES:
                res["peers"][name] = peers.run_case(name, sim, 1, OUTPUT_TOKENS, runs,
                                                    truth_decode, truth_combined, new_rows)
    return res


def run_parallel(port: int, streams: int, rate: float, mtp: bool, peers: "Any") -> dict[str, Any]:
    """One parallel case: measure.py at ``--concurrency streams`` (after one single run)."""
    out = WORK / f"fid_par_{streams}_{'mtp' if mtp else 'bare'}.json"
    out.unlink(missing_ok=True)
    with Sim(port, rate, mtp) as sim:
        mr = common.run_measure(sim.url, OUTPUT_TOKENS, 1, 0, str(streams), out, timeout=300)
        par = [p for p in mr.result.get("parallel", []) if p.get("concurrency") == streams]
        if mr.returncode != 0 or not par:
            last = (mr.stderr.strip().splitlines() or ["no output"])[-1]
            raise PerfError(f"measure.py failed at {streams} streams (exit {mr.returncode}): {last}")
        rows = new_rows(set(), sim.requests(), OUTPUT_TOKENS)[-streams:]
        truth_c = truth_combined(rows)
        truth_d = median(truth_decode(r) for r in rows)
        res: dict[str, Any] = {
            "streams": streams, "rate": rate, "mtp": mtp, "truth": truth_c,
            "truth_per_stream": truth_d, "measure": par[0]["combined_tok_s"],
            "measure_err": rel_err(par[0]["combined_tok_s"], truth_c) if truth_c else None,
            "measure_stream": par[0].get("per_stream_decode_tok_s_median"),
            "measure_stream_err": rel_err(par[0].get("per_stream_decode_tok_s_median") or 0,
                                          truth_d) if truth_d else None,
            "peers": {}}
        if peers is not None:
            for name in peers.NAMES:
                res["peers"][name] = peers.run_case(name, sim, streams, OUTPUT_TOKENS, 1,
                                                    truth_decode, truth_combined, new_rows)
    return res


def _peer_cell(p: dict[str, Any] | None, key: str) -> str:
    if not p:
        return "—"
    if p.get("error"):
        return "n/a¹"
    return pct(p.get(key), 2)


def run(quick: bool = False) -> Section:
    """Measure table 1 and return its section."""
    common.require(common.MEASURE, "scripts/measure.py")
    WORK.mkdir(parents=True, exist_ok=True)
    try:
        from perf import peers as peers_mod  # noqa: PLC0415
        peer_state = peers_mod.prepare(quick)
    except PerfError as exc:
        peers_mod, peer_state = None, str(exc)
    port = common.free_port(common.PORT_SIM_BASE)
    rates = [50, 200, 1000, 2000] if quick else [50, 100, 200, 500, 1000, 2000]
    streams = [2, 8, 64] if quick else [2, 4, 8, 16, 64]
    runs = 3
    singles: list[dict[str, Any]] = []
    pars: list[dict[str, Any]] = []
    use_peers = peers_mod if peers_mod is not None and peer_state is True else None
    peer_rates = (1000,) if quick else (50, 1000)
    peer_streams = (64,) if quick else (8, 64)
    for mtp in (False, True):
        for r in rates:
            singles.append(run_single(port, r, mtp, runs, use_peers if r in peer_rates else None))
        # The same top rate with a longer decode window (8× the tokens): separates the server's
        # per-chunk send jitter (fixed in ms, so smaller as a fraction of a longer window) from
        # the client's timing.
        singles.append(run_single(port, rates[-1], mtp, runs, None, tokens=8 * OUTPUT_TOKENS))
        for n in streams:
            per = min(500.0, AGGREGATE_CAP / n)
            pars.append(run_parallel(port, n, per, mtp, use_peers if n in peer_streams else None))

    names = list(peers_mod.NAMES) if peers_mod is not None else ["AIPerf", "GuideLLM"]
    rows_s = [[("MTP" if r["mtp"] else "bare"), fmt(r["rate"], 0), f"{r['tokens']:,}", fmt(r["truth"], 2),
               fmt(r["hist_truth"], 2), fmt(r["measure"], 2), pct(r["measure_err"], 3)]
              + [_peer_cell(r["peers"].get(n), "decode_err") for n in names] for r in singles]
    table_s = md_table(["mode", "sim rate (bare tok/s)", "tokens", "truth decode tok/s (timeline)",
                        "truth (TPOT histogram)", "measure.py decode", "measure.py error"]
                       + [f"{n} error" for n in names], rows_s)
    rows_p = [[("MTP" if r["mtp"] else "bare"), str(r["streams"]), fmt(r["rate"], 1),
               fmt(r["truth"], 1), fmt(r["measure"], 1), pct(r["measure_err"], 3),
               pct(r["measure_stream_err"], 3)]
              + [_peer_cell(r["peers"].get(n), "combined_err") for n in names] for r in pars]
    table_p = md_table(["mode", "streams", "sim rate per stream (bare tok/s)",
                        "truth combined tok/s", "measure.py combined", "measure.py combined error",
                        "measure.py per-stream decode error"]
                       + [f"{n} throughput error" for n in names], rows_p)

    std = [r for r in singles if r["tokens"] == OUTPUT_TOKENS]
    worst_single = max((abs(r["measure_err"]) for r in std if r["measure_err"] is not None),
                       default=float("nan"))
    worst_row = max((r for r in std if r["measure_err"] is not None),
                    key=lambda r: abs(r["measure_err"]), default=None)
    long_rows = [r for r in singles if r["tokens"] != OUTPUT_TOKENS and r["measure_err"] is not None]
    at64 = [abs(r["measure_err"]) for r in pars if r["streams"] == 64 and r["measure_err"] is not None]
    worst_64 = max(at64, default=float("nan"))
    peer_worse = []
    for r in singles + pars:
        key = "decode_err" if r["streams"] == 1 else "combined_err"
        for n, p in r["peers"].items():
            if p and not p.get("error") and p.get(key) is not None and r["measure_err"] is not None:
                if abs(r["measure_err"]) > abs(p[key]) + 0.001:
                    peer_worse.append(f"{n} at {r['streams']} stream(s), "
                                      f"{'MTP' if r['mtp'] else 'bare'}")
    ok_single = worst_single <= GOAL_SINGLE
    ok_64 = worst_64 <= GOAL_64
    goal_met = ok_single and ok_64 and not peer_worse
    miss_why = ""
    if not ok_single and worst_row is not None:
        window_ms = (OUTPUT_TOKENS - 1) / worst_row["truth"] * 1000
        miss_why = (f" The worst point is {'MTP' if worst_row['mtp'] else 'bare'} at "
                    f"{worst_row['rate']:,.0f} tok/s, where a {OUTPUT_TOKENS}-token decode lasts "
                    f"{window_ms:.0f} ms: an offset of {abs(worst_row['measure_err']) * window_ms:.2f} ms "
                    "between when the simulator stamps its first/last token and when the chunk "
                    "reaches the client (its HTTP thread hand-off on a loaded 2-core box) is already "
                    "that error. With 8× the tokens at the same rate the error is "
                    + ", ".join(f"{pct(r['measure_err'], 3)} ({'MTP' if r['mtp'] else 'bare'})"
                                for r in long_rows)
                    + ", and against a sender with its own send clock (table 2) measure.py is "
                    "within 0.1 % up to 20,000+ chunks/s: the error is the server's send jitter, "
                    "not the client's timing.")
    lines = [f"- Single stream ({OUTPUT_TOKENS} tokens): worst |error| {pct(worst_single, 3, False)} "
             f"(goal ≤ 0.5 %) — "
             + ("met." if ok_single else f"**missed** by {pct(worst_single - GOAL_SINGLE, 3, False)}."
                + miss_why),
             f"- 64 streams: worst |error| of the combined figure {pct(worst_64, 3, False)} "
             f"(goal ≤ 1 %) — " + ("met." if ok_64 else
                                    f"**missed** by {pct(worst_64 - GOAL_64, 3, False)}.")]
    if peer_worse:
        lines.append("- Worse than a peer (by more than 0.1 point) at: " + "; ".join(peer_worse) + ".")
    elif use_peers is not None:
        lines.append("- No worse than either peer (within 0.1 point) wherever both ran.")
    comb_errs = [r["measure_err"] for r in pars if r["measure_err"] is not None]
    if comb_errs and max(comb_errs) < 0:
        lines.append(
            f"- measure.py's combined figure reads low at every level (median "
            f"{pct(median(comb_errs), 3)}): its window runs from the client's first send to the "
            "client's receipt of the last chunk, the truth's from the server's first arrival to "
            "the server's last token; the difference is the loopback and simulator HTTP latency "
            "at both ends (a few ms on a window of 0.3–3 s). It shrinks with longer windows "
            "(more tokens per request) and is the same for any client-side tool.")
    peer_note = ""
    if use_peers is None:
        peer_note = f"\n¹ Peers not run: {peer_state}\n"
    else:
        notes = use_peers.notes()
        if notes:
            peer_note = "\n¹ " + " ".join(notes) + "\n"
    body = f"""**How:** `perf/fidelity.py`{' (--quick)' if quick else ''}. Server: the simulator
serving `{MODEL}` with `VLLM_SIM_RATE` = the bare single-stream rate (MTP runs add
`--speculative-config {{"method":"mtp","num_speculative_tokens":3}}`: 1–4 tokens a chunk at the
profile's acceptance), forced length {OUTPUT_TOKENS} tokens. Ground truth is the simulator's
own timeline (`/sim/requests`): decode = (completion_tokens − 1) / (last_token − first_token)
per request, combined = Σ tokens / (last token − first arrival); the TPOT histogram
(`{TPOT}`) gives a second single-stream truth, 1 / mean TPOT. Single stream:
`measure.py --runs {runs} --warmup 1`, error = median of per-run errors. Parallel:
`measure.py --runs 1 --warmup 0 --concurrency N`, per-stream rate min(500, {AGGREGATE_CAP:,.0f} / N)
bare tok/s — an aggregate cap of {AGGREGATE_CAP:,.0f} tok/s, what this 2-core machine serves (the
Python simulator writes every chunk of every stream; above that its own send delays, not the
client, dominate). Peers ran beside measure.py at {' and '.join(f'{r:,}' for r in peer_rates)} tok/s
single stream and at {' and '.join(map(str, peer_streams))} streams (AIPerf
{'with `--use-server-token-count --per-chunk-usage`'}, GuideLLM 0.8.1 `run` with a scenario
file; prompts from a local JSONL); their figures: decode = their per-request 1 / inter-token
latency, throughput = their output tok/s. "—" = that peer was not run at that point.

{table_s}

{table_p}

{chr(10).join(lines)}
{peer_note}"""
    # The summary (BENCHMARKS.md's section): the worst errors against the goals, the load.
    where = (f" (at {fmt(worst_row['rate'], 0)} tok/s {'MTP' if worst_row['mtp'] else 'bare'})"
             if worst_row is not None else "")
    figure = [f"Worst single-stream error {pct(worst_single, 3, False)}{where}, so the ≤ 0.5 % goal is "
              + ("met." if ok_single else f"missed by {pct(worst_single - GOAL_SINGLE, 3, False)}.")]
    below = [abs(r["measure_err"]) for r in std if r["measure_err"] is not None and r["rate"] < rates[-1]]
    if below and not ok_single:
        figure.append(f"Up to {fmt(rates[-2], 0)} tok/s the error is ≤ {pct(max(below), 3, False)}.")
    figure.append(f"The worst combined error at 64 streams is {pct(worst_64, 3, False)}.")
    if peer_worse:
        figure.append("measure.py is worse than a peer (by more than 0.1 point) at " + "; ".join(peer_worse) + ".")
    elif use_peers is not None:
        figure.append("measure.py is no worse than either peer wherever both ran.")
    peer_errs = [(abs(p["decode_err"]), n, p["decode_err"], r["rate"]) for r in std for n, p in r["peers"].items()
                 if p and not p.get("error") and p.get("decode_err") is not None]
    if peer_errs:
        _, n, err, rate = max(peer_errs)
        figure.append(f"The largest single-stream peer error: {n} {pct(err, 2)} at {fmt(rate, 0)} tok/s.")
    load = (f"The simulator serving `{MODEL}`, bare and MTP spec=3, at {fmt(rates[0], 0)} to {fmt(rates[-1], 0)} "
            f"tok/s single stream and {streams[0]} to {streams[-1]} streams, with {OUTPUT_TOKENS} forced tokens"
            + (" (`--quick`)." if quick else "."))
    today = (f"{pct(worst_single, 3, False)} single stream: {'met' if ok_single else 'missed'}; "
             f"{pct(worst_64, 3, False)} at 64: {'met' if ok_64 else 'missed'}")
    return Section("fidelity", "Fidelity", body, goal_met, {"single": singles, "parallel": pars},
                   figure=" ".join(figure), load=load, today=today)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv).body)
