"""GPU telemetry: nvidia-smi's CSV, one sample across GPUs, the sampler thread and per-phase
statistics; used memory from /proc/meminfo (unified memory on a Spark)."""
from __future__ import annotations

import argparse
import math
import re
import shlex
import shutil
import subprocess
import threading
import time
from typing import TypedDict, Union

from .common import log
from .stats import median

# The first eight are the original field set (older documents, fixtures and scripts print them in
# this order); the clock fields follow, so a reply with only the first eight still parses.
SMI_FIELDS = ["index", "name", "power.draw", "temperature.gpu", "clocks.sm", "utilization.gpu",
              "memory.used", "memory.total", "clocks.current.graphics", "clocks.max.graphics",
              "clocks_event_reasons.active"]
SMI_FIELDS_LEGACY = SMI_FIELDS[:8]
# Query sets tried in order: a driver that does not know a field answers exit 2 'Field "x" is not
# a valid field to query' (tests/fixtures/measure/nvidia-smi-invalid-field-stderr.txt); the event
# reasons have their new name from driver 535.54.03, the old one before.
SMI_QUERIES = [SMI_FIELDS, SMI_FIELDS[:10] + ["clocks_throttle_reasons.active"], SMI_FIELDS_LEGACY]
# header names nvidia-smi prints for the query names above (it shows the canonical name)
SMI_ALIASES = {"clocks.current.sm": "clocks.sm", "temperature.gpu.current": "temperature.gpu",
               "power.draw.instant": "power.draw", "power.draw.average": "power.draw",
               "clocks.gr": "clocks.current.graphics", "clocks.max.gr": "clocks.max.graphics",
               "clocks_throttle_reasons.active": "clocks_event_reasons.active"}
_SMI_TEXT = {"name", "uuid", "pci.bus_id", "pstate", "clocks_event_reasons.active", "driver_version"}
_SMI_KNOWN = set(SMI_FIELDS) | set(SMI_ALIASES) | _SMI_TEXT
_NA = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "", "[gpu is lost]"}


#: One GPU's row of nvidia-smi's CSV, by query field name (``power.draw``, ``name``, ...): a
#: number, a text field's string, or None for N/A; ``parse_nvidia_smi_csv``.
SmiRow = dict[str, Union[float, str, None]]


class GpuFigures(TypedDict):
    """One sample across GPUs: power summed [W], temperature max [C], SM clock and utilization
    mean, GPU memory summed [MiB] (None where every GPU reads N/A); ``aggregate_gpus``."""

    power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: float | None
    utilization_pct: float | None
    gpu_memory_used_mib: float | None


class ClockFigures(TypedDict):
    """The clock fields of one sample across GPUs; ``aggregate_clocks``."""

    graphics_clock_mhz: float | None
    max_graphics_clock_mhz: float | None
    clock_event_reasons: list[str]


class GpuSample(GpuFigures, ClockFigures):
    """One telemetry sample: the GPUs' figures, used host memory [MiB] and ``t`` (perf_counter s,
    the midpoint of the nvidia-smi call); ``Telemetry.sample_once``."""

    memory_used_mib: float | None
    t: float


# ---- the result's block -----------------------------------------------------------------------------
class MeanMax(TypedDict):
    """Mean and max of one field over a phase's GPU samples; ``Telemetry.summary``."""

    mean: float | None
    max: float | None


class GraphicsClock(MeanMax):
    """The graphics clock over a phase's samples [MHz], with its median; ``Telemetry.summary``."""

    p50: float | None


class TelemetryPhase(TypedDict):
    """``telemetry.phases.<phase>``: one phase's GPU statistics and energy; ``Telemetry.summary``."""

    samples: int
    duration_s: float
    power_w: MeanMax
    temperature_c: MeanMax
    sm_clock_mhz: MeanMax
    graphics_clock_mhz: GraphicsClock
    max_graphics_clock_mhz: float | None
    clock_event_reasons: list[str]
    utilization_pct: MeanMax
    memory_used_mib: MeanMax
    memory_source: str
    gpu_memory_used_mib: MeanMax | None
    energy_j: float | None
    completion_tokens: int | None
    tokens_per_joule: float | None


class TelemetryBlock(TypedDict):
    """``telemetry``: nvidia-smi per phase; ``document.telemetry_block``."""

    source: str
    command: str
    interval_s: float
    query: str
    gpu_names: list[str]
    phases: dict[str, TelemetryPhase]


def _smi_number(text: str) -> float | None:
    t = text.strip()
    if t.lower() in _NA:
        return None
    m = re.match(r"^-?\d+(?:\.\d+)?", t)
    return float(m.group(0)) if m else None


def parse_nvidia_smi_csv(text: str, fields: list[str] | None = None) -> list[SmiRow]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` output.

    With a header line the columns are matched by name (units such as ``[W]`` stripped, canonical
    names mapped back by SMI_ALIASES); without one the order of ``fields`` (default SMI_FIELDS) is
    assumed, or the eight-field SMI_FIELDS_LEGACY order when a row has eight cells. Lines that are
    not data rows (comments, command lines) are skipped. ``[N/A]`` becomes None; text fields
    (name, clocks_event_reasons.active, ...) stay strings. One dict per GPU row.
    """
    cols = [SMI_ALIASES.get(c, c) for c in (fields or SMI_FIELDS)]
    header = False
    rows = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or s.startswith("$"):
            continue
        cells = [c.strip() for c in s.split(",")]
        names = [c.split(" [")[0].strip() for c in cells]
        if _smi_number(cells[0]) is None and any(n in _SMI_KNOWN for n in names):
            cols = [SMI_ALIASES.get(n, n) for n in names]
            header = True
            continue
        use = cols
        if len(cells) != len(cols):
            if header or len(cells) != len(SMI_FIELDS_LEGACY):
                continue
            use = SMI_FIELDS_LEGACY
        row: SmiRow = {}
        for name, cell in zip(use, cells):
            if name in _SMI_TEXT:
                row[name] = None if cell.lower() in _NA else cell
            else:
                row[name] = _smi_number(cell)
        if not any(k in row for k in ("power.draw", "temperature.gpu", "clocks.current.graphics",
                                      "clocks_event_reasons.active")):
            continue
        rows.append(row)
    return rows


def _meminfo_kb(path: str) -> dict[str, float] | None:
    """/proc/meminfo's numeric fields as {name: kB}; None when the file cannot be read."""
    vals: dict[str, float] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if parts and _smi_number(parts[0]) is not None:
                    vals[k.strip()] = float(parts[0])
    except OSError:
        return None
    return vals


def read_meminfo(path: str = "/proc/meminfo") -> float | None:
    """Used memory [MiB] = MemTotal - MemAvailable from /proc/meminfo (unified memory on a Spark)."""
    vals = _meminfo_kb(path)
    if vals and "MemTotal" in vals and "MemAvailable" in vals:
        return (vals["MemTotal"] - vals["MemAvailable"]) / 1024.0
    return None


def aggregate_gpus(rows: list[SmiRow]) -> GpuFigures:
    """One sample across GPUs: power summed [W], temperature max [C], SM clock mean [MHz],
    utilization mean [%], GPU memory used summed [MiB] (None where every GPU reads N/A)."""

    def vals(k: str) -> list[float]:
        return [r[k] for r in rows if isinstance(r.get(k), (int, float))]

    p, t, c, u, m = (vals("power.draw"), vals("temperature.gpu"), vals("clocks.sm"),
                     vals("utilization.gpu"), vals("memory.used"))
    return {"power_w": sum(p) if p else None, "temperature_c": max(t) if t else None,
            "sm_clock_mhz": sum(c) / len(c) if c else None,
            "utilization_pct": sum(u) / len(u) if u else None,
            "gpu_memory_used_mib": sum(m) if m else None}


def aggregate_clocks(rows: list[SmiRow]) -> ClockFigures:
    """The clock fields of one sample across GPUs: ``graphics_clock_mhz`` = mean of
    ``clocks.current.graphics`` [MHz] (``clocks.sm`` where the graphics clock is not reported, as in
    the eight-field set), ``max_graphics_clock_mhz`` = the highest ``clocks.max.graphics`` [MHz]
    (None when not reported), ``clock_event_reasons`` = the distinct raw reason strings."""
    gr = [r["clocks.current.graphics"] for r in rows if isinstance(r.get("clocks.current.graphics"), (int, float))]
    if not gr:
        gr = [r["clocks.sm"] for r in rows if isinstance(r.get("clocks.sm"), (int, float))]
    mx = [r["clocks.max.graphics"] for r in rows if isinstance(r.get("clocks.max.graphics"), (int, float))]
    reasons = sorted({r["clocks_event_reasons.active"] for r in rows if r.get("clocks_event_reasons.active")})
    return {"graphics_clock_mhz": sum(gr) / len(gr) if gr else None,
            "max_graphics_clock_mhz": max(mx) if mx else None, "clock_event_reasons": reasons}


class Telemetry:
    """Samples nvidia-smi once a second in a thread; per phase statistics and energy.

    ``argv`` is the nvidia-smi command (``["nvidia-smi"]``, or ``docker exec C nvidia-smi`` split);
    the query options are appended. :meth:`probe` takes the first sample synchronously (it picks
    the query set the driver knows and gives the idle reference); :meth:`start` starts the thread.
    :meth:`in_flight` marks the spans during which requests were on the wire (the Measurement
    calls it around every request batch), so samples can be judged "under load" later."""

    def __init__(self, smi: str | list[str], interval: float = 1.0) -> None:
        self.argv = [smi] if isinstance(smi, str) else list(smi)
        self.smi = self.argv[0]
        self.interval = interval
        self.query = list(SMI_QUERIES[0])
        self.last_error: str | None = None
        self.lock = threading.Lock()
        self.phase: str | None = None
        self.samples: dict[str, list[GpuSample]] = {}
        self.bounds: dict[str, list[float]] = {}
        self.flight: list[list[float]] = []  # [start, end] perf_counter spans with requests in flight
        self.gpu_names: list[str] = []
        self.idle: GpuSample | None = None
        self.stop_ev = threading.Event()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def sample_once(self) -> GpuSample | None:
        """One sample (``t`` = midpoint of the nvidia-smi call, perf_counter seconds), or None with
        ``last_error`` saying why."""
        while True:
            t0 = time.perf_counter()
            try:
                r = subprocess.run(self.argv + ["--query-gpu=" + ",".join(self.query),
                                                "--format=csv,noheader,nounits"], capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.last_error = f"{' '.join(self.argv)}: {exc}"
                return None
            t1 = time.perf_counter()
            err = r.stderr.decode("utf-8", "replace").strip()
            if r.returncode != 0 and "not a valid field" in err:
                idx = SMI_QUERIES.index(self.query) if self.query in SMI_QUERIES else len(SMI_QUERIES) - 1
                if idx + 1 < len(SMI_QUERIES):
                    self.query = list(SMI_QUERIES[idx + 1])
                    continue
            if r.returncode != 0:
                self.last_error = (f"{' '.join(self.argv)} exited {r.returncode}: "
                                   + (err.splitlines()[-1] if err else "no message"))
                return None
            break
        rows = parse_nvidia_smi_csv(r.stdout.decode("utf-8", "replace"), self.query)
        if not rows:
            self.last_error = f"{' '.join(self.argv)}: no GPU row in its answer"
            return None
        if not self.gpu_names:
            self.gpu_names = [str(x.get("name")) for x in rows if x.get("name")]
        s: GpuSample = aggregate_gpus(rows)  # with the clocks, memory and time below
        s.update(aggregate_clocks(rows))
        s["memory_used_mib"] = read_meminfo()
        s["t"] = (t0 + t1) / 2.0
        return s

    def probe(self) -> str | None:
        """The first sample, before any request (the idle reference); None, or why it failed."""
        self.idle = self.sample_once()
        return None if self.idle is not None else (self.last_error or "no answer")

    def start(self) -> None:
        self.thread.start()

    def in_flight(self, on: bool) -> None:
        """Requests go on the wire (True) or have all finished (False)."""
        now = time.perf_counter()
        with self.lock:
            if on:
                self.flight.append([now, math.inf])
            elif self.flight and self.flight[-1][1] == math.inf:
                self.flight[-1][1] = now

    def _loop(self) -> None:
        while not self.stop_ev.is_set():
            s = self.sample_once()
            with self.lock:
                if s is not None and self.phase is not None:
                    self.samples[self.phase].append(s)
            self.wake.wait(self.interval)
            self.wake.clear()

    def begin(self, phase: str) -> None:
        with self.lock:
            self.phase = phase
            self.samples[phase] = []
            self.bounds[phase] = [time.perf_counter(), 0.0]
        self.wake.set()

    def end(self, phase: str) -> None:
        with self.lock:
            if self.phase == phase:
                self.phase = None
                self.bounds[phase][1] = time.perf_counter()

    def close(self) -> None:
        self.stop_ev.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout=15)

    def summary(self, phase: str, tokens: int | None) -> TelemetryPhase:
        """Per-phase statistics; energy_j = mean power [W] x phase duration [s];
        tokens_per_joule = completion tokens of the phase / energy_j; graphics_clock_mhz
        {mean, max, p50} over the phase's samples [MHz], max_graphics_clock_mhz the highest
        reported maximum, clock_event_reasons the distinct raw reason values."""
        with self.lock:
            ss = list(self.samples.get(phase, []))
            t0, t1 = self.bounds.get(phase, [0.0, 0.0])
        dur = max(0.0, t1 - t0)

        def stat(k: str) -> MeanMax:
            v = [s[k] for s in ss if isinstance(s.get(k), (int, float))]
            return {"mean": sum(v) / len(v) if v else None, "max": max(v) if v else None}

        power = stat("power_w")
        energy = power["mean"] * dur if power["mean"] is not None else None
        gpu_mem = stat("gpu_memory_used_mib")
        gclk = stat("graphics_clock_mhz")
        gclk["p50"] = median([s["graphics_clock_mhz"] for s in ss if isinstance(s.get("graphics_clock_mhz"), (int, float))])
        mx = [s["max_graphics_clock_mhz"] for s in ss if isinstance(s.get("max_graphics_clock_mhz"), (int, float))]
        return {
            "samples": len(ss), "duration_s": dur, "power_w": power,
            "temperature_c": stat("temperature_c"), "sm_clock_mhz": stat("sm_clock_mhz"),
            "graphics_clock_mhz": gclk, "max_graphics_clock_mhz": max(mx) if mx else None,
            "clock_event_reasons": sorted({x for s in ss for x in s.get("clock_event_reasons") or []}),
            "utilization_pct": stat("utilization_pct"),
            "memory_used_mib": stat("memory_used_mib"), "memory_source": "/proc/meminfo",
            "gpu_memory_used_mib": gpu_mem if gpu_mem["mean"] is not None else None,
            "energy_j": energy, "completion_tokens": tokens,
            "tokens_per_joule": (tokens / energy) if (energy and tokens) else None,
        }

    def load_samples(self) -> list[GpuSample]:
        """The samples of every phase that were taken while requests were in flight."""
        with self.lock:
            spans = [(a, b) for a, b in self.flight]
            ss = [s for v in self.samples.values() for s in v]
        return [s for s in ss if any(a <= s["t"] <= b for a, b in spans)]



def start_telemetry(args: argparse.Namespace) -> tuple[Telemetry | None, str | None]:
    """nvidia-smi from --nvidia-smi (shell-split) or PATH, sampling in its thread after the first
    (idle) sample; (None, why) when there is none or it does not answer."""
    cmd = args.nvidia_smi
    if cmd is not None and cmd.strip().lower() == "none":
        return None, "no GPU on this host (--nvidia-smi none)"
    if args.telemetry != "auto":
        return None, "--telemetry off"
    if cmd is None:
        smi = shutil.which("nvidia-smi")
        if not smi:
            return None, "nvidia-smi not found on this host"
        argv = [smi]
    else:
        argv = shlex.split(cmd)
        if not argv or shutil.which(argv[0]) is None:
            return None, f"--nvidia-smi {cmd!r}: {argv[0] if argv else 'the command'} not found"
    tel = Telemetry(argv)
    why = tel.probe()
    if why:
        reason = f"nvidia-smi did not answer: {why}"
        log(f"telemetry off: {reason}")
        return None, reason
    tel.start()
    return tel, None
