"""Configurations of a model's only build against its first configuration, on one unit (pure, no
I/O); see :mod:`sparkbench.report.compare`. Where a model has one build on a unit the
head-to-head has nothing to pair, so its configurations are compared instead: each against the
first one in matrix order (the source article's MTP against bare; the CPU matrix's fp32 against
bf16), single stream and combined at 2/4/8 parallel, each with its verdict."""

from __future__ import annotations

from .. import numbers as n
from .pairs import AT_8, METRICS, compare_pair, unreliable


def _groups(results: list[dict]) -> dict[tuple[str, str], dict[str, dict[str, dict]]]:
    """(host, model key) → build → config → the first result of it in matrix order; measured
    one-unit results only (a cluster is compared with one unit under "Cluster vs one unit")."""
    groups: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
    for r in n.sort_results(results):
        if not (isinstance(r, dict) and n.is_measured(r) and not n.is_cluster(r)
                and n.build_of(r) and n.config_of(r) and n.model_key(r)):
            continue
        by_build = groups.setdefault((n.host_of(r), n.model_key(r)), {})
        by_build.setdefault(n.build_of(r), {}).setdefault(n.config_of(r), r)
    return groups


def config_compare(results: list[dict], drift: dict | None = None) -> dict:
    """Every configuration against the first one, for each model with a single build on a host.

    Returns ``{"rows": [...], "summary": [...]}``. Each row: host, model_key, build,
    reference_config, config, reference_variant, variant, metric, reference_value, value,
    pct_diff, verdict (:func:`~sparkbench.report.compare.verdict_of`), unreliable (the host's
    drift text or None), simulated. Each summary entry (per host × model key × configuration):
    host, model_key, build, reference_config, config, reference_variant, variant, simulated,
    unreliable, and its ``single`` and ``combined_8`` rows."""
    rows: list[dict] = []
    for (host, mkey), by_build in _groups(results).items():
        if len(by_build) != 1:
            continue  # two builds or more: the head-to-head compares them
        (build, by_config), = by_build.items()
        configs = list(by_config)
        if len(configs) < 2:
            continue
        ref = by_config[configs[0]]
        for config in configs[1:]:
            other = by_config[config]
            for metric in METRICS:
                row = compare_pair(ref, other, metric)
                row.update(host=host, model_key=mkey, build=build, reference_config=configs[0], config=config,
                           reference_variant=n.variant_name(ref), variant=n.variant_name(other),
                           unreliable=unreliable(host, drift),
                           simulated=n.is_simulated(ref) or n.is_simulated(other))
                rows.append(row)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> list[dict]:
    """Per host × model key × configuration: the names and its single-stream and 8-parallel rows."""
    out: dict[tuple, dict] = {}
    for row in rows:
        key = (row["host"], row["model_key"], row["config"])
        entry = out.setdefault(key, {k: row[k] for k in ("host", "model_key", "build", "reference_config", "config",
                                                          "reference_variant", "variant", "simulated", "unreliable")})
        if row["metric"] in ("single", AT_8):
            entry[row["metric"]] = row
    return list(out.values())
