"""``scripts/sparkbench``: one command for every job. The playbook verbs (provision, bench,
health, serve, teardown) run their playbook on ansible-runner with live progress and end with
lines that fit the terminal (a bench: the compact table, the answer, where the report is); the
others read stored runs and models. The parser is :mod:`sparkbench.runner.commands`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from ..errors import DocumentError
from ..report.closing import closing_lines, output_width, shown_path, wrap
from .api import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BenchResult, UsageError, parse_extravars, run_bench, run_report
from .commands import parser
from .playbooks import PlaybookResult, run_playbook
from .progress import DONE, FAILED, Progress
from .tasks import TaskProgress
from .view import TaskView, View

__all__ = ["main", "parser", "summary"]


def summary(result: BenchResult, out: TextIO, width: int | None = None) -> None:
    """A bench's closing lines: per host counts and failures, the compact table and the answer
    (:func:`sparkbench.report.closing.closing_lines`), where the report is, and the exit code;
    every line at most ``width`` columns (default: :func:`output_width` of ``out``)."""
    width = width or output_width(out)
    lines = [f"run {result.run_id}: ansible-playbook {result.status} (rc {result.ansible_rc})"]
    for host, states in result.states.items():
        done = sum(1 for s in states.values() if s == DONE)
        failed = [v for v, s in states.items() if s == FAILED]
        line = f"{host}: {done}/{len(states)} done" + (f", failed: {', '.join(failed)}" if failed else "")
        if host in result.failed_hosts:
            line += f" — host {result.failed_hosts[host]}"
        lines += wrap(line, width, first="  ", rest="      ")
        for v in failed:
            note = result.notes.get(host, {}).get(v)
            if note:
                lines += wrap(f"{v}: {note}", width, first="      ", rest="        ")
    for line in result.summary:
        lines += wrap(line, width, first="  ", rest="    ")
    if result.report_doc is not None and result.report_html:
        lines += [""] + closing_lines(result.report_doc, width)
    if result.report_html:
        where = shown_path(result.report_html.parent)
        lines += wrap(f"report:\xa0{where}/report.html (the full table and the charts; also report.md, results.csv)",
                      width, rest="  ")
    elif result.report_error:
        lines += wrap(f"report: not written ({result.report_error})", width, rest="  ")
    lines += wrap(f"results:\xa0{shown_path(result.run_dir)}", width, rest="  ")
    lines += wrap(f"artifacts:\xa0{shown_path(result.artifacts_dir)}", width, rest="  ")
    lines.append(f"exit code {result.rc}")
    out.write("\n" + "\n".join(lines) + "\n")


def playbook_summary(result: PlaybookResult, out: TextIO, width: int | None = None) -> None:
    """A playbook verb's closing lines: what the playbook said, per host its outcome, the files it
    wrote, the exit code; every line at most ``width`` columns."""
    width = width or output_width(out)
    lines: list[str] = []
    hosts = {h for h, _ in result.said if h}
    for host, line in result.said:
        lines += wrap(line, width, first=f"{host}: " if host and len(hosts) > 1 else "", rest="    ")
    for host, why in result.failed_hosts.items():
        lines += wrap(f"{host}: {why}", width, first="✘ ", rest="    ")
    for u in result.units:
        if u.verdict != "healthy" and u.remedy:
            lines += wrap(f"{u.host}: remedy: {u.remedy}", width, rest="    ")
    if result.early:
        lines += wrap(f"ansible-playbook exited {result.ansible_rc} before any host ran: {result.early}", width,
                      rest="    ")
    for name, path in result.files.items():
        lines += wrap(f"{name}:\xa0{shown_path(path)}", width, rest="  ")
    lines += wrap(f"artifacts:\xa0{shown_path(result.artifacts_dir)}", width, rest="  ")
    lines.append(f"{result.verb}: ansible-playbook rc {result.ansible_rc}; exit code {result.rc}")
    out.write("\n" + "\n".join(lines) + "\n")


def _history(host: str, variant: str | None, results_dir: str | None) -> int:
    """``sparkbench history HOST [VARIANT]``: one line per run, Δ vs the previous and the first run."""
    from .. import history
    from ..paths import DEFAULT_RESULTS_DIR

    where = results_dir or DEFAULT_RESULTS_DIR
    if not Path(where).is_dir():
        print(f"sparkbench: --results-dir {where} is not a directory; pass the folder that holds the runs",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        _, rebuilt = history.ensure(where)
        index_rows = history.rows(where, host, variant)
    except DocumentError as exc:  # a run's health.json that is not a health document: named by its field
        print(f"sparkbench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if rebuilt:
        print(f"sparkbench: index rebuilt ({rebuilt})", file=sys.stderr)
    for line in history.format_trend(history.trend(index_rows), host):
        print(line)
    return EXIT_OK


def _report(args) -> int:
    out = run_report(args.run, baseline=args.baseline, results_dir=args.results_dir,
                     fleet_threshold=args.fleet_threshold, bridge_threshold=args.bridge_threshold)
    for e in out["load_errors"]:
        print(f"sparkbench: skipped {e}", file=sys.stderr)
    print("\n".join(closing_lines(out["doc"], output_width(sys.stdout))))
    print("\n".join(wrap(f"report:\xa0{shown_path(out['paths']['report.html'])} (the full table and the charts)",
                          output_width(sys.stdout), rest="  ")))
    return EXIT_OK


def _bench(args) -> int:
    extravars = parse_extravars(args.extra_vars)
    if args.check:
        return _playbook("bench", args, extravars)
    progress = Progress()
    view = View(progress, tty=False if args.plain else None)
    progress.on_change = view.change
    try:
        result = run_bench(inventory=args.inventory, limit=args.limit, extravars=extravars, run_id=args.run_id,
                           playbook=args.playbook, results_dir=args.results_dir, progress=progress,
                           report=not args.no_report, baseline=args.baseline, verbosity=args.verbose)
    finally:
        view.stop()
    summary(result, sys.stdout)
    return result.rc


def _verb_extravars(args) -> dict:
    """The extra vars a verb's own options stand for (serve's action and variant, teardown's purge)."""
    ev = parse_extravars(args.extra_vars)
    if args.command == "serve":
        if args.action in ("deploy", "undeploy"):
            ev["serve_variant"] = args.variant
            ev["serve_state"] = "present" if args.action == "deploy" else "absent"
        if args.action == "deploy" and args.run:
            ev["serve_run"] = args.run
        if args.action == "deploy" and args.port is not None:
            ev["serve_port"] = args.port
        if args.action == "list" and ("serve_variant" in ev or "serve_state" in ev):
            raise UsageError("serve list takes no serve_variant/serve_state; use serve deploy or serve undeploy")
    if args.command == "teardown" and args.purge_cache:
        ev["teardown_purge_cache"] = True
    return ev


def _playbook(verb: str, args, extravars: dict) -> int:
    """Run a playbook verb with its live view, then its closing lines."""
    measured = verb == "health" and not args.check
    progress: Progress | TaskProgress = Progress() if measured else TaskProgress()
    view = (View if measured else TaskView)(progress, tty=False if args.plain else None)  # type: ignore[operator]
    try:
        result = run_playbook(verb, inventory=args.inventory, limit=args.limit, extravars=extravars,
                              check=args.check, run_id=getattr(args, "run_id", None),
                              results_dir=getattr(args, "results_dir", None), verbosity=args.verbose,
                              on_change=view.change)
    finally:
        view.stop()
    playbook_summary(result, sys.stdout)
    return result.rc


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        if args.command == "profile":
            from ..modelfiles.command import profile_command
            return profile_command(args.model, args.model_id, args.profiles_dir, args.dry_run, args.revision)
        if args.command == "predict":
            from ..predict.command import predict_command
            return predict_command(args.model, args.hardware, args.host, args.args_json, args.results_dir,
                                   args.profiles_dir, args.vllm_version, args.acceptance, args.json,
                                   args.fit_variant)
        if args.command == "history":
            return _history(args.host, args.variant, args.results_dir)
        if args.command == "schema":
            from ..documents.schema import schema_text
            sys.stdout.write(schema_text())
            return EXIT_OK
        if args.command == "report":
            return _report(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "tune":
            from .tune import run_tune
            return run_tune(args.space, inventory=args.inventory, limit=args.limit, run_id=args.run_id,
                            results_dir=args.results_dir, extravars=parse_extravars(args.extra_vars), out=sys.stdout)
        if args.command == "upgrade" and args.check:
            from .upgrade import check_extravars
            return _playbook("upgrade", args, check_extravars(parse_extravars(args.extra_vars), args.image, args.variant,
                                                               args.model_revision, args.run_id, args.results_dir))
        if args.command == "upgrade":
            from .upgrade import run_upgrade
            return run_upgrade(args.image, inventory=args.inventory, limit=args.limit, variant=args.variant,
                               revision=args.model_revision, run_id=args.run_id, results_dir=args.results_dir,
                               extravars=parse_extravars(args.extra_vars), out=sys.stdout)
        return _playbook(args.command, args, _verb_extravars(args))
    except UsageError as exc:
        print(f"sparkbench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sparkbench: interrupted; re-run with the same --run-id to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
