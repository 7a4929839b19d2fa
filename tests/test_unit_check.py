"""sparkbench.unit_check: what a unit lacks, the fix named, and what the opt-in may change."""
from __future__ import annotations

import pytest

from sparkbench import unit_check as uc

pytestmark = pytest.mark.unit

GOOD = {"python": "/usr/bin/python3", "requests_rc": 0, "user": "spark", "uid": 1000,
        "groups": ["spark", "sudo", "docker"], "docker_socket": "/var/run/docker.sock",
        "docker_socket_group": "docker", "os_family": "Debian"}


def test_a_unit_with_everything_needs_nothing():
    assert uc.unit_needs(GOOD) == {"ok": True, "problems": [], "install": {"packages": [], "docker_group": False}}


def test_missing_requests_in_the_system_python_names_the_package_and_the_opt_in():
    needs = uc.unit_needs({**GOOD, "requests_rc": 1})
    [p] = needs["problems"]
    assert p["id"] == "python_requests" and "(/usr/bin/python3)" in p["reason"] and "cannot import 'requests'" in p["reason"]
    assert p["fix"] == ("on the unit: sudo apt-get install python3-requests; or let provisioning install it: "
                        "-e spark_host_install_missing=true")
    opted = uc.unit_needs({**GOOD, "requests_rc": 1}, install_missing="true")
    assert opted["ok"] and opted["install"]["packages"] == ["python3-requests"]


def test_a_python_apt_cannot_fix_is_not_offered_the_package():
    """A virtualenv (or pyenv) interpreter: apt's python3-requests would not reach it, so the
    opt-in installs nothing and the problem stays, with a fix that does reach it."""
    probes = {**GOOD, "requests_rc": 1, "python": "/home/spark/venv/bin/python3"}
    for opt in (False, True):
        needs = uc.unit_needs(probes, install_missing=opt)
        assert not needs["ok"] and needs["install"]["packages"] == []
        assert needs["problems"][0]["fix"].startswith("install requests into /home/spark/venv/bin/python3")
    rpm = uc.unit_needs({**GOOD, "requests_rc": 1, "os_family": "RedHat"}, install_missing=True)
    assert not rpm["ok"] and "spark_host_install_missing" not in rpm["problems"][0]["fix"]


def test_a_user_outside_the_docker_group_is_named_with_the_fix():
    needs = uc.unit_needs({**GOOD, "groups": ["spark", "sudo"]})
    [p] = needs["problems"]
    assert p["reason"] == "spark is not in the docker group, which owns the Docker socket /var/run/docker.sock"
    assert "sudo usermod -aG docker spark" in p["fix"] and "-e spark_host_install_missing=true" in p["fix"]
    assert uc.problems_message("spark01", needs).startswith("spark01: spark is not in the docker group")
    opted = uc.unit_needs({**GOOD, "groups": ["spark"]}, install_missing=True)
    assert opted["ok"] and opted["install"]["docker_group"] is True


@pytest.mark.parametrize("probes", [
    {**GOOD, "uid": 0, "user": "root", "groups": ["root"]},           # root reaches the socket anyway
    {**GOOD, "groups": ["spark"], "docker_socket_group": ""},         # no socket: the Docker check says so
    {**GOOD, "groups": ["spark"], "docker_socket_group": "root"},     # a socket not owned by the docker group
])
def test_no_docker_group_problem_where_the_group_would_not_help(probes):
    assert uc.unit_needs(probes)["ok"]


def test_probes_are_read_from_the_registered_results_and_facts():
    facts = {"python": {"executable": "/usr/bin/python3"}, "user_id": "spark", "user_uid": 1000, "os_family": "Debian"}
    probe = {"python": "/usr/bin/python3", "requests_rc": 1, "requests_error": "ModuleNotFoundError: requests",
             "groups": ["spark", "sudo"], "docker_socket": {"exists": True, "gr_name": "docker"}}
    probes = uc.probes_from(probe, facts, "/var/run/docker.sock")
    assert probes == {"python": "/usr/bin/python3", "requests_rc": 1, "user": "spark", "uid": 1000,
                      "groups": ["spark", "sudo"], "docker_socket": "/var/run/docker.sock",
                      "docker_socket_group": "docker", "os_family": "Debian"}
    gone = uc.probes_from({"requests_rc": 0, "groups": [], "docker_socket": {"exists": False, "gr_name": ""}}, facts,
                          "/var/run/docker.sock")
    assert gone["docker_socket_group"] == ""


@pytest.mark.parametrize("msg, fault, fix", [
    ("Error while fetching server API version: ('Connection aborted.', PermissionError(13, 'Permission denied'))",
     "refused spark", "sudo usermod -aG docker spark"),
    ("Failed to import the required Python library (requests) on unit's Python /usr/bin/python3.",
     "Docker modules cannot run", "python3-requests"),
    ("Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'No such file'))",
     "not reachable", "sudo systemctl enable --now docker"),
])
def test_the_docker_probe_failure_names_the_real_fault(msg, fault, fix):
    text = uc.docker_problem({"msg": msg, "can_talk_to_docker": False}, "spark", "spark01")
    assert fault in text and fix in text
    if "permission" not in msg.lower():
        assert "docker group" not in text

