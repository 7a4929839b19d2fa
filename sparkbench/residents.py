"""What runs on a unit: its resident and candidate containers as the unit lists them (``residents``,
labelled ``sparkbench.resident``; ``on_unit``: one simulated unit's; ``listing``: in words), and the
controller's current deployment records (``deployed``, read through their model by ``load`` from
``<bench_results_dir>/.deployments/<host>/``: ``controller_dir``). The plan, the memory plan and
serve.yml read them here; ``sparkbench.serve.deployment_records`` builds and writes the records.
The record models are imported where a record is read, not with this module: Ansible's workers
import it, and building them costs about 0.1 s."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .launch import SIM_UNIT_CONTAINER, UNIT_HOME

if TYPE_CHECKING:
    from .documents.deployment import DeploymentRecord

#: The container label that marks a resident or a candidate (its value: the variant); the unit's
#: probe filters on it too (roles/spark_host/defaults/main.yml ``spark_host_resident_label``).
RESIDENT_LABEL = "sparkbench.resident"
FOLDER = ".deployments"


def controller_dir(results_dir: str | Path, host: str) -> Path:
    """``<bench_results_dir>/.deployments/<host>``."""
    return Path(results_dir) / FOLDER / str(host)


#: the residents an upgrade stopped while it measures, below ``controller_dir`` (a folder of its own:
#: the records' ``*.json`` never see it); the next serve.yml or upgrade.yml run on the unit starts
#: any it finds there (an upgrade that lost the unit before it started them again)
STOPPED_FILE = "upgrade/stopped.json"


def stopped_path(results_dir: str | Path, host: str) -> Path:
    """``<bench_results_dir>/.deployments/<host>/upgrade/stopped.json``."""
    return controller_dir(results_dir, host) / STOPPED_FILE


def left_stopped(results_dir: str | Path, host: str) -> list[dict[str, str]]:
    """The residents (``{variant, container}``) an upgrade stopped and did not start again; [] when none."""
    try:
        found = json.loads(stopped_path(results_dir, host).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [{"variant": str(r.get("variant")), "container": str(r["container"])}
            for r in found if isinstance(r, dict) and r.get("container")] if isinstance(found, list) else []


def load(path: str | Path) -> DeploymentRecord | None:
    """The record in ``path`` through its model (``sparkbench.documents.load_deployment``), None
    when there is no such file; one that does not match its model (or is not JSON) raises
    ``DocumentError`` naming the file and the field."""
    from .documents.load import load_deployment

    return load_deployment(path) if Path(path).is_file() else None


def deployed(results_dir: str | Path, host: str) -> list[DeploymentRecord]:
    """The host's current records in state ``deployed`` (by variant name)."""
    base = controller_dir(results_dir, host)
    found = [load(p) for p in sorted(base.glob("*.json"))] if base.is_dir() else []
    return [r for r in found if r is not None and r.state == "deployed"]


class DockerMount(TypedDict, total=False):
    """One of a container's ``Mounts`` as Docker lists it."""

    Source: str
    Destination: str


class DockerContainer(TypedDict, total=False):
    """A container of ``community.docker.docker_host_info``'s verbose list (the keys ``residents`` reads)."""

    Names: list[str]
    Labels: dict[str, str]
    State: str
    Status: str
    Mounts: list[DockerMount]


class Resident(TypedDict):
    """One of the unit's resident or candidate containers (``residents``): its name and state, the
    rest from its labels (None where a label is missing)."""

    name: str
    variant: str
    role: str | None
    port: str | None
    run: str | None
    config_hash: str | None
    listen: str | None
    running: bool
    unit_dir: str | None
    status: str


def residents(containers: Sequence[DockerContainer]) -> list[Resident]:
    """The unit's resident and candidate containers (``community.docker.docker_host_info``'s
    verbose container list, labelled ``sparkbench.resident``) as :class:`Resident`, by name."""
    out: list[Resident] = []
    for c in containers or []:
        labels = c.get("Labels") or {}
        if RESIDENT_LABEL not in labels:
            continue
        name = str((c.get("Names") or ["?"])[0]).lstrip("/")
        out.append({"name": name, "variant": labels[RESIDENT_LABEL], "role": labels.get("sparkbench.role"),
                    "port": labels.get("sparkbench.port"), "run": labels.get("sparkbench.run"),
                    "config_hash": labels.get("sparkbench.config_hash"),
                    "listen": labels.get("sparkbench.listen"), "running": c.get("State") == "running",
                    "unit_dir": _unit_dir(c),
                    "status": str(c.get("Status") or c.get("State") or "")})
    return sorted(out, key=lambda r: r["name"])


def _unit_dir(container: DockerContainer) -> str | None:
    """The simulated unit's account a container mounts (``sparkbench.launch.SIM_UNIT_CONTAINER``), or None."""
    for m in container.get("Mounts") or []:
        if isinstance(m, Mapping) and m.get("Destination") == SIM_UNIT_CONTAINER:
            return str(m.get("Source") or "") or None
    return None


def on_unit(found: Sequence[Resident], sim_dir: Any) -> list[Resident]:
    """The residents of one simulated unit: those that mount its account ``sim_dir`` (simulated
    units of one machine share its Docker engine); all of ``found`` without an account or while its
    path still holds ``<unit home>``."""
    text = str(sim_dir or "")
    if not text or UNIT_HOME in text:
        return [r.copy() for r in found]
    return [r.copy() for r in found if r.get("unit_dir") == text]


def listing(host: str, found: Sequence[Resident]) -> list[str]:
    """One line per resident of ``host`` (``residents``), or a line saying there is none."""
    if not found:
        return [f"{host}: no resident"]
    return [f"{host}: {r['name']} — {r['variant']} from run {r['run']} on port {r['port']} "
            f"({r['status'] or ('running' if r['running'] else 'stopped')}; config hash {str(r['config_hash'])[:12]})"
            for r in found]
