"""The figures of the serving phases per result (pure, no I/O): arrival rates and the SLO, the
prefix-cache phase, multi-turn conversations and the tool-call check."""

from __future__ import annotations

from statistics import median

from . import accessors as n

#: The share of a rate's requests that must meet every SLO for the rate to count as served
#: (``rate_search.target_share`` of the run when measure.py searched, else this).
SLO_TARGET_SHARE = 0.9


def rates_of(result: dict) -> list[dict]:
    """The arrival-rate phase's entries of a result (measure.py ``rates``), [] when it did not run."""
    rates = result.get("rates") if isinstance(result, dict) else None
    return [r for r in rates if isinstance(r, dict)] if isinstance(rates, list) else []


def highest_rate_meeting_slo(result: dict) -> tuple[float | None, float]:
    """(the highest arrival rate [requests/s] whose ``slo_met_share`` reached the target share,
    the target share): measure.py's search result when it searched, else the highest listed rate
    that met ``SLO_TARGET_SHARE``; None when none did."""
    search = result.get("rate_search") if isinstance(result.get("rate_search"), dict) else None
    target = float(search.get("target_share")) if search and search.get("target_share") is not None else SLO_TARGET_SHARE
    if search and search.get("best_rate") is not None:
        return float(search["best_rate"]), target
    met = [float(r["rate"]) for r in rates_of(result)
           if isinstance(r.get("rate"), (int, float)) and r.get("slo_met_share") is not None
           and float(r["slo_met_share"]) >= target]
    return (max(met) if met else None), target


def good_flags(rate_entry: dict) -> list[bool]:
    """The per-request good flags of one arrival rate (``rates[].per_request[].good``: completed
    and within every SLO); a request without a bool ``good`` is left out."""
    rows = rate_entry.get("per_request") if isinstance(rate_entry, dict) else None
    return [x["good"] for x in rows or [] if isinstance(x, dict) and isinstance(x.get("good"), bool)]



def prefix_caching_on(result: dict) -> bool:
    """Whether the server cached prefixes: False when it was launched with
    ``--no-enable-prefix-caching`` (``enable-prefix-caching: false``), else True (vLLM's V1 engine
    caches prefixes unless told not to)."""
    value = n.launch_flags(result).get("enable-prefix-caching")
    return not (value is False or (isinstance(value, str) and value.lower() in ("false", "0", "no")))


def prefix_cache_of(result: dict) -> dict | None:
    """The prefix-cache phase's block (measure.py ``prefix_cache``), None when it did not run."""
    block = result.get("prefix_cache") if isinstance(result, dict) and n.is_measured(result) else None
    return block if isinstance(block, dict) else None


def warm_ttfts(result: dict) -> list[float]:
    """Per-request TTFT [s] of the prefix phase's warm requests (``prefix_cache.per_request`` in
    order of ``i``, the first — cold — request left out; failed requests have no TTFT)."""
    block = prefix_cache_of(result) or {}
    rows = sorted((x for x in block.get("per_request") or [] if isinstance(x, dict)),
                  key=lambda x: n.num(x.get("i")) if n.num(x.get("i")) is not None else float("inf"))
    return [v for v in (n.num(x.get("ttft_s")) for x in rows[1:]) if v is not None and v > 0]


def prefix_row(result: dict) -> dict | None:
    """One row of the prefix phase: caching on/off, prefix and suffix tokens, requests (completed,
    failed), cold TTFT, warm TTFT p50/p90, prefill tok/s, hit rate (Δ hits / Δ queries of vLLM's
    counters), cached tokens per warm request (median of ``usage`` cached_tokens) and the reason
    when the hit rate is missing. None without a prefix phase."""
    block = prefix_cache_of(result)
    if block is None:
        return None
    rows = [x for x in block.get("per_request") or [] if isinstance(x, dict)]
    cached = [n.num(x.get("cached_tokens")) for x in rows[1:] if n.num(x.get("cached_tokens")) is not None]
    return {"host": n.host_of(result), **n.unit_fields(result), "variant": n.variant_name(result),
            "build": n.build_of(result), "model": n.model_of(result), "simulated": n.is_simulated(result),
            "prefix_caching": prefix_caching_on(result),
            "prefix_tokens": n.num(block.get("prefix_tokens")), "suffix_tokens": n.num(block.get("suffix_tokens")),
            "requests": n.num(block.get("requests")), "completed": n.num(block.get("completed")),
            "failed": n.num(block.get("failed")), "cold_ttft_s": n.num(block.get("cold_ttft_s")),
            "warm_ttft_p50_s": n.num(n.dig(block, "ttft_s", "p50")),
            "warm_ttft_p90_s": n.num(n.dig(block, "ttft_s", "p90")),
            "prefill_tok_s": n.num(block.get("prefill_tok_s")), "hit_rate": n.num(block.get("hit_rate")),
            "hit_tokens": n.num(block.get("hit_tokens")), "query_tokens": n.num(block.get("query_tokens")),
            "cached_tokens_median": median(cached) if cached else None, "reason": block.get("reason")}


def multi_turn_of(result: dict) -> dict | None:
    """The multi-turn phase's block (measure.py ``multi_turn``), None when it did not run."""
    block = result.get("multi_turn") if isinstance(result, dict) and n.is_measured(result) else None
    return block if isinstance(block, dict) else None


def multi_turn_rows(result: dict) -> list[dict]:
    """Per turn of the multi-turn phase (``multi_turn.per_turn``, in turn order): turn, requests,
    context tokens (median prompt tokens), TTFT [s], decode tok/s and prefill tok/s (medians)."""
    block = multi_turn_of(result) or {}
    turns = [t for t in block.get("per_turn") or [] if isinstance(t, dict)]
    return [{"turn": n.num(t.get("turn")), "requests": n.num(t.get("requests")),
             "context_tokens": n.num(t.get("context_tokens")), "ttft_s": n.num(t.get("ttft_s")),
             "decode_tok_s": n.num(t.get("decode_tok_s")), "prefill_tok_s": n.num(t.get("prefill_tok_s"))}
            for t in sorted(turns, key=lambda t: n.num(t.get("turn")) or 0)]


def multi_turn_change(result: dict) -> dict:
    """First → last turn: ``{"context_first", "context_last", "ttft_first_s", "ttft_last_s",
    "ttft_change_pct", "decode_first_tok_s", "decode_last_tok_s", "decode_change_pct"}`` with
    change = (last − first) / first × 100; None where a turn lacks the figure."""
    rows = multi_turn_rows(result)
    first, last = (rows[0], rows[-1]) if rows else ({}, {})

    def change(a: float | None, b: float | None) -> float | None:
        return (b - a) / a * 100.0 if a and b is not None and len(rows) > 1 else None
    return {"context_first": first.get("context_tokens"), "context_last": last.get("context_tokens"),
            "ttft_first_s": first.get("ttft_s"), "ttft_last_s": last.get("ttft_s"),
            "ttft_change_pct": change(first.get("ttft_s"), last.get("ttft_s")),
            "decode_first_tok_s": first.get("decode_tok_s"), "decode_last_tok_s": last.get("decode_tok_s"),
            "decode_change_pct": change(first.get("decode_tok_s"), last.get("decode_tok_s"))}


def tools_of(result: dict) -> dict | None:
    """The tool-call check's block (measure.py ``tools``), None when it did not run."""
    block = result.get("tools") if isinstance(result, dict) and n.is_measured(result) else None
    return block if isinstance(block, dict) else None


def tools_summary(result: dict) -> dict | None:
    """``{"passed", "failed", "skipped", "total", "tool_choice", "by_category": {cat: {"passed",
    "total"}}, "by_bucket": {bucket: n}, "reason" (why the whole check was skipped, else None),
    "failures": [{"id", "category", "bucket", "reason"}]}``
    of the tool-call check (counts from the block, else from its prompts); None without one."""
    block = tools_of(result)
    if block is None:
        return None
    prompts = [p for p in block.get("prompts") or [] if isinstance(p, dict)]

    def count(key: str, verdict: str) -> int:
        v = n.num(block.get(key))
        return int(v) if v is not None else sum(1 for p in prompts if p.get("verdict") == verdict)
    total = n.num(block.get("total"))
    by_cat = block.get("by_category") if isinstance(block.get("by_category"), dict) else None
    if by_cat is None:  # skipped prompts are not judged: in no category's total (measure.py)
        by_cat = {}
        for p in prompts:
            if p.get("verdict") not in ("pass", "fail"):
                continue
            c = by_cat.setdefault(str(p.get("category")), {"passed": 0, "total": 0})
            c["total"] += 1
            c["passed"] += p.get("verdict") == "pass"
    by_bucket = block.get("by_bucket") if isinstance(block.get("by_bucket"), dict) else {}
    return {"passed": count("passed", "pass"), "failed": count("failed", "fail"),
            "skipped": count("skipped", "skipped"), "total": int(total) if total is not None else len(prompts),
            "tool_choice": block.get("tool_choice"), "by_category": by_cat, "by_bucket": by_bucket,
            "reason": block.get("reason"),
            "failures": [{"id": p.get("id"), "category": p.get("category"), "bucket": p.get("bucket"),
                          "reason": p.get("reason")} for p in prompts if p.get("verdict") == "fail"]}


def serving_fields(result: dict) -> dict:
    """The row figures of the serving phases (``results.csv`` / ``results.json`` rows; None where a
    phase did not run): ``slo_best_rate`` (:func:`highest_rate_meeting_slo`) and
    ``slo_target_share``; ``prefix_caching`` (on/off as launched), ``prefix_warm_ttft_p50_s``,
    ``prefix_prefill_tok_s``, ``prefix_hit_rate``; ``turns``, ``turns_context_first`` /
    ``_last`` (tokens), ``turns_ttft_first_s`` / ``_last_s``, ``turns_decode_first_tok_s`` /
    ``_last_tok_s``; ``tools_passed``, ``tools_total``."""
    rates = rates_of(result) if n.is_measured(result) else []
    best, target = highest_rate_meeting_slo(result) if rates else (None, None)
    pre = prefix_row(result) or {}
    turns = multi_turn_rows(result)
    mt = multi_turn_change(result) if turns else {}
    tools = tools_summary(result) or {}
    return {"slo_best_rate": best, "slo_target_share": target,
            "prefix_caching": pre.get("prefix_caching"), "prefix_warm_ttft_p50_s": pre.get("warm_ttft_p50_s"),
            "prefix_prefill_tok_s": pre.get("prefill_tok_s"), "prefix_hit_rate": pre.get("hit_rate"),
            "turns": len(turns) or None, "turns_context_first": mt.get("context_first"),
            "turns_context_last": mt.get("context_last"), "turns_ttft_first_s": mt.get("ttft_first_s"),
            "turns_ttft_last_s": mt.get("ttft_last_s"), "turns_decode_first_tok_s": mt.get("decode_first_tok_s"),
            "turns_decode_last_tok_s": mt.get("decode_last_tok_s"),
            "tools_passed": tools.get("passed"), "tools_total": tools.get("total")}
