"""Writers: report.md, results.csv, results.json, report.html beside the run's result files.
Each file is written to a temporary name and renamed, so a reader never sees half a report."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..measure.figures import COMBINED, MEAN_ACCEPTANCE_LENGTH, MODEL_MEMORY, SINGLE_DECODE, TIME_TO_READY, TTFT
from .numbers import CONCURRENCIES
from .table import Section, Table

CSV_COLUMNS = ["run_id", "host", "variant", "build", "model", "config", "status", "simulated",
               SINGLE_DECODE.column, SINGLE_DECODE.low_column, SINGLE_DECODE.high_column, "speedup_vs_bare",
               *(COMBINED.column_at(c) for c in CONCURRENCIES), "acceptance_per_position",
               MEAN_ACCEPTANCE_LENGTH.column, TTFT.column, "roofline_tok_s", "pct_of_roofline", "bandwidth_gbps",
               "pct_of_measured_bandwidth", "tokens_per_step", TIME_TO_READY.column, MODEL_MEMORY.column,
               "quality_passed", "failure_stage", "failure_reason", "protocol_flags",
               "attention_backend", "moe_backend", "slo_best_rate", "slo_target_share", "prefix_caching",
               "prefix_warm_ttft_p50_s", "prefix_prefill_tok_s", "prefix_hit_rate", "turns", "turns_context_first",
               "turns_context_last", "turns_ttft_first_s", "turns_ttft_last_s", "turns_decode_first_tok_s",
               "turns_decode_last_tok_s", "tools_passed", "tools_total"]


#: ``results.json``'s keys in order: the run's own entries (``run_id`` … ``summary``,
#: ``baseline_run_id``, ``charts``, ``tables``) and the sections' keys
#: (:class:`~sparkbench.report.table.Section`: a section's ``data`` under its ``key`` where
#: ``in_doc``); ``terminal_table``, made from all of these, comes last.
DOC_KEYS = ("run_id", "generated_at", "simulated", "backends", "load_errors", "summary", "answer", "tune",
            "rows", "quality", "image", "telemetry", "failures", "protocol", "hosts_without_results",
            "head_to_head", "config_compare", "fleet", "prediction", "run_compare", "baseline_run_id", "drift", "manifest", "charts", "tables",
            "serving", "goodput_verdicts", "prefix_caching", "multi_turn", "tool_calls", "cluster_vs_unit",
            "clusters")


def results_doc(sections: list[Section], **entries: Any) -> dict:
    """``results.json``'s content but ``terminal_table``: ``entries`` (the run's own) and each
    section's ``data`` where ``in_doc``, in :data:`DOC_KEYS` order. RuntimeError for a key that is
    not in :data:`DOC_KEYS` (add it there)."""
    entries.update({s.key: s.data for s in sections if s.in_doc})
    unknown = sorted(set(entries) - set(DOC_KEYS))
    if unknown:
        raise RuntimeError(f"results.json keys missing from DOC_KEYS: {', '.join(unknown)}")
    return {key: entries[key] for key in DOC_KEYS if key in entries}


def table_md(t: Table) -> str:
    """One table as a markdown section (pipe table via tabulate)."""
    def cell(c: str) -> str:  # a pipe inside a cell would end it in a markdown table
        return c.replace("|", "\\|").replace("\n", " ")
    body = tabulate([[cell(c) for c in row] for row in t.rows], headers=t.headers, tablefmt="github",
                    disable_numparse=True)
    notes = "".join(f"\n_{n}_\n" for n in t.notes)
    return f"## {t.title}\n\n{body}\n{notes}"


def markdown(ctx: dict, charts: list[dict]) -> str:
    """The whole report.md, in report.html's order: the answer's table, the summary, the
    findings, the charts, the details (``ctx``: see :func:`sparkbench.report.html_page.render_html`)."""
    parts = [f"# sparkbench report — run {ctx['run_id']}\n",
             f"generated {ctx['generated_at']} from {ctx['n_files']} result file(s); {ctx['n_hosts']} host(s)\n"]
    if ctx["simulated"]:
        parts.append("> **SIMULATED** — figures come from the sparkbench vLLM simulator, not from a GPU.\n")
    if "vllm-cpu" in (ctx.get("backends") or []):
        parts.append("> **REAL vLLM ON A CPU** — figures from vLLM's CPU build (backend vllm-cpu), measured, not "
                     "simulated, but not on a DGX Spark: no Spark roofline for them.\n")
    if ctx["load_errors"]:
        parts.append("**Result files that could not be read (not in the tables):**\n\n"
                     + "\n".join(f"- {e}" for e in ctx["load_errors"]) + "\n")
    parts += [table_md(t) for t in ctx["answer"]]
    if ctx["summary"]:
        parts.append("## Summary\n\n" + "\n".join(f"- {line}" for line in ctx["summary"]) + "\n")
    parts += [table_md(t) for t in ctx["findings"]]
    drawn = [c for c in charts if c.get("path")]
    if drawn:
        parts.append("## Charts\n\n" + "\n".join(f"![{c['title']}](charts/{Path(c['path']).name})" for c in drawn) + "\n")
    parts += [table_md(t) for t in ctx["details"]]
    return "\n".join(parts)


def results_csv(run_id: str, rows: list[dict], quality: list[dict], failures: list[dict]) -> str:
    """One CSV row per host × variant; empty cell = not measured."""
    q = {(x["host"], x["variant"]): x["passed"] for x in quality}
    fails = {(x["host"], x["variant"]): x for x in failures}
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        out = {k: r.get(k) for k in CSV_COLUMNS}
        out["run_id"] = run_id
        out["acceptance_per_position"] = " ".join(f"{a:g}" for a in r["acceptance_per_position"])
        out["quality_passed"] = q.get((r["host"], r["variant"]))
        fail = fails.get((r["host"], r["variant"]))
        if fail:
            out["failure_stage"], out["failure_reason"] = fail["stage"], fail["reason"]
        w.writerow({k: ("" if v is None else v) for k, v in out.items()})
    return buf.getvalue()


def results_json(doc: dict) -> str:
    """results.json: the report's numbers, sections and chart data."""
    return json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n"
