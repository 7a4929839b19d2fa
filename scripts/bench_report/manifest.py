"""Manifest summary: what was measured with what — fleet-wide fields with one value, the fields that
vary (per host), and each variant's exact launch command (secrets redacted)."""

from __future__ import annotations

import json
from collections import defaultdict

from .filters import report_tables as rt
from .table import DASH, Table, redact, text

FIELDS = ("simulated", "vllm_version", "image", "image_id", "image_digest", "model", "model_revision",
          "driver", "cuda", "gpu", "os", "kernel", "hostname", "sparkbench_version")


def _value(result: dict, field: str) -> str | None:
    """The manifest value as text, None when the result does not record it."""
    if field == "simulated":
        return "yes" if rt.is_simulated(result) else "no"
    v = rt.dig(result, "manifest", field)
    return None if v is None or v == "" else str(v)


def build(results: list[dict]) -> tuple[dict, list[Table]]:
    """(summary dict, [fields table, launch commands table]).

    A field with one recorded value across the run shows that value; one whose hosts all hold the
    same set of values differs only between variants ("per variant: …"); otherwise the values are
    listed per host. Results that do not record a field (e.g. a variant failed before the manifest
    was taken) are left out of that field."""
    values: dict[str, set[str]] = defaultdict(set)
    per_host: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in results:
        for field in FIELDS:
            val = _value(r, field)
            if val is None:
                continue
            values[field].add(val)
            per_host[field][rt.host_of(r)].add(val)
    rows = []
    summary: dict[str, object] = {}
    for field in FIELDS:
        vals = sorted(values.get(field, set()))
        if len(vals) <= 1:
            rows.append([field, vals[0] if vals else DASH])
            summary[field] = vals[0] if vals else None
            continue
        host_sets = {frozenset(v) for v in per_host[field].values()}
        if len(host_sets) == 1:
            rows.append([field, "per variant: " + ", ".join(vals)])
            summary[field] = {"per_variant": vals}
        else:
            by_host = "; ".join(f"{h}: {', '.join(sorted(v))}" for h, v in sorted(per_host[field].items()))
            rows.append([field, f"varies by host — {by_host}"])
            summary[field] = {h: sorted(v) for h, v in per_host[field].items()}
    settings = {json.dumps(rt.dig(r, "manifest", "settings") or r.get("settings"), sort_keys=True, ensure_ascii=False)
                for r in results if rt.is_measured(r) and (rt.dig(r, "manifest", "settings") or r.get("settings"))}
    rows.append(["measurement settings", "; ".join(sorted(settings)) or DASH])
    summary["settings"] = sorted(settings)
    fields = Table("manifest", "Manifest", ["field", "value"], rows,
                   ["one value = the same for every host and variant of the run"])
    cmds = []
    seen = set()
    for r in rt.sort_results(results):
        cmd = redact(r.get("launch_command") or rt.dig(r, "manifest", "launch_command"))
        key = (rt.variant_name(r), cmd)
        if cmd and key not in seen:
            seen.add(key)
            cmds.append([rt.variant_name(r), cmd, text(r.get("config_hash"))])
    tables = [fields]
    if cmds:
        tables.append(Table("launch", "Launch commands (secrets redacted)", ["variant", "command", "config hash"], cmds))
    summary["launch_commands"] = {row[0]: row[1] for row in cmds}
    return summary, tables
