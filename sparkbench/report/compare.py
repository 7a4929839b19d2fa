"""The report's comparisons (pure, no I/O): builds head to head, hosts across the fleet, and a run
against a baseline run with the version bridge verdict. Results are read through
:mod:`sparkbench.report.numbers` only.

Head-to-head
    Pairs results on the same host whose model is the same apart from its publisher
    (:func:`~sparkbench.report.numbers.model_key`) and whose ``config`` is the same, and compares
    every build with the reference build: % difference = (build − reference) / reference × 100,
    for the single-stream median and the combined throughput at 2/4/8 parallel. The reference
    build is the first build listed in the matrix (:func:`~sparkbench.report.numbers.build_order`),
    unless ``reference_build`` names another. "Within noise": single stream, when the two min–max
    ranges overlap; combined throughput (measured once per concurrency) when |Δ| ≤ the larger
    relative single-stream spread ((max − min) / median × 100) of the two variants.

Fleet
    matrix cell = single-stream median of that host × variant; fleet median of a variant = median
    of its cells; deviation (%) = (cell − fleet median) / fleet median × 100; a host's deviation =
    the median of its cells' deviations. Flagged: host deviation < −threshold (default 5 %), only
    with at least 3 measuring hosts (with two the median is their mean). Differing fields: per
    variant, the majority value of each manifest field over the hosts; the SM clock (telemetry
    median) when it is more than the threshold below the fleet's.

Run to run
    Pairs by host and variant name (by variant name alone when each run has one host and the names
    differ); Δ% = (current − baseline) / baseline × 100 for single and combined at 8. Version
    bridge: the pairs whose vLLM version differs (or ``bridge_variants``); the runs are
    *comparable* when every bridge pair's single-stream |Δ%| ≤ ``threshold_pct`` (default 2.5 %,
    the seed's tolerance: 27B 12.13 → 12.43 bare = +2.5 %, 29.38 → 28.91 MTP = −1.6 %).
"""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

from . import numbers as n

METRICS: tuple[str, ...] = ("single", "combined_2", "combined_4", "combined_8")
MANIFEST_FIELDS: tuple[str, ...] = ("driver", "cuda", "gpu", "os", "kernel", "image", "image_id",
                                    "image_digest", "vllm_version", "model_revision", "sparkbench_version")
MIN_HOSTS_TO_FLAG = 3


def _threshold(value: Any, what: str) -> float:
    """A threshold in percent (≥ 0), or ValueError naming ``what``."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} threshold must be a number of percent, got {value!r}") from None
    if threshold < 0:
        raise ValueError(f"{what} threshold must be ≥ 0 %, got {threshold}")
    return threshold


# --------------------------------------------------------------------------- head to head

def pct_diff(value: float | None, reference: float | None) -> float | None:
    """(value − reference) / reference × 100, None when either is missing or reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / reference * 100.0


def ranges_overlap(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> bool | None:
    """True when [a0, a1] and [b0, b1] overlap; None when a bound is missing."""
    if None in a or None in b:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def relative_spread(result: dict) -> float | None:
    """Single-stream (max − min) / median × 100, None when not recorded."""
    med, lo, hi = n.single_stats(result)
    if med in (None, 0) or lo is None or hi is None:
        return None
    return (hi - lo) / med * 100.0


def metric_value(result: dict, metric: str) -> float | None:
    """``single`` → single median; ``combined_N`` → combined tok/s at N parallel."""
    if metric == "single":
        return n.single_stats(result)[0]
    return n.combined_at(result, int(metric.split("_", 1)[1]))


def compare_pair(ref: dict, other: dict, metric: str) -> dict:
    """One comparison row: values, % difference and the within-noise verdict for ``metric``."""
    rv, ov = metric_value(ref, metric), metric_value(other, metric)
    row: dict[str, Any] = {"metric": metric, "reference_value": rv, "value": ov, "pct_diff": pct_diff(ov, rv)}
    if metric == "single":
        _, rlo, rhi = n.single_stats(ref)
        _, olo, ohi = n.single_stats(other)
        row["within_noise"] = ranges_overlap((rlo, rhi), (olo, ohi))
        row["noise_basis"] = "min–max ranges overlap"
    else:
        spreads = [s for s in (relative_spread(ref), relative_spread(other)) if s is not None]
        if row["pct_diff"] is None or not spreads:
            row["within_noise"] = None
        else:
            row["within_noise"] = abs(row["pct_diff"]) <= max(spreads)
        row["noise_basis"] = (f"|Δ| ≤ single-stream spread {max(spreads):.1f} %" if spreads
                              else "no range recorded")
    return row


def head_to_head(results: list[dict], reference_build: str | None = None) -> dict:
    """Compare builds per (host, model key, config).

    Returns ``{"reference_build", "builds", "rows": [...], "summary": [...]}``. Each row: host,
    model_key, config, reference_build, build, reference_variant, variant, metric,
    reference_value, value, pct_diff, within_noise, noise_basis, simulated. Each summary entry
    (per host × model key × non-reference build): the single-stream % range across configurations
    (``single_pct_min``/``_max``, the configs they came from), the same at 8 parallel, and whether
    every 8-parallel difference is within noise. ValueError when ``reference_build`` is not one
    of the results' builds."""
    measured = [r for r in results if isinstance(r, dict) and n.is_measured(r)
                and n.build_of(r) and n.config_of(r) and n.model_key(r)]
    order = n.build_order(measured)
    if reference_build is not None and reference_build not in order:
        raise ValueError(f"reference build {reference_build!r} is not in the results "
                         f"(builds: {', '.join(order) or 'none'}); pick one of them")
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for r in n.sort_results(measured):
        groups.setdefault((n.host_of(r), n.model_key(r), n.config_of(r)), {}).setdefault(n.build_of(r), r)
    rows: list[dict] = []
    for (host, mkey, config), by_build in groups.items():
        builds = [b for b in order if b in by_build]
        ref = reference_build if reference_build in by_build else (builds[0] if builds else None)
        if ref is None or len(by_build) < 2 or (reference_build and reference_build not in by_build):
            continue
        for b in builds:
            if b == ref:
                continue
            for metric in METRICS:
                row = compare_pair(by_build[ref], by_build[b], metric)
                row.update(host=host, model_key=mkey, config=config, reference_build=ref, build=b,
                           reference_variant=n.variant_name(by_build[ref]),
                           variant=n.variant_name(by_build[b]),
                           simulated=n.is_simulated(by_build[ref]) or n.is_simulated(by_build[b]))
                rows.append(row)
    return {"reference_build": reference_build or (order[0] if order else None), "builds": order,
            "rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> list[dict]:
    """Per host × model key × build: the range of % differences single-stream and at 8 parallel."""
    out: dict[tuple, dict] = {}
    for row in rows:
        key = (row["host"], row["model_key"], row["build"])
        s = out.setdefault(key, {"host": row["host"], "model_key": row["model_key"], "build": row["build"],
                                 "reference_build": row["reference_build"], "single": [], "combined_8": [],
                                 "simulated": False})
        s["simulated"] = s["simulated"] or row["simulated"]
        if row["metric"] in ("single", "combined_8") and row["pct_diff"] is not None:
            s[row["metric"]].append((row["pct_diff"], row["config"], row["within_noise"]))
    summary = []
    for s in out.values():
        entry = {k: s[k] for k in ("host", "model_key", "build", "reference_build", "simulated")}
        for metric, label in (("single", "single"), ("combined_8", "c8")):
            vals = s[metric]
            if vals:
                lo = min(vals, key=lambda v: v[0])
                hi = max(vals, key=lambda v: v[0])
                entry.update({f"{label}_pct_min": lo[0], f"{label}_pct_min_config": lo[1],
                              f"{label}_pct_max": hi[0], f"{label}_pct_max_config": hi[1],
                              f"{label}_configs": [v[1] for v in vals],
                              f"{label}_all_within_noise": (all(v[2] for v in vals)
                                                            if all(v[2] is not None for v in vals) else None)})
            else:
                entry.update({f"{label}_pct_min": None, f"{label}_pct_max": None, f"{label}_configs": [],
                              f"{label}_all_within_noise": None})
        summary.append(entry)
    return summary


# --------------------------------------------------------------------------- fleet

def host_clock(results: list[dict]) -> float | None:
    """Median of a host's telemetry ``sm_clock_mhz_mean`` over all variants and phases (MHz)."""
    clocks = [n.num(t.get("sm_clock_mhz_mean")) for r in results
              for t in (r.get("telemetry") or {}).values() if isinstance(t, dict)]
    clocks = [c for c in clocks if c is not None]
    return median(clocks) if clocks else None


def fleet_compare(results: list[dict], threshold_pct: float = 5.0) -> dict:
    """Host × variant matrix with deviations from the fleet median and flagged slow hosts.

    Returns ``{"hosts", "variants", "matrix": {variant: {host: tok_s}}, "fleet_median":
    {variant: tok_s}, "deviation_pct": {variant: {host: pct}}, "host_deviation_pct": {host: pct},
    "flagged": [{"host", "deviation_pct", "differs": [{"field", "value", "majority", "variants"}]}],
    "host_differs", "threshold_pct", "can_flag", "simulated"}``."""
    threshold = _threshold(threshold_pct, "fleet")
    docs = [r for r in results if isinstance(r, dict)]
    hosts = sorted({n.host_of(r) for r in docs})
    variants: list[str] = []
    for r in n.sort_results(docs):
        if n.variant_name(r) not in variants:
            variants.append(n.variant_name(r))
    matrix: dict[str, dict[str, float]] = {v: {} for v in variants}
    by_host_variant: dict[tuple[str, str], dict] = {}
    for r in docs:
        by_host_variant[(n.host_of(r), n.variant_name(r))] = r
        med = n.single_stats(r)[0]
        if med is not None:
            matrix[n.variant_name(r)][n.host_of(r)] = med
    fleet_median = {v: median(cells.values()) for v, cells in matrix.items() if cells}
    deviation = {v: {h: (val - fleet_median[v]) / fleet_median[v] * 100.0 for h, val in cells.items()}
                 for v, cells in matrix.items() if cells and fleet_median[v]}
    host_dev: dict[str, float] = {}
    for h in hosts:
        devs = [deviation[v][h] for v in deviation if h in deviation[v]]
        if devs:
            host_dev[h] = median(devs)
    measuring_hosts = {h for cells in matrix.values() for h in cells}
    can_flag = len(measuring_hosts) >= MIN_HOSTS_TO_FLAG

    majority: dict[tuple[str, str], Any] = {}
    for v in variants:
        for field in MANIFEST_FIELDS:
            values = [n.dig(by_host_variant[(h, v)], "manifest", field) for h in hosts
                      if (h, v) in by_host_variant]
            values = [x for x in values if x is not None]
            if values:
                majority[(v, field)] = Counter(map(str, values)).most_common(1)[0][0]
    clocks = {h: host_clock([r for r in docs if n.host_of(r) == h]) for h in hosts}
    known_clocks = [c for c in clocks.values() if c is not None]
    fleet_clock = median(known_clocks) if known_clocks else None

    def differs(host: str) -> list[dict]:
        found: dict[tuple[str, str, str], list[str]] = {}
        for v in variants:
            r = by_host_variant.get((host, v))
            if r is None:
                continue
            for field in MANIFEST_FIELDS:
                value = n.dig(r, "manifest", field)
                if value is None or (v, field) not in majority:
                    continue
                if str(value) != majority[(v, field)]:
                    found.setdefault((field, str(value), majority[(v, field)]), []).append(v)
        out = [{"field": f, "value": val, "majority": maj, "variants": vs} for (f, val, maj), vs in found.items()]
        clock = clocks.get(host)
        if clock is not None and fleet_clock and (clock - fleet_clock) / fleet_clock * 100.0 < -threshold:
            out.append({"field": "sm_clock_mhz", "value": f"{clock:.0f}", "majority": f"{fleet_clock:.0f}",
                        "variants": []})
        return out

    flagged = []
    if can_flag:
        for h in hosts:
            if h in host_dev and host_dev[h] < -threshold:
                flagged.append({"host": h, "deviation_pct": host_dev[h], "differs": differs(h)})
    return {"hosts": hosts, "variants": variants, "matrix": matrix, "fleet_median": fleet_median,
            "deviation_pct": deviation, "host_deviation_pct": host_dev, "flagged": flagged,
            "host_differs": {h: differs(h) for h in hosts},
            "threshold_pct": threshold, "can_flag": can_flag,
            "simulated": any(n.is_simulated(r) for r in docs)}


# --------------------------------------------------------------------------- run to run

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


def _bridge_verdict(bridge_rows: list[dict], threshold: float) -> tuple[bool | None, float | None, str]:
    """(comparable, max |Δ|, the one-line verdict) of the version bridge pairs."""
    measured = [r for r in bridge_rows if r["single_pct"] is not None]
    if not measured:
        return None, None, ("no bridge: no variant was measured on both runs with different vLLM versions"
                            if not bridge_rows else
                            "no bridge: the bridge variants have no single-stream figure on both runs")
    max_abs = max(abs(r["single_pct"]) for r in measured)
    comparable = max_abs <= threshold
    if len(measured) <= 4:
        parts = ", ".join(f"{r['variant']} {r['baseline_single']:.2f} → {r['current_single']:.2f} "
                          f"({r['single_pct']:+.1f} %)" for r in measured)
    else:
        lo = min(r["single_pct"] for r in measured)
        hi = max(r["single_pct"] for r in measured)
        parts = f"{len(measured)} host × variant pairs re-measured, Δ {lo:+.1f} … {hi:+.1f} %"
    from_v = "/".join(sorted({str(r["baseline_vllm"]) for r in bridge_rows}))
    to_v = "/".join(sorted({str(r["current_vllm"]) for r in bridge_rows}))
    verdict = (f"vLLM {from_v} → {to_v}: {parts}; max |Δ| {max_abs:.1f} % "
               f"{'≤' if comparable else '>'} {threshold:g} % → figures "
               f"{'comparable across the runs' if comparable else 'NOT comparable across the runs'}")
    return comparable, max_abs, verdict


def run_compare(current: list[dict], baseline: list[dict], threshold_pct: float = 2.5,
                bridge_variants: list[str] | None = None) -> dict:
    """Per host × variant deltas between two runs plus the version-bridge verdict.

    Returns ``{"rows": [...], "bridge": {...}, "threshold_pct", "only_current", "only_baseline",
    "simulated"}``. Each row: host, variant, baseline/current single medians and Δ%, within_noise,
    baseline/current combined at 8 and Δ%, baseline/current vLLM version. ``bridge``: ``pairs``
    (the bridge rows), ``comparable`` (True/False; None without a bridge pair), ``max_abs_pct``,
    ``from_versions``/``to_versions`` and a one-line ``verdict``."""
    threshold = _threshold(threshold_pct, "bridge")
    pairs = pair_results(current, baseline)
    rows: list[dict[str, Any]] = []
    for cur, base in pairs:
        cmed, clo, chi = n.single_stats(cur)
        bmed, blo, bhi = n.single_stats(base)
        c8, b8 = n.combined_at(cur, 8), n.combined_at(base, 8)
        rows.append({
            "host": n.host_of(cur), "baseline_host": n.host_of(base), "variant": n.variant_name(cur),
            "model": n.model_of(cur), "config": n.config_of(cur),
            "baseline_single": bmed, "current_single": cmed, "single_pct": pct_diff(cmed, bmed),
            "within_noise": ranges_overlap((blo, bhi), (clo, chi)),
            "baseline_combined_8": b8, "current_combined_8": c8, "combined_8_pct": pct_diff(c8, b8),
            "baseline_vllm": vllm_version(base), "current_vllm": vllm_version(cur),
            "simulated": n.is_simulated(cur) or n.is_simulated(base),
        })
    if bridge_variants:
        bridge_rows = [r for r in rows if r["variant"] in set(bridge_variants)]
    else:
        bridge_rows = [r for r in rows if r["baseline_vllm"] != r["current_vllm"]]
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
