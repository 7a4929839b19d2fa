"""Shared helpers of the sparkbench self-benchmarks (`make perf`).

Every benchmark module in `perf/` exposes ``run(quick: bool) -> Section``; `perf/run_all.py`
collects the sections, writes each to `perf/results/<name>.md` (:func:`render_section`: title,
stamp, summary block, body) and assembles `BENCHMARKS.md` from those files' summary blocks (so a
subset run with `--only` keeps the other tables as last measured).

Statistics used throughout (the machine is shared and noisy):

- median of a list (``statistics.median``), quoted with min and max;
- relative error = (measured − truth) / truth, shown in percent;
- ratio = value / reference value (e.g. wall time at N hosts / wall time at 1 host).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

REPO = Path(__file__).resolve().parent.parent
PERF = REPO / "perf"
WORK = PERF / ".work"
RESULTS = PERF / "results"
MEASURE = REPO / "scripts" / "measure.py"
SIM = REPO / "scripts" / "vllm_sim"

# Ports of this benchmark suite (brief: 18400–18599). Fleet scaling owns 18500–18599.
PORT_EMITTER = 18400
PORT_SIM_BASE = 18410
PORT_GPU_SERVER = 18490
PORT_FLEET_BASE = 18500


class PerfError(RuntimeError):
    """A benchmark could not run; the message is one line that names the cause and the fix."""


@dataclass
class Section:
    """One benchmark: its section of BENCHMARKS.md and its file under perf/results/.

    ``name`` is the file stem under perf/results/ and the key of ``--only``; ``body`` is
    Markdown (method, table, verdict) written below the title, the stamp and the summary block.
    The summary (what BENCHMARKS.md shows): ``figure``, today's headline figure(s) in a sentence
    or three; ``load``, what was served and measured; ``today``, a few words for BENCHMARKS.md's
    table (the figure and "met" / "missed"). The machine line is the stamp's (:func:`machine_line`).
    """

    name: str
    title: str
    body: str
    goal_met: bool | None = None
    data: dict[str, Any] = field(default_factory=dict)
    figure: str = ""
    load: str = ""
    today: str = ""


def git_commit() -> str:
    """Short hash of HEAD, with ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               text=True, capture_output=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def utc_now() -> str:
    """UTC time as ``YYYY-mm-dd HH:MM UTC``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _cpu_model() -> str:
    cpu_model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return cpu_model


def _mem_gib() -> float:
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    return mem_gib


def _load_average() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def machine_facts() -> str:
    """One line: CPU count, CPU model, memory, Python and OS (what the figures depend on)."""
    avg = _load_average()
    load = "" if avg is None else " · load avg %.2f" % avg
    return (f"{os.cpu_count()} CPU cores ({_cpu_model()}) · {_mem_gib():.0f} GiB RAM · "
            f"Python {platform.python_version()} · {platform.system()} {platform.release()}{load}")


def stamp(when: str | None = None, commit: str | None = None) -> str:
    """The stamp line under each table: date, commit and machine."""
    return f"_Measured {when or utc_now()} at commit `{commit or git_commit()}` on {machine_facts()}._"


def machine_line(when: str | None = None, commit: str | None = None) -> str:
    """The summary's machine: cores, CPU, memory, Python; UTC time, commit, load average.

    E.g. ``2 CPU cores (AMD EPYC), 24 GiB RAM, Python 3.11.7; 2026-11-30 03:46 UTC, commit
    `4eddbff`, load average 7.63.`` (the stamp's facts, shorter).
    """
    cpu = re.sub(r"\((R|TM)\)", "", _cpu_model())
    cpu = re.sub(r"\s+", " ", re.sub(r"\s(Processor|CPU)\b", " ", cpu)).strip()
    avg = _load_average()
    load = "" if avg is None else ", load average %.2f" % avg
    return (f"{os.cpu_count()} CPU cores ({cpu}), {_mem_gib():.0f} GiB RAM, Python "
            f"{platform.python_version()}; {when or utc_now()}, commit `{commit or git_commit()}`{load}.")


# The summary block of a results file: what BENCHMARKS.md shows of the benchmark. perf/run_all.py
# writes it (render_section) and reads it back (read_summary); its bullets are "- **Key.** text",
# a bullet's further lines indented by two spaces.
SUMMARY_BEGIN = "<!-- summary: what BENCHMARKS.md shows (perf/run_all.py writes and reads it) -->"
SUMMARY_END = "<!-- /summary -->"
SUMMARY_KEYS = ("Today", "Figure", "Machine", "Load")
_BULLET = re.compile(r"^- \*\*(\w+)\.\*\* ?(.*)$")


_NBSP = "\u00a0"
_UNIT = re.compile(r"(\d) (%|×|s\b|ms\b|min\b|tok/s|GB/s|req/s)")


def wrap(text: str, width: int = 100, first: str = "", rest: str = "") -> str:
    """Markdown text wrapped at ``width`` columns, never between a number and its unit nor inside a
    `code span` (Markdown joins the lines again)."""
    glued = _UNIT.sub(lambda m: m.group(1) + _NBSP + m.group(2), " ".join(text.split()))
    glued = re.sub(r"`[^`]+`", lambda m: m.group(0).replace(" ", _NBSP), glued)
    out = textwrap.fill(glued, width=width, initial_indent=first, subsequent_indent=rest,
                        break_long_words=False, break_on_hyphens=False)
    return out.replace(_NBSP, " ")


def bullet(key: str, text: str) -> str:
    """One summary bullet ("- **Key.** text"), wrapped at 100 columns."""
    return wrap(text, first=f"- **{key}.** ", rest="  ")


def summary_block(sec: Section, machine: str | None = None) -> str:
    """The summary block of a section: Today, Figure, Machine (default :func:`machine_line`), Load."""
    verdict = {True: "goal met", False: "goal missed", None: "no verdict"}[sec.goal_met]
    fields = {"Today": sec.today or verdict,
              "Figure": sec.figure or f"{verdict[0].upper()}{verdict[1:]}; the figures are in the tables below.",
              "Machine": machine or machine_line(), "Load": sec.load}
    lines = [SUMMARY_BEGIN] + [bullet(k, fields[k]) for k in SUMMARY_KEYS if fields[k].strip()]
    return "\n".join(lines + [SUMMARY_END])


def render_section(sec: Section, number: int, machine: str | None = None) -> str:
    """A results file: numbered title, stamp, summary block, body."""
    when, commit = utc_now(), git_commit()
    block = summary_block(sec, machine or machine_line(when, commit))
    return f"## {number}. {sec.title}\n\n{stamp(when, commit)}\n\n{block}\n\n{sec.body.strip()}\n"


def read_summary(text: str) -> dict[str, str] | None:
    """The summary block of a results file as {key: text} (a bullet's lines kept as written), or
    None when the file has no block."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("<!-- summary"))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == SUMMARY_END)
    except StopIteration:
        return None
    out: dict[str, str] = {}
    key = None
    for line in lines[start + 1:end]:
        m = _BULLET.match(line)
        if m:
            key = m.group(1)
            out[key] = m.group(2)
        elif key is not None and line.strip():
            out[key] += "\n" + line.rstrip()
    return out


def median(values: Iterable[float]) -> float:
    """Median of the values (``nan`` when empty)."""
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def rel_err(measured: float, truth: float) -> float:
    """Relative error (measured − truth) / truth as a fraction (0.01 = +1 %)."""
    if truth == 0:
        return float("nan")
    return (measured - truth) / truth


def pct(x: float | None, digits: int = 2, signed: bool = True) -> str:
    """A fraction as a percentage string: 0.0123 → '+1.23 %'; None/nan → '—'."""
    if x is None or x != x:
        return "—"
    return f"{x * 100:+.{digits}f} %" if signed else f"{x * 100:.{digits}f} %"


def fmt(x: float | None, digits: int = 1) -> str:
    """A number with fixed decimals and thousands separators; None/nan → '—'."""
    if x is None or x != x:
        return "—"
    return f"{x:,.{digits}f}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; cells are str()'d and '|' is escaped."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when it is free on 127.0.0.1, else a port the kernel picks."""
    if preferred is not None:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, data: Any = None, timeout: float = 10.0) -> Any:
    """GET (or POST when ``data`` is given) a URL and decode its JSON answer."""
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def http_text(url: str, timeout: float = 10.0) -> str:
    """GET a URL and return its body as text."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Poll ``url`` until it answers 200, the process exits, or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise PerfError(f"server exited with status {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.05)
    raise PerfError(f"{url} did not answer within {timeout:.0f} s")


def stop(proc: subprocess.Popen | None, timeout: float = 5.0) -> None:
    """Terminate a process started by a benchmark (its own process group), then kill it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait(timeout)


def pin(cores: set[int] | None):
    """A ``preexec_fn`` that pins the child to ``cores`` and gives it its own process group."""
    def _pre() -> None:
        os.setpgrp()
        if cores:
            avail = os.sched_getaffinity(0)
            use = {c for c in cores if c in avail} or avail
            os.sched_setaffinity(0, use)
    return _pre


def cores_for_split() -> tuple[set[int] | None, set[int] | None]:
    """(client cores, load-source cores): core 0 and core 1 when the machine has two or more."""
    avail = sorted(os.sched_getaffinity(0))
    if len(avail) >= 2:
        return {avail[0]}, {avail[1]}
    return None, None


class SimProcess:
    """The simulator (``scripts/vllm_sim``) as a child process serving ``model`` on
    127.0.0.1:``port`` with ``flags``; a context manager that waits for /health and stops it.
    ``env``: variables set for it (a None value removes one inherited from this process); its
    log goes to ``.work/<log_name>``."""

    def __init__(self, port: int, model: str, flags: Sequence[str], env: dict[str, str | None], log_name: str) -> None:
        self.port, self.model, self.flags, self.env, self.log_name = port, model, list(flags), env, log_name
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "SimProcess":
        require(SIM / "__main__.py", "the simulator (scripts/vllm_sim)")
        env = dict(os.environ)
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        log = open(WORK / self.log_name, "w")
        cmd = [sys.executable, str(SIM), "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port),
               *self.flags]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, preexec_fn=pin(None))
        log.close()
        wait_http(self.url + "/health", 30, self.proc)
        return self

    def __exit__(self, *exc: Any) -> None:
        stop(self.proc)


def python() -> str:
    """The interpreter that runs the benchmarks (the project venv under `make perf`)."""
    return sys.executable


def require(path: Path, what: str) -> None:
    """Raise a one-line PerfError when a file another part of the project owns is missing."""
    if not path.exists():
        raise PerfError(f"{what} not found at {path.relative_to(REPO)}; it lands with its own issue")


@dataclass
class MeasureRun:
    """One run of scripts/measure.py: its JSON result and the CPU seconds the process used."""

    result: dict[str, Any]
    cpu_s: float
    wall_s: float
    returncode: int
    stderr: str


def run_measure(base_url: str, output_tokens: int, runs: int, warmup: int, concurrency: str,
                out: Path, cores: set[int] | None = None, extra: Sequence[str] = (),
                timeout: float = 600.0, env: dict[str, str] | None = None) -> MeasureRun:
    """Run measure.py as a child process (optionally pinned) and read its JSON and rusage.

    CPU seconds = ru_utime + ru_stime of the child (os.wait4), i.e. the measure.py process only.
    """
    require(MEASURE, "scripts/measure.py")
    cmd = [python(), str(MEASURE), "--base-url", base_url, "--output-tokens", str(output_tokens),
           "--runs", str(runs), "--warmup", str(warmup), "--concurrency", concurrency,
           "--out", str(out), *extra]
    errfile = out.with_suffix(out.suffix + ".stderr")
    t0 = time.perf_counter()
    with open(errfile, "w") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf, text=True,
                                preexec_fn=pin(cores), env=env)
    deadline = t0 + timeout
    # Wait with wait4 to get the child's own resource usage.
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.perf_counter() > deadline:
            stop(proc)
            raise PerfError(f"measure.py did not finish within {timeout:.0f} s: {' '.join(cmd[2:])}")
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = errfile.read_text(errors="replace")
    result: dict[str, Any] = {}
    if out.exists():
        try:
            result = json.loads(out.read_text())
        except json.JSONDecodeError:
            result = {}
    return MeasureRun(result, usage.ru_utime + usage.ru_stime, wall, proc.returncode, stderr)
