"""A resident unit's health canary (``playbooks/health.yml``): its deployed service, not the canary variant.

``canary(found, records, results_dir, run_id, host)``: ``found`` the unit's resident containers
(``sparkbench.residents.residents``, from their Docker labels), ``records`` the controller's current records of
the host in state ``deployed`` (``sparkbench.residents.deployed``). The unit's canary is the resident whose
container (labelled ``sparkbench.resident``) has the name its deployed record gives (a candidate
renamed into place keeps its ``sparkbench.role`` label, so the name decides), the most recently
deployed one when several serve. ``None`` when there is none: the unit
runs the canary variant as before.

The canary measures the resident with its record's ``health_argv`` (the deployment canary's
settings: single stream, the measured settings, ≥ 5 requests, against ``serve_port``) on the unit,
from ``health_remote_dir`` where measure is copied first; the result document is a normal one
(``sparkbench.result``) at ``<run>/<host>/<variant>.json``, from ``entry``: the source result's
variant, preflight and profiles, the resident's launch (the recorded argv at its address and port),
the canary's settings and their configuration hash. ``deployment`` is what
``sparkbench.health.judge`` compares it with: the deployment canary's requests (``canary.samples``),
not the unit's history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ..errors import InputError
from ..launch import config_hash
from ..paths import result_path
from ..result import stored
from .deploy_plan import with_address

if TYPE_CHECKING:
    from ..documents.deployment import DeploymentRecord
    from ..residents import Resident
    from ..result_shapes import StoredResult
    from ..settings import Settings
    from .shapes import ResidentCanary, ResidentDeployment, ResidentEntry, ResidentLaunch


class _Chosen(NamedTuple):
    """The unit's newest deployed resident: its record, its container's state, the other residents."""

    record: DeploymentRecord
    running: bool
    status: str
    others: list[str]


def _chosen(found: Sequence[Resident], records: Sequence[DeploymentRecord]) -> _Chosen | None:
    """The record of the unit's newest deployed resident (and its container's state), and the other
    residents' names; None when no deployed record names a resident the unit runs."""
    by_name = {str(r.container): r for r in records if r.state == "deployed"}
    serving = [r for r in found if str(r.get("name")) in by_name]
    if not serving:
        return None
    chosen = max(serving, key=lambda r: by_name[str(r["name"])].when)
    others = [str(r["name"]) for r in serving if r["name"] != chosen["name"]]
    return _Chosen(by_name[str(chosen["name"])], bool(chosen.get("running")), str(chosen.get("status") or ""), others)


def entry(rec: DeploymentRecord, src_doc: StoredResult, path: str) -> ResidentEntry:
    """The resident canary's plan entry for ``sparkbench.result.record`` (see the module docstring)."""
    src_launch = src_doc.get("launch") or {}
    manifest = src_doc.get("manifest") or {}
    profile = src_doc.get("profile") or {}
    if rec.port is None or rec.health_settings is None or rec.health_argv is None:
        raise InputError(f"resident {rec.container} on {rec.host}: its deployment record has no port, "
                         "health_settings or health_argv: deploy it again (playbooks/serve.yml)")
    launch: ResidentLaunch = {
        "argv": with_address(src_launch.get("argv") or [], str(rec.listen), rec.port),
        "command": rec.command or "", "env": dict(src_launch.get("env") or {}),
        "secret_env": list(src_launch.get("secret_env") or []), "image": str(manifest.get("image") or ""),
        "base_url": rec.base_url}
    settings = cast("Settings", dict(rec.health_settings))  # the deployment canary's, checked (deploy_plan.canary_settings)
    return {"name": rec.variant, "variant": dict(src_doc.get("variant") or {}), "launch": launch,
            "config_hash": config_hash(launch, settings), "result_path": str(path), "action": "measure",
            "preflight": dict(src_doc.get("preflight") or {"verdict": "pass", "failures": []}), "settings": settings,
            "hardware_profile": profile.get("hardware"), "model_profile": profile.get("model"),
            "measure_argv": list(rec.health_argv)}


def canary(found: Sequence[Resident], records: Sequence[DeploymentRecord], results_dir: Any,
           run_id: str, host: str) -> ResidentCanary | None:
    """The unit's resident canary, or None (see the module docstring). A record that cannot be
    measured (written without the health fields, or its source result gone) raises ``InputError``
    naming the fix: health.yml judges the unit ``failed`` with it."""
    chosen = _chosen(found, records)
    if chosen is None:
        return None
    rec, others = chosen.record, chosen.others
    name, variant = str(rec.container), rec.variant
    missing = [k for k in ("health_argv", "health_settings", "health_remote_dir") if not getattr(rec, k)]
    samples = list(rec.canary.samples) if rec.canary is not None else []
    if missing or not samples:
        raise InputError(f"resident {name} on {host}: its deployment record has no "
                         f"{', '.join(missing) or 'canary.samples'} (written by an older sparkbench): deploy it "
                         f"again (playbooks/serve.yml -l {host} -e serve_variant={variant}) so health.yml can "
                         "measure it against its deployment")
    src_path = rec.source.path or ""
    src_doc = stored(src_path) if src_path else {}
    if not src_doc:
        raise InputError(f"resident {name} on {host}: the result it was deployed from ({src_path or 'none recorded'}) "
                         "is not in bench_results_dir: point bench_results_dir at the folder the deployment used")
    out_path = result_path(results_dir, run_id, host, variant)
    deployment: ResidentDeployment = {
        "name": name, "variant": variant, "deployed_at": rec.when, "run": rec.source.run,
        "port": rec.port, "samples": samples, "canary_text": rec.canary.text if rec.canary else None}
    state = "running" if chosen.running else f"not running ({chosen.status or 'stopped'})"
    summary = [f"canary: resident {name} ({variant} from run {deployment['run']}, deployed {rec.when}, "
               f"port {rec.port}, {state}), judged against its deployment's canary "
               f"({deployment['canary_text']})",
               f"measure: {' '.join(rec.health_argv or [])}"]
    if others:
        summary.append(f"other residents on the unit (not measured): {', '.join(others)}")
    return {"deployment": deployment, "argv": list(rec.health_argv or []), "remote_dir": str(rec.health_remote_dir),
            "entry": entry(rec, src_doc, str(out_path)), "summary": summary, "others": others}
