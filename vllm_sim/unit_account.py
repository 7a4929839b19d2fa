"""The memory account of one simulated unit, shared by every simulator engine on it.

A Spark's GPU and CPU share one memory, and vLLM sizes itself from a share of the total: at
start each worker asks for ``ceil(total x --gpu-memory-utilization)`` and refuses to start when
the device has less free (vLLM's ``request_memory``, ``vllm/v1/worker/utils.py``). Simulator
containers of one unit see that memory through a directory mounted into each of them
(``VLLM_SIM_UNIT_DIR``):

* ``engines/<id>.json`` — one file per engine that holds memory: ``id``, ``pid``, ``pid_ns``,
  ``boot_id``, ``proc_start`` (the process's start in clock ticks, against pid reuse),
  ``hostname``, ``model``, ``port``, ``gpu_memory_utilization``, ``share_bytes``, ``total_bytes``,
  ``registered`` and ``heartbeat`` (epoch seconds), ``traffic`` (its memory-traffic demand,
  ``unit_traffic.py``). The engine rewrites its own file (temporary file + rename) every
  ``unit_traffic.PUBLISH_S`` and removes it on a clean shutdown.
* ``tenants.json`` — optional, written by whoever declares what else lives in the unit's memory:
  ``[{"name": "rag", "gb": 20}]`` (the inventory's ``bench_tenants`` shape; GB = 1e9 bytes).
* ``unit.lock`` — ``fcntl.flock`` around every check-and-register, so two engines starting at
  once see each other.

An entry is live while its engine is: in the reader's own PID namespace (same boot) the pid must
exist with the recorded start time; in another container's namespace its heartbeat must be
younger than the lease. A start that does not fit only because of entries it cannot check by pid
waits one lease before it fails (a container removed a moment ago stops holding memory then).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass

GiB = 2 ** 30
ENGINES = "engines"
TENANTS = "tenants.json"
LOCK = "unit.lock"
DEVICE = "cuda:0"


def format_gib(nbytes: float) -> float:
    """vLLM's ``format_gib`` (``vllm/utils/mem_utils.py``): GiB rounded to 2 places."""
    return round(nbytes / GiB, 2)


def shortage_text(free: float, total: float, util: float, requested: float, device: str = DEVICE) -> str:
    """vLLM's start-up refusal (``request_memory`` in ``vllm/v1/worker/utils.py``), figures filled in."""
    return (f"Free memory on device {device} ({format_gib(free)}/{format_gib(total)} GiB) on startup is less "
            f"than desired GPU memory utilization ({util}, {format_gib(requested)} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes.")


class MemoryShortage(Exception):
    """The engine's share does not fit what the unit has free; ``str()`` is vLLM's text."""

    def __init__(self, free: float, total: float, util: float, requested: float) -> None:
        super().__init__(shortage_text(free, total, util, requested))
        self.free, self.total, self.util, self.requested = free, total, util, requested


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def proc_start(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks): a pid reused by another
    process has another one. None where /proc is not there."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


@dataclass(frozen=True)
class Identity:
    """Who an engine is: its process, PID namespace and boot (containers of one host share the boot)."""

    pid: int
    pid_ns: str | None
    boot_id: str | None
    proc_start: str | None
    hostname: str

    @classmethod
    def here(cls) -> "Identity":
        try:
            ns = os.readlink("/proc/self/ns/pid")
        except OSError:
            ns = None
        pid = os.getpid()
        return cls(pid, ns, _read("/proc/sys/kernel/random/boot_id"), proc_start(pid), socket.gethostname())

    def can_check(self, entry: dict) -> bool:
        """True when ``entry``'s pid means the same process here (same boot, same PID namespace)."""
        return bool(self.pid_ns) and entry.get("pid_ns") == self.pid_ns and entry.get("boot_id") == self.boot_id


def pid_alive(entry: dict) -> bool:
    """The entry's process still runs (and is the same process: its start time matches)."""
    pid = entry.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = proc_start(pid)
    return started is None or entry.get("proc_start") in (None, started)


def is_live(entry: dict, me: Identity, now: float, lease_s: float) -> bool:
    """Live: checked by pid where that is possible, else a heartbeat younger than the lease."""
    if me.can_check(entry):
        return pid_alive(entry)
    return now - float(entry.get("heartbeat") or 0.0) <= lease_s


def _write_json(path: str, data) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class UnitAccount:
    """One engine's view of its unit's account (directory ``path``)."""

    def __init__(self, path: str, total_bytes: float, lease_s: float = 3.0, me: Identity | None = None) -> None:
        self.path, self.total, self.lease_s = path, float(total_bytes), float(lease_s)
        self.me = me or Identity.here()
        safe_host = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.me.hostname)[:40]
        self.id = f"{safe_host}-{self.me.pid}-{secrets.token_hex(3)}"
        self.entry: dict | None = None
        self.free_at_start: float | None = None
        self._own = threading.Lock()  # the own entry: heartbeat (publisher thread) vs release (shutdown)
        os.makedirs(os.path.join(path, ENGINES), exist_ok=True)

    def _file(self, engine_id: str) -> str:
        return os.path.join(self.path, ENGINES, f"{engine_id}.json")

    @contextlib.contextmanager
    def _locked(self):
        with open(os.path.join(self.path, LOCK), "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _scan(self) -> tuple[list[dict], list[str]]:
        """(live entries of other engines, files of dead ones)."""
        live, dead, now = [], [], time.time()
        folder = os.path.join(self.path, ENGINES)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json") or name[:-5] == self.id:
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    entry = json.load(f)
            except (OSError, ValueError):
                continue
            if is_live(entry, self.me, now, self.lease_s):
                live.append(entry)
            else:
                dead.append(name)
        return live, dead

    def others(self) -> list[dict]:
        """The live entries of the unit's other engines."""
        return self._scan()[0]

    def tenants(self) -> list[dict]:
        """The declared non-vLLM tenants (``tenants.json``; none when absent or unreadable)."""
        try:
            with open(os.path.join(self.path, TENANTS), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return []
        return [t for t in data if isinstance(t, dict)] if isinstance(data, list) else []

    def free_bytes(self, live: list[dict], tenants: list[dict]) -> float:
        """Total less the live engines' shares and the tenants' gigabytes (never below 0)."""
        used = sum(float(e.get("share_bytes") or 0) for e in live)
        used += sum(float(t.get("gb") or 0) * 1e9 for t in tenants)
        return max(self.total - used, 0.0)

    def register(self, util: float, about: dict) -> dict:
        """Take ``ceil(total x util)`` bytes, or raise :class:`MemoryShortage` (vLLM's figures)."""
        requested = math.ceil(self.total * util)
        for attempt in (0, 1):
            with self._locked():
                live, dead = self._scan()
                for name in dead:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(self.path, ENGINES, name))
                free = self.free_bytes(live, self.tenants())
                if free >= requested:
                    return self._take(util, requested, free, about)
                unsure = sum(float(e.get("share_bytes") or 0) for e in live if not self.me.can_check(e))
                if attempt or free + unsure < requested:
                    raise MemoryShortage(free, self.total, util, requested)
            time.sleep(self.lease_s * 1.1 + 0.05)  # entries of a removed container expire within one lease
        raise MemoryShortage(free, self.total, util, requested)  # not reached: the second pass decides

    def _take(self, util: float, requested: int, free: float, about: dict) -> dict:
        now = time.time()
        me = self.me
        self.entry = {**about, "id": self.id, "pid": me.pid, "pid_ns": me.pid_ns, "boot_id": me.boot_id,
                      "proc_start": me.proc_start, "hostname": me.hostname, "gpu_memory_utilization": util,
                      "share_bytes": requested, "total_bytes": self.total, "registered": now, "heartbeat": now,
                      "traffic": {"share": 0.0, "bytes_s": 0.0, "at": now}}
        self.free_at_start = free
        _write_json(self._file(self.id), self.entry)
        return self.entry

    def heartbeat(self, traffic: dict | None = None) -> None:
        """Rewrite the own entry (heartbeat now, the latest traffic); a missing folder is not fatal."""
        with self._own:
            if self.entry is None:
                return
            self.entry = {**self.entry, "heartbeat": time.time(), **({"traffic": traffic} if traffic else {})}
            with contextlib.suppress(OSError):
                _write_json(self._file(self.id), self.entry)

    def release(self) -> None:
        """Give the share back (a clean shutdown); a heartbeat after it writes nothing."""
        with self._own:
            if self.entry is None:
                return
            self.entry = None
            with contextlib.suppress(OSError):
                os.remove(self._file(self.id))
