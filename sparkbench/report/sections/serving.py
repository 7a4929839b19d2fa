"""The serving sections: goodput by arrival rate, the variants' share of requests meeting the SLO
against the reference, prefix caching with and without, multi-turn conversations and the tool-call
check. Each is in ``results.json`` only for runs where its phase ran."""

from __future__ import annotations

from typing import Any, Callable

from ...verdict import MIN_REQUESTS
from .. import compare
from .. import numbers as n
from ..table import DASH, Section, Table, f, pct, redact, sim, text
from .hosts import unit_cell
from .verdicts import missing_notes, verdict_cell


def _rate_label(rate) -> str:
    return "replay" if rate == "replay" else (f"{rate:g}" if isinstance(rate, (int, float)) else text(rate))


def _share(v) -> str:
    return DASH if v is None else f"{100 * float(v):.0f} %"


def _pp(v) -> str:
    return DASH if v is None else f"{v:+.1f} pp".replace("-", "−")


def _with_phase(results: list[dict], figures: Callable[[dict], Any]) -> list[tuple[dict, Any]]:
    """(result, its ``figures``) for each result in report order whose phase figures are not
    empty (``figures`` = e.g. :func:`~sparkbench.report.numbers.rates_of`)."""
    return [(r, x) for r, x in ((r, figures(r)) for r in n.sort_results(results)) if x]


def serving(results: list[dict]) -> Section:
    """"Serving: goodput by arrival rate": one entry per unit × variant with an arrival-rate phase,
    a summary sentence each, and the table. Per rate: achieved request rate, output tok/s, TTFT
    p50/p90, TPOT p90, end-to-end p90, the client's schedule error p99, the share of requests meeting
    every SLO and the goodput; per variant the highest rate meeting the SLO for the target share."""
    found = _with_phase(results, n.rates_of)
    if not found:
        return Section("serving", "Serving", [], in_doc=False)
    entries, rows, lines = [], [], []
    for r, rates in found:
        best, target = n.highest_rate_meeting_slo(r)
        slo = next((x.get("slo") for x in rates if x.get("slo")), None) or {}
        slo_text = ", ".join(f"{k} ≤ {v:g} s" for k, v in slo.items()) or "no SLO"
        unit = n.unit_of(r)
        entries.append({"unit": unit, "host": n.host_of(r), "variant": n.variant_name(r), "best_rate": best,
                        "target_share": target, "slo": slo, "rates": [
                            {k: x.get(k) for k in ("rate", "requests", "achieved_rate", "output_tok_s", "goodput",
                                                   "slo_met_share", "ttft_s", "tpot_s", "e2e_s", "schedule_error_ms",
                                                   "search", "replay")} for x in rates]})
        for x in rates:
            pick = lambda key, q: (x.get(key) or {}).get(q) if isinstance(x.get(key), dict) else None  # noqa: E731
            err = pick("schedule_error_ms", "p99")
            rows.append([unit, sim(n.variant_name(r), n.is_simulated(r)),
                         text(x.get("replay") and "replay") if x.get("replay") else
                         (f"{x['rate']:g}" if isinstance(x.get("rate"), (int, float)) else text(x.get("rate")))
                         + (" (search)" if x.get("search") else ""),
                         text(x.get("requests")), f(x.get("achieved_rate"), 2), f(x.get("output_tok_s"), 1),
                         f(pick("ttft_s", "p50"), 3), f(pick("ttft_s", "p90"), 3), f(pick("tpot_s", "p90"), 4),
                         f(pick("e2e_s", "p90"), 2), f(err, 3),
                         DASH if x.get("slo_met_share") is None else f"{100 * float(x['slo_met_share']):.0f} %",
                         f(x.get("goodput"), 2),
                         DASH if best is None else f"{best:g}"])
        lines.append(f"{unit}/{n.variant_name(r)}: highest arrival rate meeting the SLO ({slo_text}) for "
                     f"≥ {100 * target:.0f} % of requests: "
                     + (f"{best:g} requests/s" if best is not None else "none of the rates tried"))
    simulated = any(n.is_simulated(r) for r, _ in found)
    table = Table("serving", sim("Serving: goodput by arrival rate", simulated),
                  ["host", "variant", "rate req/s", "requests", "achieved req/s", "output tok/s", "TTFT p50 s",
                   "TTFT p90 s", "TPOT p90 s", "e2e p90 s", "schedule error p99 ms", "met SLO", "goodput req/s",
                   "highest rate meeting SLO"], rows,
                  ["requests arrive by a Poisson process (gamma with --burstiness) at each rate, each with the "
                   "forced output length; a request is good when it completed and every SLO holds (vLLM bench "
                   "serve's --goodput, in seconds); goodput = good requests / (last completion − first send); "
                   "met SLO = good / requests; highest rate meeting SLO = measure.py's search result, else the "
                   f"highest listed rate whose share reached {100 * n.SLO_TARGET_SHARE:.0f} %; schedule error = "
                   "actual send − scheduled send (docs/MEASUREMENT.md)"])
    return Section("serving", "Serving", entries, [table], lines)


def goodput_verdicts(results: list[dict], reference_build: str | None = None) -> Section:
    """"Goodput: variants against the reference": the numbers, one summary line per unit ×
    variant, and the table: at each arrival rate both ran, the share of requests meeting every
    SLO of a variant against the unit's reference variant, Δ in percentage points, with the verdict
    of :func:`sparkbench.verdict.compare_shares` on the per-request good flags
    (:func:`sparkbench.report.compare.goodput_verdicts`). In ``results.json`` when two or more
    variants of a unit ran the same rates."""
    data = compare.goodput_verdicts(results, reference_build)
    if not data["rows"]:
        return Section("goodput_verdicts", "Goodput verdicts", data, in_doc=False)
    rows = [[r["unit"], f"{r['variant']} vs {r['reference_variant']}", _rate_label(r["rate"]),
             _share(r["reference_share"]), _share(r["share"]), _pp(r["pp_diff"]), verdict_cell(r["verdict"]),
             f(r["reference_goodput"], 2), f(r["goodput"], 2)] for r in data["rows"]]
    lines = []
    for s in data["summary"]:
        kinds = s["kinds"]
        if all(k == "not_enough" for k in kinds):
            tail = "not enough requests for a verdict"
        elif "differs" not in kinds:
            short = sum(k == "not_enough" for k in kinds)
            tail = "no difference detectable" + (f" ({short} of {len(kinds)} rates: not enough requests)" if short else "")
        else:
            tail = f"differs at {sum(k == 'differs' for k in kinds)} of {len(kinds)} rates"
        span = (DASH if s["pp_min"] is None else _pp(s["pp_min"]) if round(s["pp_min"], 1) == round(s["pp_max"], 1)
                else f"{_pp(s['pp_min'])} … {_pp(s['pp_max'])}")
        lines.append(sim(f"{s['unit']}: {s['variant']} vs {s['reference_variant']} — requests meeting the SLO {span} "
                         f"at {', '.join(_rate_label(x) for x in s['rates'])} req/s — {tail}", s["simulated"]))
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("goodput-verdicts", sim("Goodput: variants against the reference", simulated),
                  ["host", "variants", "rate req/s", "reference met SLO", "met SLO", "Δ met SLO", "verdict",
                   "reference goodput req/s", "goodput req/s"], rows,
                  ["Δ met SLO = other − reference share of requests meeting every SLO, in percentage points; "
                   f"reference = the unit's first variant of the reference build ({data['reference_build']})",
                   "verdict: 95 % bootstrap interval over the per-request good flags (one good and one bad "
                   "pseudo-request per side, widened as the decode verdicts are) and the minimum detectable "
                   "difference in pp (docs/REPORTS.md, \"How to read a verdict\"); "
                   f"fewer than {MIN_REQUESTS} requests at a rate on a side: no verdict"]
                  + missing_notes([("verdict", [r["verdict"] for r in data["rows"]])]))
    return Section("goodput_verdicts", "Goodput verdicts", data, [table], lines)


def prefix_caching(results: list[dict]) -> Section:
    """"Prefix caching": the numbers (:func:`sparkbench.report.compare.prefix_pairs` with
    ``variants``, :func:`sparkbench.report.numbers.prefix_row` of each variant), a summary line per
    pair, and the tables "Prefix caching: with and without" (the pairs) and "Prefix cache phase"
    (every variant that ran it). Empty and out of ``results.json`` without a prefix phase."""
    per_variant = [x for x in (n.prefix_row(r) for r in n.sort_results(results)) if x]
    data = compare.prefix_pairs(results)
    data["variants"] = per_variant
    if not per_variant:
        return Section("prefix_caching", "Prefix caching", data, in_doc=False)
    tables, lines = [], []
    if data["pairs"]:
        rows = []
        for p in data["pairs"]:
            rows.append([p["unit"], text(p["build"]),
                         f"{p['variant_on']} vs {p['variant_off']}" + ("" if p["flags_match"] else " (flags differ)"),
                         f(p["prefix_tokens"], 0), f(p["warm_ttft_p50_on_s"], 3), f(p["warm_ttft_p50_off_s"], 3),
                         pct(p["ttft_change_pct"]), verdict_cell(p["verdict"]), f(p["prefill_tok_s_on"], 0),
                         f(p["prefill_tok_s_off"], 0), pct(p["prefill_change_pct"]),
                         _share(p["hit_rate_on"]), _share(p["hit_rate_off"])])
            change = p["ttft_change_pct"]
            how = (DASH if change is None else f"{abs(change):.1f} % " + ("sooner" if change < 0 else "later"))
            lines.append(sim(
                f"{p['unit']} · {p['build']}: prefix caching ({p['variant_on']} vs {p['variant_off']}, "
                f"{f(p['prefix_tokens'], 0)}-token shared prefix) — warm TTFT p50 {f(p['warm_ttft_p50_off_s'], 3)} → "
                f"{f(p['warm_ttft_p50_on_s'], 3)} s, first token {how}: {p['verdict']['text']}; prefill "
                f"{f(p['prefill_tok_s_off'], 0)} → {f(p['prefill_tok_s_on'], 0)} tok/s; hit rate "
                f"{_share(p['hit_rate_on'])} (without: {_share(p['hit_rate_off'])})", p["simulated"]))
        notes = ["with = the variant serving with prefix caching, without = the same build launched with "
                 "--no-enable-prefix-caching (same other flags unless marked \"flags differ\"); warm = the phase's "
                 "requests 2…n (request 1 fills the cache); Δ = (with − without) / without",
                 "verdict: sparkbench.verdict.compare_samples on the per-request warm TTFTs, without caching as the "
                 "reference (a negative difference: the first token comes sooner with caching); hit rate = "
                 "Δ vllm:prefix_cache_hits / Δ vllm:prefix_cache_queries over the phase (tokens)"]
        notes += missing_notes([("TTFT verdict", [p["verdict"] for p in data["pairs"]])])
        if data["unpaired"]:
            notes.append("no pair: " + "; ".join(data["unpaired"]))
        tables.append(Table("prefix-pairs", sim("Prefix caching: with and without", data["simulated"]),
                            ["host", "build", "with vs without", "prefix tokens", "warm TTFT p50 s with",
                             "warm TTFT p50 s without", "Δ TTFT", "TTFT verdict", "prefill tok/s with",
                             "prefill tok/s without", "Δ prefill", "hit rate with", "hit rate without"], rows, notes))
    rows = [[unit_cell(x), sim(x["variant"], x["simulated"]), "on" if x["prefix_caching"] else "off",
             f(x["prefix_tokens"], 0), f(x["suffix_tokens"], 0),
             f"{f(x['completed'], 0)}/{f(x['requests'], 0)}" if x["requests"] is not None else DASH,
             f(x["cold_ttft_s"], 3), f(x["warm_ttft_p50_s"], 3), f(x["warm_ttft_p90_s"], 3), f(x["prefill_tok_s"], 0),
             _share(x["hit_rate"]), f(x["cached_tokens_median"], 0), text(x["reason"])] for x in per_variant]
    tables.append(Table("prefix-cache", sim("Prefix cache phase", data["simulated"]),
                        ["host", "variant", "prefix caching", "prefix tokens", "suffix tokens", "completed",
                         "cold TTFT s", "warm TTFT p50 s", "warm TTFT p90 s", "prefill tok/s", "hit rate",
                         "cached tokens (median)", "reason"], rows,
                        ["requests one at a time, each = the shared prefix + its own suffix; cold = request 1, warm = "
                         "requests 2…n; prefill tok/s = median prompt tokens / TTFT of the warm requests; cached "
                         "tokens = usage.prompt_tokens_details.cached_tokens where the server reports it "
                         "(docs/MEASUREMENT.md)"]))
    return Section("prefix_caching", "Prefix caching", data, tables, lines)


def multi_turn(results: list[dict]) -> Section:
    """"Multi-turn: TTFT and decode by context depth": one entry per unit × variant with the
    multi-turn phase, a summary line each, and the table: per turn the context tokens, TTFT,
    decode and prefill tok/s (medians over the conversations) and the change against turn 1."""
    found = _with_phase(results, n.multi_turn_rows)
    if not found:
        return Section("multi_turn", "Multi-turn", [], in_doc=False)
    entries, rows, lines = [], [], []
    for r, turns in found:
        ch = n.multi_turn_change(r)
        unit, name = n.unit_of(r), n.variant_name(r)
        block = n.multi_turn_of(r) or {}
        entries.append({"unit": unit, "host": n.host_of(r), "variant": name, "conversations": block.get("conversations"),
                        "turn_tokens": block.get("turn_tokens"), "output_tokens": block.get("output_tokens"),
                        "completed": block.get("completed"), "failed": block.get("failed"), "per_turn": turns, **ch})
        t0 = turns[0]
        for t in turns:
            rows.append([unit, sim(name, n.is_simulated(r)), f(t["turn"], 0), f(t["requests"], 0),
                         f(t["context_tokens"], 0), f(t["ttft_s"], 3),
                         pct(compare.pct_diff(t["ttft_s"], t0["ttft_s"])) if t is not t0 else DASH,
                         f(t["decode_tok_s"], 2),
                         pct(compare.pct_diff(t["decode_tok_s"], t0["decode_tok_s"])) if t is not t0 else DASH,
                         f(t["prefill_tok_s"], 0)])
        lines.append(sim(f"{unit}/{name}: over {len(turns)} turns the context grows {f(ch['context_first'], 0)} → "
                         f"{f(ch['context_last'], 0)} tokens; TTFT {f(ch['ttft_first_s'], 3)} → {f(ch['ttft_last_s'], 3)} s "
                         f"({pct(ch['ttft_change_pct'])}), decode {f(ch['decode_first_tok_s'], 2)} → "
                         f"{f(ch['decode_last_tok_s'], 2)} tok/s ({pct(ch['decode_change_pct'])})", n.is_simulated(r)))
    simulated = any(n.is_simulated(r) for r, _ in found)
    table = Table("multi-turn", sim("Multi-turn: TTFT and decode by context depth", simulated),
                  ["host", "variant", "turn", "requests", "context tokens", "TTFT s", "TTFT Δ vs turn 1",
                   "decode tok/s", "decode Δ vs turn 1", "prefill tok/s"], rows,
                  ["each turn re-sends the whole conversation (the assistant's real answers included) plus new user "
                   "tokens; conversations interleaved, one request at a time; per turn the medians over the "
                   "conversations: context tokens = usage prompt tokens, decode tok/s as in the single stream "
                   "(docs/MEASUREMENT.md); Δ = (turn − turn 1) / turn 1"])
    return Section("multi_turn", "Multi-turn", entries, [table], lines)


TOOL_CATEGORIES = ("irrelevance", "simple", "multiple", "parallel")


def tool_calls(results: list[dict], reference_build: str | None = None) -> Section:
    """"Tool calls": one entry per unit × variant with the tool-call check, a summary line each,
    and the tables "Tool calls" (passed/total, per BFCL-style category, the failure buckets, the
    pass share against the unit's reference variant with its verdict,
    :func:`sparkbench.report.compare.tool_verdicts`) and "Tool calls: failures" (each failed
    prompt with its bucket and reason, :func:`sparkbench.report.numbers.tools_summary`)."""
    entries, rows, fails, lines = [], [], [], []
    versus = compare.tool_verdicts(results, reference_build)
    summaries = _with_phase(results, n.tools_summary)
    if not summaries:
        return Section("tool_calls", "Tool calls", [], in_doc=False)
    simulated = any(n.is_simulated(r) for r, _ in summaries)
    cats = list(TOOL_CATEGORIES) + sorted({c for _, s in summaries for c in s["by_category"]} - set(TOOL_CATEGORIES))
    for r, s in summaries:
        unit, name = n.unit_of(r), n.variant_name(r)
        vs = versus.get((unit, name))
        entries.append({"unit": unit, "host": n.host_of(r), "variant": name, **s, "vs_reference": vs})
        buckets = "; ".join(f"{b} {c}" for b, c in sorted(s["by_bucket"].items()) if c) or DASH
        cat_cells = []
        for c in cats:
            x = s["by_category"].get(c)
            cat_cells.append(f"{x.get('passed', 0)}/{x.get('total', 0)}" if isinstance(x, dict) else DASH)
        rows.append([unit, sim(name, n.is_simulated(r)), text(s["tool_choice"]), f"{s['passed']}/{s['total']}",
                     str(s["skipped"])] + cat_cells + [buckets]
                    + ([f"{_pp(vs['pp_diff'])} vs {vs['reference_variant']}", verdict_cell(vs["verdict"])]
                       if vs else [DASH, DASH]))
        for x in s["failures"]:
            fails.append([unit, name, text(x["id"]), text(x["category"]), text(x["bucket"]), text(redact(x["reason"]))])
        lines.append(sim(f"{unit}/{name}: tool calls {s['passed']}/{s['total']} passed (tool_choice "
                         f"{s['tool_choice'] or '?'})" + (f", {s['skipped']} skipped" if s["skipped"] else "")
                         + (f"; failures: {buckets}" if s["failures"] else "")
                         + (f"; skipped: {redact(s['reason'])}" if s.get("reason") else ""), n.is_simulated(r)))
    tables = [Table("tools", sim("Tool calls", simulated),
                    ["host", "variant", "tool choice", "passed", "skipped"] + cats
                    + ["failures by bucket", "Δ passed", "verdict"], rows,
                    ["pass = tool_calls well formed, every name and argument valid against the tool's JSON schema "
                     "and an acceptable value, the expected number of calls (parallel calls in any order), no call "
                     "where none is needed; categories and buckets after BFCL's AST checker (docs/MEASUREMENT.md); "
                     "per category passed/total",
                     "Δ passed = (pass share − the reference variant's) in percentage points, verdict "
                     "sparkbench.verdict.compare_shares over the prompts' pass flags (skipped prompts left out)"]
                    + missing_notes([("verdict", [(e["vs_reference"] or {}).get("verdict") for e in entries])]))]
    if fails:
        tables.append(Table("tool-failures", sim("Tool calls: failures", simulated),
                            ["host", "variant", "prompt", "category", "bucket", "reason"], fails))
    return Section("tool_calls", "Tool calls", entries, tables, lines)
