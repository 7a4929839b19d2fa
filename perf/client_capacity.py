#!/usr/bin/env python3
"""Table 2 — client capacity: how many chunks per second measure.py follows on ONE core.

Method (all on this machine, loopback):

- Load source: `perf/sse_emitter.py`, pinned to the second core, replays pre-rendered vLLM SSE
  chunks (continuous usage stats) at a scheduled rate R token chunks/s, deadline-paced, and logs
  its own send times. measure.py runs pinned to the first core (``os.sched_setaffinity``), so
  the two never share a core (other users of the machine still may: figures are medians).
- Truth: the emitter's schedule. With k tokens a chunk, the true decode rate is k × R tok/s.
  Timing error = (measure.py's ``single.decode_tok_s_median`` − k × R) / (k × R); the
  emitter's own send rate (from its send timestamps) is shown beside it — when the client falls
  behind, TCP back-pressure makes the emitter lag its schedule and both figures drop.
- Followed: the highest R of the ladder whose median |error| < 1 %.
- 4 tokens a chunk (MTP-like): the same ladder, truth 4 × R tok/s.
- CPU time per million tokens: ru_utime + ru_stime of the measure.py process (os.wait4), marginal
  between a long and a short stream at the ceiling, so interpreter start-up is excluded:
  (cpu(N_long) − cpu(N_short)) / (N_long − N_short) × 10⁶ CPU seconds.

Goal: ≥ 10,000 chunks/s followed at 1 token a chunk with < 1 % timing error.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from perf import common
from perf.common import PERF, WORK, PerfError, Section, fmt, http_json, md_table, median, pct, rel_err

GOAL_CHUNKS_S = 10_000.0
MAX_ERR = 0.01


class EmitterProc:
    """The emitter as a child process pinned to ``cores``; a context manager that stops it."""

    def __init__(self, port: int, cores: set[int] | None) -> None:
        self.port = port
        self.cores = cores
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> "EmitterProc":
        log = open(WORK / "sse_emitter.log", "w")
        self.proc = subprocess.Popen(
            [common.python(), str(PERF / "sse_emitter.py"), "--port", str(self.port),
             "--no-keep-sends"], stdout=log, stderr=log, preexec_fn=common.pin(self.cores))
        log.close()
        common.wait_http(self.url + "/health", 20, self.proc)
        return self

    def __exit__(self, *exc: Any) -> None:
        common.stop(self.proc)

    def configure(self, rate: float, tokens_per_chunk: int) -> None:
        """Set the pacing of the next requests and clear the emitter's log."""
        http_json(self.url + "/emitter/config", {"rate": rate, "tokens_per_chunk": tokens_per_chunk,
                                                 "ttft_ms": 5.0})
        http_json(self.url + "/emitter/reset", {})

    def log(self) -> list[dict[str, Any]]:
        """The emitter's per-request send timelines since the last configure()."""
        return http_json(self.url + "/emitter/requests")


def followed(r: dict[str, Any]) -> bool:
    """A ladder point is followed when its median |timing error| is below 1 %."""
    return r.get("err") is not None and abs(r["err"]) < MAX_ERR


def highest_followed(rows: list[dict[str, Any]]) -> float:
    """Highest scheduled rate followed, counting up the ladder only until the first miss
    (a pass above a failure is luck, not capacity); 0 when the first point already fails."""
    best = 0.0
    for r in sorted(rows, key=lambda x: x["rate"]):
        if not followed(r):
            break
        best = r["rate"]
    return best


def measure_point(em: EmitterProc, rate: float, tpc: int, tokens: int, runs: int, warmup: int,
                  cores: set[int] | None, tag: str) -> dict[str, Any]:
    """One ladder point: measure.py's decode figures and the emitter's own send rates."""
    em.configure(rate, tpc)
    out = WORK / f"capacity_{tag}.json"
    out.unlink(missing_ok=True)
    mr = common.run_measure(em.url, tokens, runs, warmup, "none", out, cores=cores)
    if mr.returncode != 0 or not mr.result:
        last = (mr.stderr.strip().splitlines() or ["no output"])[-1]
        raise PerfError(f"measure.py failed against the emitter (exit {mr.returncode}): {last}")
    single = mr.result.get("single") or {}
    decodes = [r.get("decode_tok_s") for r in single.get("runs", []) if r.get("decode_tok_s")]
    dec_med = single.get("decode_tok_s_median") or median(decodes)
    logs = em.log()[warmup:]
    send_rates = [l["send_rate"] * tpc for l in logs if l.get("send_rate")]
    truth = rate * tpc if rate > 0 else None
    return {"rate": rate, "tpc": tpc, "tokens": tokens, "runs": len(decodes),
            "decode_median": dec_med, "decode_min": min(decodes) if decodes else None,
            "decode_max": max(decodes) if decodes else None,
            "err": rel_err(dec_med, truth) if truth else None,
            "errs": [rel_err(d, truth) for d in decodes] if truth else [],
            "send_rate_median": median(send_rates) if send_rates else None,
            "err_vs_sent": rel_err(dec_med, median(send_rates)) if send_rates else None,
            "max_lag_s": max((l.get("max_lag_s") or 0.0) for l in logs) if logs else None,
            "cpu_s": mr.cpu_s, "wall_s": mr.wall_s}


def run(quick: bool = False) -> Section:
    """Measure table 2 and return its section."""
    common.require(common.MEASURE, "scripts/measure.py")
    WORK.mkdir(parents=True, exist_ok=True)
    client_cores, emitter_cores = common.cores_for_split()
    port = common.free_port(common.PORT_EMITTER)
    ladder = [5_000, 10_000, 20_000, 50_000] if quick else \
        [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000]
    ladder4 = [10_000] if quick else [5_000, 10_000, 20_000]
    runs = 3 if quick else 5
    seconds = 0.5 if quick else 1.0  # streaming time per request at each rate
    n_long = 50_000 if quick else 100_000
    rows: list[dict[str, Any]] = []
    rows4: list[dict[str, Any]] = []
    with EmitterProc(port, emitter_cores) as em:
        for rate in ladder:
            tokens = max(2_000, int(rate * seconds))
            rows.append(measure_point(em, rate, 1, tokens, runs, 1, client_cores, f"r{rate}"))
        for rate in ladder4:
            tokens = 4 * max(500, int(rate * seconds))
            rows4.append(measure_point(em, rate, 4, tokens, runs, 1, client_cores, f"r{rate}x4"))
        # CPU per million tokens: marginal cost between a short and a long stream, one run each,
        # sent as fast as the socket takes it (rate 0).
        cpu = {}
        for tpc in (1, 4):
            short = measure_point(em, 0, tpc, 1_000, 1, 0, client_cores, f"cpu_s{tpc}")
            long_ = measure_point(em, 0, tpc, n_long, 1, 0, client_cores, f"cpu_l{tpc}")
            per_mtok = (long_["cpu_s"] - short["cpu_s"]) / (n_long - 1_000) * 1e6
            cpu[tpc] = {"per_mtok": per_mtok, "fixed_s": short["cpu_s"],
                        "cpu_bound_chunks_s": 1e6 / per_mtok / tpc if per_mtok > 0 else None}

    ok = followed
    best = highest_followed(rows)
    best4 = highest_followed(rows4)
    goal_met = best >= GOAL_CHUNKS_S

    def ladder_table(rs: list[dict[str, Any]], tpc: int) -> str:
        return md_table(
            [f"scheduled chunks/s ({tpc} tok/chunk)", "scheduled tok/s", "tokens/request",
             "measure.py decode tok/s, median (min–max)", "error vs schedule, median",
             "emitter send tok/s, median", "error vs what was sent", "worst send lag",
             "followed (< 1 %)"],
            [[fmt(r["rate"], 0), fmt(r["rate"] * tpc, 0), f"{r['tokens']:,}",
              f"{fmt(r['decode_median'])} ({fmt(r['decode_min'])}–{fmt(r['decode_max'])})",
              pct(r["err"], 3), fmt(r["send_rate_median"]), pct(r.get("err_vs_sent"), 3),
              f"{r['max_lag_s'] * 1000:.2f} ms" if r["max_lag_s"] is not None else "—",
              "yes" if ok(r) else "**no**"] for r in rs])

    cpu_table = md_table(
        ["tokens a chunk", "CPU s per 10⁶ tokens (marginal)", "chunks per CPU-second (one core "
         "100 % busy)", "tok per CPU-second", "fixed CPU s per run (start-up + 1,000 tokens)"],
        [[str(t), fmt(c["per_mtok"], 2), fmt(c["cpu_bound_chunks_s"], 0),
          fmt((c["cpu_bound_chunks_s"] or 0) * t, 0), fmt(c["fixed_s"], 3)]
         for t, c in sorted(cpu.items())])
    verdict = (f"**Goal met**: measure.py follows {fmt(best, 0)} chunks/s on one core with "
               f"< 1 % timing error (goal ≥ {fmt(GOAL_CHUNKS_S, 0)}; highest rate tried "
               f"{fmt(ladder[-1], 0)}), and {fmt(best4 * 4, 0)} tok/s at 4 tokens a chunk.") \
        if goal_met else (
        f"**Goal missed** by {pct(rel_err(best, GOAL_CHUNKS_S), 0)}: measure.py follows "
        f"{fmt(best, 0)} chunks/s with < 1 % error (goal ≥ {fmt(GOAL_CHUNKS_S, 0)}).")
    pinning = (f"measure.py pinned to core {sorted(client_cores)[0]}, emitter to core "
               f"{sorted(emitter_cores)[0]}" if client_cores else
               "one core only: measure.py and the emitter share it (figures are a lower bound)")
    body = f"""**How:** `perf/client_capacity.py`{' (--quick)' if quick else ''}. Load source
`perf/sse_emitter.py` replays pre-rendered vLLM chunks (`chat.completion.chunk`, usage on every
chunk, HTTP chunked encoding) deadline-paced at the scheduled rate; {pinning}. Each point is
`scripts/measure.py --runs {runs} --warmup 1 --concurrency none` with a stream of ≈ {seconds:g} s;
error = (measure.py's median decode tok/s − scheduled tok/s) / scheduled tok/s. The emitter's
send rate comes from its own send timestamps; when it falls below the schedule the sender, not
measure.py, was behind (the machine is shared). CPU time is the measure.py process's user +
system time (os.wait4), marginal between 1,000- and {n_long:,}-token streams sent as fast as the
socket takes them; measure.py timestamps bytes as they arrive and parses after the stream, so
its timing does not depend on its parsing speed. A Spark at 8 parallel streams with MTP needs a
few hundred chunks/s.

{ladder_table(rows, 1)}

{ladder_table(rows4, 4)}

{cpu_table}

{verdict}
"""
    # The summary (BENCHMARKS.md's section): the highest rate followed, the first missed, the CPU cost.
    at_best = next((r for r in rows if r["rate"] == best), None)
    above = next((r for r in sorted(rows, key=lambda x: x["rate"]) if r["rate"] > best), None)
    figure = (f"{fmt(best, 0)} chunks/s followed" + (f" within {pct(at_best['err'], 3)}" if at_best else "")
              + f" at 1 token a chunk, and {fmt(best4 * 4, 0)} tok/s ({fmt(best4, 0)} chunks/s) at 4 tokens a chunk.")
    if above is not None:
        figure += (f" {fmt(above['rate'], 0)} chunks/s at 1 token a chunk missed the 1 % bound "
                   f"({pct(above['err'], 3)}).")
    if cpu.get(1):
        figure += (f" Marginal CPU: {fmt(cpu[1]['per_mtok'], 1)} s per 10⁶ tokens "
                   f"({fmt(cpu[1]['cpu_bound_chunks_s'], 0)} chunks per CPU-second).")
    load = (f"`perf/sse_emitter.py` replays pre-rendered vLLM chunks, deadline-paced, in streams of about "
            f"{seconds:g} s; each point is {runs} runs and 1 warm-up; {pinning}. A Spark at 8 parallel streams "
            "with MTP needs a few hundred chunks/s.")
    return Section("capacity", "Client capacity", body, goal_met,
                   {"rows": rows, "rows4": rows4, "cpu": cpu, "best": best, "best4": best4},
                   figure=figure, load=load, today=f"{fmt(best, 0)} chunks/s: {'met' if goal_met else 'missed'}")


if __name__ == "__main__":
    sec = run(quick="--quick" in sys.argv)
    print(sec.body)
