"""Builds of the same model head to head on one unit (pure, no I/O); see
:mod:`sparkbench.report.compare`."""

from __future__ import annotations

from .. import numbers as n
from .pairs import AT_8, METRICS, compare_pair, unreliable


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
                                 "reference_build": row["reference_build"], "single": [], AT_8: [],
                                 "simulated": False})
        s["simulated"] = s["simulated"] or row["simulated"]
        s["unreliable"] = s.get("unreliable") or row.get("unreliable")
        if row["metric"] in ("single", AT_8) and row["pct_diff"] is not None:
            s[row["metric"]].append((row["pct_diff"], row["config"], row["verdict"]["kind"]))
    summary = []
    for s in out.values():
        entry = {k: s[k] for k in ("host", "model_key", "build", "reference_build", "simulated")}
        entry["unreliable"] = s.get("unreliable")
        for metric, label in (("single", "single"), (AT_8, "c8")):
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
