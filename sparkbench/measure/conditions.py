"""Run conditions (the result's ``protocol`` block): memory and swap before and after, the clock
under load, new kernel-log lines, and the flags they raise."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from typing import Literal, TypedDict

from .bandwidth import BandwidthProbes
from .stats import median
from .telemetry import GpuSample, Telemetry, _meminfo_kb

#: clock_capped: the median graphics clock under load is below this share of the GPU's reported
#: maximum. spark-gpu-throttle-check (hoesing, 6a27755) fails a GB10 below 1400 of 3003 MHz
#: (46.6 %) under an SGEMM load; a healthy GB10 runs 2424-2483 MHz (81-83 %) under load and a
#: USB-PD-capped one 500-850 MHz (17-28 %). 50 % (1501 MHz on a GB10) sits between the two.
CLOCK_CAPPED_SHARE = 0.50
#: A sample counts as "under load" when it was taken while requests were in flight AND the GPU
#: was busy: utilization.gpu >= this [%] where the driver reports it, else (no utilization) a
#: graphics clock above CLOCK_IDLE_FACTOR x the idle reference clock taken before the first request.
LOAD_UTILIZATION_PCT = 50.0
CLOCK_IDLE_FACTOR = 1.5
#: The clock is judged only on at least this many samples under load (one reading proves little).
CLOCK_MIN_SAMPLES = 2
#: host_swapped: pswpin + pswpout grew by more than this many pages during the measured phases.
SWAP_PAGES_THRESHOLD = 256
KERNEL_LINES_KEPT = 200
XID_RE = re.compile(r"NVRM: Xid")
OOM_RE = re.compile(r"Out of memory: Killed process|oom-kill")
MEMINFO_KEYS = {"mem_total_mib": "MemTotal", "mem_available_mib": "MemAvailable", "mem_free_mib": "MemFree",
                "cached_mib": "Cached", "swap_total_mib": "SwapTotal", "swap_free_mib": "SwapFree"}


# ---- the result's block -----------------------------------------------------------------------------
class Meminfo(TypedDict):
    """``protocol.memory_before`` / ``memory_after``: /proc/meminfo [MiB]; ``read_meminfo_fields``."""

    mem_total_mib: float | None
    mem_available_mib: float | None
    mem_free_mib: float | None
    cached_mib: float | None
    swap_total_mib: float | None
    swap_free_mib: float | None
    swap_used_mib: float | None


class SwapDelta(TypedDict):
    """``protocol.swap``: pages swapped over the measured phases; ``swap_delta``."""

    pswpin: int
    pswpout: int
    source: str


class ClockJudgement(TypedDict):
    """``protocol.clock``: the graphics clock under load against its maximum; ``judge_clock``."""

    max_mhz: float | None
    under_load_mhz: float | None
    share_of_max: float | None
    samples_under_load: int
    idle_mhz: float | None
    reason: str | None


class KernelLog(TypedDict):
    """``protocol.kernel_log``: the kernel-log lines new during the run; ``RunConditions``."""

    source: str
    new_lines: list[str]
    new_lines_total: int
    xid: list[str]
    oom: list[str]


class DropCaches(TypedDict):
    """``protocol.drop_caches``: the page cache dropped before the variant (the controller fills
    it, bench_drop_caches; measure writes null)."""

    requested: bool
    done: bool
    reason: str | None


class Flag(TypedDict):
    """``protocol.flags[]``: a condition that marks the figures; ``protocol_flags`` and
    ``document.finish`` (bandwidth_drop)."""

    code: Literal["clock_capped", "host_swapped", "gpu_xid", "oom_kill", "bandwidth_drop"]
    reason: str


class _ProtocolBase(TypedDict):
    memory_before: Meminfo | None
    memory_after: Meminfo | None
    swap: SwapDelta | None
    clock: ClockJudgement
    kernel_log: KernelLog | None
    kernel_log_reason: str | None
    drop_caches: DropCaches | None
    flags: list[Flag]


class ProtocolBlock(_ProtocolBase, total=False):
    """``protocol``: the run conditions; ``RunConditions.finish`` (``bandwidth``: ``document.finish``
    on a hand run that probed)."""

    bandwidth: BandwidthProbes


def read_meminfo_fields(path: str = "/proc/meminfo") -> Meminfo | None:
    """/proc/meminfo in MiB (kB / 1024, 1 decimal): MemTotal, MemAvailable, MemFree, Cached (page
    cache), SwapTotal, SwapFree and swap_used_mib = SwapTotal - SwapFree; None when unreadable."""
    vals = _meminfo_kb(path)
    if not vals or "MemTotal" not in vals:
        return None
    out: Meminfo = {key: (round(vals[src] / 1024.0, 1) if src in vals else None)  # swap_used_mib below
                    for key, src in MEMINFO_KEYS.items()}
    st, sf = out["swap_total_mib"], out["swap_free_mib"]
    out["swap_used_mib"] = round(st - sf, 1) if st is not None and sf is not None else None
    return out


def read_vmstat(path: str = "/proc/vmstat") -> dict[str, int] | None:
    """``pswpin`` and ``pswpout`` (pages swapped in / out since boot) from /proc/vmstat; None when
    unreadable or absent."""
    vals: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] in ("pswpin", "pswpout") and parts[1].isdigit():
                    vals[parts[0]] = int(parts[1])
    except OSError:
        return None
    return vals if len(vals) == 2 else None


def swap_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> SwapDelta | None:
    """Pages swapped in and out between two /proc/vmstat readings."""
    if not before or not after:
        return None
    return {"pswpin": max(0, after["pswpin"] - before["pswpin"]),
            "pswpout": max(0, after["pswpout"] - before["pswpout"]), "source": "/proc/vmstat"}


def read_kernel_log(argv: list[str], timeout: float = 15) -> tuple[list[str] | None, str | None]:
    """The kernel ring buffer as lines (``dmesg``, or ``docker exec C dmesg``), or (None, why)."""
    name = " ".join(argv)
    if not argv or shutil.which(argv[0]) is None:
        return None, f"{argv[0] if argv else 'kernel log command'} not found on this host (--kernel-log)"
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{name}: {exc}"
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()
        return None, f"{name} exited {r.returncode}: {err.splitlines()[-1] if err else 'no message'}"
    return r.stdout.decode("utf-8", "replace").splitlines(), None


def new_kernel_lines(before: list[str], after: list[str]) -> list[str]:
    """Lines of ``after`` that ``before`` did not hold (dmesg lines carry their timestamp, so a
    line seen again is the same message)."""
    seen = set(before)
    return [line for line in after if line.strip() and line not in seen]


def judge_clock(samples: list[GpuSample], idle: GpuSample | None) -> ClockJudgement:
    """The clock under load from the samples taken while requests were in flight.

    A sample is under load when utilization.gpu >= LOAD_UTILIZATION_PCT, or, where the driver
    reports no utilization, when its graphics clock exceeds CLOCK_IDLE_FACTOR x the idle clock
    (with neither, every in-flight sample counts). ``under_load_mhz`` = median graphics clock of
    those samples [MHz]; ``max_mhz`` = the highest clocks.max.graphics reported [MHz];
    ``share_of_max`` = under_load_mhz / max_mhz; ``idle_mhz`` = the reference sample taken before
    the first request. ``reason`` says why a figure is missing."""
    idle_mhz = (idle or {}).get("graphics_clock_mhz")
    maxima = [s["max_graphics_clock_mhz"] for s in samples + ([idle] if idle else [])
              if isinstance(s.get("max_graphics_clock_mhz"), (int, float))]
    loaded = []
    for s in samples:
        clk, util = s.get("graphics_clock_mhz"), s.get("utilization_pct")
        if not isinstance(clk, (int, float)):
            continue
        if isinstance(util, (int, float)):
            busy = util >= LOAD_UTILIZATION_PCT
        elif isinstance(idle_mhz, (int, float)):
            busy = clk > CLOCK_IDLE_FACTOR * idle_mhz
        else:
            busy = True
        if busy:
            loaded.append(clk)
    under = median(loaded)
    top = max(maxima) if maxima else None
    out: ClockJudgement = {"max_mhz": top, "under_load_mhz": under,
                           "share_of_max": round(under / top, 4) if under is not None and top else None,
                           "samples_under_load": len(loaded), "idle_mhz": idle_mhz, "reason": None}
    if not samples:
        out["reason"] = "no GPU sample was taken while requests were in flight"
    elif not loaded:
        out["reason"] = (f"none of the {len(samples)} samples taken while requests were in flight had the GPU "
                         f"busy (utilization >= {LOAD_UTILIZATION_PCT:.0f} %)")
    elif top is None:
        out["reason"] = "the driver reports no clocks.max.graphics: the clock is not judged"
    elif len(loaded) < CLOCK_MIN_SAMPLES:
        out["reason"] = f"only {len(loaded)} sample under load: the clock is not judged (needs {CLOCK_MIN_SAMPLES})"
    return out


def protocol_flags(clock: ClockJudgement | None, swap: SwapDelta | None,
                   kernel: KernelLog | None) -> list[Flag]:
    """The run-protocol flags, each ``{code, reason}``:

    * ``clock_capped``: at least CLOCK_MIN_SAMPLES samples under load and their median graphics
      clock < CLOCK_CAPPED_SHARE (50 %) x the reported maximum (the throttle check's 1400 of
      3003 MHz is 46.6 %);
    * ``host_swapped``: pswpin + pswpout grew by more than SWAP_PAGES_THRESHOLD pages;
    * ``gpu_xid`` / ``oom_kill``: new ``NVRM: Xid`` / OOM-killer lines in the kernel log.
    """
    flags: list[Flag] = []
    if clock and clock.get("share_of_max") is not None and clock["samples_under_load"] >= CLOCK_MIN_SAMPLES:
        if clock["share_of_max"] < CLOCK_CAPPED_SHARE:
            flags.append({"code": "clock_capped", "reason": (
                f"clock {clock['under_load_mhz']:.0f} of {clock['max_mhz']:.0f} MHz under load "
                f"({100 * clock['share_of_max']:.0f} % of the maximum, below {100 * CLOCK_CAPPED_SHARE:.0f} %; "
                f"median of {clock['samples_under_load']} samples)")})
    if swap:
        moved = swap["pswpin"] + swap["pswpout"]
        if moved > SWAP_PAGES_THRESHOLD:
            flags.append({"code": "host_swapped", "reason": (
                f"the host swapped during the measured phases: {swap['pswpin']} pages in, {swap['pswpout']} out "
                f"(/proc/vmstat; more than {SWAP_PAGES_THRESHOLD})")})
    if kernel:
        if kernel.get("xid"):
            flags.append({"code": "gpu_xid", "reason": f"GPU Xid in the kernel log: {kernel['xid'][0].strip()}"
                          + (f" (+{len(kernel['xid']) - 1} more)" if len(kernel["xid"]) > 1 else "")})
        if kernel.get("oom"):
            flags.append({"code": "oom_kill", "reason": f"OOM killer in the kernel log: {kernel['oom'][0].strip()}"
                          + (f" (+{len(kernel['oom']) - 1} more)" if len(kernel["oom"]) > 1 else "")})
    return flags



class RunConditions:
    """The run conditions of one measurement: read before the first request (memory, kernel log),
    around the measured phases (swap), and at the end (the ``protocol`` block and its flags)."""

    def __init__(self, kernel_log: str | None) -> None:
        self.kernel_log = kernel_log or "dmesg"
        self.memory_before: Meminfo | None = None
        self.vm_before: dict[str, int] | None = None
        self.vm_after: dict[str, int] | None = None
        self.kernel_argv: list[str] = []
        self.kernel_before: list[str] | None = None
        self.kernel_reason: str | None = None

    def start(self) -> None:
        """Before anything else: /proc/meminfo and the kernel log as they were."""
        self.memory_before = read_meminfo_fields()
        if self.kernel_log.strip().lower() in ("off", "none"):
            self.kernel_reason = "--kernel-log off"
            return
        self.kernel_argv = shlex.split(self.kernel_log)
        self.kernel_before, self.kernel_reason = read_kernel_log(self.kernel_argv)

    def phase_started(self) -> None:
        """Swap is counted over the measured phases only: from the first phase's start."""
        if self.vm_before is None:
            self.vm_before = read_vmstat()

    def phase_ended(self) -> None:
        self.vm_after = read_vmstat()

    def _kernel(self) -> tuple[KernelLog | None, str | None]:
        if self.kernel_before is None:
            return None, self.kernel_reason
        after, why = read_kernel_log(self.kernel_argv)
        if after is None:
            return None, f"kernel log readable at the start but not at the end: {why}"
        new = new_kernel_lines(self.kernel_before, after)
        return {"source": " ".join(self.kernel_argv), "new_lines": new[-KERNEL_LINES_KEPT:],
                "new_lines_total": len(new), "xid": [x for x in new if XID_RE.search(x)],
                "oom": [x for x in new if OOM_RE.search(x)]}, None

    def finish(self, tel: Telemetry | None, telemetry_reason: str | None) -> ProtocolBlock:
        """The ``protocol`` block: memory before/after, swap over the measured phases, the clock
        under load, new kernel-log lines and the flags they raise."""
        kernel, kreason = self._kernel()
        if tel is not None:
            clock = judge_clock(tel.load_samples(), tel.idle)
        else:
            clock = {"max_mhz": None, "under_load_mhz": None, "share_of_max": None, "samples_under_load": 0,
                     "idle_mhz": None, "reason": f"no telemetry: {telemetry_reason or 'not measured'}"}
        swap = swap_delta(self.vm_before, self.vm_after)
        return {"memory_before": self.memory_before, "memory_after": read_meminfo_fields(), "swap": swap,
                "clock": clock, "kernel_log": kernel, "kernel_log_reason": None if kernel is not None else kreason,
                "drop_caches": None, "flags": protocol_flags(clock, swap, kernel)}
