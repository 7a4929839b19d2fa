"""``nvidia-smi`` and ``dmesg`` stand-ins: GB10-like answers (DGX Spark reports memory fields as ``[N/A]``).

Driver version from VLLM_SIM_DRIVER_VERSION, else the hardware profile's default. What the GPU
is doing comes from the engine's state file (:mod:`gpustate`, ``VLLM_SIM_GPU_STATE_FILE``): with
no sequence running the GPU reads idle (graphics clock 208 MHz, P8, utilization 0 %, ~8 W); while
sequences run it reads the load clock (2450 MHz, or ``VLLM_SIM_CLOCK_CAP_MHZ`` when lower), P0,
96 %, and power ``idle + (load - idle) x (f / f_load)^1.5`` (86 W at 2450 MHz; ~24 W at 850 MHz,
near the 15-18 W a capped GX10 showed at 630-650 MHz); ``clocks.max.graphics`` is the profile's
3003 MHz and ``clocks_event_reasons.active`` reads ``0x0`` even when capped, as GB10 does. Every
figure is the hardware profile's ``gpu_telemetry`` block (sources in its ``_notes``): SIMULATED.

``dmesg`` prints a simulated kernel ring: a few boot lines, then, when ``VLLM_SIM_FAULT_XID=N``
is set and a request has run, one ``NVRM: Xid (PCI:...): N, ...`` line stamped at the first
request's time (the same text on every call, so a reader can tell new lines from old).
"""
from __future__ import annotations

import hashlib
import socket
import sys
import time

from . import gpustate, profiles
from .knobs import KnobError, Knobs

#: Query names nvidia-smi accepts for one field, and the canonical name it prints in the header.
CANONICAL = {"clocks.sm": "clocks.current.sm", "clocks.current.sm": "clocks.current.sm",
             "clocks.gr": "clocks.current.graphics", "clocks.current.graphics": "clocks.current.graphics",
             "clocks.max.gr": "clocks.max.graphics", "clocks.max.graphics": "clocks.max.graphics",
             "clocks.max.sm": "clocks.max.sm", "clocks_throttle_reasons.active": "clocks_event_reasons.active",
             "clocks_event_reasons.active": "clocks_event_reasons.active"}
UNITS = {"power.draw": "W", "power.limit": "W", "clocks.current.sm": "MHz", "clocks.max.sm": "MHz",
         "clocks.current.graphics": "MHz", "clocks.max.graphics": "MHz", "utilization.gpu": "%",
         "memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB"}
XID_TEXT = {13: "Graphics Engine Exception", 31: "MMU Fault", 43: "Reset Channel Verif Error",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU",
            79: "GPU has fallen off the bus.", 109: "CTX SWITCH TIMEOUT", 119: "Timeout waiting for RPC from GSP!"}
PCI = "0000000F:01:00.0"


def _gpu_figures(knobs: Knobs, hw: dict, busy: bool) -> dict[str, str]:
    """The load-dependent fields (formulas in the module docstring)."""
    t = hw.get("gpu_telemetry") or {}
    f_load = float(t.get("clock_load_mhz", 2450))
    if not busy:
        clock, power = float(t.get("clock_idle_mhz", 208)), float(t.get("power_idle_w", 8.0))
        temp, util, pstate = float(t.get("temperature_idle_c", 41)), float(t.get("utilization_idle_pct", 0)), "P8"
    else:
        clock = min(knobs.clock_cap_mhz, f_load) if knobs.clock_cap_mhz else f_load
        p0, p1 = float(t.get("power_idle_w", 8.0)), float(t.get("power_load_w", 86.0))
        power = p0 + (p1 - p0) * (clock / f_load) ** 1.5
        t0, t1 = float(t.get("temperature_idle_c", 41)), float(t.get("temperature_load_c", 61))
        temp = t0 + (t1 - t0) * (power - p0) / max(p1 - p0, 1e-9)
        util, pstate = float(t.get("utilization_load_pct", 96)), "P0"
    return {"clocks.current.graphics": f"{clock:.0f}", "clocks.current.sm": f"{clock:.0f}",
            "clocks.max.graphics": f"{float(t.get('clock_max_mhz', 3003)):.0f}",
            "clocks.max.sm": f"{float(t.get('clock_max_mhz', 3003)):.0f}",
            "power.draw": f"{power:.2f}", "temperature.gpu": f"{temp:.0f}", "utilization.gpu": f"{util:.0f}",
            "pstate": pstate, "clocks_event_reasons.active": "0x0"}


def _values(knobs: Knobs, busy: bool = False) -> dict[str, str]:
    try:
        hw = profiles.load_hardware(knobs.hardware, knobs.profiles_dir)
    except profiles.ProfileError:
        hw = {}
    driver = knobs.driver_version or hw.get("default_driver_version", "580.95.05")
    uuid = hashlib.sha1(socket.gethostname().encode()).hexdigest()
    uuid = f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"
    vals = {"name": hw.get("gpu_name", "NVIDIA GB10"), "driver_version": driver, "count": "1", "index": "0",
            "uuid": uuid, "pci.bus_id": PCI, "compute_cap": "12.1",
            "memory.total": "[N/A]", "memory.used": "[N/A]", "memory.free": "[N/A]", "power.limit": "[N/A]",
            "persistence_mode": "Enabled", "vbios_version": "[N/A]", "cuda_version": hw.get("cuda_version", "13.0")}
    vals.update(_gpu_figures(knobs, hw, busy))
    return vals


def _busy(knobs: Knobs) -> bool:
    return int(gpustate.read(knobs.gpu_state_file).get("running") or 0) > 0


def _knobs() -> Knobs | None:
    """The knobs from the environment; None (the error said on stderr) when one is bad."""
    try:
        return Knobs.from_env()
    except KnobError as e:
        sys.stderr.write(f"{e}\n")
        return None


def main(argv: list[str]) -> int:
    """``nvidia-smi [--query-gpu=a,b --format=csv[,noheader][,nounits]] [-L]``."""
    knobs = _knobs()
    if knobs is None:
        return 1
    vals = _values(knobs, _busy(knobs))
    query = fmt = None
    for a in argv:
        if a.startswith("--query-gpu="):
            query = a.split("=", 1)[1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
    if "-L" in argv or "--list-gpus" in argv:
        print(f"GPU 0: {vals['name']} (UUID: {vals['uuid']})")
        return 0
    if query:
        fields = [f.strip() for f in query.split(",") if f.strip()]
        for f in fields:
            if CANONICAL.get(f, f) not in vals:
                sys.stderr.write(f'Field "{f}" is not a valid field to query.\n\n')
                return 2
        opts = set((fmt or "csv").split(","))
        if "csv" not in opts:
            sys.stderr.write('"--format" must contain "csv".\n')
            return 2
        names = [CANONICAL.get(f, f) for f in fields]
        if "noheader" not in opts:
            print(", ".join(n + (f" [{UNITS[n]}]" if n in UNITS and "nounits" not in opts else "") for n in names))

        def cell(n: str) -> str:
            v = vals[n]
            if n in UNITS and "nounits" not in opts and not v.startswith("["):
                return f"{v} {UNITS[n]}"
            return v
        print(", ".join(cell(n) for n in names))
        return 0
    print("sparkbench SIMULATED nvidia-smi (no GPU in this container; values mimic a DGX Spark)")
    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print(f"NVIDIA-SMI {vals['driver_version']}    Driver Version: {vals['driver_version']}    CUDA Version: {vals['cuda_version']}")
    print(f"GPU 0  {vals['name']}  {vals['persistence_mode']}  {vals['pci.bus_id']}  Memory-Usage: Not Supported")
    print(f"       {vals['pstate']}  {vals['power.draw']}W / N/A  {vals['clocks.current.graphics']} MHz  "
          f"{vals['utilization.gpu']}%")
    return 0


def kernel_ring(knobs: Knobs, state: dict) -> list[str]:
    """The simulated kernel ring buffer (``[seconds since boot] message``); SIMULATED."""
    try:
        hw = profiles.load_hardware(knobs.hardware, knobs.profiles_dir)
    except profiles.ProfileError:
        hw = {}
    driver = knobs.driver_version or hw.get("default_driver_version", "580.95.05")
    lines = [(0.0, "Booting Linux on physical CPU 0x0000000000 [0x410fd871] (sparkbench SIMULATED kernel ring)"),
             (0.0, "Linux version 6.11.0-1016-nvidia (sparkbench simulator) #16-Ubuntu SMP PREEMPT_DYNAMIC"),
             (2.514306, "nvidia: loading out-of-tree module taints kernel."),
             (2.623119, f"NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  {driver}  Release Build"),
             (5.120004, f"nvidia-modeset: Loading NVIDIA UNIX Open Kernel Mode Setting Driver for aarch64  {driver}")]
    boot = 12.0  # the simulated container "booted" this many seconds before the server started
    if knobs.fault_xid is not None and state.get("first_request") and state.get("started"):
        at = boot + float(state["first_request"]) - float(state["started"]) + 0.25
        text = XID_TEXT.get(knobs.fault_xid, "simulated fault")
        pci = PCI.lower().replace("0000000f", "000f")[:-2]
        lines.append((at, f"NVRM: Xid (PCI:{pci}): {knobs.fault_xid}, pid={state.get('pid') or '<unknown>'}, "
                          f"name=python3, {text}"))
    return [f"[{t:12.6f}] {msg}" for t, msg in lines]


def dmesg_main(argv: list[str]) -> int:
    """``dmesg`` (no options needed): the simulated kernel ring."""
    knobs = _knobs()
    if knobs is None:
        return 1
    for line in kernel_ring(knobs, gpustate.read(knobs.gpu_state_file)):
        print(line)
    return 0
