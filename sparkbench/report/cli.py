"""Command line: ``python3 -m sparkbench.report render RUN_DIR [--baseline RUN_DIR]
[--fleet-threshold 5] [--bridge-threshold 2.5] [--reference-build NAME] [--profiles DIR]
[--host-failure HOST=REASON ...] [--expected-host HOST ...] [--missing-host-reason TEXT]
[--table-format FMT] [--quiet]``.

Exit status: 0 report written (unreadable result files are listed in the report and on stderr,
the others are reported); 2 bad usage or input (missing run directory, no result file, bad
option) — one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from tabulate import tabulate_formats

from . import drift as drift_mod
from . import sections
from .html_page import render_html
from .load import RunNotFound, apply_profiles, load_run, result_files
from .table import Table, redact
from .terminal import terminal_table
from .writers import markdown, results_csv, results_json, write_atomic

EXIT_OK, EXIT_USAGE = 0, 2
PROG = "sparkbench.report"
HOST_RE = re.compile(r"[A-Za-z0-9._-]+")
#: Why an expected host has no result file when nobody said why.
MISSING_HOST_REASON = "no result file: failed before its first variant"


class ReportError(Exception):
    """A one-line, user-facing error (bad input or option)."""


def hosts_without_results(run_path: Path, failures: dict[str, str] | None = None,
                          expected: list[str] | None = None,
                          default_reason: str = MISSING_HOST_REASON, results: list[dict] | None = None) -> list[dict]:
    """Hosts of the run with no result file in it: ``[{"host", "reason"}]``, sorted by host.

    A host counts when it is in ``expected`` (the hosts the run targeted) or in ``failures``
    (host → why it failed as a whole, e.g. from Ansible's play); its reason is the one in
    ``failures``, else ``default_reason``. A host whose folder holds any result file (even an
    unreadable one, which the report names) is never listed, except when every document of it is
    a host failure (``failure.stage == "host"``: provisioning failed before its first variant),
    whose reason it then gives. Reasons go through the report's secret redaction."""
    have = {p.parent.name for p in result_files(run_path)}
    failures = dict(failures or {})
    by_host: dict[str, list[dict]] = {}
    for doc in results or []:
        by_host.setdefault(str(doc.get("host") or ""), []).append(doc)
    for host, docs in by_host.items():
        stages = {(d.get("failure") or {}).get("stage") for d in docs}
        if host in have and stages == {"host"}:
            have.discard(host)
            failures.setdefault(host, (docs[0].get("failure") or {}).get("reason") or default_reason)
    hosts = sorted((set(expected or []) | set(failures)) - have)
    return [{"host": h, "reason": redact(failures.get(h) or default_reason) or MISSING_HOST_REASON}
            for h in hosts]


def render(run_dir: str | Path, baseline: str | Path | None = None, fleet_threshold: float = 5.0,
           bridge_threshold: float = 2.5, reference_build: str | None = None,
           profiles: str | Path | None = None, failed_hosts: dict[str, str] | None = None,
           expected_hosts: list[str] | None = None, missing_host_reason: str = MISSING_HOST_REASON,
           table_format: str = "simple", drift: dict | None = None) -> dict:
    """Render the reports of ``run_dir``; returns ``{"paths": {...}, "summary": [...],
    "load_errors": [...], "charts": [...], "doc": results.json content, "tables": [...]}``.

    ``failed_hosts`` (host → reason) and ``expected_hosts``: see :func:`hosts_without_results`;
    those hosts are listed under "Hosts without results". ``table_format``: the tabulate format
    of the terminal table (``results.json`` → ``terminal_table``). ``drift`` (``{host:
    {"unreliable": bool, "text": str, …}}``, :mod:`sparkbench.report.drift`): the comparisons of
    a host marked unreliable read "(unreliable: drift)". Raises :class:`ReportError` with a
    one-line message for bad input."""
    try:
        run = load_run(run_dir)
        base = load_run(baseline) if baseline else None
    except RunNotFound as exc:
        raise ReportError(str(exc)) from None
    if profiles:
        if not Path(profiles).is_dir():
            raise ReportError(f"--profiles {profiles} is not a directory; pass the profiles/ folder")
        apply_profiles(run.results, profiles)
        if base:
            apply_profiles(base.results, profiles)
    missing = hosts_without_results(run.path, failed_hosts, expected_hosts, missing_host_reason, run.results)
    # A host that failed as a whole is listed once, under "Hosts without results": its per-variant
    # host-failure documents stay out of the tables.
    whole = {x["host"] for x in missing}
    results = [r for r in run.results if str(r.get("host") or "") not in whole]
    if drift is None:  # the run's own bracket documents: <variant>.bracket.json
        drift = drift_mod.host_drift(results, [b for b in run.brackets if str(b.get("host") or "") not in whole])
    drift_tables, drift_lines = sections.drift_section(drift)
    try:
        data, host_tabs, extra_tabs = sections.per_host(results)
        h2h_data, h2h_lines, h2h_table = sections.head_to_head(results, reference_build, drift=drift)
        cvu_data, cvu_lines, cvu_table = sections.cluster_vs_unit(results, drift=drift)  # TP=2 / PP=2 vs one Spark
        fleet_data, fleet_tables, fleet_lines = sections.fleet(results, fleet_threshold, drift=drift)
        rc_data, rc_tables, bridge_line = (sections.run_to_run(results, base.results, base.run_id, bridge_threshold,
                                                               drift=drift)
                                           if base else (None, [], None))
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    man_summary, man_tables = sections.manifest(results)
    cluster_entries, cluster_tables = sections.clusters(results)  # each cluster's nodes, placement and link
    serving_entries, serving_lines, serving_table = sections.serving(results)  # goodput by arrival rate
    try:  # the second wave's serving workloads: goodput verdicts, prefix caching, multi-turn, tool calls
        gv_data, gv_lines, gv_table = sections.goodput_verdicts(results, reference_build)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    prefix_data, prefix_lines, prefix_tables = sections.prefix_caching(results)
    turn_entries, turn_lines, turn_table = sections.multi_turn(results)
    tool_entries, tool_lines, tool_tables = sections.tool_calls(results, reference_build)
    from . import charts as charts_mod  # matplotlib: imported only when there is a report to draw

    out_dir = run.path
    trends = sections.host_trends(run.path, results)  # the hosts' stored runs (sparkbench.history)
    charts = charts_mod.all_charts(results, out_dir / "charts", fleet_data, h2h_data["builds"], trends)

    summary = list(h2h_lines) + list(cvu_lines) + list(fleet_lines) + ([bridge_line] if bridge_line else [])
    summary += [f"{x.get('unit') or x['host']}/{x['variant']}: {x['status']} at {x['stage'] or '?'} — "
                f"{x['reason'] or '?'}" for x in data["failures"]]
    summary += [f"{x['host']}: no results — {x['reason']}" for x in missing]
    summary += [f"{p['host']}/{p['variant']}: run protocol — {fl.get('reason')}"  # sections.protocol_table
                for p in data.get("protocol") or [] for fl in p["flags"]]
    summary += drift_lines + serving_lines + gv_lines + prefix_lines + turn_lines + tool_lines
    all_tables = list(host_tabs)
    if missing:
        all_tables.append(Table("hosts_without_results", "Hosts without results", ["host", "reason"],
                                [[x["host"], x["reason"]] for x in missing]))
    if h2h_table:
        all_tables.append(h2h_table)
    if cvu_table:
        all_tables.append(cvu_table)
    if serving_table:
        all_tables.append(serving_table)
    all_tables += ([gv_table] if gv_table else []) + prefix_tables + ([turn_table] if turn_table else []) + tool_tables
    all_tables += fleet_tables + rc_tables + drift_tables + extra_tabs + man_tables + cluster_tables
    all_tables += [t for t in [sections.kernels_table(results)] if t]  # the kernels vLLM chose (engine_log)
    all_tables += sections.history_trend(run.path, results, trends)  # the hosts' trend over stored runs
    ctx = {"run_id": run.run_id, "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "simulated": data["simulated"] or bool(rc_data and rc_data["simulated"]),
           "backends": data["backends"],
           "n_files": len(results) + len(run.errors), "n_hosts": len(data["hosts"]),
           "load_errors": [str(e) for e in run.errors], "summary": summary, "tables": all_tables}
    rows = [row for host_rows in data["hosts"].values() for row in host_rows]
    doc = {"run_id": run.run_id, "generated_at": ctx["generated_at"], "simulated": ctx["simulated"],
           "backends": ctx["backends"],
           "load_errors": ctx["load_errors"], "summary": summary, "rows": rows,
           "quality": data["quality"], "image": data["image"], "telemetry": data["telemetry"],
           "failures": data["failures"], "protocol": data.get("protocol") or [], "hosts_without_results": missing, "head_to_head": h2h_data, "fleet": fleet_data,
           "run_compare": rc_data, "baseline_run_id": base.run_id if base else None, "drift": drift,
           "manifest": man_summary, "charts": charts, "tables": [t.as_dict() for t in all_tables]}
    if serving_entries:  # runs with an arrival-rate phase only (bench_workloads: serving)
        doc["serving"] = serving_entries
    if gv_data["rows"]:  # two or more variants of a unit ran the same rates
        doc["goodput_verdicts"] = gv_data
    if prefix_data["variants"]:  # runs with the prefix-cache phase only
        doc["prefix_caching"] = prefix_data
    if turn_entries:
        doc["multi_turn"] = turn_entries
    if tool_entries:
        doc["tool_calls"] = tool_entries
    if cluster_entries:  # runs with a cluster only: one-unit runs keep their results.json as it was
        doc["cluster_vs_unit"] = cvu_data
        doc["clusters"] = cluster_entries
    doc["terminal_table"] = terminal_table(doc, table_format)
    paths = {"report.md": out_dir / "report.md", "results.csv": out_dir / "results.csv",
             "results.json": out_dir / "results.json", "report.html": out_dir / "report.html"}
    write_atomic(paths["report.md"], markdown(ctx, charts))
    write_atomic(paths["results.csv"], results_csv(run.run_id, rows, data["quality"], data["failures"]))
    write_atomic(paths["results.json"], results_json(doc))
    write_atomic(paths["report.html"], render_html(ctx, charts))
    return {"paths": {k: str(v) for k, v in paths.items()}, "summary": summary,
            "load_errors": ctx["load_errors"], "charts": charts, "doc": doc, "tables": all_tables}


def _host_failure(value: str) -> tuple[str, str]:
    """``HOST=REASON`` → (host, reason); HOST must match ``[A-Za-z0-9._-]+``."""
    host, sep, reason = value.partition("=")
    if not sep or not HOST_RE.fullmatch(host):
        raise argparse.ArgumentTypeError(
            f"expected HOST=REASON with HOST made of letters, digits, '.', '_' or '-', got {value!r}")
    return host, " ".join(reason.split())


def _host(value: str) -> str:
    """An inventory host name (``[A-Za-z0-9._-]+``)."""
    if not HOST_RE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"expected a host name made of letters, digits, '.', '_' or '-', got {value!r}")
    return value


def _percent(value: str) -> float:
    """A percentage ≥ 0 given on the command line."""
    number = None
    try:
        number = float(value)
    except ValueError:
        pass
    if number is None:
        raise argparse.ArgumentTypeError(f"expected a number of percent, got {value!r}")
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a percentage ≥ 0, got {value}")
    return number


def _table_format(value: str) -> str:
    """A tabulate table format name."""
    if value not in tabulate_formats:
        raise argparse.ArgumentTypeError(f"unknown table format {value!r}; use one of {', '.join(tabulate_formats)}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"{PROG}: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    """The ``render`` command line."""
    p = _Parser(prog=f"python3 -m {PROG}", description="Render sparkbench reports for a stored run.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="write report.md, results.csv, results.json, report.html, charts/")
    r.add_argument("run_dir", help="results/<run-id>")
    r.add_argument("--baseline", help="results/<run-id> of an earlier run to compare with (run to run + version bridge)")
    r.add_argument("--fleet-threshold", type=_percent, default=5.0,
                   help="flag hosts more than this %% below the fleet median (default 5)")
    r.add_argument("--bridge-threshold", type=_percent, default=2.5,
                   help="version bridge: figures comparable when every bridge |Δ| ≤ this %% (default 2.5)")
    r.add_argument("--reference-build", help="head-to-head reference build (default: the first listed)")
    r.add_argument("--profiles", help="profiles/ folder to fill results that carry no roofline profile")
    r.add_argument("--host-failure", type=_host_failure, action="append", default=[], metavar="HOST=REASON",
                   help="a host that failed as a whole and why (repeatable); listed under "
                        "'Hosts without results' when the run has no result file of it")
    r.add_argument("--expected-host", type=_host, action="append", default=[], metavar="HOST",
                   help="a host the run targeted (repeatable); listed under 'Hosts without results' "
                        "when the run has no result file of it")
    r.add_argument("--missing-host-reason", default=MISSING_HOST_REASON, metavar="TEXT",
                   help=f"reason shown for an expected host without results and without --host-failure "
                        f"(default: {MISSING_HOST_REASON!r})")
    r.add_argument("--table-format", type=_table_format, default="simple", metavar="FMT",
                   help="tabulate format of the terminal table (default simple; github, grid, ...)")
    r.add_argument("--quiet", action="store_true", help="print only the report path")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        out = render(args.run_dir, args.baseline, args.fleet_threshold, args.bridge_threshold,
                     args.reference_build, args.profiles, dict(args.host_failure), args.expected_host,
                     " ".join(args.missing_host_reason.split()), args.table_format)
    except ReportError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for e in out["load_errors"]:
        print(f"{PROG}: skipped {e}", file=sys.stderr)
    if not args.quiet:
        print(out["doc"]["terminal_table"])
        for line in out["summary"]:
            print(f"- {line}")
        for c in out["charts"]:
            if c["path"]:
                print(f"chart: {c['path']}")
    print(f"report: {out['paths']['report.html']}")
    return EXIT_OK
