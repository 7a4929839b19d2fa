"""Run to run: two stored runs compared, and the "version bridge" verdict (pure functions, no I/O).

Pairs a result of the current run with the baseline result of the same host and variant name
(when each run has exactly one host and the host names differ, by variant name alone). For each
pair: Δ% = (current − baseline) / baseline × 100 for the single-stream median and the combined
throughput at 8 parallel; "within noise" when the single-stream min–max ranges overlap.

Version bridge (the seed's method: re-measure a reference model on the new vLLM before comparing
new models with old figures): the pairs whose ``manifest.vllm_version`` differs between the runs
(or the variants named in ``bridge_variants``) are the bridge. The runs are *comparable* when every
bridge pair's single-stream |Δ%| ≤ ``threshold_pct`` (default 2.5 %, the seed's tolerance: 27B
12.13 → 12.43 bare = +2.5 %, 29.38 → 28.91 MTP = −1.6 %).

Also exposed as the Ansible filter ``run_compare`` (documented in ``run_compare.yml``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any


def _sibling(name: str):
    """Import another filter_plugins file by path (filter_plugins/ is not a package)."""
    mod_name = f"sparkbench_filter_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


rt = _sibling("report_tables")
h2h = _sibling("head_to_head")


def vllm_version(result: dict) -> str | None:
    """vLLM version a result was measured with: ``manifest.vllm_version``, else ``server.version``."""
    return rt.dig(result, "manifest", "vllm_version") or rt.dig(result, "server", "version")


def pair_results(current: list[dict], baseline: list[dict]) -> list[tuple[dict, dict]]:
    """(current, baseline) pairs by host and variant name; by variant name alone when each run has
    exactly one host and they differ."""
    cur = [r for r in current if isinstance(r, dict)]
    base = [r for r in baseline if isinstance(r, dict)]
    cur_hosts = {rt.host_of(r) for r in cur}
    base_hosts = {rt.host_of(r) for r in base}
    by_name_only = len(cur_hosts) == 1 and len(base_hosts) == 1 and cur_hosts != base_hosts
    index = {((None if by_name_only else rt.host_of(r)), rt.variant_name(r)): r for r in base}
    pairs = []
    for r in rt.sort_results(cur):
        b = index.get(((None if by_name_only else rt.host_of(r)), rt.variant_name(r)))
        if b is not None:
            pairs.append((r, b))
    return pairs


def run_compare(current: list[dict], baseline: list[dict], threshold_pct: float = 2.5,
                bridge_variants: list[str] | None = None) -> dict:
    """Per host × variant deltas between two runs plus the version-bridge verdict.

    Returns ``{"rows": [...], "bridge": {...}, "threshold_pct", "only_current", "only_baseline",
    "simulated"}``. Each row: host, variant, baseline/current single medians and Δ%, within_noise,
    baseline/current combined at 8 and Δ%, baseline/current vLLM version. ``bridge``: ``pairs``
    (the bridge rows), ``comparable`` (True/False; None without a bridge pair), ``max_abs_pct``,
    ``from_versions``/``to_versions`` and a one-line ``verdict``."""
    try:
        threshold = float(threshold_pct)
    except (TypeError, ValueError):
        raise ValueError(f"bridge threshold must be a number of percent, got {threshold_pct!r}") from None
    pairs = pair_results(current, baseline)
    rows: list[dict[str, Any]] = []
    for cur, base in pairs:
        cmed, clo, chi = rt.single_stats(cur)
        bmed, blo, bhi = rt.single_stats(base)
        c8, b8 = rt.combined_at(cur, 8), rt.combined_at(base, 8)
        rows.append({
            "host": rt.host_of(cur), "baseline_host": rt.host_of(base), "variant": rt.variant_name(cur),
            "model": rt.model_of(cur), "config": rt.config_of(cur),
            "baseline_single": bmed, "current_single": cmed, "single_pct": h2h.pct_diff(cmed, bmed),
            "within_noise": h2h.ranges_overlap((blo, bhi), (clo, chi)),
            "baseline_combined_8": b8, "current_combined_8": c8, "combined_8_pct": h2h.pct_diff(c8, b8),
            "baseline_vllm": vllm_version(base), "current_vllm": vllm_version(cur),
            "simulated": rt.is_simulated(cur) or rt.is_simulated(base),
        })
    if bridge_variants:
        bridge_rows = [r for r in rows if r["variant"] in set(bridge_variants)]
    else:
        bridge_rows = [r for r in rows if r["baseline_vllm"] != r["current_vllm"]]
    measured = [r for r in bridge_rows if r["single_pct"] is not None]
    comparable = None
    max_abs = None
    if measured:
        max_abs = max(abs(r["single_pct"]) for r in measured)
        comparable = max_abs <= threshold
    from_v = sorted({str(r["baseline_vllm"]) for r in bridge_rows})
    to_v = sorted({str(r["current_vllm"]) for r in bridge_rows})
    if comparable is None:
        verdict = ("no bridge: no variant was measured on both runs with different vLLM versions"
                   if not bridge_rows else "no bridge: the bridge variants have no single-stream figure on both runs")
    else:
        if len(measured) <= 4:
            parts = ", ".join(f"{r['variant']} {r['baseline_single']:.2f} → {r['current_single']:.2f} "
                              f"({r['single_pct']:+.1f} %)" for r in measured)
        else:
            lo = min(r["single_pct"] for r in measured)
            hi = max(r["single_pct"] for r in measured)
            parts = f"{len(measured)} host × variant pairs re-measured, Δ {lo:+.1f} … {hi:+.1f} %"
        verdict = (f"vLLM {'/'.join(from_v)} → {'/'.join(to_v)}: {parts}; max |Δ| {max_abs:.1f} % "
                   f"{'≤' if comparable else '>'} {threshold:g} % → figures "
                   f"{'comparable across the runs' if comparable else 'NOT comparable across the runs'}")
    cur_keys = {(rt.host_of(c), rt.variant_name(c)) for c, _ in pairs}
    base_keys = {(rt.host_of(b), rt.variant_name(b)) for _, b in pairs}
    return {
        "rows": rows,
        "bridge": {"pairs": bridge_rows, "comparable": comparable, "max_abs_pct": max_abs,
                   "from_versions": from_v, "to_versions": to_v, "threshold_pct": threshold,
                   "verdict": verdict},
        "threshold_pct": threshold,
        "only_current": sorted(f"{rt.host_of(r)}/{rt.variant_name(r)}" for r in current
                               if isinstance(r, dict) and (rt.host_of(r), rt.variant_name(r)) not in cur_keys),
        "only_baseline": sorted(f"{rt.host_of(r)}/{rt.variant_name(r)}" for r in baseline
                                if isinstance(r, dict) and (rt.host_of(r), rt.variant_name(r)) not in base_keys),
        "simulated": any(r["simulated"] for r in rows),
    }


class FilterModule:
    """Ansible filter plugin: ``results | run_compare(baseline_results, threshold_pct=2.5)``."""

    def filters(self) -> dict:
        return {"run_compare": run_compare}
