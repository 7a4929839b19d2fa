"""Live progress of a playbook that plans no variants (provision, serve, teardown), from
ansible-runner events (pure, no I/O): per host the task it is in, how many tasks ended ok,
changed, failed or skipped, whether it was unreachable, and what the playbook said (its ``debug``
messages, in order, once each).

A failure a task ignores (``ignore_errors``) or a rescue handles is counted but does not fail the
host; a host fails when ``playbook_on_stats`` lists it among the failures, or is unreachable when
it is listed under ``dark``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

#: ``on_change`` receives (host, task, outcome): outcome "start", "ok", "changed", "failed",
#: "skipped" or "unreachable"
TaskChange = tuple[str, str, str]

_DEBUG_ACTIONS = ("debug", "ansible.builtin.debug")


@dataclass
class HostTasks:
    """One host: the task it is in, the counts per outcome, why it failed."""

    task: str = ""
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "skipped": 0})
    failed: str | None = None       # "failed at <task>: <message>" once the play ended with the host failed
    unreachable: str | None = None  # the connection's message
    last_failure: str | None = None


def _first_line(res: dict) -> str:
    text = str(res.get("msg") or res.get("stderr") or res.get("reason") or "failed").strip()
    return (text.splitlines() or ["failed"])[0][:240]


class TaskProgress:
    """Folds ansible-runner events into per-host task progress. Thread-safe."""

    def __init__(self, on_change: Callable[[TaskChange], None] | None = None) -> None:
        self.hosts: dict[str, HostTasks] = {}
        self.said: list[tuple[str, str]] = []  # (host, message line) of every debug task, in order
        self.on_change = on_change
        self.finished = False
        self._lock = threading.RLock()

    def snapshot(self) -> dict[str, HostTasks]:
        with self._lock:
            return {h: HostTasks(s.task, dict(s.counts), s.failed, s.unreachable, s.last_failure)
                    for h, s in self.hosts.items()}

    def failed_hosts(self) -> dict[str, str]:
        """Hosts that failed or were unreachable, with the reason."""
        with self._lock:
            return {h: s.unreachable and f"unreachable: {s.unreachable}" or s.failed
                    for h, s in self.hosts.items() if s.failed or s.unreachable}

    def unreachable_hosts(self) -> list[str]:
        """Hosts Ansible could not reach."""
        with self._lock:
            return [h for h, s in self.hosts.items() if s.unreachable]

    def _said(self, host: str, res: dict) -> None:
        msg = res.get("msg")
        lines = msg if isinstance(msg, list) else str(msg if msg is not None else "").splitlines()
        for line in lines:
            entry = (host, str(line))
            if str(line).strip() and entry not in self.said:
                self.said.append(entry)

    def _emit(self, host: str, task: str, outcome: str) -> None:
        if self.on_change:
            self.on_change((host, task, outcome))

    def handle(self, event: dict) -> bool:
        """Fold one ansible-runner event in. Returns True (ansible-runner keeps the event)."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        task = (data.get("task") or "").strip()
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        with self._lock:
            hs = self.hosts.setdefault(host, HostTasks()) if host else None
            if kind == "runner_on_start" and hs:
                hs.task = task
                self._emit(host, task, "start")
            elif kind == "runner_item_on_ok" and hs and data.get("task_action") in _DEBUG_ACTIONS:
                self._said(host, res)  # a debug task with a loop: each item's message
            elif kind == "runner_on_ok" and hs:
                outcome = "changed" if res.get("changed") else "ok"
                hs.counts[outcome] += 1
                if data.get("task_action") in _DEBUG_ACTIONS and not isinstance(res.get("results"), list):
                    self._said(host, res)
                self._emit(host, task, outcome)
            elif kind == "runner_on_skipped" and hs:
                hs.counts["skipped"] += 1
                self._emit(host, task, "skipped")
            elif kind == "runner_on_failed" and hs:
                hs.counts["failed"] += 1
                if not data.get("ignore_errors"):
                    hs.last_failure = f"{task}: {_first_line(res)}"
                self._emit(host, task, "failed")
            elif kind == "runner_on_unreachable" and hs:
                hs.unreachable = _first_line(res)
                self._emit(host, task, "unreachable")
            elif kind == "playbook_on_stats":
                for h in data.get("dark") or {}:
                    self.hosts.setdefault(h, HostTasks()).unreachable = \
                        self.hosts[h].unreachable or "host unreachable"
                for h in data.get("failures") or {}:
                    st = self.hosts.setdefault(h, HostTasks())
                    st.failed = f"failed at {st.last_failure}" if st.last_failure else "failed"
                self.finished = True
        return True
