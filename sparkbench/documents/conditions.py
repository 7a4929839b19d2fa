"""The conditions the figures were measured under: GPU telemetry per phase (``telemetry``), the run
protocol (``protocol``: memory, swap, clock, kernel log, page cache, the bandwidth probes) and one
bandwidth probe's reading (``bandwidth_reading``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from .base import Above0, Block, Count, Int, NonNegative, Positive, Timestamp


# ---------------------------------------------------------------------------------------- telemetry
class Minmean(Block):
    mean: Optional[float]
    max: Optional[float]


class GraphicsClock(Block):
    ("clocks.current.graphics over the phase's samples [MHz] (clocks.sm where not reported)")
    mean: Optional[float] = None
    max: Optional[float] = None
    p50: Optional[float] = None


class TelemetryPhase(Block):
    samples: Count
    duration_s: NonNegative = None
    power_w: Minmean
    temperature_c: Minmean
    sm_clock_mhz: Minmean
    utilization_pct: Minmean
    memory_used_mib: Minmean
    memory_source: str = None
    gpu_memory_used_mib: Optional[Minmean] = None
    energy_j: Optional[NonNegative]
    completion_tokens: Optional[Count] = None
    tokens_per_joule: Optional[NonNegative]
    graphics_clock_mhz: GraphicsClock = None
    max_graphics_clock_mhz: Optional[float] = Field(
        None, description="the highest clocks.max.graphics reported [MHz]")
    clock_event_reasons: list[str] = Field(None, description="distinct raw clocks_event_reasons.active values")


class Telemetry(Block):
    source: str
    interval_s: float = None
    gpu_names: list[str] = None
    phases: dict[str, TelemetryPhase]


# ------------------------------------------------------------------------------------ the bandwidth
class Spread(Block):
    min: float
    max: float
    p25: float = None
    p75: float = None
    iqr: NonNegative = None
    repeats: Positive


class Gemv(Block):
    method: str
    gbps: Above0
    shape: list[Int] = None
    dtype: str = None


class BandwidthReading(Block):
    ("One bandwidth probe (sparkbench.bandwidth.reading): the unit's memory bandwidth measured in a throw-away "
     "container of a variant's image while no variant's server ran. gbps = the median streaming read [GB/s, 10^9 "
     "bytes], null with reason when the probe gave no figure; method torch-cuda-stream-read | torch-cpu-stream-read "
     "| simulated (the simulator's stand-in: the hardware profile's bandwidth x its stream_read_share x "
     "VLLM_SIM_EFFICIENCY, SIMULATED); spread = min, max, quartiles of the repeats; gemv = a GEMV of decode's shape "
     "on a GPU; cost_s = what the probe step cost.")
    gbps: Optional[Above0]
    method: str
    when: Timestamp
    spread: Optional[Spread] = None
    device: Optional[str] = None
    simulated: bool = None
    reason: Optional[str] = Field(None, description="why gbps is null")
    image: str = None
    cost_s: NonNegative = None
    seconds: Optional[float] = None
    gemv: Optional[Gemv] = None


class BandwidthDrop(Block):
    share: NonNegative
    before_gbps: float
    after_gbps: float
    cause: Optional[str]
    text: str


class BandwidthProbes(BandwidthReading):
    ("The bandwidth probe run last before the variant's launch (its reading's fields), the one run first after the "
     "variant's server stopped (after), and the drop between them (after below 0.9 x before, their quartiles apart "
     "where both have them: the flag bandwidth_drop marks the variant's figures, with its cause where the run's "
     "telemetry names one).")
    after: Optional[BandwidthReading]
    drop: Optional[BandwidthDrop]


# ------------------------------------------------------------------------------------- the protocol
class Meminfo(Block):
    # /proc/meminfo [MiB]: every key a number or null, these always there
    __pydantic_extra__: dict[str, Optional[float]]
    mem_total_mib: Optional[float]
    mem_available_mib: Optional[float]
    mem_free_mib: Optional[float]
    cached_mib: Optional[float]
    swap_total_mib: Optional[float]
    swap_free_mib: Optional[float]
    swap_used_mib: Optional[float]


class Swap(Block):
    pswpin: Count
    pswpout: Count
    source: str


class Clock(Block):
    max_mhz: Optional[float]
    under_load_mhz: Optional[float]
    share_of_max: Optional[NonNegative]
    samples_under_load: Count
    idle_mhz: Optional[float]
    reason: Optional[str] = Field(None, description="why a clock figure is missing or not judged")


class KernelLog(Block):
    source: str
    new_lines: list[str]
    new_lines_total: Count = None
    xid: list[str]
    oom: list[str]


class DropCaches(Block):
    requested: bool
    done: bool
    reason: Optional[str]


class Flag(Block):
    code: Literal["clock_capped", "host_swapped", "gpu_xid", "oom_kill", "bandwidth_drop"]
    reason: str


class Protocol(Block):
    ("measure.py's run protocol (docs/MEASUREMENT.md): /proc/meminfo before and after [MiB], swap pages moved "
     "during the measured phases, the graphics clock under load against its maximum, new kernel-log lines; flags "
     "(also in warnings[]) clock_capped | host_swapped | gpu_xid | oom_kill; drop_caches is filled by the "
     "controller (bench_drop_caches), and so is bandwidth (sparkbench.bandwidth: the probe before the variant's "
     "launch, the one after its server stopped, and a drop between them) with the flag bandwidth_drop")
    memory_before: Optional[Meminfo] = None
    memory_after: Optional[Meminfo] = None
    swap: Optional[Swap] = None
    clock: Optional[Clock] = None
    kernel_log: Optional[KernelLog] = None
    kernel_log_reason: Optional[str] = None
    drop_caches: Optional[DropCaches] = None
    bandwidth: Optional[BandwidthProbes] = None
    flags: list[Flag]
