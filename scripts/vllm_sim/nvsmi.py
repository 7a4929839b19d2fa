"""``nvidia-smi`` stand-in: GB10-like answers (DGX Spark reports memory fields as ``[N/A]``).

Driver version from VLLM_SIM_DRIVER_VERSION, else the hardware profile's default.
"""
from __future__ import annotations

import hashlib
import os
import socket
import sys
import time

from . import profiles
from .knobs import Knobs, KnobError


def _values(knobs: Knobs) -> dict[str, str]:
    try:
        hw = profiles.load_hardware(knobs.hardware, knobs.profiles_dir)
    except profiles.ProfileError:
        hw = {}
    driver = knobs.driver_version or hw.get("default_driver_version", "580.95.05")
    uuid = hashlib.sha1(socket.gethostname().encode()).hexdigest()
    uuid = f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"
    return {"name": hw.get("gpu_name", "NVIDIA GB10"), "driver_version": driver, "count": "1", "index": "0",
            "uuid": uuid, "pci.bus_id": "0000000F:01:00.0", "compute_cap": "12.1",
            "memory.total": "[N/A]", "memory.used": "[N/A]", "memory.free": "[N/A]",
            "temperature.gpu": "42", "utilization.gpu": "0", "power.draw": "11.52", "power.limit": "[N/A]",
            "clocks.sm": "2405", "clocks.max.sm": "3003", "persistence_mode": "Enabled", "pstate": "P0",
            "vbios_version": "[N/A]", "cuda_version": hw.get("cuda_version", "13.0")}


def main(argv: list[str]) -> int:
    """``nvidia-smi [--query-gpu=a,b --format=csv[,noheader][,nounits]] [-L]``."""
    try:
        knobs = Knobs.from_env()
    except KnobError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    vals = _values(knobs)
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
            if f not in vals:
                sys.stderr.write(f'Field "{f}" is not a valid field to query.\n\n')
                return 2
        opts = set((fmt or "csv").split(","))
        if "csv" not in opts:
            sys.stderr.write('"--format" must contain "csv".\n')
            return 2
        units = {"power.draw": "W", "power.limit": "W", "clocks.sm": "MHz", "clocks.max.sm": "MHz",
                 "utilization.gpu": "%", "memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB"}
        if "noheader" not in opts:
            print(", ".join(f + (f" [{units[f]}]" if f in units and "nounits" not in opts else "") for f in fields))

        def cell(f: str) -> str:
            v = vals[f]
            if f in units and "nounits" not in opts and not v.startswith("["):
                return f"{v} {units[f]}"
            return v
        print(", ".join(cell(f) for f in fields))
        return 0
    print("sparkbench SIMULATED nvidia-smi (no GPU in this container; values mimic a DGX Spark)")
    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print(f"NVIDIA-SMI {vals['driver_version']}    Driver Version: {vals['driver_version']}    CUDA Version: {vals['cuda_version']}")
    print(f"GPU 0  {vals['name']}  {vals['persistence_mode']}  {vals['pci.bus_id']}  Memory-Usage: Not Supported")
    return 0
