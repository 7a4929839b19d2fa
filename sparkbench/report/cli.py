"""Command line: ``python3 -m sparkbench.report render RUN_DIR [--baseline RUN_DIR]
[--fleet-threshold 5] [--bridge-threshold 2.5] [--reference-build NAME] [--profiles DIR]
[--host-failure HOST=REASON ...] [--expected-host HOST ...] [--missing-host-reason TEXT]
[--table-format FMT] [--width N] [--cwd DIR] [--quiet]``.

Without ``--quiet`` it prints the run's closing lines (:mod:`sparkbench.report.closing`: the
compact table, the answer, where the report is), at most ``--width`` columns (default: COLUMNS,
else 100) with paths relative to ``--cwd`` (default: the working directory).

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

from ..paths import write_atomic
from . import drift as drift_mod
from . import sections
from .closing import closing_lines, output_width
from .html_page import render_html
from .load import Run, RunNotFound, apply_profiles, load_run, result_files
from .table import redact
from .terminal import terminal_table
from .writers import markdown, results_csv, results_doc, results_json

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


def _load(run_dir: str | Path, baseline: str | Path | None, profiles: str | Path | None) -> tuple[Run, Run | None]:
    """The run and the baseline run (None without one), their results given the profiles of
    ``profiles`` where they carry none. ReportError for a missing run or profiles folder."""
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
    return run, base


def _reported(run: Run, missing: list[dict], drift: dict | None) -> tuple[list[dict], dict]:
    """(the results the tables report, the hosts' drift). A host that failed as a whole is listed
    once, under "Hosts without results" (``missing``): its per-variant host-failure documents stay
    out of the tables and out of the drift, which comes from the run's own bracket documents
    (``<variant>.bracket.json``) unless ``drift`` is given."""
    whole = {x["host"] for x in missing}
    results = [r for r in run.results if str(r.get("host") or "") not in whole]
    if drift is None:
        drift = drift_mod.host_drift(results, [b for b in run.brackets if str(b.get("host") or "") not in whole])
    return results, drift


def _write(out_dir: Path, ctx: dict, doc: dict, charts: list[dict]) -> dict[str, Path]:
    """Write report.md, results.csv, results.json and report.html into ``out_dir``; their paths."""
    paths = {"report.md": out_dir / "report.md", "results.csv": out_dir / "results.csv",
             "results.json": out_dir / "results.json", "report.html": out_dir / "report.html"}
    write_atomic(paths["report.md"], markdown(ctx, charts).encode("utf-8"))
    write_atomic(paths["results.csv"],
                 results_csv(doc["run_id"], doc["rows"], doc["quality"], doc["failures"]).encode("utf-8"))
    write_atomic(paths["results.json"], results_json(doc).encode("utf-8"))
    write_atomic(paths["report.html"], render_html(ctx, charts).encode("utf-8"))
    return paths


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
    run, base = _load(run_dir, baseline, profiles)
    missing = hosts_without_results(run.path, failed_hosts, expected_hosts, missing_host_reason, run.results)
    results, drift = _reported(run, missing, drift)
    try:
        parts = sections.report_sections(results, missing, drift, run.path, baseline=base,
                                         fleet_threshold=fleet_threshold, bridge_threshold=bridge_threshold,
                                         reference_build=reference_build)
    except ValueError as exc:
        raise ReportError(str(exc)) from None
    by_key = {s.key: s for s in parts}
    from . import charts as charts_mod  # matplotlib: imported only when there is a report to draw

    charts = charts_mod.all_charts(results, run.path / "charts", by_key["fleet"].data,
                                   by_key["head_to_head"].data["builds"], by_key["history"].data, by_key["tune"].data)
    rows, rc = by_key["rows"].data, by_key["run_compare"].data
    tables = [t for s in parts for t in s.tables]
    summary = sections.summary_lines(parts)
    ctx = {"run_id": run.run_id, "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "simulated": any(r["simulated"] for r in rows) or bool(rc and rc["simulated"]),
           "backends": sorted({r["backend"] for r in rows if r["backend"]}),
           "n_files": len(results) + len(run.errors), "n_hosts": len({r["host"] for r in rows}),
           "load_errors": [str(e) for e in run.errors],
           # report.md and report.html: the answer's table first, then the other sections' summary lines
           "summary": sections.summary_lines(parts, skip=(sections.ANSWER,)), **sections.placed(parts),
           "answer_chart": sections.ANSWER_CHART}
    doc = results_doc(parts, **{k: ctx[k] for k in ("run_id", "generated_at", "simulated", "backends",
                                                    "load_errors")}, summary=summary,
                      baseline_run_id=base.run_id if base else None, charts=charts,
                      tables=[t.as_dict() for t in tables])
    doc["terminal_table"] = terminal_table(doc, table_format)
    paths = _write(run.path, ctx, doc, charts)
    return {"paths": {k: str(v) for k, v in paths.items()}, "summary": summary,
            "load_errors": ctx["load_errors"], "charts": charts, "doc": doc, "tables": tables}


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
    r.add_argument("--profiles", help="profiles/ folder (over the built-in profiles) to fill results that carry no "
                   "roofline profile")
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
    r.add_argument("--width", type=int, default=None, metavar="N",
                   help="the closing lines' width (default: COLUMNS when set, else 100)")
    r.add_argument("--cwd", default=None, metavar="DIR",
                   help="print paths relative to DIR (default: the working directory)")
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
    if args.quiet:
        print(f"report: {out['paths']['report.html']}")
        return EXIT_OK
    width = args.width or output_width(sys.stdout)
    print("\n".join(closing_lines(out["doc"], width, Path(out["paths"]["report.html"]).parent, args.cwd)))
    return EXIT_OK
