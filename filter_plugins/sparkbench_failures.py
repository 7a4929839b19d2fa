"""Thin Ansible adapters over the run's failure owners (the logic and its tests live there).

* ``sparkbench_host_failure``   failed task's name, its registered result, host → the host failure object
                                {task, reason, remedy, log_excerpt, issue, summary} (sparkbench.host_failure)
* ``sparkbench_host_failures``  hosts, hostvars[, field] → {host: host failure} of those bench.yml recorded
* ``sparkbench_run_outcome``    results.json, host failures[, check, hosts] → {failed, failed_variants, failed_hosts,
                                lines, message}: whether the run failed (sparkbench.runner.outcome)
"""

from __future__ import annotations

from typing import Any

from sparkbench import host_failure
from sparkbench.runner import outcome as run_outcome


def sparkbench_host_failure(task: Any, result: Any, host: Any = "") -> dict:
    """See sparkbench.host_failure.explain."""
    return host_failure.explain(task, result if isinstance(result, dict) else dict(result or {}), str(host or ""))


def sparkbench_host_failures(hosts: Any, hostvars: Any, field: Any = None) -> dict:
    """See sparkbench.host_failure.collect (the fact ``bench_host_failure``)."""
    return host_failure.collect(list(hosts or []), hostvars, field=str(field) if field else None)


def sparkbench_run_outcome(report: Any, host_failures: Any = None, check: Any = False, hosts: Any = None) -> dict:
    """See sparkbench.runner.outcome.outcome."""
    return run_outcome.outcome(report or None, host_failures or {}, bool(check),
                               None if hosts is None else list(hosts))


class FilterModule:
    """sparkbench failure filters."""

    def filters(self) -> dict:
        return {"sparkbench_host_failure": sparkbench_host_failure,
                "sparkbench_host_failures": sparkbench_host_failures,
                "sparkbench_run_outcome": sparkbench_run_outcome}
