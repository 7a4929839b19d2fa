"""Thin Ansible adapters over sparkbench.unit_check (what a unit needs before a benchmark).

* ``sparkbench_unit_needs``      the unit's probe, facts, socket, install_missing → {ok, problems, install}
* ``sparkbench_unit_problems``   host, needs → one message naming each fault and its fix
* ``sparkbench_docker_problem``  docker_host_info result, user, host → the fault and its fix
"""

from __future__ import annotations

from typing import Any

from sparkbench import unit_check


def sparkbench_unit_needs(probe: Any, facts: Any, docker_socket: Any, install_missing: Any = False) -> dict:
    """See sparkbench.unit_check.unit_needs (probes read by unit_check.probes_from)."""
    probes = unit_check.probes_from(probe or {}, facts or {}, str(docker_socket))
    return unit_check.unit_needs(probes, install_missing)


def sparkbench_unit_problems(needs: Any, host: Any) -> str:
    """See sparkbench.unit_check.problems_message."""
    return unit_check.problems_message(str(host), needs or {})


def sparkbench_docker_problem(probe: Any, user: Any, host: Any) -> str:
    """See sparkbench.unit_check.docker_problem."""
    return unit_check.docker_problem(probe or {}, str(user), str(host))


class FilterModule:
    """sparkbench unit-check filters."""

    def filters(self) -> dict:
        return {"sparkbench_unit_needs": sparkbench_unit_needs, "sparkbench_unit_problems": sparkbench_unit_problems,
                "sparkbench_docker_problem": sparkbench_docker_problem}
