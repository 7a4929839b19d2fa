"""Hosts across the fleet (pure, no I/O): each one-unit host × variant against the fleet median,
its verdict against its peers, the flagged slow hosts and how they differ; see
:mod:`sparkbench.report.compare`."""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

from ... import verdict as vd
from .. import numbers as n
from .pairs import parse_threshold, remedy, unreliable

MANIFEST_FIELDS: tuple[str, ...] = ("driver", "cuda", "gpu", "os", "kernel", "image", "image_id",
                                    "image_digest", "vllm_version", "model_revision", "sparkbench_version")
MIN_HOSTS_TO_FLAG = 3


def host_clock(results: list[dict]) -> float | None:
    """Median of a host's telemetry ``sm_clock_mhz_mean`` over all variants and phases (MHz)."""
    clocks = [t["sm_clock_mhz_mean"] for r in results for t in n.telemetry_phases(r).values()]
    clocks = [c for c in clocks if c is not None]
    return median(clocks) if clocks else None


def _matrix(docs: list[dict]) -> tuple[list[str], dict[str, dict[str, float]], dict[tuple[str, str], dict]]:
    """(the variants in report order, {variant: {host: single-stream median}}, {(host, variant):
    result})."""
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
    return variants, matrix, by_host_variant


def _deviations(matrix: dict[str, dict[str, float]], hosts: list[str]) -> tuple[dict, dict, dict]:
    """(fleet median per variant, deviation % per variant and host, each host's median deviation)."""
    fleet_median = {v: median(cells.values()) for v, cells in matrix.items() if cells}
    deviation = {v: {h: (val - fleet_median[v]) / fleet_median[v] * 100.0 for h, val in cells.items()}
                 for v, cells in matrix.items() if cells and fleet_median[v]}
    host_dev: dict[str, float] = {}
    for h in hosts:
        devs = [deviation[v][h] for v in deviation if h in deviation[v]]
        if devs:
            host_dev[h] = median(devs)
    return fleet_median, deviation, host_dev


def _peer_verdicts(variants: list[str], matrix: dict, deviation: dict, by_host_variant: dict,
                   threshold: float) -> dict[str, dict[str, dict]]:
    """{variant: {host: verdict}}: the host's single-stream requests against the pooled requests of
    its peers, for every host with a peer."""
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
    return verdicts


def _host_differs(docs: list[dict], hosts: list[str], variants: list[str], by_host_variant: dict,
                  threshold: float) -> dict[str, list[dict]]:
    """{host: [{"field", "value", "majority", "variants"}]}: each manifest field whose value on the
    host differs from the majority of the hosts for the same variant, and the SM clock when the
    host's is more than ``threshold`` % below the fleet's."""
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
    return {h: differs(h) for h in hosts}


def fleet_compare(results: list[dict], threshold_pct: float = 5.0, drift: dict | None = None) -> dict:
    """Host × variant matrix with deviations from the fleet median and flagged slow hosts.

    Returns ``{"hosts", "variants", "matrix": {variant: {host: tok_s}}, "fleet_median":
    {variant: tok_s}, "deviation_pct": {variant: {host: pct}}, "host_deviation_pct": {host: pct},
    "verdicts": {variant: {host: verdict}} (the host's single-stream requests against the pooled
    requests of its peers: the other hosts within ±threshold of the fleet median, or all others
    when none is), "unreliable": {host: drift text}, "flagged": [{"host", "deviation_pct",
    "differs": [{"field", "value", "majority", "variants"}], "verdicts": {variant: verdict}}],
    "host_differs", "threshold_pct", "can_flag", "simulated"}``."""
    threshold = parse_threshold(threshold_pct, "fleet")
    # A cluster is not a peer of one Spark: its results stay out of the fleet (see cluster_vs_unit).
    clusters = [r for r in results if isinstance(r, dict) and n.is_cluster(r)]
    docs = [r for r in results if isinstance(r, dict) and not n.is_cluster(r)]
    hosts = sorted({n.host_of(r) for r in docs})
    variants, matrix, by_host_variant = _matrix(docs)
    fleet_median, deviation, host_dev = _deviations(matrix, hosts)
    verdicts = _peer_verdicts(variants, matrix, deviation, by_host_variant, threshold)
    can_flag = len({h for cells in matrix.values() for h in cells}) >= MIN_HOSTS_TO_FLAG
    host_differs = _host_differs(docs, hosts, variants, by_host_variant, threshold)
    flagged = [{"host": h, "deviation_pct": host_dev[h], "differs": host_differs[h],
                "verdicts": {v: cells[h] for v, cells in verdicts.items() if h in cells}}
               for h in hosts if can_flag and h in host_dev and host_dev[h] < -threshold]
    out = {"hosts": hosts, "variants": variants, "matrix": matrix, "fleet_median": fleet_median,
           "deviation_pct": deviation, "host_deviation_pct": host_dev, "verdicts": verdicts,
           "unreliable": {h: t for h in hosts if (t := unreliable(h, drift))}, "flagged": flagged,
           "host_differs": host_differs,
           "threshold_pct": threshold, "can_flag": can_flag,
           "simulated": any(n.is_simulated(r) for r in docs)}
    if clusters:  # the key exists only in runs with a cluster variant
        out["clusters_left_out"] = [f"{n.unit_of(r)}/{n.variant_name(r)}" for r in n.sort_results(clusters)]
    return out
