"""Command line: ``python3 scripts/bench_report render RUN_DIR [--baseline RUN_DIR]
[--fleet-threshold 5] [--bridge-threshold 2.5] [--reference-build NAME] [--profiles DIR]
[--host-failure HOST=REASON ...]``.

Exit status: 0 report written (unreadable result files are listed in the report and on stderr,
the others are reported); 2 bad usage or input (missing run directory, no result file, bad
option) — one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from . import fleet, headtohead, manifest, runcompare, tables
from .html_page import render_html
from .load import RunNotFound, apply_profiles, load_run, result_files
from .table import Table, redact
from .writers import markdown, results_csv, results_json, write_atomic

EXIT_OK, EXIT_USAGE = 0, 2


HOST_RE = re.compile(r"[A-Za-z0-9._-]+")


class ReportError(Exception):
    """A one-line, user-facing error (bad input or option)."""


def host_failures(run_path: Path, failures: dict[str, str] | None) -> list[dict]:
    """Hosts that failed as a whole: ``[{"host", "reason"}]`` for each entry of ``failures``
    (host → reason, e.g. from Ansible's play) whose folder holds no result file in the run;
    reasons go through the same secret redaction as launch commands."""
    have = {p.parent.name for p in result_files(run_path)}
    return [{"host": h, "reason": redact(reason) or "failed (no reason given)"}
            for h, reason in sorted((failures or {}).items()) if h not in have]


def render(run_dir: str | Path, baseline: str | Path | None = None, fleet_threshold: float = 5.0,
           bridge_threshold: float = 2.5, reference_build: str | None = None,
           profiles: str | Path | None = None, failed_hosts: dict[str, str] | None = None) -> dict:
    """Render the reports of ``run_dir``; returns ``{"paths": {...}, "summary": [...],
    "load_errors": [...], "charts": [...], "doc": results.json content}``. ``failed_hosts``
    (host → reason): hosts that failed as a whole; those without a result file in the run are
    listed under "Hosts without results". Raises :class:`ReportError` with a one-line message
    for bad input."""
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
    results = run.results
    try:
        data, tabs = tables.build(results)
        h2h_data, h2h_lines, h2h_table = headtohead.build(results, reference_build)
        fleet_data, fleet_tables, fleet_lines = fleet.build(results, fleet_threshold)
        rc_data, rc_tables, bridge_line = (runcompare.build(results, base.results, base.run_id, bridge_threshold)
                                           if base else (None, [], None))
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    man_summary, man_tables = manifest.build(results)
    from . import charts as charts_mod  # matplotlib: imported only when there is a report to draw

    out_dir = run.path
    charts = charts_mod.all_charts(results, out_dir / "charts", fleet_data, h2h_data["builds"])

    summary = list(h2h_lines) + list(fleet_lines) + ([bridge_line] if bridge_line else [])
    failed = [f"{x['host']}/{x['variant']}: {x['status']} at {x['stage'] or '?'} — {x['reason'] or '?'}"
              for x in data["failures"]]
    summary += failed
    missing = host_failures(run.path, failed_hosts)
    summary += [f"{x['host']}: no results — {x['reason']}" for x in missing]
    all_tables = tabs[:len(data["hosts"])]
    if missing:
        all_tables.append(Table("hosts_without_results", "Hosts without results", ["host", "reason"],
                                [[x["host"], x["reason"]] for x in missing]))
    if h2h_table:
        all_tables.append(h2h_table)
    all_tables += fleet_tables + rc_tables + tabs[len(data["hosts"]):] + man_tables
    ctx = {"run_id": run.run_id, "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "simulated": data["simulated"] or bool(rc_data and rc_data["simulated"]),
           "n_files": len(results) + len(run.errors), "n_hosts": len(data["hosts"]),
           "load_errors": [str(e) for e in run.errors], "summary": summary, "tables": all_tables}
    rows = [row for host_rows in data["hosts"].values() for row in host_rows]
    doc = {"run_id": run.run_id, "generated_at": ctx["generated_at"], "simulated": ctx["simulated"],
           "load_errors": ctx["load_errors"], "summary": summary, "rows": rows,
           "quality": data["quality"], "image": data["image"], "telemetry": data["telemetry"],
           "failures": data["failures"], "hosts_without_results": missing, "head_to_head": h2h_data, "fleet": fleet_data,
           "run_compare": rc_data, "baseline_run_id": base.run_id if base else None,
           "manifest": man_summary, "charts": charts, "tables": [t.as_dict() for t in all_tables]}
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


def _positive(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of percent, got {value!r}") from None
    if x < 0:
        raise argparse.ArgumentTypeError(f"expected a percentage ≥ 0, got {value}")
    return x


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_USAGE, f"bench_report: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    p = _Parser(prog="bench_report", description="Render sparkbench reports for a stored run.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="write report.md, results.csv, results.json, report.html, charts/")
    r.add_argument("run_dir", help="results/<run-id>")
    r.add_argument("--baseline", help="results/<run-id> of an earlier run to compare with (run to run + version bridge)")
    r.add_argument("--fleet-threshold", type=_positive, default=5.0,
                   help="flag hosts more than this %% below the fleet median (default 5)")
    r.add_argument("--bridge-threshold", type=_positive, default=2.5,
                   help="version bridge: figures comparable when every bridge |Δ| ≤ this %% (default 2.5)")
    r.add_argument("--reference-build", help="head-to-head reference build (default: the first listed/measured)")
    r.add_argument("--profiles", help="profiles/ folder to fill results that carry no roofline profile")
    r.add_argument("--host-failure", type=_host_failure, action="append", default=[], metavar="HOST=REASON",
                   help="a host that failed as a whole and why (repeatable); listed under "
                        "'Hosts without results' when the run has no result file of it")
    r.add_argument("--quiet", action="store_true", help="print only the report path")
    args = p.parse_args(argv)
    try:
        out = render(args.run_dir, args.baseline, args.fleet_threshold, args.bridge_threshold,
                     args.reference_build, args.profiles, dict(args.host_failure))
    except ReportError as exc:
        print(f"bench_report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for e in out["load_errors"]:
        print(f"bench_report: skipped {e}", file=sys.stderr)
    if not args.quiet:
        for t in out["tables"][:1]:
            from .writers import table_md
            print(table_md(t))
        for line in out["summary"]:
            print(f"- {line}")
        for c in out["charts"]:
            if c["path"]:
                print(f"chart: {c['path']}")
    print(f"report: {out['paths']['report.html']}")
    return EXIT_OK
