"""``scripts/sparkbench``: bench with live progress, or render a stored run's report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from .api import (
    EXIT_HOST_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PLAYBOOK_ERROR,
    EXIT_USAGE,
    EXIT_VARIANT_FAILED,
    BenchResult,
    UsageError,
    parse_extravars,
    run_bench,
    run_report,
)
from .progress import DONE, FAILED, Progress
from .view import View

EPILOG = f"""exit codes (bench.yml follows the same policy: non-zero if and only if a variant or a host
failed, decided after the report is written; cron and CI can read either):
  {EXIT_OK}    no variant and no host failed (an incomplete variant keeps its figures and does not fail the run)
  {EXIT_VARIANT_FAILED}    at least one variant failed (each has a result file with stage, reason, remedy)
  {EXIT_HOST_FAILED}    a host was unreachable or failed as a whole (listed under "Hosts without results")
  {EXIT_PLAYBOOK_ERROR}    ansible-playbook failed before/around the variants (syntax, inventory, no hosts)
  {EXIT_USAGE}    bad command line
  {EXIT_INTERRUPTED}  interrupted
secrets: never pass tokens with -e; export HF_TOKEN (or use ansible-vault)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.exit(EXIT_USAGE, f"sparkbench: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sparkbench", description="Reproducible vLLM benchmarks on DGX Spark units.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="run bench.yml with live progress, then write the report",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("-i", "--inventory", action="append", help="inventory file or folder, repeatable (default: ansible.cfg's)")
    b.add_argument("-l", "--limit", help="hosts or groups, as ansible-playbook -l")
    b.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE|@FILE",
                   help="extra variable (repeatable); value parsed as JSON when it is JSON")
    b.add_argument("--run-id", help="results/<run-id> (default: UTC time YYYYmmddTHHMMSSZ); reuse to resume")
    b.add_argument("--playbook", default="bench.yml", help="playbook (default: bench.yml)")
    b.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    b.add_argument("--baseline", help="compare the report with this stored run (id or directory)")
    b.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    b.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    b.add_argument("-v", "--verbose", action="count", default=0, help="ansible verbosity (artifacts only)")
    r = sub.add_parser("report", help="render a stored run's report (report.md/html, results.csv/json, charts)")
    r.add_argument("run", help="run id or results/<run-id>")
    r.add_argument("--baseline", help="run id or directory to compare with (run to run + version bridge)")
    r.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    r.add_argument("--fleet-threshold", type=float, default=5.0, help="flag hosts this %% below the fleet median")
    r.add_argument("--bridge-threshold", type=float, default=2.5, help="version bridge tolerance in %%")
    h = sub.add_parser("history", help="a unit's trend over the stored runs (the SQLite index, sparkbench.history)")
    h.add_argument("host", help="inventory host name, e.g. spark-sim03")
    h.add_argument("variant", nargs="?", help="one variant (default: every variant of the host)")
    h.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    m = sub.add_parser("profile", help="write a model profile from config.json and the safetensors headers")
    m.add_argument("model", help="a model folder (a Hugging Face snapshot or a checkpoint), or ORG/NAME on the Hub "
                                 "(config.json and the shards' headers by range request; HF_TOKEN for gated models)")
    m.add_argument("--revision", default="main", help="Hub revision: branch, tag or commit (default: main)")
    m.add_argument("--id", dest="model_id", help="ORG/NAME (default: read from the snapshot path or config.json)")
    m.add_argument("--profiles-dir", help="where profiles live (default: profiles/ at the repo root)")
    m.add_argument("--dry-run", action="store_true", help="print the profile instead of writing it")
    q = sub.add_parser("predict", help="predicted decode tok/s of a model on a unit, before it is downloaded")
    q.add_argument("model", help="a model id with a profile, a model folder, or ORG/NAME on the Hub (headers only)")
    q.add_argument("--hardware", help="hardware profile (default: dgx-spark)")
    q.add_argument("--host", help="an inventory host: calibrate on its measured history and its bandwidth probe")
    q.add_argument("--args", dest="args_json", help="vLLM flags as JSON, e.g. "
                   '\'{"kv-cache-dtype": "fp8", "max-model-len": 65536, '
                   '"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}\'')
    q.add_argument("--acceptance", help="MTP acceptance per position, e.g. 0.87,0.69 (default: the model profile's)")
    q.add_argument("--vllm-version", default="0.25.0", help="vLLM version the prediction is for (default: 0.25.0)")
    q.add_argument("--results-dir", help="where runs are stored (default: results/ at the repo root)")
    q.add_argument("--profiles-dir", help="where profiles live (default: profiles/ at the repo root)")
    q.add_argument("--fit-variant", help="a hardware fitted on the unit (x86-cpu): the variant whose result fits it "
                                         "(default: the host's newest complete result of the model)")
    q.add_argument("--json", action="store_true", help="print the prediction as JSON")
    return p


def summary(result: BenchResult, out: TextIO) -> None:
    """The final summary: per host counts, failures with reasons, the report path and the rc."""
    out.write(f"\nrun {result.run_id}: ansible-playbook {result.status} (rc {result.ansible_rc})\n")
    for host, states in result.states.items():
        done = sum(1 for s in states.values() if s == DONE)
        failed = [v for v, s in states.items() if s == FAILED]
        line = f"  {host}: {done}/{len(states)} done"
        if failed:
            line += f", failed: {', '.join(failed)}"
        if host in result.failed_hosts:
            line += f" — host {result.failed_hosts[host]}"
        out.write(line + "\n")
        for v in failed:
            note = result.notes.get(host, {}).get(v)
            if note:
                out.write(f"      {v}: {note}\n")
    for line in result.summary:
        out.write(f"  {line}\n")
    if result.report_html:
        out.write(f"report: {result.report_html}\n")
    elif result.report_error:
        out.write(f"report: not written ({result.report_error})\n")
    out.write(f"results: {result.run_dir}\nartifacts: {result.artifacts_dir}\nexit code {result.rc}\n")


def history_command(host: str, variant: str | None, results_dir: str | None) -> int:
    """``sparkbench history HOST [VARIANT]``: one line per run, Δ vs the previous and the first run."""
    from .. import history
    from ..paths import DEFAULT_RESULTS_DIR

    where = results_dir or DEFAULT_RESULTS_DIR
    if not Path(where).is_dir():
        print(f"sparkbench: --results-dir {where} is not a directory; pass the folder that holds the runs",
              file=sys.stderr)
        return EXIT_USAGE
    _, rebuilt = history.ensure(where)
    if rebuilt:
        print(f"sparkbench: index rebuilt ({rebuilt})", file=sys.stderr)
    for line in history.format_trend(history.trend(history.rows(where, host, variant)), host):
        print(line)
    return EXIT_OK


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
            return history_command(args.host, args.variant, args.results_dir)
        if args.command == "report":
            out = run_report(args.run, baseline=args.baseline, results_dir=args.results_dir,
                             fleet_threshold=args.fleet_threshold, bridge_threshold=args.bridge_threshold)
            for e in out["load_errors"]:
                print(f"sparkbench: skipped {e}", file=sys.stderr)
            for line in out["summary"]:
                print(f"- {line}")
            print(f"report: {out['paths']['report.html']}")
            return EXIT_OK
        extravars = parse_extravars(args.extra_vars)
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
    except UsageError as exc:
        print(f"sparkbench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sparkbench: interrupted; re-run with the same --run-id to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
