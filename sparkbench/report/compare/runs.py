"""A run against a baseline run, with the version bridge verdict (pure, no I/O); see
:mod:`sparkbench.report.compare`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ... import verdict as vd
from .. import numbers as n
from .pairs import AT_8, parse_threshold, pct_diff, unreliable, verdict_of


def vllm_version(result: dict) -> str | None:
    """vLLM version a result was measured with: ``manifest.vllm_version``, else ``server.version``."""
    return n.dig(result, "manifest", "vllm_version") or n.dig(result, "server", "version")


def pair_results(current: list[dict], baseline: list[dict]) -> list[tuple[dict, dict]]:
    """(current, baseline) pairs by host and variant name; by variant name alone when each run has
    exactly one host and they differ."""
    cur = [r for r in current if isinstance(r, dict)]
    base = [r for r in baseline if isinstance(r, dict)]
    cur_hosts = {n.host_of(r) for r in cur}
    base_hosts = {n.host_of(r) for r in base}
    by_name_only = len(cur_hosts) == 1 and len(base_hosts) == 1 and cur_hosts != base_hosts
    index = {((None if by_name_only else n.host_of(r)), n.variant_name(r)): r for r in base}
    pairs = []
    for r in n.sort_results(cur):
        b = index.get(((None if by_name_only else n.host_of(r)), n.variant_name(r)))
        if b is not None:
            pairs.append((r, b))
    return pairs


def pair_ok(row: dict) -> bool | None:
    """A bridge pair's share of the bridge: None without a verdict (not enough requests); False
    when its interval lies wholly beyond ±tolerance, or reaches past it with the estimate
    |Δ| > tolerance; True otherwise (no detectable difference, the interval within ±tolerance,
    or an unresolved interval around an estimate within it)."""
    v = row["bridge_verdict"]
    if v["kind"] == "not_enough":
        return None
    if v["within_tolerance"] is False:
        return False
    if v["kind"] == "differs" and v["within_tolerance"] is None:
        return abs(v["pct"]) <= v["tolerance_pct"]
    return True


def _bridge_verdict(bridge_rows: list[dict], threshold: float) -> tuple[bool | None, float | None, str]:
    """(comparable, max |Δ|, the one-line verdict) of the version bridge pairs.

    With verdicts: comparable when every pair with a verdict is :func:`pair_ok` and every pair
    without one has |Δ| ≤ threshold on its medians — i.e. unless the requests show (or point to) a
    difference beyond the tolerance. Without any verdict (only medians recorded):
    comparable when every |Δ| ≤ threshold, said to rest on the medians alone."""
    measured = [r for r in bridge_rows if r["single_pct"] is not None]
    if not measured:
        return None, None, ("no bridge: no variant was measured on both runs with different vLLM versions"
                            if not bridge_rows else
                            "no bridge: the bridge variants have no single-stream figure on both runs")
    max_abs = max(abs(r["single_pct"]) for r in measured)
    judged = [r for r in measured if pair_ok(r) is not None]

    def part(r: dict) -> str:
        out = (f"{r['variant']} {r['baseline_single']:.2f} → {r['current_single']:.2f} "
               f"({r['single_pct']:+.1f} %)")
        if r["bridge_verdict"]["kind"] != "not_enough":
            out += f": {vd.explained(r['bridge_verdict'])}"
        return out + (" (unreliable: drift)" if r.get("unreliable") else "")

    if len(measured) <= 4:
        parts = ", ".join(part(r) for r in measured)
    else:
        lo = min(r["single_pct"] for r in measured)
        hi = max(r["single_pct"] for r in measured)
        def kind(r: dict) -> str:
            v = r["bridge_verdict"]
            if v["kind"] != "differs":
                return {"no_difference": "no difference detectable", "not_enough": "without a verdict"}[v["kind"]]
            return {True: "differ within the tolerance", False: "differ beyond the tolerance",
                    None: "differ, unresolved against the tolerance"}[v["within_tolerance"]]
        kinds = Counter(kind(r) for r in measured)
        said = ", ".join(f"{c} {k}" for k, c in sorted(kinds.items()))
        parts = f"{len(measured)} host × variant pairs re-measured, Δ {lo:+.1f} … {hi:+.1f} % ({said})"
    from_v = "/".join(sorted({str(r["baseline_vllm"]) for r in bridge_rows}))
    to_v = "/".join(sorted({str(r["current_vllm"]) for r in bridge_rows}))
    if not judged:
        comparable = max_abs <= threshold
        why = vd.explained(measured[0]["bridge_verdict"])
        return comparable, max_abs, (
            f"vLLM {from_v} → {to_v}: {parts}; {why}; by the medians alone max |Δ| {max_abs:.1f} % "
            f"{'≤' if comparable else '>'} {threshold:g} % → figures "
            f"{'comparable across the runs' if comparable else 'NOT comparable across the runs'}")
    bad = [r for r in judged if not pair_ok(r)]
    bad += [r for r in measured if pair_ok(r) is None and abs(r["single_pct"]) > threshold]
    comparable = not bad
    if comparable:
        tail = (f"no bridge pair beyond the {threshold:g} % bridge tolerance → figures comparable across "
                "the runs")
    else:
        names = ", ".join(sorted({f"{r['host']}/{r['variant']}" for r in bad}))
        tail = (f"{names} beyond the {threshold:g} % bridge tolerance → figures NOT comparable across the runs")
    return comparable, max_abs, f"vLLM {from_v} → {to_v}: {parts}; {tail}"


def run_compare(current: list[dict], baseline: list[dict], threshold_pct: float = 2.5,
                bridge_variants: list[str] | None = None, drift: dict | None = None) -> dict:
    """Per host × variant deltas between two runs plus the version-bridge verdict.

    Returns ``{"rows": [...], "bridge": {...}, "threshold_pct", "only_current", "only_baseline",
    "simulated"}``. Each row: host, variant, baseline/current single medians and Δ%, ``verdict``
    (current's single-stream requests against the baseline's), baseline/current combined at 8,
    Δ% and ``combined_8_verdict``, baseline/current vLLM version, ``unreliable`` (drift text of
    the current run's host or None). ``bridge``: ``pairs`` (the bridge rows, each with a
    ``bridge_verdict``: the single-stream verdict with the tolerance), ``comparable``
    (True/False; None without a bridge pair), ``max_abs_pct``, ``from_versions``/``to_versions``
    and a one-line ``verdict``."""
    threshold = parse_threshold(threshold_pct, "bridge")
    pairs = pair_results(current, baseline)
    rows: list[dict[str, Any]] = []
    for cur, base in pairs:
        cmed = n.single_stats(cur)[0]
        bmed = n.single_stats(base)[0]
        c8, b8 = n.combined_at(cur, 8), n.combined_at(base, 8)
        rows.append({
            "host": n.host_of(cur), **n.unit_fields(cur), "baseline_host": n.host_of(base), "variant": n.variant_name(cur),
            "model": n.model_of(cur), "config": n.config_of(cur),
            "baseline_single": bmed, "current_single": cmed, "single_pct": pct_diff(cmed, bmed),
            "verdict": verdict_of(base, cur, "single"),
            "baseline_combined_8": b8, "current_combined_8": c8, "combined_8_pct": pct_diff(c8, b8),
            "combined_8_verdict": verdict_of(base, cur, AT_8),
            "unreliable": unreliable(n.host_of(cur), drift),
            "baseline_vllm": vllm_version(base), "current_vllm": vllm_version(cur),
            "simulated": n.is_simulated(cur) or n.is_simulated(base),
        })
    if bridge_variants:
        bridge_rows = [r for r in rows if r["variant"] in set(bridge_variants)]
    else:
        bridge_rows = [r for r in rows if r["baseline_vllm"] != r["current_vllm"]]
    by_row = {id(r): (c, b) for r, (c, b) in zip(rows, pairs)}
    for r in bridge_rows:
        c, b = by_row[id(r)]
        r["bridge_verdict"] = verdict_of(b, c, "single", tolerance_pct=threshold)
    comparable, max_abs, verdict = _bridge_verdict(bridge_rows, threshold)
    cur_keys = {(n.host_of(c), n.variant_name(c)) for c, _ in pairs}
    base_keys = {(n.host_of(b), n.variant_name(b)) for _, b in pairs}
    return {
        "rows": rows,
        "bridge": {"pairs": bridge_rows, "comparable": comparable, "max_abs_pct": max_abs,
                   "from_versions": sorted({str(r["baseline_vllm"]) for r in bridge_rows}),
                   "to_versions": sorted({str(r["current_vllm"]) for r in bridge_rows}),
                   "threshold_pct": threshold, "verdict": verdict},
        "threshold_pct": threshold,
        "only_current": sorted(f"{n.host_of(r)}/{n.variant_name(r)}" for r in current
                               if isinstance(r, dict) and (n.host_of(r), n.variant_name(r)) not in cur_keys),
        "only_baseline": sorted(f"{n.host_of(r)}/{n.variant_name(r)}" for r in baseline
                                if isinstance(r, dict) and (n.host_of(r), n.variant_name(r)) not in base_keys),
        "simulated": any(r["simulated"] for r in rows),
    }
