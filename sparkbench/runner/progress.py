"""Live progress of a bench run, computed from ansible-runner events (pure, no I/O).

What it reads is structural, never a task name: two facts in the events' results. ``bench_plan``
(set by the ``sparkbench_plan`` action: ``names``, the host's variants in order, and per variant
its ``action``, measure or skip) and ``bench_stage`` = ``{variant, stage}``, set by each step as
it begins (``preflight``, ``launch``, ``measure``) and by the ``sparkbench_result`` action when
the document is written (``done`` — complete or incomplete — or ``failed``, with ``reason``).

States of a host × variant: waiting → launching → measuring → done | failed. A host that is
unreachable or fails outside a variant's rescue marks its unfinished variants failed; so does a
host bench.yml recorded as failed and ended (the fact ``bench_host_failure``,
``sparkbench.host_failure``: its ``summary`` is the host's reason). The report play's last task
fails the run when a variant or a host failed (after the fact ``bench_run_outcome``,
``sparkbench.runner.outcome``), and health.yml's when a unit is slow or failed (after the fact
``bench_health_verdict``): that failure is the run's verdict, not a failure of the host it ran on.

The bracket run (``bench_plan.bracket``: the reference variant measured again at the end, named
``<variant>.bracket``) is its own entry, after the host's variants. It appears when its first
stage begins, not from the plan: bench.yml runs it only once the reference's result is complete,
so a bracket that never starts is not a failure."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

WAITING, LAUNCHING, MEASURING, DONE, FAILED = "waiting", "launching", "measuring", "done", "failed"
STATES = (WAITING, LAUNCHING, MEASURING, DONE, FAILED)
FINAL = (DONE, FAILED)
_RANK = {WAITING: 0, LAUNCHING: 1, MEASURING: 2, DONE: 3, FAILED: 3}

_STAGE_STATE = {"preflight": LAUNCHING, "launch": LAUNCHING, "measure": MEASURING, "done": DONE, "failed": FAILED}


@dataclass
class HostState:
    """One host: its planned variants in order, each variant's state, and why the host failed."""

    variants: dict[str, str] = field(default_factory=dict)
    failed: str | None = None  # "unreachable: …" / "failed: …" when the host itself failed
    notes: dict[str, str] = field(default_factory=dict)  # variant → last failure message


Change = tuple[str, str, str]  # (host, variant, new state); variant "" = host-level change


class Progress:
    """Folds ansible-runner events into host × variant states. Thread-safe: ansible-runner calls
    the event handler from its own thread. ``on_change(change)`` is called after each change."""

    def __init__(self, on_change: Callable[[Change], None] | None = None) -> None:
        self.hosts: dict[str, HostState] = {}
        self.on_change = on_change
        self.finished = False
        self._current: dict[str, str] = {}  # host → the variant whose stage was entered last
        self._last_failure: dict[str, str] = {}  # host → "task: message" of its last unrescued-looking failure
        self._decided: set[str] = set()  # hosts that set the run's verdict (bench_run_outcome, bench_health_verdict)
        self._verdict_failed: set[str] = set()  # hosts whose failure was that verdict
        self._lock = threading.RLock()  # re-entrant: on_change callbacks read snapshots

    # ------------------------------------------------------------------ queries
    def snapshot(self) -> dict[str, dict[str, str]]:
        """``{host: {variant: state}}`` (a copy)."""
        with self._lock:
            return {h: dict(s.variants) for h, s in self.hosts.items()}

    def variant_names(self) -> list[str]:
        """Every variant name seen, in first-planned order."""
        seen: list[str] = []
        with self._lock:
            hosts = list(self.hosts.values())
        for s in hosts:
            for v in s.variants:
                if v not in seen:
                    seen.append(v)
        return seen

    def counts(self) -> dict[str, int]:
        """How many host × variants are in each state."""
        out = {s: 0 for s in STATES}
        for s in self.hosts.values():
            for st in s.variants.values():
                out[st] += 1
        return out

    def failed_hosts(self) -> dict[str, str]:
        """Hosts that failed as a whole, with the reason."""
        with self._lock:
            return {h: s.failed for h, s in self.hosts.items() if s.failed}

    # ------------------------------------------------------------------ updates
    def _set(self, host: str, variant: str, state: str, note: str | None = None) -> None:
        hs = self.hosts.setdefault(host, HostState())
        current = hs.variants.get(variant)
        if current in FINAL:
            return
        if current is not None and _RANK[state] < _RANK[current]:
            return
        if note:
            hs.notes[variant] = note
        if current != state:
            hs.variants[variant] = state
            if self.on_change:
                self.on_change((host, variant, state))

    def _fail_host(self, host: str, reason: str, replace: bool = False) -> None:
        """Mark ``host`` failed (its unfinished variants too); ``replace``: a better reason (the
        recorded host failure) replaces an earlier one without a second change."""
        hs = self.hosts.setdefault(host, HostState())
        if hs.failed is None:
            hs.failed = reason
            if self.on_change:
                self.on_change((host, "", f"host {reason}"))
        elif replace:
            hs.failed = reason
        for v, st in list(hs.variants.items()):
            if st not in FINAL:
                self._set(host, v, FAILED, reason)

    def _note_failure(self, host: str, task: str, data: dict, variant: str | None = None) -> None:
        """Remember a failed task's first message line (for the host's or the variant's reason)."""
        res = data.get("res") or {}
        lines = str(res.get("msg") or res.get("stderr") or "failed").strip().splitlines() or ["failed"]
        self._last_failure[host] = f"{task}: {lines[0][:200]}"
        if variant:
            self.hosts.setdefault(host, HostState()).notes[variant] = f"{task}: {lines[0][:200]}"

    def handle(self, event: dict) -> bool:
        """Fold one ansible-runner event in. Returns True (ansible-runner keeps the event)."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        task = (data.get("task") or "").strip()
        res = data.get("res") or {}
        facts = res.get("ansible_facts") if isinstance(res.get("ansible_facts"), dict) else {}
        with self._lock:
            if kind == "runner_on_ok" and host and isinstance((facts.get("bench_plan") or {}).get("names"), list):
                plan = facts["bench_plan"]
                # A cluster's head also plans the cluster variants (run across its members, after its own).
                actions = {str(v.get("name")): v.get("action")
                           for v in list(plan.get("variants") or []) + list(plan.get("cluster_variants") or [])
                           if isinstance(v, dict)}
                for name in list(plan["names"]) + list(plan.get("cluster_names") or []):
                    self._set(host, str(name), WAITING)
                    if actions.get(str(name)) == "skip":
                        self._set(host, str(name), DONE, "skipped: complete result with the same configuration hash")
            elif kind == "runner_on_ok" and host and isinstance(facts.get("bench_stage"), dict):
                stage = facts["bench_stage"]
                state = _STAGE_STATE.get(str(stage.get("stage")))
                if state and stage.get("variant"):
                    name = str(stage["variant"])
                    self._current[host] = name
                    reason = str(stage.get("reason") or "").strip()
                    self._set(host, name, state, reason.splitlines()[0][:200] if reason else None)
            elif kind == "runner_on_ok" and host and isinstance(facts.get("bench_host_failure"), dict):
                failure = facts["bench_host_failure"]
                why = str(failure.get("summary") or failure.get("reason") or "failed").strip()
                self._fail_host(host, why if why.startswith("unreachable") else f"failed: {why}", replace=True)
            elif kind == "runner_on_ok" and host and (isinstance(facts.get("bench_run_outcome"), dict)
                                                      or isinstance(facts.get("bench_health_verdict"), dict)):
                self._decided.add(host)
            elif kind == "runner_on_failed" and host in self._decided:
                self._verdict_failed.add(host)
            elif kind == "runner_on_unreachable" and host:
                reason = res.get("msg") or "host unreachable"
                self._fail_host(host, f"unreachable: {str(reason).strip().splitlines()[0][:200]}")
            elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
                self._note_failure(host, task, data, variant=self._current.get(host))
            elif kind == "playbook_on_stats":
                for h in (data.get("dark") or {}):
                    self._fail_host(h, "unreachable")
                for h in (data.get("failures") or {}):
                    if h in self._verdict_failed:
                        continue
                    where = self._last_failure.get(h)
                    self._fail_host(h, f"failed at {where}" if where else "failed outside a variant's rescue")
                for h, hs in self.hosts.items():  # a variant that never finished did not succeed
                    for v, st in list(hs.variants.items()):
                        if st not in FINAL:
                            self._set(h, v, FAILED, "never finished (the play ended before its result was recorded)")
                self.finished = True
        return True
