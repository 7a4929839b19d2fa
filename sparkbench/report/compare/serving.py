"""Variants of one unit compared on the serving phases (pure, no I/O): prefix caching with and
without, the share of requests meeting the SLO at each arrival rate, and the tool-call check."""

from __future__ import annotations

from typing import Any

from ... import verdict as vd
from .. import numbers as n
from .pairs import pct_diff


def prefix_pairs(results: list[dict]) -> dict:
    """Pairs each variant launched without prefix caching (``--no-enable-prefix-caching``, the
    serving plan's ``<build>-noprefix``) that ran the prefix phase with the variant of the same
    unit, build and model that cached prefixes and ran it too: the one whose other launch flags
    are the same (:func:`~sparkbench.report.numbers.launch_flags`, address flags and
    ``enable-prefix-caching`` left out), else the first in matrix order, marked ``flags_match``
    False. Per pair: warm TTFT p50 and prefill tok/s with and without, their change
    (with − without) / without × 100, the hit rates, and the verdict of
    :func:`sparkbench.verdict.compare_samples` on the per-request warm TTFTs (reference =
    without caching; a negative difference = caching made the first token come sooner).

    Returns ``{"pairs": [...], "unpaired": ["unit/variant (why)"], "simulated"}``."""
    with_phase = [r for r in n.sort_results(results) if isinstance(r, dict) and n.prefix_cache_of(r)]
    on = [r for r in with_phase if n.prefix_caching_on(r)]
    pairs, unpaired = [], []

    def others(r: dict) -> dict:
        flags = n.launch_flags(r)
        flags.pop("enable-prefix-caching", None)
        return flags
    for off in (r for r in with_phase if not n.prefix_caching_on(r)):
        same = [r for r in on if n.unit_of(r) == n.unit_of(off) and n.build_of(r) == n.build_of(off)
                and n.model_of(r) == n.model_of(off)]
        if not same:
            unpaired.append(f"{n.unit_of(off)}/{n.variant_name(off)} (no variant of build {n.build_of(off)} with "
                            "prefix caching ran the prefix phase on this unit)")
            continue
        match = next((r for r in same if others(r) == others(off)), None)
        ref_on = match or same[0]
        a, b = n.prefix_row(off), n.prefix_row(ref_on)
        verdict = vd.compare_samples(n.warm_ttfts(off), n.warm_ttfts(ref_on),
                                     remedy=f"--prefix-requests {vd.MIN_REQUESTS + 1}")
        pairs.append({"unit": n.unit_of(off), "host": n.host_of(off), "build": n.build_of(off),
                      "model": n.model_of(off), "variant_on": n.variant_name(ref_on),
                      "variant_off": n.variant_name(off), "flags_match": match is not None,
                      "prefix_tokens": b["prefix_tokens"], "prefix_tokens_off": a["prefix_tokens"],
                      "warm_ttft_p50_on_s": b["warm_ttft_p50_s"], "warm_ttft_p50_off_s": a["warm_ttft_p50_s"],
                      "ttft_change_pct": pct_diff(b["warm_ttft_p50_s"], a["warm_ttft_p50_s"]),
                      "prefill_tok_s_on": b["prefill_tok_s"], "prefill_tok_s_off": a["prefill_tok_s"],
                      "prefill_change_pct": pct_diff(b["prefill_tok_s"], a["prefill_tok_s"]),
                      "cold_ttft_on_s": b["cold_ttft_s"], "cold_ttft_off_s": a["cold_ttft_s"],
                      "hit_rate_on": b["hit_rate"], "hit_rate_off": a["hit_rate"],
                      "reason_on": b["reason"], "reason_off": a["reason"], "verdict": verdict,
                      "simulated": n.is_simulated(off) or n.is_simulated(ref_on)})
    return {"pairs": pairs, "unpaired": unpaired, "simulated": any(n.is_simulated(r) for r in with_phase)}


# --------------------------------------------------------------------------- goodput between variants

def goodput_verdicts(results: list[dict], reference_build: str | None = None) -> dict:
    """Per unit, each variant's share of requests meeting every SLO (``slo_met_share``) against
    the unit's reference variant, at each arrival rate both ran (matched by the rate's value;
    replayed workloads by "replay"): Δ = other − reference in percentage points, with the verdict
    of :func:`sparkbench.verdict.compare_shares` on the per-request good flags
    (``rates[].per_request[].good``). The reference variant = the unit's first variant in matrix
    order of the reference build (the first build listed, or ``reference_build``) that ran the
    arrival-rate phase, as the head-to-head chooses its reference.

    Returns ``{"rows": [{"unit", "host", "reference_variant", "variant", "rate", "reference_share",
    "share", "pp_diff", "reference_goodput", "goodput", "verdict", "simulated"}], "summary":
    [{"unit", "reference_variant", "variant", "kinds", "rates", "pp_min", "pp_max", "simulated"}]}``."""
    with_rates = [r for r in n.sort_results(results) if isinstance(r, dict) and n.is_measured(r) and n.rates_of(r)]
    order = n.build_order(with_rates)
    ref_build = reference_build if reference_build in order else (order[0] if order else None)
    units: dict[str, list[dict]] = {}
    for r in with_rates:
        units.setdefault(n.unit_of(r), []).append(r)
    rows, summary = [], []

    def key(x: dict) -> Any:
        return "replay" if x.get("replay") else (float(x["rate"]) if isinstance(x.get("rate"), (int, float)) else None)
    for unit, docs in units.items():
        if len(docs) < 2:
            continue
        ref = next((r for r in docs if n.build_of(r) == ref_build), docs[0])
        ref_rates: dict[Any, dict] = {}
        for x in n.rates_of(ref):
            ref_rates.setdefault(key(x), x)
        for other in docs:
            if other is ref:
                continue
            kinds, rates, diffs = [], [], []
            seen = set()
            for x in n.rates_of(other):
                k = key(x)
                if k is None or k in seen or k not in ref_rates:
                    continue
                seen.add(k)
                rx = ref_rates[k]
                verdict = vd.compare_shares(n.good_flags(rx), n.good_flags(x))
                share, rshare = n.num(x.get("slo_met_share")), n.num(rx.get("slo_met_share"))
                diff = (share - rshare) * 100.0 if share is not None and rshare is not None else None
                rows.append({"unit": unit, "host": n.host_of(other), "reference_variant": n.variant_name(ref),
                             "variant": n.variant_name(other), "rate": k, "reference_share": rshare, "share": share,
                             "pp_diff": diff, "reference_goodput": n.num(rx.get("goodput")),
                             "goodput": n.num(x.get("goodput")), "verdict": verdict,
                             "simulated": n.is_simulated(ref) or n.is_simulated(other)})
                kinds.append(verdict["kind"])
                rates.append(k)
                if diff is not None:
                    diffs.append(diff)
            if rates:
                summary.append({"unit": unit, "reference_variant": n.variant_name(ref), "variant": n.variant_name(other),
                                "kinds": kinds, "rates": rates, "pp_min": min(diffs) if diffs else None,
                                "pp_max": max(diffs) if diffs else None,
                                "simulated": n.is_simulated(ref) or n.is_simulated(other)})
    return {"rows": rows, "summary": summary, "reference_build": ref_build}


def reference_variants(results: list[dict], reference_build: str | None = None) -> dict[str, dict]:
    """Per unit, the reference variant of the comparisons between variants: the unit's first
    result, in matrix order, of the reference build (the first build listed, or
    ``reference_build`` when it is one of them), else its first result."""
    docs = [r for r in n.sort_results(results) if isinstance(r, dict) and n.is_measured(r)]
    order = n.build_order(docs)
    ref_build = reference_build if reference_build in order else (order[0] if order else None)
    out: dict[str, dict] = {}
    for r in docs:
        unit = n.unit_of(r)
        if unit not in out or (n.build_of(out[unit]) != ref_build and n.build_of(r) == ref_build):
            out[unit] = r
    return out


def tool_verdicts(results: list[dict], reference_build: str | None = None) -> dict[tuple[str, str], dict]:
    """(unit, variant) → the tool-call check's pass share against the unit's reference variant
    among those that ran the check (:func:`reference_variants` over them): ``{"reference_variant",
    "pp_diff", "verdict"}``, verdict :func:`sparkbench.verdict.compare_shares` of the prompts'
    pass flags (skipped prompts left out). The reference variant itself is not in the map."""
    with_tools = [r for r in results if isinstance(r, dict) and n.tools_of(r)]
    refs = reference_variants(with_tools, reference_build)

    def flags(r: dict) -> list[bool]:
        return [p.get("verdict") == "pass" for p in (n.tools_of(r) or {}).get("prompts") or []
                if isinstance(p, dict) and p.get("verdict") in ("pass", "fail")]
    out: dict[tuple[str, str], dict] = {}
    for r in n.sort_results(with_tools):
        ref = refs.get(n.unit_of(r))
        if ref is None or ref is r:
            continue
        verdict = vd.compare_shares(flags(ref), flags(r), remedy=f"a --tools-file with {vd.MIN_REQUESTS} or more prompts")
        a, b = verdict["share_reference"], verdict["share_other"]
        out[(n.unit_of(r), n.variant_name(r))] = {"reference_variant": n.variant_name(ref), "verdict": verdict,
                                                  "pp_diff": (b - a) * 100.0 if a is not None and b is not None else None}
    return out
