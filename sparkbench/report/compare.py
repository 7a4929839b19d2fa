"""The report's comparisons (pure, no I/O): builds head to head, hosts across the fleet, and a run
against a baseline run with the version bridge verdict. Results are read through
:mod:`sparkbench.report.numbers` only.

Head-to-head
    Pairs results on the same host whose model is the same apart from its publisher
    (:func:`~sparkbench.report.numbers.model_key`) and whose ``config`` is the same, and compares
    every build with the reference build: % difference = (build − reference) / reference × 100,
    for the single-stream median and the combined throughput at 2/4/8 parallel. The reference
    build is the first build listed in the matrix (:func:`~sparkbench.report.numbers.build_order`),
    unless ``reference_build`` names another. A cluster result is paired on its unit
    (:func:`~sparkbench.report.numbers.unit_of`), not on its head host. Every row carries a ``verdict``
    (:func:`sparkbench.verdict.compare_samples`): single stream compares the two variants'
    per-request decode rates (``single.runs[]``); combined at N — measured once per concurrency —
    compares the N per-stream decode rates that make it up (``parallel[].per_stream``), so at 2
    and 4 parallel there are too few streams for a verdict.

Cluster vs one unit
    A cluster variant (a result with a ``cluster`` block: one model over several hosts, written
    under the head host) is one unit, ``"<name> (<head> + <worker>)"``. Each is compared with the
    same build's one-unit variant on its head host (same ``variant.build`` and model, tensor and
    pipeline parallel size 1; the one whose other flags match, else the first in matrix order):
    % difference = (cluster − one unit) / one unit × 100, single stream and combined at 2/4/8
    parallel, each with its verdict as in the head-to-head. Clusters are never in the fleet.

Fleet
    one-unit results only (a cluster is not a peer of one Spark). matrix cell = single-stream
    median of that host × variant; fleet median of a variant = median of its cells; deviation (%) = (cell − fleet median) / fleet median × 100; a host's deviation =
    the median of its cells' deviations. Flagged: host deviation < −threshold (default 5 %), only
    with at least 3 measuring hosts (with two the median is their mean). Each cell carries a
    verdict: the host's single-stream requests against the pooled requests of its peers (the other
    hosts within ±threshold of the fleet median, all other hosts when none is). Differing fields: per
    variant, the majority value of each manifest field over the hosts; the SM clock (telemetry
    median) when it is more than the threshold below the fleet's.

Run to run
    Pairs by host and variant name (by variant name alone when each run has one host and the names
    differ); Δ% = (current − baseline) / baseline × 100 for single and combined at 8. Version
    bridge: the pairs whose vLLM version differs (or ``bridge_variants``); the runs are
    *comparable* when every bridge pair's single-stream verdict (``tolerance_pct`` =
    ``threshold_pct``, default 2.5 %, the seed's tolerance) either finds no detectable difference
    or puts the whole 95 % interval within ±tolerance. Pairs without per-request data (results
    that hold only medians, e.g. the seed's published figures: 27B 12.13 → 12.43 bare = +2.5 %,
    29.38 → 28.91 MTP = −1.6 %) read "not enough requests for a verdict"; when no pair has a
    verdict the bridge falls back to the medians: comparable when every |Δ%| ≤ ``threshold_pct``.

Drift
    ``drift`` (``{host: {"unreliable": bool, "text": str, …}}``, from
    :mod:`sparkbench.report.drift`) marks every comparison of a host whose reference variant
    drifted beyond the noise: the row's ``unreliable`` holds the drift text (None otherwise).
"""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

from .. import verdict as vd
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


def metric_value(result: dict, metric: str) -> float | None:
    """``single`` → single median; ``combined_N`` → combined tok/s at N parallel."""
    if metric == "single":
        return n.single_stats(result)[0]
    return n.combined_at(result, int(metric.split("_", 1)[1]))


def remedy(metric: str) -> str:
    """How to get enough requests for a verdict on ``metric`` (the hint of "not enough …")."""
    if metric == "single":
        return f"--runs {vd.MIN_REQUESTS}"
    return f"measure at {vd.MIN_REQUESTS} or more parallel"


def verdict_of(ref: dict, other: dict, metric: str, tolerance_pct: float | None = None) -> dict:
    """:func:`sparkbench.verdict.compare_samples` of ``other`` against ``ref`` on ``metric``'s
    per-request values (:func:`sparkbench.verdict.samples`)."""
    return vd.compare_samples(vd.samples(ref, metric), vd.samples(other, metric),
                              tolerance_pct=tolerance_pct, remedy=remedy(metric))


def unreliable(host: str | None, drift: dict | None) -> str | None:
    """The drift text when ``drift`` marks ``host`` unreliable, else None."""
    entry = (drift or {}).get(host) if host is not None else None
    if isinstance(entry, dict) and entry.get("unreliable"):
        return str(entry.get("text") or "drift beyond the noise")
    return None


def compare_pair(ref: dict, other: dict, metric: str) -> dict:
    """One comparison row: values, % difference (of the recorded figures) and the verdict on the
    per-request values for ``metric``."""
    rv, ov = metric_value(ref, metric), metric_value(other, metric)
    return {"metric": metric, "reference_value": rv, "value": ov, "pct_diff": pct_diff(ov, rv),
            "verdict": verdict_of(ref, other, metric)}


def head_to_head(results: list[dict], reference_build: str | None = None, drift: dict | None = None) -> dict:
    """Compare builds per (host, model key, config).

    Returns ``{"reference_build", "builds", "rows": [...], "summary": [...]}``. Each row: host,
    model_key, config, reference_build, build, reference_variant, variant, metric,
    reference_value, value, pct_diff, verdict (:func:`verdict_of`), unreliable (drift text or
    None), simulated. Each summary entry (per host × model key × non-reference build): the
    single-stream % range across configurations (``single_pct_min``/``_max``, the configs they
    came from), the same at 8 parallel, and the verdict kinds per metric (``single_kinds``,
    ``c8_kinds``). ValueError when ``reference_build`` is not one of the results' builds."""
    measured = [r for r in results if isinstance(r, dict) and n.is_measured(r)
                and n.build_of(r) and n.config_of(r) and n.model_key(r)]
    order = n.build_order(measured)
    if reference_build is not None and reference_build not in order:
        raise ValueError(f"reference build {reference_build!r} is not in the results "
                         f"(builds: {', '.join(order) or 'none'}); pick one of them")
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for r in n.sort_results(measured):  # a cluster is its own unit (n.unit_of), never paired with its head alone
        groups.setdefault((n.unit_of(r), n.model_key(r), n.config_of(r)), {}).setdefault(n.build_of(r), r)
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
                           variant=n.variant_name(by_build[b]), unreliable=unreliable(n.host_of(by_build[b]), drift),
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
        s["unreliable"] = s.get("unreliable") or row.get("unreliable")
        if row["metric"] in ("single", "combined_8") and row["pct_diff"] is not None:
            s[row["metric"]].append((row["pct_diff"], row["config"], row["verdict"]["kind"]))
    summary = []
    for s in out.values():
        entry = {k: s[k] for k in ("host", "model_key", "build", "reference_build", "simulated")}
        entry["unreliable"] = s.get("unreliable")
        for metric, label in (("single", "single"), ("combined_8", "c8")):
            vals = s[metric]
            if vals:
                lo = min(vals, key=lambda v: v[0])
                hi = max(vals, key=lambda v: v[0])
                entry.update({f"{label}_pct_min": lo[0], f"{label}_pct_min_config": lo[1],
                              f"{label}_pct_max": hi[0], f"{label}_pct_max_config": hi[1],
                              f"{label}_configs": [v[1] for v in vals],
                              f"{label}_kinds": [v[2] for v in vals]})
            else:
                entry.update({f"{label}_pct_min": None, f"{label}_pct_max": None, f"{label}_configs": [],
                              f"{label}_kinds": []})
        summary.append(entry)
    return summary


# --------------------------------------------------------------------------- cluster vs one unit

#: launch flags that only lay the model out over devices: a cluster variant and its one-unit
#: reference may differ in these and still be "the same model and settings"
PARALLEL_FLAGS: tuple[str, ...] = ("tensor-parallel-size", "pipeline-parallel-size", "distributed-executor-backend",
                                   "data-parallel-size")


def _flags_but_parallel(result: dict) -> dict | None:
    """The variant's flag mapping without :data:`PARALLEL_FLAGS` (None when ``variant.args`` is
    not a mapping)."""
    args = n.variant_of(result).get("args")
    if not isinstance(args, dict):
        return None
    return {str(k).lstrip("-").replace("_", "-"): v for k, v in args.items()
            if str(k).lstrip("-").replace("_", "-") not in PARALLEL_FLAGS}


def one_unit_reference(cluster_result: dict, results: list[dict]) -> tuple[dict | None, bool]:
    """(the one-unit variant a cluster variant is compared with, whether its flags equal the
    cluster's apart from the parallel layout). Candidates: measured results on the cluster's head
    host (``cluster.head``, else ``host``) without a cluster block, with the same ``variant.build``
    and model, whose tensor and pipeline parallel sizes are both 1; the first in matrix order whose
    flags match (:data:`PARALLEL_FLAGS` left out), else the first in matrix order."""
    head = str((n.cluster_of(cluster_result) or {}).get("head") or n.host_of(cluster_result))
    candidates = [r for r in n.sort_results(results) if isinstance(r, dict) and not n.is_cluster(r)
                  and n.is_measured(r) and n.host_of(r) == head and n.build_of(r) == n.build_of(cluster_result)
                  and n.model_of(r) == n.model_of(cluster_result) and n.parallel_sizes(r) == (1, 1)]
    if not candidates:
        return None, False
    want = _flags_but_parallel(cluster_result)
    for r in candidates:
        if want is not None and _flags_but_parallel(r) == want:
            return r, True
    return candidates[0], False


def cluster_vs_unit(results: list[dict], drift: dict | None = None) -> dict:
    """Each measured cluster variant (TP=2, PP=2, …) against the same build's one-unit variant on
    its head host (:func:`one_unit_reference`): % difference = (cluster − one unit) / one unit ×
    100 for the single-stream median and the combined throughput at 2/4/8 parallel, each with
    its verdict (:func:`verdict_of`: single = the two variants' single-stream requests, N par =
    the N per-stream decode rates of each side).

    Returns ``{"rows": [...], "summary": [...], "unmatched": [...], "simulated"}``. Each row:
    unit (``"sim_pair (spark-sim11 + spark-sim12)"``), cluster, head, members, parallel
    (``TP=2``), tensor_parallel_size, pipeline_parallel_size, build, model_key, variant,
    reference_host, reference_variant, flags_match, metric, reference_value, value, pct_diff,
    verdict, unreliable (the head's drift text or None), simulated. ``summary``: per cluster
    variant, its single and 8-parallel rows. ``unmatched``: cluster variants without a one-unit
    variant of their build measured on the head (``unit/variant``)."""
    docs = [r for r in results if isinstance(r, dict)]
    rows: list[dict] = []
    summary: list[dict] = []
    unmatched: list[str] = []
    for c in n.sort_results(r for r in docs if n.is_cluster(r) and n.is_measured(r)):
        ref, match = one_unit_reference(c, docs)
        if ref is None:
            unmatched.append(f"{n.unit_of(c)}/{n.variant_name(c)}")
            continue
        tp, pp = n.parallel_sizes(c)
        block = n.cluster_of(c) or {}
        common = {"unit": n.unit_of(c), "cluster": block.get("name"), "head": n.host_of(c),
                  "members": n.cluster_members(c), "parallel": n.parallel_label(c),
                  "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "build": n.build_of(c),
                  "model_key": n.model_key(c), "variant": n.variant_name(c), "reference_host": n.host_of(ref),
                  "reference_variant": n.variant_name(ref), "flags_match": match,
                  "unreliable": unreliable(n.host_of(ref), drift),
                  "simulated": n.is_simulated(c) or n.is_simulated(ref)}
        by_metric = {}
        for metric in METRICS:
            row = compare_pair(ref, c, metric)
            row.update(common)
            rows.append(row)
            by_metric[metric] = row
        summary.append({**common, "single": by_metric["single"], "combined_8": by_metric["combined_8"]})
    return {"rows": rows, "summary": summary, "unmatched": unmatched, "simulated": any(r["simulated"] for r in rows)}


# --------------------------------------------------------------------------- fleet

def host_clock(results: list[dict]) -> float | None:
    """Median of a host's telemetry ``sm_clock_mhz_mean`` over all variants and phases (MHz)."""
    clocks = [t["sm_clock_mhz_mean"] for r in results for t in n.telemetry_phases(r).values()]
    clocks = [c for c in clocks if c is not None]
    return median(clocks) if clocks else None


def fleet_compare(results: list[dict], threshold_pct: float = 5.0, drift: dict | None = None) -> dict:
    """Host × variant matrix with deviations from the fleet median and flagged slow hosts.

    Returns ``{"hosts", "variants", "matrix": {variant: {host: tok_s}}, "fleet_median":
    {variant: tok_s}, "deviation_pct": {variant: {host: pct}}, "host_deviation_pct": {host: pct},
    "verdicts": {variant: {host: verdict}} (the host's single-stream requests against the pooled
    requests of its peers: the other hosts within ±threshold of the fleet median, or all others
    when none is), "unreliable": {host: drift text}, "flagged": [{"host", "deviation_pct",
    "differs": [{"field", "value", "majority", "variants"}], "verdicts": {variant: verdict}}],
    "host_differs", "threshold_pct", "can_flag", "simulated"}``."""
    threshold = _threshold(threshold_pct, "fleet")
    # A cluster is not a peer of one Spark: its results stay out of the fleet (see cluster_vs_unit).
    clusters = [r for r in results if isinstance(r, dict) and n.is_cluster(r)]
    docs = [r for r in results if isinstance(r, dict) and not n.is_cluster(r)]
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
    verdicts: dict[str, dict[str, dict]] = {}
    for v in variants:
        cells = matrix.get(v, {})
        for h in cells:
            # Peers: the other hosts within ±threshold of the fleet median (all others when none
            # is), so one slow host does not widen its siblings' interval into "no difference
            # detectable above 15 %" by making the pooled sample bimodal.
            others = [p for p in cells if p != h]
            inliers = [p for p in others if abs(deviation.get(v, {}).get(p, 0.0)) <= threshold] or others
            peers = [x for p in inliers for x in vd.samples(by_host_variant[(p, v)], "single")]
            if others:
                verdicts.setdefault(v, {})[h] = vd.compare_samples(
                    peers, vd.samples(by_host_variant[(h, v)], "single"), remedy=remedy("single"))
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
                flagged.append({"host": h, "deviation_pct": host_dev[h], "differs": differs(h),
                                "verdicts": {v: cells[h] for v, cells in verdicts.items() if h in cells}})
    out = {"hosts": hosts, "variants": variants, "matrix": matrix, "fleet_median": fleet_median,
           "deviation_pct": deviation, "host_deviation_pct": host_dev, "verdicts": verdicts,
           "unreliable": {h: t for h in hosts if (t := unreliable(h, drift))}, "flagged": flagged,
           "host_differs": {h: differs(h) for h in hosts},
           "threshold_pct": threshold, "can_flag": can_flag,
           "simulated": any(n.is_simulated(r) for r in docs)}
    if clusters:  # only runs with a cluster get the key: one-unit runs keep their results.json as it was
        out["clusters_left_out"] = [f"{n.unit_of(r)}/{n.variant_name(r)}" for r in n.sort_results(clusters)]
    return out


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
            out += f": {r['bridge_verdict']['text']}"
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
        why = measured[0]["bridge_verdict"]["text"]
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
    threshold = _threshold(threshold_pct, "bridge")
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
            "combined_8_verdict": verdict_of(base, cur, "combined_8"),
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


# --------------------------------------------------------------------------- prefix caching: with and without

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
