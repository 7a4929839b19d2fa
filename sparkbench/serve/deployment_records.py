"""The deployment record: what runs as a resident, from which result, since when, what it replaced.

One shape (``record``) for every outcome, ``state``:

* ``deployed``   the resident serves (``canary``: the verdict against the source result, its
  requests' decode rates as ``canary.samples``: the deployment's baseline for health.yml, which
  measures the resident with ``health_argv`` (the canary's ``health_settings`` against
  ``serve_port``, measure copied to ``health_remote_dir`` on the unit): ``sparkbench.serve.health_canary``);
* ``failed``     the deploy was rolled back (``failure``: ``stage`` ``start`` | ``canary`` |
  ``promote`` | ``unreachable``, ``reason``, ``remedy``, ``log_excerpt``; ``left``: what runs on the
  unit afterwards);
* ``undeployed`` the resident was removed (``serve_state=absent``);
* ``replaced``   a resident another deployment took the port of.

Where it lies: on the controller ``<bench_results_dir>/.deployments/<host>/<variant>.json`` (the
variant's current record; a failed deploy leaves it as it was) and every record also as
``<host>/history/<when>-<variant>-<state>.json``; on the unit ``<serve_unit_dir>/<variant>.json``
(``~/.sparkbench/residents``) while the resident is deployed. The folder is hidden so that run
listings (``sparkbench.history``, the reports) never take it for a run. No secret enters a record:
the command has secrets ``<redacted>`` and ``api_key`` says only whether a key is required.

The record's shape is its model's, :class:`sparkbench.documents.deployment.DeploymentRecord`:
``record`` builds one and reads it through the model (a wrong key or type, a bug, raises
``DocumentError`` naming the field); every record file is read by ``load``, and a record carried
as a fact by ``as_record``, both through ``sparkbench.documents.load_deployment`` (a record written
before ``schema_version`` was recorded is version 1; one that does not match its model raises
``DocumentError`` naming the file and the field). The models are imported where a record is built
or read, not with this module: Ansible's workers import it, and building them costs about 0.1 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from ..measure.figures import SINGLE_DECODE
from ..paths import write_atomic
from ..residents import controller_dir, load

if TYPE_CHECKING:
    from ..documents.deployment import DeploymentRecord
    from .shapes import (
        CanaryBlock,
        CanaryJudgement,
        Deployment,
        FailureNote,
        RecordDocument,
        RecordSourceBlock,
        RecordState,
    )

KIND: Final = "sparkbench.deployment"
#: the record's version (= sparkbench.documents.deployment.SCHEMA_VERSION; a test holds them equal)
SCHEMA_VERSION: Final = "1"
STATES = ("deployed", "failed", "undeployed", "replaced")
REMEDY = {
    "start": "read the log excerpt (the candidate did not answer /health): the unit changed since the "
             "measurement (image, model files, memory in use); fix it, or re-measure the variant on the unit",
    "canary": "the service is slower than the result it was deployed from: check what else runs on the unit "
              "(other residents, a capped clock: health.yml), then deploy again or re-measure the variant",
    "promote": "read the reason; the previous resident was kept or started again: deploy again",
    "unreachable": "make the unit answer (network, SSH), list its residents (serve.yml without serve_variant), "
                   "then deploy again: a candidate left there is replaced",
}


def record(dep: Deployment, state: RecordState, when: str, canary: CanaryJudgement | None = None,
           failure: FailureNote | None = None, left: str | None = None) -> DeploymentRecord:
    """The record of ``dep`` (a deployment, ``sparkbench.serve.deploy_plan.on_unit``) in ``state``, read
    through its model (``DocumentError`` names a wrong field)."""
    if state not in STATES:
        raise ValueError(f"deployment state {state!r} is not one of {', '.join(STATES)}")
    src = dep.get("source")
    resident = dep.get("resident")
    names = dep.get("names")
    container = resident.get("container") if resident else None
    prev = dep.get("previous")
    out: RecordDocument = {
        "kind": KIND, "schema_version": SCHEMA_VERSION, "state": state, "host": dep.get("host"),
        "variant": dep.get("variant"), "when": when,
        "container": names.get("resident") if names else None, "port": dep.get("port"), "listen": dep.get("listen"),
        "base_url": resident.get("base_url") if resident else None, "api_key": bool(dep.get("api_key")),
        "restart_policy": container.get("restart_policy") if container else None,
        "command": resident.get("command") if resident else None,
        # the keys of RecordSourceBlock (the figure's through its declaration)
        "source": cast("RecordSourceBlock", {k: src.get(k) if src else None for k in (
            "run", "path", "config_hash", "finished_at", "image", "image_id", "image_digest", "model",
            "model_revision", SINGLE_DECODE.field)}),
        "placement": dep.get("placement"),
        "previous": ({"name": prev.get("name"), "variant": prev.get("variant"), "port": prev.get("port"),
                      "run": prev.get("run"), "config_hash": prev.get("config_hash")} if prev else None),
        "health_argv": dep.get("health_argv"), "health_settings": dep.get("canary_settings"),
        "health_remote_dir": dep.get("remote_dir"),
    }
    if canary:
        verdict = canary.get("verdict")
        # the keys of CanaryBlock (the figure's through its declaration) and of VerdictBlock
        out["canary"] = cast("CanaryBlock", {
            "passed": bool(canary.get("passed")), "text": canary.get("text"),
            "reason": canary.get("reason"), "requests": canary.get("requests"),
            SINGLE_DECODE.field: canary.get(SINGLE_DECODE.field),
            "verdict": {k: verdict.get(k) for k in ("kind", "pct", "lo", "hi", "mdd_pct")} if verdict else None,
            "samples": list(canary.get("samples") or [])})
    if failure:
        stage = str(failure.get("stage") or "start")
        out["failure"] = {"stage": stage, "reason": str(failure.get("reason") or f"failed at {stage}"),
                          "remedy": str(failure.get("remedy") or REMEDY.get(stage, REMEDY["start"])),
                          "log_excerpt": str(failure.get("log_excerpt") or "")[-4000:].strip()}
        out["left"] = left
    return as_record(out)


def left_behind(dep: Deployment, stage: str, stopped_previous: bool, unreachable: bool) -> str:
    """What runs on the unit after a failed deploy, in words."""
    prev = dep.get("previous")
    names = dep.get("names")
    candidate = names.get("candidate") if names else None
    if unreachable:
        if prev:
            previous = (f" and the previous resident {prev['name']} stopped" if stopped_previous
                        else f"; the previous resident {prev['name']} was not stopped")
        else:
            previous = ""
        return (f"the unit stopped answering: {candidate} may be left there{previous}"
                "; the unit's deployment record is unchanged")
    if prev:
        how = "started again" if stopped_previous else "kept serving"
        return (f"the candidate was removed; the previous resident {prev['name']} ({prev.get('variant')}, run "
                f"{prev.get('run')}) {how} on port {prev.get('port')}")
    return "the candidate was removed; no resident ran before, none runs now"


def _stamp(when: str) -> str:
    return "".join(c for c in str(when) if c.isalnum())


def _text(rec: DeploymentRecord) -> bytes:
    return (json.dumps(rec.document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write(results_dir: str | Path, rec: DeploymentRecord) -> dict[str, str]:
    """The record into the controller's folder: its history entry always, the variant's current
    record unless the deploy failed; a deployment that replaced another variant's resident marks
    that one's current record ``replaced``. Returns the paths written."""
    base = controller_dir(results_dir, rec.host)
    history = base / "history" / f"{_stamp(rec.when)}-{rec.variant}-{rec.state}.json"
    paths = {"history": str(write_atomic(history, _text(rec)))}
    if rec.state != "failed":
        paths["current"] = str(write_atomic(base / f"{rec.variant}.json", _text(rec)))
    prev = rec.previous
    if rec.state == "deployed" and prev is not None and prev.variant and prev.variant != rec.variant:
        old = load(base / f"{prev.variant}.json")
        if old is not None and old.state == "deployed":
            replaced = as_record({**_document(old), "state": "replaced", "when": rec.when, "replaced_by": rec.variant})
            write_atomic(base / f"{prev.variant}.json", _text(replaced))
    return paths


def _document(rec: DeploymentRecord) -> RecordDocument:
    """The record as written (``DeploymentRecord.document``): its model's keys, validated."""
    return cast("RecordDocument", rec.document())


def as_record(data: RecordDocument) -> DeploymentRecord:
    """A record as data (built by ``record``, or carried as a fact: ``serve_plan.current``) through
    its model (``sparkbench.documents.load_deployment``), as it is written and read: through JSON
    (a fact's tuples become lists). ``DocumentError`` names a wrong field."""
    from ..documents.load import load_deployment

    return load_deployment(json.loads(json.dumps(dict(data))))


def undeployed(rec: DeploymentRecord, when: str) -> DeploymentRecord:
    """The current record of a resident that was removed."""
    return as_record({**_document(rec), "state": "undeployed", "when": when, "deployed_at": rec.when})
