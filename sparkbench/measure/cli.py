"""measure's command line: the parser built from the option table, the inputs it names read and
checked before any request, the run, and the exit status."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Callable, TypedDict

from . import options
from .common import (
    EXIT_COMPLETE,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_USAGE,
    Abort,
    Interrupted,
    Unreachable,
    log,
    redact,
    register_secret,
)
from .document import write_out
from .options import OPTIONS, Option, OptionValue
from .profiles import default_profiles_dir, load_hardware
from .quality import default_quality_file, load_quality
from .session import Session
from .tool_judge import default_tools_file, load_tools
from .workload import load_replay

DESCRIPTION = ("Measure an OpenAI-compatible LLM server the sparkbench way (the source article's method): forced-length "
               "decode speed, parallel throughput, context prefill, speculative decoding acceptance, prefix "
               "caching, multi-turn, arrival rates with SLO goodput, tool calls, quality and image checks, GPU "
               "telemetry.")
EPILOG = ("Exit status: 0 complete, 1 failed, 2 bad arguments or server unreachable, 3 incomplete. "
          "See docs/MEASUREMENT.md.")


class ArgumentOptions(TypedDict, total=False):
    """The keyword arguments of one option's ``add_argument`` call; ``build_parser``."""

    help: str
    dest: str
    action: str
    choices: list[str]
    default: OptionValue
    type: Callable[[str], OptionValue]
    required: bool
    metavar: str


def _converter(o: Option) -> Callable[[str], OptionValue]:
    """An argparse type for the option: its table rule, with argparse's own wording of a bad value."""
    def conv(text: str) -> OptionValue:
        try:
            return options.parse_value(o, text)
        except options.BadValue as exc:
            if o.kind == "command":  # the message is a whole sentence with its fix
                raise argparse.ArgumentTypeError(exc.args[0]) from None
            item = f" ({exc.args[1]!r})" if len(exc.args) > 1 else ""
            raise argparse.ArgumentTypeError(f"must be {exc.args[0]}, got {text!r}{item}") from None
    conv.__name__ = o.kind
    return conv


def _help(o: Option) -> str:
    if o.kind == "flag" or o.required:
        return o.help
    default = o.default
    if default is None:
        return o.help + " (default off)" if o.nullable or o.kind in ("rate_list", "slo") else o.help
    shown = ",".join(str(x) for x in default) if isinstance(default, list) else f"{default:g}" \
        if isinstance(default, float) else str(default)
    return f"{o.help} (default {shown})"


def build_parser() -> argparse.ArgumentParser:
    """measure's parser, one argument per row of the option table."""
    p = argparse.ArgumentParser(prog="measure.py", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--api-key", default=None,
                   help="Bearer token (default: $SPARKBENCH_API_KEY); never written to the output")
    for o in OPTIONS:
        kw: ArgumentOptions = {"help": _help(o), "dest": o.dest}
        if o.kind == "flag":
            kw["action"] = "store_true"
        elif o.kind == "choice":
            kw.update(choices=list(o.choices), default=o.default)
        else:
            kw.update(type=_converter(o), default=o.default, required=o.required, metavar=options.metavar(o))
        p.add_argument(o.flag, **kw)
    return p


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Rules across options (options.cross_errors) and the paths the options name; fills the
    defaults that depend on the installation. Exits 2 with ``argument --x: why`` on the first problem."""
    flags = {o.key: o.flag for o in OPTIONS}
    values = {o.key: getattr(args, o.dest) for o in OPTIONS}
    for key, message in options.cross_errors(values, lambda k: flags[k], unset="not given"):
        parser.error(f"argument {flags[key]}: {message}")
    if args.target_precision is not None and args.max_runs is None:
        args.max_runs = 4 * args.runs
    if args.out != "-":
        d = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(d):
            parser.error(f"argument --out: directory {d} does not exist")
    if args.quality_file is None:
        args.quality_file = default_quality_file()
    if args.tools_file is None:
        args.tools_file = default_tools_file()
    if args.profiles_dir is None:
        args.profiles_dir = default_profiles_dir()
    elif not os.path.isdir(args.profiles_dir):
        parser.error(f"argument --profiles-dir: {args.profiles_dir} is not a directory")


def load_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace, s: Session) -> None:
    """Read every file the options name into the session before any request (exit 2 naming the option)."""
    try:
        if args.hardware:
            s.hardware = load_hardware(args.hardware, args.profiles_dir)
        if args.replay:
            s.replay_data = load_replay(args.replay)
        if args.tools:
            s.tools_data = load_tools(args.tools_file)
        if args.quality or args.image:
            s.quality_data = load_quality(args.quality_file)
    except ValueError as exc:
        parser.error(str(exc))
    if args.image and not (s.quality_data or {}).get("image"):
        parser.error(f"argument --image: {args.quality_file} has no 'image' section")


def _on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _stopped(s: Session, exc: BaseException) -> tuple[str, int]:
    """The status and exit code of a run that stopped early; why is recorded and said on stderr."""
    if isinstance(exc, Unreachable):
        phase, message, status, code, word = "probe", str(exc), "failed", EXIT_USAGE, "error"
    elif isinstance(exc, Abort):
        phase, message, status, code, word = "run", str(exc), "incomplete", EXIT_INCOMPLETE, "incomplete"
    else:
        phase, message, status, code, word = "run", f"interrupted by {exc}", "incomplete", EXIT_INCOMPLETE, \
            "incomplete"
    s.doc["errors"].append({"phase": phase, "request": None, "message": message})
    sys.stderr.write(redact(f"measure.py: {word}: {message}\n"))
    return status, code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    api_key = args.api_key or os.environ.get("SPARKBENCH_API_KEY") or None
    if api_key:
        register_secret(api_key)
    check_args(parser, args)
    s = Session(args, api_key)
    load_inputs(parser, args, s)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    code = EXIT_COMPLETE
    try:
        status = s.run()
        code = {"failed": EXIT_FAILED, "incomplete": EXIT_INCOMPLETE}.get(status, EXIT_COMPLETE)
        if status == "failed":
            log("failed: no single-stream request succeeded")
    except (Unreachable, Abort, Interrupted) as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        status, code = _stopped(s, exc)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    doc = s.finish(status)
    try:
        write_out(args.out, doc)
    except OSError as exc:
        sys.stderr.write(f"measure.py: error: cannot write --out {args.out}: {exc}\n")
        return EXIT_USAGE
    if args.out != "-":
        log(f"{status}: wrote {args.out}")
    return code
