#!/usr/bin/python
"""Ansible module: every read-only probe spark_host needs of a unit, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: spark_host_probe
short_description: Probe what a Spark unit has before the benchmark drives it
description:
  - Read-only; never reports changed; runs under --check. One module run on the unit answers what
    would otherwise take one task each (sparkbench.unit_check reads the first three).
  - Whether the Python that runs Ansible's modules on the unit (this module's own) imports requests,
    which the Docker modules need.
  - The remote user's groups (the effective group and the supplementary ones, as C(id -nG) names them)
    and the group that owns the Docker socket.
  - Which models are already in the Hugging Face cache at their pinned revision (the snapshot folder
    C(<cache>/hub/models--<org>--<name>/snapshots/<revision>) exists), and the free bytes of the disk the
    cache is on (its nearest existing folder when it does not exist yet, as under --check).
  - With cpu, the CPU model and the cores this process may run on (C(nproc)), for a unit without a GPU.
options:
  docker_socket: {description: Path of the Docker engine's socket., type: str, default: /var/run/docker.sock}
  hf_cache: {description: The unit's Hugging Face cache folder (C(hub/) below it holds the models)., type: str, required: true}
  models:
    description: "Models to look for in the cache: [{model, revision, ...}]; every key is returned with the item."
    type: list
    elements: dict
    default: []
  cpu: {description: Also read the CPU model and core count., type: bool, default: false}
"""

RETURN = r"""
python: {description: The unit's Python that ran this module., type: str}
requests_rc: {description: 0 when that Python imports requests, else 1., type: int}
requests_error: {description: The import error when it does not., type: str}
groups: {description: "The remote user's group names (effective first, then supplementary, as id -nG).", type: list}
docker_socket: {description: "{exists, gr_name} of the Docker socket.", type: dict}
models: {description: The models given, each with cached (bool) and the snapshot path looked for., type: list}
missing_models: {description: The models given that are not in the cache., type: list}
hf_cache_free_bytes: {description: Free bytes (available to the user) of the cache's disk; null if unreadable., type: int}
hf_cache_free_path: {description: The folder whose disk was read., type: str}
cpu: {description: "'<model name>, <n> cores' (cpu only).", type: str}
"""

import grp
import os
import platform
import sys

from ansible.module_utils.basic import AnsibleModule


def _requests() -> tuple[int, str]:
    try:
        import requests  # noqa: F401
    except Exception as exc:  # ImportError and whatever a broken install raises
        return 1, f"{type(exc).__name__}: {exc}"
    return 0, ""


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _groups() -> list[str]:
    gids = [os.getegid()] + [g for g in os.getgroups() if g != os.getegid()]
    return [_group_name(g) for g in gids]


def _socket(path: str) -> dict:
    try:
        st = os.stat(path)
    except OSError:
        return {"exists": False, "gr_name": ""}
    return {"exists": True, "gr_name": _group_name(st.st_gid)}


def snapshot_path(hf_cache: str, model: str, revision: str) -> str:
    """Where ``hf download`` puts a model at a revision (huggingface_hub's cache layout)."""
    return os.path.join(hf_cache, "hub", "models--" + model.replace("/", "--"), "snapshots", revision)


def _free(path: str) -> tuple[int | None, str]:
    """Free bytes of the disk ``path`` is on (``df -P``'s Available), read at its nearest existing folder."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError:
        return None, probe
    return st.f_bavail * st.f_frsize, probe


def _cpu() -> str:
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return f"{name or platform.machine()}, {cores} cores"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "docker_socket": {"type": "str", "default": "/var/run/docker.sock"},
            "hf_cache": {"type": "str", "required": True},
            "models": {"type": "list", "elements": "dict", "default": []},
            "cpu": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    rc, err = _requests()
    models = []
    for item in p["models"]:
        path = snapshot_path(p["hf_cache"], str(item.get("model", "")), str(item.get("revision", "")))
        models.append({**item, "snapshot": path, "cached": os.path.exists(path)})
    free, free_path = _free(p["hf_cache"])
    out = {"changed": False, "python": sys.executable, "requests_rc": rc, "requests_error": err,
           "groups": _groups(), "docker_socket": _socket(p["docker_socket"]), "models": models,
           "missing_models": [m for m in models if not m["cached"]],
           "hf_cache_free_bytes": free, "hf_cache_free_path": free_path}
    if p["cpu"]:
        out["cpu"] = _cpu()
    module.exit_json(**out)


if __name__ == "__main__":
    main()
