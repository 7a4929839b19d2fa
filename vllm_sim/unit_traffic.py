"""One unit's memory bandwidth, shared by the engines on it (the unit account's ``traffic``).

Each step the pacing model says how many bytes the step reads and writes
(``PacingModel.step_traffic``) and how long it takes alone. Its **share** of the bus is the time
those bytes need at the engine's own bandwidth over the step's time alone::

    share = (read + written) / BW / T_alone            (0..1; BW = pacing.bw_bytes_s, T in simulated s)

Every engine publishes its demand — the share smoothed over its planned step timeline
(exponential, time constant ``TAU_S``) — with ``busy`` (it has requests to step; a loaded
machine's late wake-ups do not make it idle) into its entry in the unit account every
``PUBLISH_S``. The others read a busy engine's demand as published and an idle one's as decaying
from its publication, so an idle engine's demand fades to 0 within a second or two. A step then takes::

    T = T_alone x max(1, own share + the other engines' published demand)

so while the demands add up to more than the bus, every engine stretches by the same factor and
together they move exactly one bus's worth of bytes (processor sharing of the memory bus; the
launch gaps stretch with the rest, a conservative simplification). Demand is what an engine would
move alone, not what it achieved, so the factor has no feedback loop. An idle co-resident engine
costs nothing; SM time-slicing between processes is not modelled, only the bandwidth.
"""
from __future__ import annotations

import math
import threading
import time

TAU_S = 0.5       # wall seconds: time constant of the published demand
PUBLISH_S = 0.2   # wall seconds between two publications (and reads of the others' demand)


def step_share(traffic_bytes: float, bw_bytes_s: float, alone_s: float) -> float:
    """The share of the bus one step takes alone (clamped to 0..1)."""
    if alone_s <= 0 or bw_bytes_s <= 0:
        return 0.0
    return min(max(traffic_bytes / bw_bytes_s / alone_s, 0.0), 1.0)


def slowdown(own_share: float, others_demand: float) -> float:
    """How much longer a step takes when the engines' demands exceed the bus."""
    return max(1.0, own_share + others_demand)


def decayed(share: float, at: float, now: float, tau: float = TAU_S) -> float:
    """A published demand ``share`` (as of ``at``) seen at ``now``: it decays while not refreshed."""
    return share * math.exp(-max(now - at, 0.0) / tau)


def traffic_of(entry: dict) -> dict:
    """The ``traffic`` an account entry published (zero demand when it has none)."""
    t = entry.get("traffic") or {}
    return {"share": float(t.get("share") or 0.0), "at": float(t.get("at") or 0.0), "busy": bool(t.get("busy"))}


def seen(traffic: dict, now: float) -> float:
    """Another engine's demand at ``now``: as published while it is busy (it keeps stepping until
    its next publication), decaying from its publication once it is idle."""
    if traffic["busy"]:
        return traffic["share"]
    return decayed(traffic["share"], traffic["at"], now)


class Demand:
    """An engine's own demand: the step shares, smoothed over wall time."""

    def __init__(self) -> None:
        self.share, self.at = 0.0, time.time()

    def add(self, share: float, start: float, end: float) -> None:
        """One step of ``share`` that runs from ``start`` to ``end`` (wall seconds)."""
        base = decayed(self.share, self.at, start)
        keep = math.exp(-max(end - start, 0.0) / TAU_S)
        self.share, self.at = base * keep + share * (1.0 - keep), end

    def now(self, t: float) -> float:
        return decayed(self.share, self.at, t)


class UnitTraffic:
    """Publishes this engine's demand, reads the others', and paces steps by the shared bus."""

    def __init__(self, account, bw_bytes_s: float, speedup: float = 1.0) -> None:
        self.account, self.bw, self.speedup = account, float(bw_bytes_s), float(speedup)
        self.demand = Demand()
        self.others: list[dict] = []   # traffic_of() each other live engine, as last read
        self.last_slowdown = 1.0
        self.busy = False   # the engine runs steps (set by pace, cleared by idle)
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="unit-traffic").start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(PUBLISH_S):
            self.publish()

    def idle(self) -> None:
        """The engine has nothing to run (it waits for requests): its demand starts to fade."""
        self.busy = False

    def publish(self) -> None:
        """Write the own demand (and heartbeat), read the others' demand."""
        now = time.time()
        busy = self.busy
        share = self.demand.share if busy else self.demand.now(now)
        self.account.heartbeat({"share": share, "bytes_s": share * self.bw, "at": now, "busy": busy})
        self.others = [traffic_of(e) for e in self.account.others()]

    def others_demand(self, now: float) -> float:
        return sum((seen(t, now) for t in self.others), 0.0)

    def pace(self, traffic_bytes: float, alone_s: float, dur: float, start: float) -> float:
        """The step's duration on the shared bus: ``dur`` (its paced time alone, jitter included)
        x the slowdown; the step, planned from ``start`` (wall seconds), enters the own demand."""
        share = step_share(traffic_bytes, self.bw, alone_s * self.speedup)
        factor = slowdown(share, self.others_demand(start))
        self.last_slowdown = factor
        self.busy = True
        self.demand.add(share, start, start + dur * factor)
        return dur * factor

    def info(self, now: float) -> dict:
        """/sim/info's ``unit``: the account as this engine sees it, the demands, the last slowdown."""
        acc, own = self.account, self.account.entry or {}
        others, tenants = acc.others(), acc.tenants()
        engines = [{"id": e.get("id"), "model": e.get("model"), "port": e.get("port"),
                    "share_bytes": e.get("share_bytes"), "traffic_share": seen(traffic_of(e), now)}
                   for e in others]
        return {"dir": acc.path, "id": acc.id, "total_bytes": acc.total, "lease_s": acc.lease_s,
                "gpu_memory_utilization": own.get("gpu_memory_utilization"), "share_bytes": own.get("share_bytes"),
                "free_bytes_at_start": acc.free_at_start, "free_bytes": acc.free_bytes(others + [own], tenants),
                "tenants": tenants, "engines": engines, "bandwidth_bytes_s": self.bw,
                "traffic_share": self.demand.now(now), "others_traffic_share": self.others_demand(now),
                "slowdown": self.last_slowdown, "tau_s": TAU_S, "publish_s": PUBLISH_S}
