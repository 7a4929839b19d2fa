"""What the run ran on: the manifest (one value per field, else per variant or per host) with the
launch commands, the kernels vLLM chose (read off each server's startup log), and each host's
history over the runs stored beside this one (:mod:`sparkbench.history`)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .. import numbers as n
from ..table import DASH, Section, Table, f, pct, redact, sim, table_list, text

MANIFEST_SUMMARY_FIELDS = ("simulated", "backend", "vllm_version", "image", "image_id", "image_digest", "model",
                           "model_revision", "driver", "cuda", "gpu", "os", "kernel", "hostname",
                           "sparkbench_version")


def _manifest_value(result: dict, field: str) -> str | None:
    """The manifest value as text, None when the result does not record it."""
    if field == "simulated":
        return "yes" if n.is_simulated(result) else "no"
    v = n.dig(result, "manifest", field)
    return None if v is None or v == "" else str(v)


def _launch_command(result: dict) -> str | None:
    """The recorded launch command (secrets redacted): ``launch_command``, ``launch.command`` or
    ``manifest.launch_command``."""
    return redact(result.get("launch_command") or n.dig(result, "launch", "command")
                  or n.dig(result, "manifest", "launch_command"))


def manifest(results: list[dict]) -> Section:
    """"Manifest": the summary dict (``results.json`` key ``manifest``), the fields table and the
    launch commands table.

    A field with one recorded value across the run shows that value; one whose hosts all hold the
    same set of values differs only between variants ("per variant: …"); otherwise the values are
    listed per host. Results that do not record a field (e.g. a variant failed before the manifest
    was taken) are left out of that field."""
    values: dict[str, set[str]] = defaultdict(set)
    per_host: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in results:
        for field in MANIFEST_SUMMARY_FIELDS:
            val = _manifest_value(r, field)
            if val is None:
                continue
            values[field].add(val)
            per_host[field][n.host_of(r)].add(val)
    rows = []
    summary: dict[str, object] = {}
    for field in MANIFEST_SUMMARY_FIELDS:
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
    settings = {json.dumps(n.dig(r, "manifest", "settings") or r.get("settings"), sort_keys=True, ensure_ascii=False)
                for r in results if n.is_measured(r) and (n.dig(r, "manifest", "settings") or r.get("settings"))}
    rows.append(["measurement settings", "; ".join(sorted(settings)) or DASH])
    summary["settings"] = sorted(settings)
    fields = Table("manifest", "Manifest", ["field", "value"], rows,
                   ["one value = the same for every host and variant of the run"])
    cmds = []
    seen = set()
    for r in n.sort_results(results):
        cmd = _launch_command(r)
        key = (n.variant_name(r), cmd)
        if cmd and key not in seen:
            seen.add(key)
            cmds.append([n.variant_name(r), cmd, text(r.get("config_hash"))])
    tables = [fields]
    if cmds:
        tables.append(Table("launch", "Launch commands (secrets redacted)", ["variant", "command", "config hash"], cmds))
    summary["launch_commands"] = {row[0]: row[1] for row in cmds}
    return Section("manifest", "Manifest", summary, tables)


HISTORY_RUNS = 8  # runs per host × variant the report's trend shows (the newest)


def host_trends(run_path, results: list[dict]) -> dict[str, list[dict]]:
    """Per host of the run, its history rows for the run's variants (the history index of the
    results folder holding the run; an index that does not exist yet is built in memory, not
    written): what the "History" tables and the trend chart show."""
    from ... import history as history_mod

    hosts = sorted({n.host_of(r) for r in results if n.host_of(r)})
    if not hosts:
        return {}
    return history_mod.host_trends(Path(run_path).parent, hosts, {n.variant_name(r) for r in results})


def history_trend(run_path, results: list[dict], trends: dict[str, list[dict]] | None = None) -> list[Table]:
    """"History" tables: per host of the run, the single-stream median of each of its variants
    over the stored runs (``trends`` from :func:`host_trends`, computed when not given), newest
    :data:`HISTORY_RUNS` runs, with Δ vs the previous run and vs the first
    (sparkbench.history.trend). Hosts with only this run get no table."""
    hosts = sorted({n.host_of(r) for r in results if n.host_of(r)})
    if not hosts:
        return []
    if trends is None:
        trends = host_trends(run_path, results)
    tables = []
    for host in hosts:
        rows_ = trends.get(host) or []
        if len({r["run_id"] for r in rows_}) < 2:
            continue
        by_variant: dict[str, list[dict]] = defaultdict(list)
        for r in rows_:
            by_variant[r["variant"]].append(r)
        cells = []
        for variant in sorted(by_variant):
            for r in by_variant[variant][-HISTORY_RUNS:]:
                cells.append([variant, text(r["run_id"]), f(r["single_median"], 2) if r["single_median"] is not None
                              else text(r["status"]), pct(r["delta_prev_pct"]), pct(r["delta_first_pct"]),
                              f(r["clock_under_load_mhz"], 0), text(r["driver"]), text(r["health"])])
        simulated = any(r["simulated"] for r in rows_)
        tables.append(Table(f"history-{host}", sim(f"History: {host}", simulated),
                            ["variant", "run", "single tok/s", "Δ prev", "Δ first", "clock MHz", "driver", "health"],
                            cells, ["Δ prev / Δ first = (median − that run's) / that run's; the runs stored beside "
                                    "this one (results/index.sqlite, rebuilt from the JSON when stale); "
                                    "`scripts/sparkbench history HOST` prints the same"]))
    return tables


KERNEL_HEADERS = ["host", "variant", "attention", "MoE backend", "GEMM kernel", "CUDA graphs", "KV cache tokens",
                  "max concurrency", "model load"]


def kernels_table(results: list[dict]) -> Table | None:
    """"Kernels vLLM chose": per variant, what its server's startup log says it picked (the
    ``kernels`` block, :mod:`sparkbench.engine_log`): attention backend, MoE backend (with its
    quantisation), NVFP4 GEMM kernel (and the Marlin FP4 weight-only warning), CUDA graphs
    (capture time and memory), KV-cache tokens, maximum concurrency (vLLM's ratio of KV-cache
    tokens to tokens per request), model load (GiB and seconds). "–" where the log does not
    say; None when no result carries a ``kernels`` block."""
    from ...engine_log import summary

    rows, simulated = [], False
    for r in n.sort_results(results):
        k = r.get("kernels")
        if not isinstance(k, dict):
            continue
        simulated = simulated or n.is_simulated(r)
        s = summary(k)
        rows.append([n.unit_of(r), n.variant_name(r) + (" (failed)" if r.get("status") == "failed" else "")]
                    + [text(redact(s[c])) for c in ("attention", "moe", "gemm", "cuda_graphs", "kv_cache_tokens",
                                                     "max_concurrency", "load")])
    if not rows:
        return None
    notes = ["read off each server's startup log (vLLM's own lines; `kernels.lines` in the result file quotes "
             "them); – = the log does not say (a CPU build logs no attention backend for a dense model)"]
    if simulated:
        notes.append("simulated rows: the simulator prints these lines in vLLM's formats from its flags and "
                     "profiles; they describe the simulation, not a GPU")
    return Table("kernels", sim("Kernels vLLM chose", simulated), KERNEL_HEADERS, rows, notes)


def kernels(results: list[dict]) -> Section:
    """"Kernels vLLM chose" (:func:`kernels_table`); tables only, nothing in ``results.json``."""
    return Section("kernels", "Kernels vLLM chose", None, table_list(kernels_table(results)), in_doc=False)


def history(run_path, results: list[dict]) -> Section:
    """"History": the hosts' trends (:func:`host_trends`, what the trend chart draws) as its
    numbers and the tables of :func:`history_trend`; nothing in ``results.json``."""
    trends = host_trends(run_path, results)
    return Section("history", "History", trends, history_trend(run_path, results, trends), in_doc=False)
