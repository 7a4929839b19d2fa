"""Fleet comparison: host × variant matrix, deviation from the fleet median, slow hosts flagged with
the manifest fields in which they differ from the majority (pure functions, no I/O).

Formulas:

- matrix cell = single-stream median decode tok/s of that host × variant (measured results only).
- fleet median of a variant = median of the cells of that variant over the hosts that measured it.
- deviation (%) of a cell = (cell − fleet median) / fleet median × 100.
- a host's deviation = the median of its cells' deviations (robust to one odd variant).
- flagged: host deviation < −threshold (default 5 %), and only when at least 3 hosts measured the
  variants (with two hosts the median is their mean and a slow unit hides half its gap).
- differing fields: per variant, the majority value of each manifest field (driver, cuda, gpu,
  os, kernel, image, image_id, image_digest, vllm_version, model_revision, sparkbench_version)
  over the hosts; a host lists the fields in which its value is not the majority's. The SM clock
  (telemetry ``sm_clock_mhz_mean``, median over a host's phases) is compared with the fleet median
  clock and listed when it is more than the threshold below it.

Also exposed as the Ansible filter ``fleet_compare`` (documented in ``fleet_compare.yml``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from statistics import median
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

MANIFEST_FIELDS: tuple[str, ...] = ("driver", "cuda", "gpu", "os", "kernel", "image", "image_id",
                                    "image_digest", "vllm_version", "model_revision", "sparkbench_version")
MIN_HOSTS_TO_FLAG = 3


def host_clock(results: list[dict]) -> float | None:
    """Median of a host's telemetry ``sm_clock_mhz_mean`` over all variants and phases (MHz)."""
    clocks = [rt.num(t.get("sm_clock_mhz_mean")) for r in results
              for t in (r.get("telemetry") or {}).values() if isinstance(t, dict)]
    clocks = [c for c in clocks if c is not None]
    return median(clocks) if clocks else None


def fleet_compare(results: list[dict], threshold_pct: float = 5.0) -> dict:
    """Host × variant matrix with deviations from the fleet median and flagged slow hosts.

    Returns ``{"hosts", "variants", "matrix": {variant: {host: tok_s}}, "fleet_median":
    {variant: tok_s}, "deviation_pct": {variant: {host: pct}}, "host_deviation_pct": {host: pct},
    "flagged": [{"host", "deviation_pct", "differs": [{"field", "value", "majority", "variants"}]}],
    "threshold_pct", "can_flag", "simulated"}``."""
    try:
        threshold = float(threshold_pct)
    except (TypeError, ValueError):
        raise ValueError(f"fleet threshold must be a number of percent, got {threshold_pct!r}") from None
    if threshold < 0:
        raise ValueError(f"fleet threshold must be ≥ 0 %, got {threshold}")
    docs = [r for r in results if isinstance(r, dict)]
    hosts = sorted({rt.host_of(r) for r in docs})
    variants: list[str] = []
    for r in rt.sort_results(docs):
        if rt.variant_name(r) not in variants:
            variants.append(rt.variant_name(r))
    matrix: dict[str, dict[str, float]] = {v: {} for v in variants}
    by_host_variant: dict[tuple[str, str], dict] = {}
    for r in docs:
        by_host_variant[(rt.host_of(r), rt.variant_name(r))] = r
        med = rt.single_stats(r)[0]
        if med is not None:
            matrix[rt.variant_name(r)][rt.host_of(r)] = med
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

    # Majority manifest value per variant and field.
    majority: dict[tuple[str, str], Any] = {}
    for v in variants:
        for field in MANIFEST_FIELDS:
            values = [rt.dig(by_host_variant[(h, v)], "manifest", field) for h in hosts
                      if (h, v) in by_host_variant]
            values = [x for x in values if x is not None]
            if values:
                majority[(v, field)] = Counter(map(str, values)).most_common(1)[0][0]
    clocks = {h: host_clock([r for r in docs if rt.host_of(r) == h]) for h in hosts}
    known_clocks = [c for c in clocks.values() if c is not None]
    fleet_clock = median(known_clocks) if known_clocks else None

    def differs(host: str) -> list[dict]:
        found: dict[tuple[str, str, str], list[str]] = {}
        for v in variants:
            r = by_host_variant.get((host, v))
            if r is None:
                continue
            for field in MANIFEST_FIELDS:
                value = rt.dig(r, "manifest", field)
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
            "simulated": any(rt.is_simulated(r) for r in docs)}


class FilterModule:
    """Ansible filter plugin: ``results | fleet_compare(threshold_pct=5)``."""

    def filters(self) -> dict:
        return {"fleet_compare": fleet_compare}
