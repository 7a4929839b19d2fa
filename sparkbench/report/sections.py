"""The report's sections as :class:`~sparkbench.report.table.Table` objects, made from the numbers
of :mod:`sparkbench.report.numbers` and :mod:`sparkbench.report.compare`: per host in the seed's
layout, quality, image check, telemetry, failures, head-to-head, cluster vs one unit, fleet, run
to run with the version bridge, the manifest and the clusters' manifest. A cluster variant (a
result with a ``cluster`` block) is one unit, shown as ``"<name> (<head> + <worker>)"``
(:func:`unit_cell`) with its layout (``gptoss-tp2 (TP=2)``, :func:`variant_label`). Every cell is
made by :mod:`sparkbench.report.table`'s formatters; :func:`variant_cells` is also what the
terminal table prints."""

from __future__ import annotations

import json
from collections import defaultdict

from ..verdict import MIN_REQUESTS
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
            "model_memory_gib": f(row["model_memory_gib"], 1),
            # the serving phases (None where they did not run): "none" = no rate tried met the SLO
            "slo_best_rate": (DASH if row.get("slo_target_share") is None else
                              "none" if row.get("slo_best_rate") is None else f"{row['slo_best_rate']:g}"),
            "tools": (DASH if row.get("tools_total") is None else f"{row['tools_passed']}/{row['tools_total']}")}


#: the main table's column for the highest rate meeting the SLO (only where serving ran)
SLO_RATE_HEADER = "max rate meeting SLO req/s"


def unit_cell(row: dict) -> str:
    """The unit a row's figures come from: its host, or a cluster's ``"<name> (<head> + <worker>)"``."""
    return row.get("unit") or row["host"]


def variant_label(row: dict) -> str:
    """The variant name, with its parallel layout for a cluster variant: ``gptoss-tp2 (TP=2)``."""
    return row["variant"] + (f" ({row['parallel']})" if row.get("parallel") else "")


def main_row(row: dict) -> list[str]:
    """One variant row of the seed-layout table."""
    if row["status"] == "failed":
        return [variant_label(row), "failed (see Failures)"] + [DASH] * (len(MAIN_HEADERS) - 2)
    name = variant_label(row) + (" (incomplete)" if row["status"] == "incomplete" else "")
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


def host_tables(data: dict) -> list[Table]:
    """One seed-layout table per host (``data`` = :func:`~sparkbench.report.numbers.report_tables`);
    a cluster's variants (rows with a ``unit``, written under the head host) get a table of their
    own, "Cluster <name> (<head> + <worker>)", right after the head's, each variant labelled with
    its parallel layout (``gptoss-tp2 (TP=2)``)."""
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
    return Table("protocol", "Run protocol",
                 ["host", "variant", "clock under load MHz (of max)", "MemAvailable GiB before → after",
                  "page cache GiB before → after", "swap pages", "kernel log", "page cache drop", "flags"], rows,
                 ["clock under load = median graphics clock of the samples taken while requests were in flight "
                  "and the GPU was busy (utilization ≥ 50 %); clock_capped below 50 % of the maximum (the "
                  "throttle check fails a GB10 below 1400 of 3003 MHz); host_swapped above 256 pages swapped "
                  "during the measured phases; gpu_xid / oom_kill on new kernel-log lines"])


def failures_table(data: dict) -> Table | None:
    """Failed and incomplete variants with stage, reason and remedy."""
    if not data["failures"]:
        return None
    rows = [[unit_cell(x), x["variant"], text(x["status"]), text(x["stage"]), text(x["reason"]), text(x["remedy"])]
            for x in data["failures"]]
    return Table("failures", "Failures", ["host", "variant", "status", "stage", "reason", "remedy"], rows)


def per_host(results: list[dict]) -> tuple[dict, list[Table], list[Table]]:
    """(the per-host numbers, the host tables, the quality/image/telemetry/failure tables)."""
    data = n.report_tables(results)
    extras = [t for t in (quality_table(data), image_table(data), telemetry_table(data), protocol_table(data),
                          failures_table(data))
              if t is not None]
    return data, host_tables(data), extras


# --------------------------------------------------------------------------- head to head

def verdict_cell(verdict: dict | None, unreliable: str | None = None) -> str:
    """A comparison's verdict text (:func:`sparkbench.verdict.compare_samples`), marked
    "(unreliable: drift)" when the host drifted."""
    out = verdict["text"] if verdict else DASH
    return out + (" (unreliable: drift)" if unreliable else "")


def _kinds_phrase(kinds: list[str], what: str) -> str:
    """`` — differs in 3 of 3 configurations`` / `` — no difference detectable: the gap is gone``
    for one summary line (``what`` = "configurations")."""
    if not kinds:
        return ""
    if all(k == "not_enough" for k in kinds):
        return " — not enough requests for a verdict"
    if all(k == "no_difference" for k in kinds):
        return " — no difference detectable: the gap is gone"
    differ = sum(k == "differs" for k in kinds)
    return f" — differs in {differ} of {len(kinds)} {what}"


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
            f"{describe_range(s['single_pct_min'], s['single_pct_max'], s['single_configs'])}"
            + _kinds_phrase(s["single_kinds"], "configurations"))
    if s["c8_configs"]:
        line += (f"; at 8 parallel {describe_range(s['c8_pct_min'], s['c8_pct_max'], s['c8_configs'])}"
                 + _kinds_phrase(s["c8_kinds"], "configurations"))
    if s.get("unreliable"):
        line += f" (unreliable: drift — {s['unreliable']})"
    return sim(line, s["simulated"])


def head_to_head(results: list[dict], reference_build: str | None = None,
                 drift: dict | None = None) -> tuple[dict, list[str], Table | None]:
    """(the numbers, summary sentences, comparison table or None when no model has two builds).
    ``drift``: see :func:`sparkbench.report.compare.head_to_head`."""
    data = compare.head_to_head(results, reference_build=reference_build, drift=drift)
    if not data["rows"]:
        return data, [], None
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["host"], row["model_key"], row["config"], row["build"]), {})[row["metric"]] = row
    rows = []
    for (host, mkey, config, build), m in by_key.items():
        s = m["single"]
        cells = [host, mkey, config, f"{build} vs {s['reference_build']}", f(s["reference_value"]), f(s["value"])]
        for metric in compare.METRICS:
            cells += [pct(m[metric]["pct_diff"]), verdict_cell(m[metric]["verdict"], m[metric]["unreliable"])]
        rows.append(cells)
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("head-to-head", sim("Head-to-head: builds of the same model", simulated),
                  ["host", "model", "config", "builds", "ref tok/s", "tok/s", "Δ single", "single verdict",
                   "Δ 2 par", "2 par verdict", "Δ 4 par", "4 par verdict", "Δ 8 par", "8 par verdict"], rows,
                  [f"Δ = (build − reference) / reference; reference build = {data['reference_build']} "
                   "(first listed in the matrix)",
                   "verdict: 95 % interval of the ratio of medians by a bootstrap over whole requests, and "
                   "the minimum detectable difference (docs/REPORTS.md, \"How to read a verdict\"); single "
                   "compares the single-stream runs, N par (combined, measured once per concurrency) the "
                   f"N per-stream decode rates, so below {MIN_REQUESTS} parallel there are too "
                   "few requests for a verdict"])
    return data, [sentence(s) for s in data["summary"]], table


# --------------------------------------------------------------------------- cluster vs one unit

def cluster_sentence(s: dict) -> str:
    """One summary line for a cluster variant against one unit, e.g. "sim_pair (spark-sim11 +
    spark-sim12) · gpt-oss-120b: gptoss-tp2 (TP=2) vs gptoss-single on spark-sim11 — single-stream
    20.0 % faster: differs by +20.0 % [+17.9, +22.0]; at 8 parallel 46.0 % faster: differs by …"."""
    def part(row: dict, what: str) -> str:
        return f"{what} {describe_range(row['pct_diff'], row['pct_diff'], [])}: {row['verdict']['text']}"
    line = (f"{s['unit']} · {s['model_key']}: {s['variant']} ({s['parallel'] or 'one GPU per node'}) vs "
            f"{s['reference_variant']} on {s['reference_host']} — " + part(s["single"], "single-stream"))
    if s["combined_8"]["pct_diff"] is not None:
        line += "; " + part(s["combined_8"], "at 8 parallel")
    if s.get("unreliable"):
        line += f" (unreliable: drift — {s['unreliable']})"
    return sim(line, s["simulated"])


def cluster_vs_unit(results: list[dict], drift: dict | None = None) -> tuple[dict, list[str], Table | None]:
    """(the numbers, summary sentences, "Cluster vs one unit" table or None when the run has no
    cluster variant with a one-unit reference). ``drift``: the head host's drift marks the rows
    (see :func:`sparkbench.report.compare.cluster_vs_unit`)."""
    data = compare.cluster_vs_unit(results, drift=drift)
    if not data["rows"]:
        return data, [], None
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["unit"], row["variant"]), {})[row["metric"]] = row
    # Parallel levels neither side measured get no columns (single stream always has them).
    shown = [metric for metric in compare.METRICS if metric == "single" or any(
        metric in m and (m[metric].get("value") is not None or m[metric].get("reference_value") is not None)
        for m in by_key.values())]
    rows = []
    for (unit, variant), m in by_key.items():
        s = m["single"]
        cells = [unit, text(s["model_key"]), f"{variant} ({s['parallel'] or '–'})",
                 f"{s['reference_variant']} on {s['reference_host']}" + ("" if s["flags_match"] else " (flags differ)"),
                 f(s["reference_value"]), f(s["value"])]
        for metric in shown:
            cells += [pct(m[metric]["pct_diff"]), verdict_cell(m[metric]["verdict"], m[metric]["unreliable"])]
        rows.append(cells)
    level_headers = []
    for metric in shown:
        label = "single" if metric == "single" else f"{metric.split('_')[1]} par"
        level_headers += [f"Δ {label}", f"{label} verdict"]
    notes = ["Δ = (cluster − one unit) / one unit; one unit = the same build's variant without tensor or pipeline "
             "parallelism measured on the cluster's head host (same flags apart from the parallel layout unless "
             "marked \"flags differ\")",
             "verdict: as in the head-to-head — single compares the single-stream runs, N par the N per-stream "
             f"decode rates, so below {MIN_REQUESTS} parallel there are too few requests for a verdict"]
    if data["unmatched"]:
        notes.append("no one-unit variant of the same build on the head to compare with: " + ", ".join(data["unmatched"]))
    table = Table("cluster-vs-unit", sim("Cluster vs one unit", data["simulated"]),
                  ["cluster", "model", "variant", "one unit", "one unit tok/s", "cluster tok/s"] + level_headers,
                  rows, notes)
    return data, [cluster_sentence(x) for x in data["summary"]], table


def _cluster_link(link: dict | None) -> tuple[str, str, str, str]:
    """(method, Gb/s, threshold, note) of a cluster's link test, "–" where not recorded."""
    link = link if isinstance(link, dict) else {}
    return (text(link.get("method")), f(n.num(link.get("gbps")), 2), f(n.num(link.get("threshold_gbps")), 0),
            text(link.get("note")))


def clusters(results: list[dict]) -> tuple[list[dict], list[Table]]:
    """(one entry per cluster variant, ["Clusters: nodes" table, "Clusters: placement and link"
    table]) — the manifest of each cluster as its result documents record it (the ``cluster``
    block): every node's host, role, registered address, Ray node id, image, image id, driver,
    alive, GPUs, interface, MTU and link speed (rows that read the same for several variants of a
    cluster are printed once, with those variants), then per variant the parallel layout, nodes
    alive, GPUs in use, the placement group, the worker actors' nodes, Ray's version and the link
    test (method, Gb/s, NVIDIA's warning threshold where judged, the note). ([], []) without
    clusters."""
    docs = [r for r in n.sort_results(results) if isinstance(r, dict) and n.is_cluster(r)]
    if not docs:
        return [], []
    simulated = any(n.is_simulated(r) for r in docs)
    node_rows: dict[tuple, list[str]] = {}
    variant_rows, entries = [], []
    for r in docs:
        c = n.cluster_of(r) or {}
        unit, variant = n.unit_of(r), n.variant_name(r)
        for node in c.get("nodes") or []:
            if not isinstance(node, dict):
                continue
            speed = n.num(node.get("link_speed_mbps"))
            role = node.get("role") or ("head" if node.get("host") == (c.get("head") or n.host_of(r)) else "worker")
            cells = (unit, text(node.get("host")), text(role), text(node.get("address")),
                     text(node.get("node_id")), text(node.get("image")), text(node.get("image_id")),
                     text(node.get("driver")), yesno(node.get("alive")) if isinstance(node.get("alive"), bool) else DASH,
                     f(n.num(node.get("gpus")), 0), text(node.get("interface")), f(n.num(node.get("mtu")), 0),
                     f"{speed:.0f} Mb/s" if speed is not None else DASH)
            node_rows.setdefault(cells, []).append(variant)
        method, gbps, threshold, note = _cluster_link(c.get("link"))
        actors = c.get("worker_actor_node_ids")
        alive, total = n.num(c.get("nodes_alive")), len(c.get("nodes") or []) or len(n.cluster_members(r))
        variant_rows.append([unit, variant + (" (failed)" if r.get("status") == "failed" else ""),
                             text(n.parallel_label(r)), text(c.get("backend")), text(c.get("ray_version")),
                             f"{alive:.0f} of {total}" if alive is not None else DASH,
                             (f"{f(n.num(c.get('gpus_in_use')), 1)} / {f(n.num(c.get('gpus_total')), 1)}"
                              if c.get("gpus_in_use") is not None or c.get("gpus_total") is not None else DASH),
                             text(c.get("placement_group_id")),
                             ", ".join(str(a) for a in actors) if isinstance(actors, list) and actors else DASH,
                             method, gbps, threshold, note])
        entries.append({"unit": unit, "cluster": c.get("name"), "variant": variant, "head": n.host_of(r),
                        "members": n.cluster_members(r), "parallel": n.parallel_label(r),
                        "nodes_alive": c.get("nodes_alive"), "placement_group_id": c.get("placement_group_id"),
                        "worker_actor_node_ids": actors, "link": c.get("link"), "nodes": c.get("nodes")})
    nodes = Table("clusters", sim("Clusters: nodes", simulated),
                  ["cluster", "node", "role", "address", "Ray node id", "image", "image id", "driver", "alive", "GPUs",
                   "interface", "MTU", "link speed", "variants"],
                  [list(cells) + [", ".join(vs)] for cells, vs in node_rows.items()],
                  ["one cluster = one unit: the head (first host of its inventory group) serves the model, each node "
                   "is a Ray node with its GPU; address = the one Ray registered (VLLM_HOST_IP); image, image id and "
                   "driver must match on every node (preflight); link speed = ethtool on the chosen interface"])
    placement = Table("cluster-placement", sim("Clusters: placement and link", simulated),
                      ["cluster", "variant", "parallel", "backend", "Ray", "nodes alive", "GPUs in use / total",
                       "placement group", "worker actors on nodes", "link test", "link Gb/s", "threshold Gb/s",
                       "link note"], variant_rows,
                      ["read while the variant served (ray status and the Ray state API in the head's container): "
                       "one worker actor per placement-group bundle; link test = ib_write_bw between the nodes on a "
                       "real pair (NVIDIA's warning threshold 175 Gb/s), iperf3 over the container network on GPU-less "
                       "hosts, recorded and not judged (the note says which)"])
    return entries, [nodes, placement]


# --------------------------------------------------------------------------- fleet

def fleet(results: list[dict], threshold_pct: float = 5.0,
          drift: dict | None = None) -> tuple[dict, list[Table], list[str]]:
    """(the numbers, tables, flag lines). No tables for a one-host run. ``drift``: see
    :func:`sparkbench.report.compare.fleet_compare`."""
    data = compare.fleet_compare(results, threshold_pct=threshold_pct, drift=drift)
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
    if data.get("clusters_left_out"):
        notes.append("not in the fleet (a cluster is not a peer of one Spark; see \"Cluster vs one unit\"): "
                     + ", ".join(data["clusters_left_out"]))
    matrix = Table("fleet", sim("Fleet: host × variant", data["simulated"]),
                   ["variant", "fleet median"] + hosts, rows, notes)
    verdict_rows = [[h, v, f(data["matrix"][v].get(h), 2), verdict_cell(cell, data["unreliable"].get(h))]
                    for v, by_host in data["verdicts"].items() for h, cell in by_host.items()]
    verdict_table = Table("fleet-verdicts", sim("Fleet: each host against its peers", data["simulated"]),
                          ["host", "variant", "single tok/s", "verdict against its peers"], verdict_rows,
                          ["the host's single-stream requests against the pooled requests of its peers: the "
                           f"other hosts within ±{data['threshold_pct']:g} % of the fleet median (all others "
                           "when none is), same variant; 95 % bootstrap interval of the ratio of medians"])
    flag_rows, lines = [], []
    for fl in data["flagged"]:
        diffs = "; ".join(f"{d['field']} {d['value']} (fleet: {d['majority']})" for d in fl["differs"]) \
            or "no manifest difference recorded"
        kinds = [v["kind"] for v in fl["verdicts"].values()]
        said = (f"; against its peers it differs in {sum(k == 'differs' for k in kinds)} of {len(kinds)} variants"
                if any(k != "not_enough" for k in kinds) else
                ("; against its peers: not enough requests for a verdict" if kinds else ""))
        drift_note = " (unreliable: drift)" if data["unreliable"].get(fl["host"]) else ""
        flag_rows.append([fl["host"], pct(fl["deviation_pct"]), diffs])
        lines.append(sim(f"{fl['host']} is {abs(fl['deviation_pct']):.1f} % below the fleet median "
                         f"(threshold {data['threshold_pct']:g} %){said}{drift_note}; differs in: {diffs}",
                         data["simulated"]))
    tables = [matrix, verdict_table] if verdict_rows else [matrix]
    if flag_rows:
        tables.append(Table("fleet-flagged", "Flagged hosts", ["host", "deviation", "differs from the majority in"],
                            flag_rows))
    return data, tables, lines


# --------------------------------------------------------------------------- run to run

def run_to_run(results: list[dict], baseline: list[dict], baseline_id: str,
               threshold_pct: float = 2.5, drift: dict | None = None) -> tuple[dict, list[Table], str]:
    """(the numbers, [bridge table, deltas table], bridge verdict line). ``drift``: see
    :func:`sparkbench.report.compare.run_compare`."""
    data = compare.run_compare(results, baseline, threshold_pct=threshold_pct, drift=drift)
    simulated = data["simulated"]
    bridge = data["bridge"]
    verdict = sim(f"Version bridge against run {baseline_id}: {bridge['verdict']}", simulated)
    tables = []
    if bridge["pairs"]:
        rows = []
        for r in bridge["pairs"]:
            ok = compare.pair_ok(r)
            if ok is None:  # no verdict: the medians alone
                ok = None if r["single_pct"] is None else abs(r["single_pct"]) <= bridge["threshold_pct"]
            rows.append([unit_cell(r), r["variant"], f"{text(r['baseline_vllm'])} → {text(r['current_vllm'])}",
                         f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
                         verdict_cell(r["bridge_verdict"], r["unreliable"]), yesno(ok)])
        tables.append(Table("bridge", sim("Version bridge", simulated),
                            ["host", "variant", "vLLM", "baseline tok/s", "current tok/s", "Δ", "verdict",
                             f"within {bridge['threshold_pct']:g} %"], rows,
                            [f"comparable when every bridge pair's single-stream verdict finds no detectable "
                             f"difference or puts its whole 95 % interval within ±{bridge['threshold_pct']:g} % "
                             "(the seed's tolerance); pairs without per-request data are judged by their "
                             "medians' |Δ| alone", bridge["verdict"]]))
    rows = [[unit_cell(r), r["variant"], f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
             verdict_cell(r["verdict"], r["unreliable"]), f(r["baseline_combined_8"]), f(r["current_combined_8"]),
             pct(r["combined_8_pct"]), verdict_cell(r["combined_8_verdict"], r["unreliable"])]
            for r in data["rows"]]
    notes = ["Δ = (current − baseline) / baseline; verdict: the current run's requests against the baseline's "
             "(95 % bootstrap interval of the ratio of medians; 8 par: the 8 per-stream decode rates)"]
    if data["only_current"]:
        notes.append("only in this run: " + ", ".join(data["only_current"]))
    if data["only_baseline"]:
        notes.append(f"only in {baseline_id}: " + ", ".join(data["only_baseline"]))
    tables.append(Table("run-to-run", sim(f"Run to run: against {baseline_id}", simulated),
                        ["host", "variant", "baseline single", "current single", "Δ single", "single verdict",
                         "baseline 8 par", "current 8 par", "Δ 8 par", "8 par verdict"], rows, notes))
    return data, tables, verdict


# --------------------------------------------------------------------------- drift (bracketing)

def drift_section(drift: dict) -> tuple[list[Table], list[str]]:
    """(["Drift (bracketing)" table] or [], summary lines for the hosts that drifted).
    ``drift`` = :func:`sparkbench.report.drift.host_drift`."""
    if not drift:
        return [], []
    simulated = any(d.get("simulated") for d in drift.values())
    rows = []
    for host, d in sorted(drift.items()):
        verdict = d.get("verdict") or {}
        rows.append([host, text(d.get("variant")), f(d.get("reference_median"), 2) + f" (n={d.get('n_reference', 0)})",
                     f(d.get("bracket_median"), 2) + f" (n={d.get('n_bracket', 0)})",
                     text(d.get("reason") or verdict.get("text")),
                     "unreliable" if d.get("unreliable") else
                     ("no drift seen" if verdict.get("kind") == "no_difference" else "no verdict")])
    table = Table("drift", sim("Drift (bracketing)", simulated),
                  ["host", "reference variant", "start tok/s", "end tok/s", "drift verdict", "comparisons"], rows,
                  ["start = the reference variant's single-stream median in its main result; end = the same "
                   "variant measured again after the host's last variant (<variant>.bracket.json)",
                   "unreliable: the host drifted beyond the noise while its variants ran, so its comparisons "
                   "may show the drift, not the variants"])
    lines = [sim(f"{host}: comparisons unreliable — {d.get('text') or 'drift beyond the noise'}",
                 bool(d.get("simulated")))
             for host, d in sorted(drift.items()) if d.get("unreliable")]
    return [table], lines


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


# --------------------------------------------------------------------------- history (sparkbench.history)

HISTORY_RUNS = 8  # runs per host × variant the report's trend shows (the newest)


def host_trends(run_path, results: list[dict]) -> dict[str, list[dict]]:
    """Per host of the run, its history rows for the run's variants (the history index of the
    results folder holding the run; an index that does not exist yet is built in memory, not
    written): what the "History" tables and the trend chart show."""
    from pathlib import Path

    from .. import history

    hosts = sorted({n.host_of(r) for r in results if n.host_of(r)})
    if not hosts:
        return {}
    return history.host_trends(Path(run_path).parent, hosts, {n.variant_name(r) for r in results})


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


# --------------------------------------------------------------------------- kernels vLLM chose

KERNEL_HEADERS = ["host", "variant", "attention", "MoE backend", "GEMM kernel", "CUDA graphs", "KV cache tokens",
                  "max concurrency", "model load"]


def kernels_table(results: list[dict]) -> Table | None:
    """"Kernels vLLM chose": per variant, what its server's startup log says it picked (the
    ``kernels`` block, :mod:`sparkbench.engine_log`): attention backend, MoE backend (with its
    quantisation), NVFP4 GEMM kernel (and the Marlin FP4 weight-only warning), CUDA graphs
    (capture time and memory), KV-cache tokens, maximum concurrency (vLLM's ratio of KV-cache
    tokens to tokens per request), model load (GiB and seconds). "–" where the log does not
    say; None when no result carries a ``kernels`` block."""
    from sparkbench.engine_log import summary

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


def serving(results: list[dict]) -> tuple[list[dict], list[str], Table | None]:
    """(one entry per unit × variant with an arrival-rate phase, summary sentences, the "Serving:
    goodput by arrival rate" table or None). Per rate: achieved request rate, output tok/s, TTFT
    p50/p90, TPOT p90, end-to-end p90, the client's schedule error p99, the share of requests meeting
    every SLO and the goodput; per variant the highest rate meeting the SLO for the target share."""
    entries, rows, lines = [], [], []
    simulated = False
    for r in n.sort_results(results):
        rates = n.rates_of(r)
        if not rates:
            continue
        simulated = simulated or n.is_simulated(r)
        best, target = n.highest_rate_meeting_slo(r)
        slo = next((x.get("slo") for x in rates if x.get("slo")), None) or {}
        slo_text = ", ".join(f"{k} ≤ {v:g} s" for k, v in slo.items()) or "no SLO"
        unit = n.unit_of(r)
        entries.append({"unit": unit, "host": n.host_of(r), "variant": n.variant_name(r), "best_rate": best,
                        "target_share": target, "slo": slo, "rates": [
                            {k: x.get(k) for k in ("rate", "requests", "achieved_rate", "output_tok_s", "goodput",
                                                   "slo_met_share", "ttft_s", "tpot_s", "e2e_s", "schedule_error_ms",
                                                   "search", "replay")} for x in rates]})
        for x in rates:
            pick = lambda key, q: (x.get(key) or {}).get(q) if isinstance(x.get(key), dict) else None  # noqa: E731
            err = pick("schedule_error_ms", "p99")
            rows.append([unit, sim(n.variant_name(r), n.is_simulated(r)),
                         text(x.get("replay") and "replay") if x.get("replay") else
                         (f"{x['rate']:g}" if isinstance(x.get("rate"), (int, float)) else text(x.get("rate")))
                         + (" (search)" if x.get("search") else ""),
                         text(x.get("requests")), f(x.get("achieved_rate"), 2), f(x.get("output_tok_s"), 1),
                         f(pick("ttft_s", "p50"), 3), f(pick("ttft_s", "p90"), 3), f(pick("tpot_s", "p90"), 4),
                         f(pick("e2e_s", "p90"), 2), f(err, 3),
                         DASH if x.get("slo_met_share") is None else f"{100 * float(x['slo_met_share']):.0f} %",
                         f(x.get("goodput"), 2),
                         DASH if best is None else f"{best:g}"])
        lines.append(f"{unit}/{n.variant_name(r)}: highest arrival rate meeting the SLO ({slo_text}) for "
                     f"≥ {100 * target:.0f} % of requests: "
                     + (f"{best:g} requests/s" if best is not None else "none of the rates tried"))
    if not rows:
        return [], [], None
    table = Table("serving", sim("Serving: goodput by arrival rate", simulated),
                  ["host", "variant", "rate req/s", "requests", "achieved req/s", "output tok/s", "TTFT p50 s",
                   "TTFT p90 s", "TPOT p90 s", "e2e p90 s", "schedule error p99 ms", "met SLO", "goodput req/s",
                   "highest rate meeting SLO"], rows,
                  ["requests arrive by a Poisson process (gamma with --burstiness) at each rate, each with the "
                   "forced output length; a request is good when it completed and every SLO holds (vLLM bench "
                   "serve's --goodput, in seconds); goodput = good requests / (last completion − first send); "
                   "met SLO = good / requests; highest rate meeting SLO = measure.py's search result, else the "
                   f"highest listed rate whose share reached {100 * n.SLO_TARGET_SHARE:.0f} %; schedule error = "
                   "actual send − scheduled send (docs/MEASUREMENT.md)"])
    return entries, lines, table


# --------------------------------------------------------------------------- second-wave serving sections

def _rate_label(rate) -> str:
    return "replay" if rate == "replay" else (f"{rate:g}" if isinstance(rate, (int, float)) else text(rate))


def _share(v) -> str:
    return DASH if v is None else f"{100 * float(v):.0f} %"


def _pp(v) -> str:
    return DASH if v is None else f"{v:+.1f} pp".replace("-", "−")


def goodput_verdicts(results: list[dict], reference_build: str | None = None) -> tuple[dict, list[str], Table | None]:
    """(the numbers, one summary line per unit × variant, the "Goodput: variants against the
    reference" table or None): at each arrival rate both ran, the share of requests meeting every
    SLO of a variant against the unit's reference variant, Δ in percentage points, with the verdict
    of :func:`sparkbench.verdict.compare_shares` on the per-request good flags
    (:func:`sparkbench.report.compare.goodput_verdicts`)."""
    data = compare.goodput_verdicts(results, reference_build)
    if not data["rows"]:
        return data, [], None
    rows = [[r["unit"], f"{r['variant']} vs {r['reference_variant']}", _rate_label(r["rate"]),
             _share(r["reference_share"]), _share(r["share"]), _pp(r["pp_diff"]), verdict_cell(r["verdict"]),
             f(r["reference_goodput"], 2), f(r["goodput"], 2)] for r in data["rows"]]
    lines = []
    for s in data["summary"]:
        kinds = s["kinds"]
        if all(k == "not_enough" for k in kinds):
            tail = "not enough requests for a verdict"
        elif "differs" not in kinds:
            short = sum(k == "not_enough" for k in kinds)
            tail = "no difference detectable" + (f" ({short} of {len(kinds)} rates: not enough requests)" if short else "")
        else:
            tail = f"differs at {sum(k == 'differs' for k in kinds)} of {len(kinds)} rates"
        span = (DASH if s["pp_min"] is None else _pp(s["pp_min"]) if round(s["pp_min"], 1) == round(s["pp_max"], 1)
                else f"{_pp(s['pp_min'])} … {_pp(s['pp_max'])}")
        lines.append(sim(f"{s['unit']}: {s['variant']} vs {s['reference_variant']} — requests meeting the SLO {span} "
                         f"at {', '.join(_rate_label(x) for x in s['rates'])} req/s — {tail}", s["simulated"]))
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("goodput-verdicts", sim("Goodput: variants against the reference", simulated),
                  ["host", "variants", "rate req/s", "reference met SLO", "met SLO", "Δ met SLO", "verdict",
                   "reference goodput req/s", "goodput req/s"], rows,
                  ["Δ met SLO = other − reference share of requests meeting every SLO, in percentage points; "
                   f"reference = the unit's first variant of the reference build ({data['reference_build']})",
                   "verdict: 95 % bootstrap interval over the per-request good flags (one good and one bad "
                   "pseudo-request per side, widened as the decode verdicts are) and the minimum detectable "
                   "difference in pp (docs/REPORTS.md, \"How to read a verdict\"); "
                   f"fewer than {MIN_REQUESTS} requests at a rate on a side: no verdict"])
    return data, lines, table


def prefix_caching(results: list[dict]) -> tuple[dict, list[str], list[Table]]:
    """(the numbers, summary lines, ["Prefix caching: with and without" (pairs), "Prefix cache
    phase" (every variant that ran it)]): :func:`sparkbench.report.compare.prefix_pairs` and
    :func:`sparkbench.report.numbers.prefix_row`. ([], [], []) without a prefix phase."""
    per_variant = [x for x in (n.prefix_row(r) for r in n.sort_results(results)) if x]
    data = compare.prefix_pairs(results)
    data["variants"] = per_variant
    if not per_variant:
        return data, [], []
    tables, lines = [], []
    if data["pairs"]:
        rows = []
        for p in data["pairs"]:
            rows.append([p["unit"], text(p["build"]),
                         f"{p['variant_on']} vs {p['variant_off']}" + ("" if p["flags_match"] else " (flags differ)"),
                         f(p["prefix_tokens"], 0), f(p["warm_ttft_p50_on_s"], 3), f(p["warm_ttft_p50_off_s"], 3),
                         pct(p["ttft_change_pct"]), verdict_cell(p["verdict"]), f(p["prefill_tok_s_on"], 0),
                         f(p["prefill_tok_s_off"], 0), pct(p["prefill_change_pct"]),
                         _share(p["hit_rate_on"]), _share(p["hit_rate_off"])])
            change = p["ttft_change_pct"]
            how = (DASH if change is None else f"{abs(change):.1f} % " + ("sooner" if change < 0 else "later"))
            lines.append(sim(
                f"{p['unit']} · {p['build']}: prefix caching ({p['variant_on']} vs {p['variant_off']}, "
                f"{f(p['prefix_tokens'], 0)}-token shared prefix) — warm TTFT p50 {f(p['warm_ttft_p50_off_s'], 3)} → "
                f"{f(p['warm_ttft_p50_on_s'], 3)} s, first token {how}: {p['verdict']['text']}; prefill "
                f"{f(p['prefill_tok_s_off'], 0)} → {f(p['prefill_tok_s_on'], 0)} tok/s; hit rate "
                f"{_share(p['hit_rate_on'])} (without: {_share(p['hit_rate_off'])})", p["simulated"]))
        notes = ["with = the variant serving with prefix caching, without = the same build launched with "
                 "--no-enable-prefix-caching (same other flags unless marked \"flags differ\"); warm = the phase's "
                 "requests 2…n (request 1 fills the cache); Δ = (with − without) / without",
                 "verdict: sparkbench.verdict.compare_samples on the per-request warm TTFTs, without caching as the "
                 "reference (a negative difference: the first token comes sooner with caching); hit rate = "
                 "Δ vllm:prefix_cache_hits / Δ vllm:prefix_cache_queries over the phase (tokens)"]
        if data["unpaired"]:
            notes.append("no pair: " + "; ".join(data["unpaired"]))
        tables.append(Table("prefix-pairs", sim("Prefix caching: with and without", data["simulated"]),
                            ["host", "build", "with vs without", "prefix tokens", "warm TTFT p50 s with",
                             "warm TTFT p50 s without", "Δ TTFT", "TTFT verdict", "prefill tok/s with",
                             "prefill tok/s without", "Δ prefill", "hit rate with", "hit rate without"], rows, notes))
    rows = [[unit_cell(x), sim(x["variant"], x["simulated"]), "on" if x["prefix_caching"] else "off",
             f(x["prefix_tokens"], 0), f(x["suffix_tokens"], 0),
             f"{f(x['completed'], 0)}/{f(x['requests'], 0)}" if x["requests"] is not None else DASH,
             f(x["cold_ttft_s"], 3), f(x["warm_ttft_p50_s"], 3), f(x["warm_ttft_p90_s"], 3), f(x["prefill_tok_s"], 0),
             _share(x["hit_rate"]), f(x["cached_tokens_median"], 0), text(x["reason"])] for x in per_variant]
    tables.append(Table("prefix-cache", sim("Prefix cache phase", data["simulated"]),
                        ["host", "variant", "prefix caching", "prefix tokens", "suffix tokens", "completed",
                         "cold TTFT s", "warm TTFT p50 s", "warm TTFT p90 s", "prefill tok/s", "hit rate",
                         "cached tokens (median)", "reason"], rows,
                        ["requests one at a time, each = the shared prefix + its own suffix; cold = request 1, warm = "
                         "requests 2…n; prefill tok/s = median prompt tokens / TTFT of the warm requests; cached "
                         "tokens = usage.prompt_tokens_details.cached_tokens where the server reports it "
                         "(docs/MEASUREMENT.md)"]))
    return data, lines, tables


def multi_turn(results: list[dict]) -> tuple[list[dict], list[str], Table | None]:
    """(one entry per unit × variant with the multi-turn phase, summary lines, the "Multi-turn:
    TTFT and decode by context depth" table or None): per turn the context tokens, TTFT, decode
    and prefill tok/s (medians over the conversations) and the change against turn 1."""
    entries, rows, lines = [], [], []
    simulated = False
    for r in n.sort_results(results):
        turns = n.multi_turn_rows(r)
        if not turns:
            continue
        simulated = simulated or n.is_simulated(r)
        ch = n.multi_turn_change(r)
        unit, name = n.unit_of(r), n.variant_name(r)
        block = n.multi_turn_of(r) or {}
        entries.append({"unit": unit, "host": n.host_of(r), "variant": name, "conversations": block.get("conversations"),
                        "turn_tokens": block.get("turn_tokens"), "output_tokens": block.get("output_tokens"),
                        "completed": block.get("completed"), "failed": block.get("failed"), "per_turn": turns, **ch})
        t0 = turns[0]
        for t in turns:
            rows.append([unit, sim(name, n.is_simulated(r)), f(t["turn"], 0), f(t["requests"], 0),
                         f(t["context_tokens"], 0), f(t["ttft_s"], 3),
                         pct(compare.pct_diff(t["ttft_s"], t0["ttft_s"])) if t is not t0 else DASH,
                         f(t["decode_tok_s"], 2),
                         pct(compare.pct_diff(t["decode_tok_s"], t0["decode_tok_s"])) if t is not t0 else DASH,
                         f(t["prefill_tok_s"], 0)])
        lines.append(sim(f"{unit}/{name}: over {len(turns)} turns the context grows {f(ch['context_first'], 0)} → "
                         f"{f(ch['context_last'], 0)} tokens; TTFT {f(ch['ttft_first_s'], 3)} → {f(ch['ttft_last_s'], 3)} s "
                         f"({pct(ch['ttft_change_pct'])}), decode {f(ch['decode_first_tok_s'], 2)} → "
                         f"{f(ch['decode_last_tok_s'], 2)} tok/s ({pct(ch['decode_change_pct'])})", n.is_simulated(r)))
    if not rows:
        return [], [], None
    table = Table("multi-turn", sim("Multi-turn: TTFT and decode by context depth", simulated),
                  ["host", "variant", "turn", "requests", "context tokens", "TTFT s", "TTFT Δ vs turn 1",
                   "decode tok/s", "decode Δ vs turn 1", "prefill tok/s"], rows,
                  ["each turn re-sends the whole conversation (the assistant's real answers included) plus new user "
                   "tokens; conversations interleaved, one request at a time; per turn the medians over the "
                   "conversations: context tokens = usage prompt tokens, decode tok/s as in the single stream "
                   "(docs/MEASUREMENT.md); Δ = (turn − turn 1) / turn 1"])
    return entries, lines, table


TOOL_CATEGORIES = ("irrelevance", "simple", "multiple", "parallel")


def tool_calls(results: list[dict], reference_build: str | None = None) -> tuple[list[dict], list[str], list[Table]]:
    """(one entry per unit × variant with the tool-call check, summary lines, ["Tool calls",
    "Tool calls: failures"]): passed/total, per BFCL-style category, the failure buckets, the pass
    share against the unit's reference variant with its verdict
    (:func:`sparkbench.report.compare.tool_verdicts`), and each failed prompt with its bucket and
    reason (:func:`sparkbench.report.numbers.tools_summary`)."""
    entries, rows, fails, lines = [], [], [], []
    versus = compare.tool_verdicts(results, reference_build)
    simulated = False
    summaries = [(r, n.tools_summary(r)) for r in n.sort_results(results)]
    summaries = [(r, s) for r, s in summaries if s]
    if not summaries:
        return [], [], []
    cats = list(TOOL_CATEGORIES) + sorted({c for _, s in summaries for c in s["by_category"]} - set(TOOL_CATEGORIES))
    for r, s in summaries:
        simulated = simulated or n.is_simulated(r)
        unit, name = n.unit_of(r), n.variant_name(r)
        vs = versus.get((unit, name))
        entries.append({"unit": unit, "host": n.host_of(r), "variant": name, **s, "vs_reference": vs})
        buckets = "; ".join(f"{b} {c}" for b, c in sorted(s["by_bucket"].items()) if c) or DASH
        cat_cells = []
        for c in cats:
            x = s["by_category"].get(c)
            cat_cells.append(f"{x.get('passed', 0)}/{x.get('total', 0)}" if isinstance(x, dict) else DASH)
        rows.append([unit, sim(name, n.is_simulated(r)), text(s["tool_choice"]), f"{s['passed']}/{s['total']}",
                     str(s["skipped"])] + cat_cells + [buckets]
                    + ([f"{_pp(vs['pp_diff'])} vs {vs['reference_variant']}", verdict_cell(vs["verdict"])]
                       if vs else [DASH, DASH]))
        for x in s["failures"]:
            fails.append([unit, name, text(x["id"]), text(x["category"]), text(x["bucket"]), text(redact(x["reason"]))])
        lines.append(sim(f"{unit}/{name}: tool calls {s['passed']}/{s['total']} passed (tool_choice "
                         f"{s['tool_choice'] or '?'})" + (f", {s['skipped']} skipped" if s["skipped"] else "")
                         + (f"; failures: {buckets}" if s["failures"] else "")
                         + (f"; skipped: {redact(s['reason'])}" if s.get("reason") else ""), n.is_simulated(r)))
    tables = [Table("tools", sim("Tool calls", simulated),
                    ["host", "variant", "tool choice", "passed", "skipped"] + cats
                    + ["failures by bucket", "Δ passed", "verdict"], rows,
                    ["pass = tool_calls well formed, every name and argument valid against the tool's JSON schema "
                     "and an acceptable value, the expected number of calls (parallel calls in any order), no call "
                     "where none is needed; categories and buckets after BFCL's AST checker (docs/MEASUREMENT.md); "
                     "per category passed/total",
                     "Δ passed = (pass share − the reference variant's) in percentage points, verdict "
                     "sparkbench.verdict.compare_shares over the prompts' pass flags (skipped prompts left out)"])]
    if fails:
        tables.append(Table("tool-failures", sim("Tool calls: failures", simulated),
                            ["host", "variant", "prompt", "category", "bucket", "reason"], fails))
    return entries, lines, tables
