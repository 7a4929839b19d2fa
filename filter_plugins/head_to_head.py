"""Head-to-head: builds of the same model compared per configuration (pure functions, no I/O).

Pairs results on the same host whose model is the same apart from its publisher (see
``report_tables.model_key``) and whose ``config`` is the same, and compares every build with the
reference build: % difference = (build − reference) / reference × 100, for the single-stream
median and the combined throughput at 2/4/8 parallel.

The reference build is the first build listed in the matrix. Results do not carry the matrix
order, but a host measures its variants in matrix order, so the default reference is the build of
the earliest ``started_at`` (ties and missing times: name order). ``reference_build`` overrides it.

"Within noise": for the single-stream figure, when the two min–max ranges overlap. Combined
throughput is measured once per concurrency and has no range of its own: it is called within
noise when |% difference| ≤ the larger relative single-stream spread ((max − min) / median × 100)
of the two variants — the run-to-run noise this host showed. None when no range was recorded.

Also exposed as the Ansible filter ``head_to_head`` (documented in ``head_to_head.yml``).
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

METRICS: tuple[str, ...] = ("single", "combined_2", "combined_4", "combined_8")


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
    med, lo, hi = rt.single_stats(result)
    if med in (None, 0) or lo is None or hi is None:
        return None
    return (hi - lo) / med * 100.0


def metric_value(result: dict, metric: str) -> float | None:
    """``single`` → single median; ``combined_N`` → combined tok/s at N parallel."""
    if metric == "single":
        return rt.single_stats(result)[0]
    return rt.combined_at(result, int(metric.split("_", 1)[1]))


def build_order(results: list[dict]) -> list[str]:
    """Builds in matrix order: by earliest ``started_at`` of any of their results, then by name."""
    first: dict[str, str] = {}
    for r in results:
        b = rt.build_of(r)
        if b is None:
            continue
        t = str(r.get("started_at") or "~")
        if b not in first or t < first[b]:
            first[b] = t
    return sorted(first, key=lambda b: (first[b], b))


def compare_pair(ref: dict, other: dict, metric: str) -> dict:
    """One comparison row: values, % difference and the within-noise verdict for ``metric``."""
    rv, ov = metric_value(ref, metric), metric_value(other, metric)
    row: dict[str, Any] = {"metric": metric, "reference_value": rv, "value": ov, "pct_diff": pct_diff(ov, rv)}
    if metric == "single":
        _, rlo, rhi = rt.single_stats(ref)
        _, olo, ohi = rt.single_stats(other)
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
    every 8-parallel difference is within noise."""
    measured = [r for r in results if isinstance(r, dict) and rt.is_measured(r)
                and rt.build_of(r) and rt.config_of(r) and rt.model_key(r)]
    order = build_order(measured)
    if reference_build is not None and reference_build not in order:
        raise ValueError(f"reference build {reference_build!r} is not in the results "
                         f"(builds: {', '.join(order) or 'none'}); pick one of them")
    groups: dict[tuple[str, str, str], dict[str, dict]] = {}
    for r in rt.sort_results(measured):
        groups.setdefault((rt.host_of(r), rt.model_key(r), rt.config_of(r)), {}).setdefault(rt.build_of(r), r)
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
                           reference_variant=rt.variant_name(by_build[ref]),
                           variant=rt.variant_name(by_build[b]),
                           simulated=rt.is_simulated(by_build[ref]) or rt.is_simulated(by_build[b]))
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


class FilterModule:
    """Ansible filter plugin: ``results | head_to_head(reference_build=None)``."""

    def filters(self) -> dict:
        return {"head_to_head": head_to_head}
