"""The per-host sections: one table per host (and per cluster) in the source article's layout, then
quality, image check, telemetry, run protocol and failures, and the hosts without any result. A
cluster variant (a result with a ``cluster`` block) is one unit, shown as ``"<name> (<head> +
<worker>)"`` (:func:`unit_cell`) with its layout (``gptoss-tp2 (TP=2)``, :func:`variant_label`).
:func:`variant_cells` is also what the terminal table prints."""

from __future__ import annotations

from ...measure.figures import COMBINED, MEAN_ACCEPTANCE_LENGTH, MODEL_MEMORY, SINGLE_DECODE, TIME_TO_READY, TTFT
from .. import numbers as n
from ..table import DASH, Section, Table, f, rng, sim, table_list, text, yesno

#: the figures of the main table after the per-concurrency columns, in column order
_AFTER = (MEAN_ACCEPTANCE_LENGTH, TTFT)
_LAST = (TIME_TO_READY, MODEL_MEMORY)
MAIN_HEADERS = (["variant", SINGLE_DECODE.header, "× bare", *(COMBINED.header_at(c) for c in n.CONCURRENCIES),
                 "acceptance / pos", *(x.header for x in _AFTER), "% roofline or tok/step"]
                + [x.header for x in _LAST])


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
    s = SINGLE_DECODE
    return {s.column: rng(row[s.column], row[s.low_column], row[s.high_column], s.digits),
            "speedup_vs_bare": f(row["speedup_vs_bare"], 2, "×"),
            **{COMBINED.column_at(c): f(row[COMBINED.column_at(c)], COMBINED.digits) for c in n.CONCURRENCIES},
            "acceptance_per_position": " / ".join(f"{a:.2f}" for a in row["acceptance_per_position"]) or DASH,
            **{x.column: f(row[x.column], x.digits) for x in (*_AFTER, *_LAST)},
            "pct_of_roofline": roof,
            "pct_of_measured_bandwidth": (DASH if row.get("pct_of_measured_bandwidth") is None
                                          else f"{row['pct_of_measured_bandwidth']:.0f} %"),
            # the serving phases (None where they did not run): "none" = no rate tried met the SLO
            "slo_best_rate": (DASH if row.get("slo_target_share") is None else
                              "none" if row.get("slo_best_rate") is None else f"{row['slo_best_rate']:g}"),
            "tools": (DASH if row.get("tools_total") is None else f"{row['tools_passed']}/{row['tools_total']}")}


#: the main table's column for the highest rate meeting the SLO (only where serving ran)
SLO_RATE_HEADER = "max rate meeting SLO req/s"
#: where a host's variants carry the bandwidth probe: the data-sheet column renamed, and beside it
#: the share of the roofline at the measured bandwidth
ROOF_HEADER, ROOF_DATASHEET_HEADER = "% roofline or tok/step", "% data-sheet roofline or tok/step"
MEASURED_BW_HEADER = "% of measured bandwidth"


def unit_cell(row: dict) -> str:
    """The unit a row's figures come from: its host, or a cluster's ``"<name> (<head> + <worker>)"``."""
    return row.get("unit") or row["host"]


def variant_label(row: dict) -> str:
    """The variant name, with its parallel layout for a cluster variant: ``gptoss-tp2 (TP=2)``."""
    return row["variant"] + (f" ({row['parallel']})" if row.get("parallel") else "")


def main_row(row: dict) -> list[str]:
    """One variant row of a host table (the source article's layout)."""
    if row["status"] == "failed":
        return [variant_label(row), "failed (see Failures)"] + [DASH] * (len(MAIN_HEADERS) - 2)
    name = variant_label(row) + (" (incomplete)" if row["status"] == "incomplete" else "")
    c = variant_cells(row)
    return ([name, c[SINGLE_DECODE.column], c["speedup_vs_bare"], *(c[COMBINED.column_at(x)] for x in n.CONCURRENCIES),
             c["acceptance_per_position"], *(c[x.column] for x in _AFTER), c["pct_of_roofline"]]
            + [c[x.column] for x in _LAST])


def roofline_note(rows: list[dict]) -> str | None:
    """The line under a table that states each model's roofline and its basis, and why rows
    measured on a CPU have none."""
    bases = sorted({r["roofline_basis"] for r in rows if r["roofline_basis"]})
    roofs = sorted({(r["model"], round(r["roofline_tok_s"], 1)) for r in rows if r["roofline_tok_s"]})
    skipped = list(dict.fromkeys(r.get("roofline_skipped") for r in rows if r.get("roofline_skipped")))
    parts = []
    if any(r.get("parallel") for r in rows):  # a cluster's table: each layout has its own bound and basis
        laid = sorted({(r["model"], r.get("parallel") or "one node", round(r["roofline_tok_s"], 1), r["roofline_basis"])
                       for r in rows if r["roofline_tok_s"]})
        if laid:
            parts.append("roofline (bandwidth / bytes per token): "
                         + "; ".join(f"{m} {p} {v:.1f} tok/s ({b})" for m, p, v, b in laid)
                         + " — the all-reduce and stage hand-offs over the link are not in the bound")
        return "; ".join(parts + skipped) or None
    if roofs:
        parts.append("roofline (bandwidth / bytes per token, " + ", ".join(bases) + "): "
                     + "; ".join(f"{m} {v:.1f} tok/s" for m, v in roofs)
                     + " — bare rows show % of it, MTP rows tokens per verify step")
    parts += skipped
    return "; ".join(parts) if parts else None


def with_measured_bandwidth(headers: list[str], cells: list[list[str]], group: list[dict]) -> list[str]:
    """Where a row carries the bandwidth probe: "% of measured bandwidth" beside the data-sheet
    roofline (cells changed in place), and the notes that say how to read it and which variants'
    figures a drop between the probes marks; no column and no note otherwise."""
    if not any(r.get("bandwidth_gbps") is not None for r in group):
        return []
    at = headers.index(ROOF_HEADER)
    headers[at:at + 1] = [ROOF_DATASHEET_HEADER, MEASURED_BW_HEADER]
    for r, c in zip(group, cells):
        c.insert(at + 1, DASH if r["status"] == "failed" else variant_cells(r)["pct_of_measured_bandwidth"])
    figures = [r["bandwidth_gbps"] for r in group if r.get("bandwidth_gbps") is not None]
    methods = ", ".join(sorted({str(r["bandwidth_method"]) for r in group if r.get("bandwidth_method")}))
    span = f"{min(figures):.0f}" + (f"–{max(figures):.0f}" if max(figures) - min(figures) >= 0.5 else "")
    notes = [f"{MEASURED_BW_HEADER} = single-stream median / the roofline at the bandwidth the unit's probe "
             f"measured before the variant ({span} GB/s, {methods}; the data-sheet roofline uses the hardware "
             "profile's figure): near 100 % the decode streams all the unit can read"]
    notes += [f"⚠ {r['variant']}: {r['bandwidth_drop']}" for r in group if r.get("bandwidth_drop")]
    return notes


def host_tables(data: dict) -> list[Table]:
    """One table per host in the source article's layout (``data`` =
    :func:`~sparkbench.report.numbers.report_tables`); a cluster's variants (rows with a ``unit``,
    written under the head host) get a table of their own, "Cluster <name> (<head> + <worker>)",
    right after the head's, each variant labelled with its parallel layout (``gptoss-tp2 (TP=2)``)."""
    out = []
    for host, all_rows in data["hosts"].items():
        rows = [r for r in all_rows if not r.get("unit")]
        units: dict[str, list[dict]] = {}
        for r in all_rows:
            if r.get("unit"):
                units.setdefault(r["unit"], []).append(r)
        for key, title, group in ([(f"host-{host}", f"Host {host}", rows)] if rows else []) + [
                (f"cluster-{g[0].get('cluster') or unit}", f"Cluster {unit}", g) for unit, g in units.items()]:
            simulated = any(r["simulated"] for r in group)
            notes = ["decode tok/s excludes TTFT; single = median of the runs (min–max); "
                     "2/4/8 par = combined tok/s of N parallel streams"]
            if key.startswith("cluster-"):
                notes.append(f"one unit: the model served across {' + '.join(group[0].get('members') or [])} "
                             f"(Ray), measured from the head {host}; compared with one Spark under "
                             "\"Cluster vs one unit\", never a peer in the fleet")
            roof = roofline_note(group)
            if roof:
                notes.append(roof)
            headers, cells = list(MAIN_HEADERS), [main_row(r) for r in group]
            notes += with_measured_bandwidth(headers, cells, group)
            if any(r.get("slo_target_share") is not None for r in group):  # the arrival-rate phase ran
                headers.append(SLO_RATE_HEADER)
                for r, c in zip(group, cells):
                    c.append(DASH if r["status"] == "failed" else variant_cells(r)["slo_best_rate"])
                notes.append(f"{SLO_RATE_HEADER} = the highest arrival rate whose requests met every SLO for the "
                             "target share (≥ 90 % unless measure.py searched with another), see \"Serving: goodput "
                             "by arrival rate\"; none = no rate tried met it")
            out.append(Table(key, sim(title, simulated), headers, cells, notes))
    return out


def quality_table(data: dict) -> Table | None:
    """Quality per question: status and reasoning tokens."""
    if not data["quality"]:
        return None
    headers = ["host", "variant"] + list(n.QUALITY_IDS) + ["passed"]
    rows = []
    for q in data["quality"]:
        cells = [unit_cell(q), q["variant"]]
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
    rows = [[unit_cell(i), i["variant"], text(i["status"]), text(i["answer"]), text(i["expected"]),
             yesno(i["answer_right"]), yesno(i["spec_decode_active"])] for i in data["image"]]
    return Table("image", "Image input check",
                 ["host", "variant", "status", "answer", "expected", "answer right", "spec decode active"], rows)


def telemetry_table(data: dict) -> Table | None:
    """Power, clocks and tokens per joule where telemetry was recorded."""
    if not data["telemetry"]:
        return None
    rows = [[unit_cell(t), t["variant"], t["phase"], f(t["power_w_mean"]), f(t["sm_clock_mhz_mean"], 0),
             f(t["temp_c_max"], 0), f(t["tokens_per_joule"], 3)] for t in data["telemetry"]]
    return Table("telemetry", "Telemetry", ["host", "variant", "phase", "power W (mean)", "SM clock MHz",
                                            "temp °C (max)", "tok/J"], rows)


def protocol_table(data: dict) -> Table | None:
    """Run protocol per measurement: the clock under load against its maximum, memory and page
    cache before → after, swap, kernel log, the page-cache drop, and the flags with their reasons."""
    rows = []
    for p in data.get("protocol") or []:
        if p["clock_under_load_mhz"] is not None and p["clock_max_mhz"]:
            clock = f"{p['clock_under_load_mhz']:.0f} of {p['clock_max_mhz']:.0f} ({p['clock_samples']:.0f} samples)"
        else:
            clock = text(p["clock_reason"]) if p["clock_reason"] else DASH
        mem = (f"{f(p['mem_available_before_gib'], 1)} → {f(p['mem_available_after_gib'], 1)}"
               if p["mem_available_before_gib"] is not None else DASH)
        cache = (f"{f(p['cached_before_gib'], 1)} → {f(p['cached_after_gib'], 1)}"
                 if p["cached_before_gib"] is not None else DASH)
        kernel = (f"{p['kernel_new_lines']} new line(s)" if p["kernel_new_lines"] is not None
                  else text(p["kernel_reason"]) if p["kernel_reason"] else DASH)
        dc = p["drop_caches"]
        drop = DASH if not dc else ("dropped" if dc.get("done") else
                                    ("not requested" if not dc.get("requested") else f"not done: {text(dc.get('reason'))}"))
        flags = "; ".join(f"{x.get('code')}: {x.get('reason')}" for x in p["flags"]) or "none"
        rows.append([unit_cell(p), sim(p["variant"], p["simulated"]), clock, mem, cache,
                     DASH if p["swap_pages"] is None else f"{p['swap_pages']:.0f}", kernel, drop, text(flags)])
    if not rows:
        return None
    headers = ["host", "variant", "clock under load MHz (of max)", "MemAvailable GiB before → after",
               "page cache GiB before → after", "swap pages", "kernel log", "page cache drop", "flags"]
    notes = ["clock under load = median graphics clock of the samples taken while requests were in flight "
             "and the GPU was busy (utilization ≥ 50 %); clock_capped below 50 % of the maximum (the "
             "throttle check fails a GB10 below 1400 of 3003 MHz); host_swapped above 256 pages swapped "
             "during the measured phases; gpu_xid / oom_kill on new kernel-log lines"]
    probed = [bandwidth_cell(p) for p in data["protocol"]]
    if any(c != DASH for c in probed):  # the bandwidth probes around each variant, where any ran
        headers.insert(-1, "bandwidth GB/s before → after")
        for row, cell in zip(rows, probed):
            row.insert(-1, cell)
        notes.append("bandwidth = the unit's probe before the variant's launch and after its server stopped (a "
                     "streaming read, sparkbench.bandwidth); bandwidth_drop when the one after reads below 0.9 × "
                     "the one before, their quartiles apart")
    return Table("protocol", "Run protocol", headers, rows, notes)


def bandwidth_cell(p: dict) -> str:
    """The probes around a variant: ``231 → 229``, the one after missing as a dash, and why the one
    before gave no figure."""
    before, after = p.get("bandwidth_before_gbps"), p.get("bandwidth_after_gbps")
    if before is None and p.get("bandwidth_reason"):
        return text(f"no figure: {p['bandwidth_reason']}")
    if before is None and after is None:
        return DASH
    return f"{f(before, 0)} → {f(after, 0)}"


def failures_table(data: dict) -> Table | None:
    """Failed and incomplete variants with stage, reason and remedy."""
    if not data["failures"]:
        return None
    rows = [[unit_cell(x), x["variant"], text(x["status"]), text(x["stage"]), text(x["reason"]), text(x["remedy"])]
            for x in data["failures"]]
    return Table("failures", "Failures", ["host", "variant", "status", "stage", "reason", "remedy"], rows)


def per_host(results: list[dict]) -> list[Section]:
    """The per-host sections, in print order: ``rows`` (every variant's row; the host and cluster
    tables), ``quality``, ``image``, ``telemetry``, ``protocol`` (a summary line per run-protocol
    flag) and ``failures`` (a summary line per failed or incomplete variant)."""
    data = n.report_tables(results)
    rows = [row for host_rows in data["hosts"].values() for row in host_rows]
    return [Section("rows", "Per host", rows, host_tables(data)),
            Section("quality", "Quality check", data["quality"], table_list(quality_table(data))),
            Section("image", "Image input check", data["image"], table_list(image_table(data))),
            Section("telemetry", "Telemetry", data["telemetry"], table_list(telemetry_table(data))),
            Section("protocol", "Run protocol", data["protocol"], table_list(protocol_table(data)),
                    [f"{p['host']}/{p['variant']}: run protocol — {fl.get('reason')}"
                     for p in data["protocol"] for fl in p["flags"]]),
            Section("failures", "Failures", data["failures"], table_list(failures_table(data)),
                    [f"{x.get('unit') or x['host']}/{x['variant']}: {x['status']} at {x['stage'] or '?'} — "
                     f"{x['reason'] or '?'}" for x in data["failures"]])]


def missing_hosts(missing: list[dict]) -> Section:
    """"Hosts without results": ``missing`` = ``[{"host", "reason"}]``
    (:func:`sparkbench.report.cli.hosts_without_results`), a table row and a summary line each."""
    table = (Table("hosts_without_results", "Hosts without results", ["host", "reason"],
                   [[x["host"], x["reason"]] for x in missing]) if missing else None)
    return Section("hosts_without_results", "Hosts without results", missing, table_list(table),
                   [f"{x['host']}: no results — {x['reason']}" for x in missing])
