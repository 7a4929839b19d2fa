"""What a unit must have before the benchmark can drive it, and the fix for each lack.

The spark_host role probes the unit (roles/spark_host/tasks/unit.yml: the Python Ansible runs
there, whether it imports ``requests``, the remote user's groups, the Docker socket's group) and
passes the probes here. ``unit_needs`` returns the problems, each with its reason and fix, and
what provisioning may change when the owner opted in (``spark_host_install_missing: true``): a
unit is the owner's machine, so nothing is installed otherwise. ``docker_problem`` turns the
Docker engine probe's answer into the real fault and its fix.

A problem is ``{"id", "reason", "fix"}``; ids: ``python_requests``, ``docker_group``.
"""
from __future__ import annotations

from typing import Any, TypedDict

from .values import as_bool

OPT_IN = "-e spark_host_install_missing=true"
#: The Debian/Ubuntu package that gives the unit's system python3 ``requests`` (DGX OS is Ubuntu).
REQUESTS_PACKAGE = "python3-requests"
SYSTEM_PYTHONS = ("/usr/bin/python3", "/bin/python3") + tuple(f"/usr/bin/python3.{n}" for n in range(8, 20))


class SocketProbe(TypedDict):
    """The Docker socket as the spark_host_probe module reads it: whether it exists, its group's name."""

    exists: bool
    gr_name: str


class SparkHostProbe(TypedDict, total=False):
    """The registered result of roles/spark_host/library/spark_host_probe.py (its ``RETURN``), the keys
    ``probes_from`` reads: the unit's Python, whether it imports requests, the user's groups, the socket."""

    python: str
    requests_rc: int
    requests_error: str
    groups: list[str]
    docker_socket: SocketProbe


class PythonFact(TypedDict, total=False):
    """``ansible_facts.python``: the interpreter Ansible runs on the unit."""

    executable: str


class UnitFacts(TypedDict, total=False):
    """The unit's Ansible facts ``probes_from`` reads (gathered by Ansible; absent ones read as empty)."""

    python: PythonFact
    user_id: str
    user_uid: int
    os_family: str


class UnitProbes(TypedDict, total=False):
    """What ``unit_needs`` judges (``probes_from``; a test may give some keys only)."""

    python: str
    requests_rc: int | str
    user: str
    uid: int | str
    groups: list[str]
    docker_socket: str
    docker_socket_group: str
    os_family: str


class UnitProblem(TypedDict):
    """One thing the unit lacks (``unit_needs``): ``python_requests`` or ``docker_group``, why, the fix."""

    id: str
    reason: str
    fix: str


class UnitInstall(TypedDict):
    """What provisioning changes on the unit when opted in (``unit_needs``)."""

    packages: list[str]
    docker_group: bool


class UnitNeeds(TypedDict):
    """``unit_needs``' answer: whether the unit is ready, what stays wrong, what provisioning does."""

    ok: bool
    problems: list[UnitProblem]
    install: UnitInstall


class DockerInfoResult(TypedDict, total=False):
    """The registered result of community.docker.docker_host_info that ``docker_problem`` reads: its
    message when it could not talk to Docker."""

    msg: str


def _requests_problem(p: UnitProbes, installable: bool) -> UnitProblem:
    python = str(p.get("python") or "python3")
    reason = (f"the unit's Python ({python}), which runs Ansible's Docker modules there, cannot import "
              "'requests'")
    if python in SYSTEM_PYTHONS:
        fix = f"on the unit: sudo apt-get install {REQUESTS_PACKAGE}"
        fix += f"; or let provisioning install it: {OPT_IN}" if installable else ""
    else:
        fix = (f"install requests into {python} (python -m pip install requests), or set ansible_python_interpreter "
               f"for this host to the unit's /usr/bin/python3 and install {REQUESTS_PACKAGE} there")
    return {"id": "python_requests", "reason": reason, "fix": fix}


def _docker_group_problem(p: UnitProbes) -> UnitProblem:
    user = str(p.get("user") or "the remote user")
    socket = str(p.get("docker_socket") or "/var/run/docker.sock")
    return {"id": "docker_group",
            "reason": f"{user} is not in the docker group, which owns the Docker socket {socket}",
            "fix": f"on the unit: sudo usermod -aG docker {user} (it takes effect at the next login); "
                   f"or let provisioning add it: {OPT_IN}"}


def unit_needs(probes: UnitProbes, install_missing: Any = False) -> UnitNeeds:
    """``probes``: ``python`` (path), ``requests_rc`` (0 when ``import requests`` worked),
    ``user``, ``uid``, ``groups`` (names), ``docker_socket`` and
    ``docker_socket_group`` (empty when there is no socket), ``os_family``.

    Returns ``{"ok", "problems", "install": {"packages", "docker_group"}}``: ``install`` is what
    provisioning does when ``install_missing`` is true (it is empty otherwise), ``problems`` what
    stays wrong without it."""
    opted_in = as_bool(install_missing)
    apt = str(probes.get("os_family") or "") == "Debian"
    python = str(probes.get("python") or "")
    problems: list[UnitProblem] = []
    install: UnitInstall = {"packages": [], "docker_group": False}

    if int(probes.get("requests_rc", 0) or 0) != 0:
        can_install = apt and python in SYSTEM_PYTHONS
        if opted_in and can_install:
            install["packages"].append(REQUESTS_PACKAGE)
        else:
            problems.append(_requests_problem(probes, can_install))

    groups = [str(g) for g in probes.get("groups") or []]
    root = int(probes.get("uid", 0) or 0) == 0
    if (not root and str(probes.get("docker_socket_group") or "") == "docker" and "docker" not in groups):
        if opted_in:
            install["docker_group"] = True
        else:
            problems.append(_docker_group_problem(probes))
    return {"ok": not problems, "problems": problems, "install": install}


def probes_from(probe: SparkHostProbe, facts: UnitFacts, docker_socket: str) -> UnitProbes:
    """``unit_needs``' probes from the registered result of roles/spark_host/tasks/unit_probe.yml (the
    role's ``spark_host_probe`` module) and the unit's facts."""
    socket = probe.get("docker_socket") or {}
    return {"python": str(probe.get("python") or (facts.get("python") or {}).get("executable") or ""),
            "requests_rc": probe.get("requests_rc", 0),
            "user": facts.get("user_id", ""), "uid": facts.get("user_uid", 0),
            "groups": [str(g) for g in probe.get("groups") or []], "docker_socket": docker_socket,
            "docker_socket_group": socket.get("gr_name", "") if socket.get("exists") else "",
            "os_family": facts.get("os_family", "")}


def problems_message(host: str, needs: UnitNeeds) -> str:
    """One line per problem: ``<host>: <reason>; fix: <fix>``."""
    return " | ".join(f"{host}: {p['reason']}; fix: {p['fix']}" for p in needs.get("problems") or [])


def docker_problem(probe: DockerInfoResult, user: str, host: str) -> str:
    """Why the Docker engine probe (community.docker.docker_host_info, registered) did not talk to
    Docker, with the fix: the socket's permission (docker group), a missing Python library, or no
    engine answering."""
    msg = str(probe.get("msg") or "no answer")
    low = msg.lower()
    if "permission denied" in low:
        return (f"Docker engine on {host} refused {user} ({msg}); fix: sudo usermod -aG docker {user} on the unit "
                f"and reconnect, or {OPT_IN}")
    if "failed to import" in low or "no module named" in low:
        return (f"Ansible's Docker modules cannot run on {host} ({msg}); fix: sudo apt-get install "
                f"{REQUESTS_PACKAGE} on the unit, or {OPT_IN}")
    return (f"Docker engine not reachable on {host} ({msg}); fix: install Docker (DGX OS ships it) and start it "
            "(sudo systemctl enable --now docker)")
