"""The report's sections as :class:`~sparkbench.report.table.Table` objects, made from the numbers
of :mod:`sparkbench.report.numbers` and :mod:`sparkbench.report.compare`: per host in the seed's
layout, quality, image check, telemetry, failures, head-to-head, fleet, run to run with the
version bridge, and the manifest. Every cell is made by :mod:`sparkbench.report.table`'s
formatters; :func:`variant_cells` is also what the terminal table prints."""

from __future__ import annotations

import json
from collections import defaultdict

from . import compare
from . import numbers as n
from .table import DASH, Table, f, pct, redact, rng, sim, text, yesno

MAIN_HEADERS = ["variant", "single tok/s median (min–max)", "× bare", "2 par", "4 par", "8 par",
                "acceptance / pos", "mean acc. len", "TTFT p50 s", "% roofline or tok/step",
                "ready s", "model GiB"]


# --------------------------------------------------------------------------- per host

def variant_cells(row: dict) -> dict[str, str]:
    """The text of every figure of one variant row (``results.json`` → ``rows[]``), keyed by the
    row's key: the one formatting report.md, report.html and the terminal table share."""
    if row["pct_of_roofline"] is not None:
        roof = f"{row['pct_of_roofline']:.0f} %"
    elif row["tokens_per_step"] is not None:
        roof = f"{row['tokens_per_step']:.2f} tok/step"
    else:
        roof = DASH
    return {"single_tok_s": rng(row["single_tok_s"], row["single_min"], row["single_max"], 2),
            "speedup_vs_bare": f(row["speedup_vs_bare"], 2, "×"),
            **{f"combined_{c}": f(row[f"combined_{c}"]) for c in n.CONCURRENCIES},
            "acceptance_per_position": " / ".join(f"{a:.2f}" for a in row["acceptance_per_position"]) or DASH,
            "mean_acceptance_length": f(row["mean_acceptance_length"], 2),
            "ttft_p50_s": f(row["ttft_p50_s"], 3),
            "pct_of_roofline": roof,
            "time_to_ready_s": f(row["time_to_ready_s"], 0),
            "model_memory_gib": f(row["model_memory_gib"], 1)}


def main_row(row: dict) -> list[str]:
    """One variant row of the seed-layout table."""
    if row["status"] == "failed":
        return [row["variant"], "failed (see Failures)"] + [DASH] * (len(MAIN_HEADERS) - 2)
    name = row["variant"] + (" (incomplete)" if row["status"] == "incomplete" else "")
    c = variant_cells(row)
    return [name, c["single_tok_s"], c["speedup_vs_bare"], c["combined_2"], c["combined_4"], c["combined_8"],
            c["acceptance_per_position"], c["mean_acceptance_length"], c["ttft_p50_s"], c["pct_of_roofline"],
            c["time_to_ready_s"], c["model_memory_gib"]]


def roofline_note(rows: list[dict]) -> str | None:
    """The line under a table that states each model's roofline and its basis, and why rows
    measured on a CPU have none."""
    bases = sorted({r["roofline_basis"] for r in rows if r["roofline_basis"]})
    roofs = sorted({(r["model"], round(r["roofline_tok_s"], 1)) for r in rows if r["roofline_tok_s"]})
    skipped = list(dict.fromkeys(r.get("roofline_skipped") for r in rows if r.get("roofline_skipped")))
    parts = []
    if roofs:
        parts.append("roofline (bandwidth / bytes per token, " + ", ".join(bases) + "): "
                     + "; ".join(f"{m} {v:.1f} tok/s" for m, v in roofs)
                     + " — bare rows show % of it, MTP rows tokens per verify step")
    parts += skipped
    return "; ".join(parts) if parts else None


def host_tables(data: dict) -> list[Table]:
    """One seed-layout table per host (``data`` = :func:`~sparkbench.report.numbers.report_tables`)."""
    out = []
    for host, rows in data["hosts"].items():
        simulated = any(r["simulated"] for r in rows)
        notes = ["decode tok/s excludes TTFT; single = median of the runs (min–max); "
                 "2/4/8 par = combined tok/s of N parallel streams"]
        roof = roofline_note(rows)
        if roof:
            notes.append(roof)
        out.append(Table(f"host-{host}", sim(f"Host {host}", simulated), MAIN_HEADERS,
                         [main_row(r) for r in rows], notes))
    return out


def quality_table(data: dict) -> Table | None:
    """Quality per question: status and reasoning tokens."""
    if not data["quality"]:
        return None
    headers = ["host", "variant"] + list(n.QUALITY_IDS) + ["passed"]
    rows = []
    for q in data["quality"]:
        cells = [q["host"], q["variant"]]
        for qid in n.QUALITY_IDS:
            status = q[f"q_{qid}"]
            tokens = q[f"rt_{qid}"]
            cells.append(DASH if status is None else (status + (f" ({tokens:.0f} rt)" if tokens is not None else "")))
        cells.append(f"{q['passed']}/{len(n.QUALITY_IDS)}")
        rows.append(cells)
    return Table("quality", "Quality check", headers, rows,
                 ["status per question; (N rt) = reasoning tokens spent; truncated = the budget ran out before an answer"])


def image_table(data: dict) -> Table | None:
    """Image input check: answer right, spec decode active."""
    if not data["image"]:
        return None
    rows = [[i["host"], i["variant"], text(i["status"]), text(i["answer"]), text(i["expected"]),
             yesno(i["answer_right"]), yesno(i["spec_decode_active"])] for i in data["image"]]
    return Table("image", "Image input check",
                 ["host", "variant", "status", "answer", "expected", "answer right", "spec decode active"], rows)


def telemetry_table(data: dict) -> Table | None:
    """Power, clocks and tokens per joule where telemetry was recorded."""
    if not data["telemetry"]:
        return None
    rows = [[t["host"], t["variant"], t["phase"], f(t["power_w_mean"]), f(t["sm_clock_mhz_mean"], 0),
             f(t["temp_c_max"], 0), f(t["tokens_per_joule"], 3)] for t in data["telemetry"]]
    return Table("telemetry", "Telemetry", ["host", "variant", "phase", "power W (mean)", "SM clock MHz",
                                            "temp °C (max)", "tok/J"], rows)


def failures_table(data: dict) -> Table | None:
    """Failed and incomplete variants with stage, reason and remedy."""
    if not data["failures"]:
        return None
    rows = [[x["host"], x["variant"], text(x["status"]), text(x["stage"]), text(x["reason"]), text(x["remedy"])]
            for x in data["failures"]]
    return Table("failures", "Failures", ["host", "variant", "status", "stage", "reason", "remedy"], rows)


def per_host(results: list[dict]) -> tuple[dict, list[Table], list[Table]]:
    """(the per-host numbers, the host tables, the quality/image/telemetry/failure tables)."""
    data = n.report_tables(results)
    extras = [t for t in (quality_table(data), image_table(data), telemetry_table(data), failures_table(data))
              if t is not None]
    return data, host_tables(data), extras


# --------------------------------------------------------------------------- head to head

def _noise(value: bool | None) -> str:
    return DASH if value is None else ("within noise" if value else "beyond noise")


def describe_range(lo: float | None, hi: float | None, configs: list[str]) -> str:
    """``12.0–16.7 % slower`` / ``3.1 % faster`` / ``−0.5 … +0.9 %`` over ``configs``."""
    if lo is None or hi is None:
        return "not measured"
    where = f" ({', '.join(configs)})" if configs else ""
    if hi < 0:
        a, b = abs(hi), abs(lo)
        span = f"{a:.1f} %" if round(a, 1) == round(b, 1) else f"{a:.1f}–{b:.1f} %"
        return f"{span} slower{where}"
    if lo > 0:
        span = f"{lo:.1f} %" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}–{hi:.1f} %"
        return f"{span} faster{where}"
    return f"{pct(lo)} … {pct(hi)}{where}"


def sentence(s: dict) -> str:
    """One summary line for a build against the reference build on one host."""
    line = (f"{s['host']} · {s['model_key']}: {s['build']} vs {s['reference_build']} — single-stream "
            f"{describe_range(s['single_pct_min'], s['single_pct_max'], s['single_configs'])}")
    if s["c8_configs"]:
        line += f"; at 8 parallel {describe_range(s['c8_pct_min'], s['c8_pct_max'], s['c8_configs'])}"
        if s["c8_all_within_noise"]:
            line += " — within noise: the gap is gone"
        elif s["c8_all_within_noise"] is False:
            line += " — beyond noise"
    return sim(line, s["simulated"])


def head_to_head(results: list[dict], reference_build: str | None = None) -> tuple[dict, list[str], Table | None]:
    """(the numbers, summary sentences, comparison table or None when no model has two builds)."""
    data = compare.head_to_head(results, reference_build=reference_build)
    if not data["rows"]:
        return data, [], None
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["host"], row["model_key"], row["config"], row["build"]), {})[row["metric"]] = row
    rows = []
    for (host, mkey, config, build), m in by_key.items():
        s = m["single"]
        rows.append([host, mkey, config, f"{build} vs {s['reference_build']}", f(s["reference_value"]),
                     f(s["value"]), pct(s["pct_diff"]), _noise(s["within_noise"]),
                     pct(m["combined_2"]["pct_diff"]), pct(m["combined_4"]["pct_diff"]),
                     pct(m["combined_8"]["pct_diff"]), _noise(m["combined_8"]["within_noise"])])
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("head-to-head", sim("Head-to-head: builds of the same model", simulated),
                  ["host", "model", "config", "builds", "ref tok/s", "tok/s", "Δ single", "single noise",
                   "Δ 2 par", "Δ 4 par", "Δ 8 par", "8 par noise"], rows,
                  [f"Δ = (build − reference) / reference; reference build = {data['reference_build']} "
                   "(first listed in the matrix)",
                   "single: within noise when the min–max ranges overlap; combined (measured once): when "
                   "|Δ| ≤ the larger single-stream spread of the two variants"])
    return data, [sentence(s) for s in data["summary"]], table


# --------------------------------------------------------------------------- fleet

def fleet(results: list[dict], threshold_pct: float = 5.0) -> tuple[dict, list[Table], list[str]]:
    """(the numbers, tables, flag lines). No tables for a one-host run."""
    data = compare.fleet_compare(results, threshold_pct=threshold_pct)
    if len(data["hosts"]) < 2:
        return data, [], []
    hosts = data["hosts"]
    rows = []
    for v in data["variants"]:
        cells = data["matrix"].get(v, {})
        if not cells:
            continue
        row = [v, f(data["fleet_median"].get(v))]
        for h in hosts:
            row.append(f"{cells[h]:.1f} ({pct(data['deviation_pct'][v][h])})" if h in cells else DASH)
        rows.append(row)
    rows.append(["host deviation (median)", ""] + [pct(data["host_deviation_pct"].get(h)) for h in hosts])
    notes = [f"cell = single-stream tok/s (deviation from the fleet median); flagged: host deviation "
             f"below −{data['threshold_pct']:g} %"]
    if not data["can_flag"]:
        notes.append(f"fewer than {compare.MIN_HOSTS_TO_FLAG} hosts measured: no host is flagged "
                     "(with two hosts the median is their mean)")
    matrix = Table("fleet", sim("Fleet: host × variant", data["simulated"]),
                   ["variant", "fleet median"] + hosts, rows, notes)
    flag_rows, lines = [], []
    for fl in data["flagged"]:
        diffs = "; ".join(f"{d['field']} {d['value']} (fleet: {d['majority']})" for d in fl["differs"]) \
            or "no manifest difference recorded"
        flag_rows.append([fl["host"], pct(fl["deviation_pct"]), diffs])
        lines.append(sim(f"{fl['host']} is {abs(fl['deviation_pct']):.1f} % below the fleet median "
                         f"(threshold {data['threshold_pct']:g} %); differs in: {diffs}", data["simulated"]))
    tables = [matrix]
    if flag_rows:
        tables.append(Table("fleet-flagged", "Flagged hosts", ["host", "deviation", "differs from the majority in"],
                            flag_rows))
    return data, tables, lines


# --------------------------------------------------------------------------- run to run

def run_to_run(results: list[dict], baseline: list[dict], baseline_id: str,
               threshold_pct: float = 2.5) -> tuple[dict, list[Table], str]:
    """(the numbers, [bridge table, deltas table], bridge verdict line)."""
    data = compare.run_compare(results, baseline, threshold_pct=threshold_pct)
    simulated = data["simulated"]
    bridge = data["bridge"]
    verdict = sim(f"Version bridge against run {baseline_id}: {bridge['verdict']}", simulated)
    tables = []
    if bridge["pairs"]:
        rows = [[r["host"], r["variant"], f"{text(r['baseline_vllm'])} → {text(r['current_vllm'])}",
                 f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
                 DASH if r["single_pct"] is None else ("yes" if abs(r["single_pct"]) <= bridge["threshold_pct"] else "no")]
                for r in bridge["pairs"]]
        tables.append(Table("bridge", sim("Version bridge", simulated),
                            ["host", "variant", "vLLM", "baseline tok/s", "current tok/s", "Δ",
                             f"within {bridge['threshold_pct']:g} %"], rows,
                            [f"comparable when every bridge variant's single-stream |Δ| ≤ "
                             f"{bridge['threshold_pct']:g} % (the seed's tolerance)", bridge["verdict"]]))
    rows = [[r["host"], r["variant"], f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
             _noise(r["within_noise"]), f(r["baseline_combined_8"]), f(r["current_combined_8"]),
             pct(r["combined_8_pct"])]
            for r in data["rows"]]
    notes = ["Δ = (current − baseline) / baseline; within noise when the single-stream min–max ranges overlap"]
    if data["only_current"]:
        notes.append("only in this run: " + ", ".join(data["only_current"]))
    if data["only_baseline"]:
        notes.append(f"only in {baseline_id}: " + ", ".join(data["only_baseline"]))
    tables.append(Table("run-to-run", sim(f"Run to run: against {baseline_id}", simulated),
                        ["host", "variant", "baseline single", "current single", "Δ single", "noise",
                         "baseline 8 par", "current 8 par", "Δ 8 par"], rows, notes))
    return data, tables, verdict


# --------------------------------------------------------------------------- manifest

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


def manifest(results: list[dict]) -> tuple[dict, list[Table]]:
    """(summary dict, [fields table, launch commands table]).

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
    return summary, tables
