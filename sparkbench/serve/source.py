"""Which result a deployment comes from, and whether it can be served exactly as measured.

``find(results_dir, host, variant, run)`` reads ``<results_dir>/<run>/<host>/<variant>.json``:
the named run's (``serve_run``), else the newest bench run where that variant is complete on that
host (newest by the document's ``finished_at``, then by run id; health runs are left out). ``source(doc, path, run)`` checks the
document and returns what the deployment needs of it:

* ``status`` complete (a failed or incomplete result has no figures to hold the service to);
* one unit's container (a cluster variant runs inside a Ray cluster: not a resident);
* the configuration hash recomputed from the recorded launch (argv, image, environment, secret
  names) and the measurement settings (``sparkbench.launch.config_hash``) equals the recorded
  ``config_hash``: the resident gets exactly those flags, image and environment;
* at least ``verdict.MIN_REQUESTS`` valid single-stream requests (the canary's baseline).

Every refusal raises ``InputError`` naming the field and the fix, before the unit is touched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import verdict as verdict_mod
from ..errors import InputError
from ..launch import config_hash
from ..measure.figures import MODEL_MEMORY, SINGLE_DECODE
from ..paths import result_path

if TYPE_CHECKING:
    from ..result_shapes import LaunchRecord, ManifestBlock, StoredResult
    from .shapes import Source


def _load(path: Path) -> StoredResult | None:
    """The result document in ``path`` as it lies on disk (unvalidated), None when it is not a JSON object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cast("StoredResult", doc) if isinstance(doc, dict) else None


def runs_with(results_dir: str | Path, host: str, variant: str) -> list[tuple[str, StoredResult]]:
    """``(run id, document)`` of every bench run holding ``<host>/<variant>.json``, newest first. A
    health run (its folder holds ``health.json``) is left out: its canaries are measured with
    health.yml's reduced settings, and a resident's canary is the resident itself, so neither is a
    measurement to deploy from (``serve_run`` may still name one)."""
    base = Path(results_dir)
    found = []
    for path in base.glob(f"*/{host}/{variant}.json") if base.is_dir() else []:
        if (path.parent.parent / "health.json").is_file():
            continue
        doc = _load(path)
        if doc is not None:
            found.append((path.parent.parent.name, doc))
    return sorted(found, key=lambda rd: (str(rd[1].get("finished_at") or ""), rd[0]), reverse=True)


def find(results_dir: str | Path, host: str, variant: str, run: str | None = None) -> tuple[str, Path, StoredResult]:
    """``(run id, path, document)`` of the result to deploy; ``InputError`` when there is none."""
    if not variant:
        raise InputError("serve_variant is not set: name the measured variant to deploy, e.g. "
                         "-e serve_variant=nvidia-bare (its result must be under bench_results_dir/<run>/<host>/)")
    if run:
        path = result_path(results_dir, run, host, variant)
        doc = _load(path)
        if doc is None:
            others = [r for r, d in runs_with(results_dir, host, variant) if d.get("status") == "complete"]
            hint = (f"runs where {variant} is complete on {host}: {', '.join(others[:5])}" if others
                    else f"no run in {results_dir} has {variant} complete on {host}")
            raise InputError(f"serve_run={run}: no result {path} (bench_results_dir={results_dir}); {hint}; "
                             "set serve_run to one of them, or leave it unset for the newest")
        return run, path, doc
    for run_id, doc in runs_with(results_dir, host, variant):
        if doc.get("status") == "complete":
            return run_id, result_path(results_dir, run_id, host, variant), doc
    raise InputError(f"serve_variant={variant}: no complete result of {variant} on {host} in bench_results_dir="
                     f"{results_dir} (looked for <run>/{host}/{variant}.json); measure it first "
                     f"(ansible-playbook bench.yml -l {host} -e '{{\"bench_select\": [\"{variant}\"]}}'), "
                     "or point bench_results_dir at the folder that holds it")


def recorded_hash(doc: StoredResult) -> str:
    """The configuration hash of the document's recorded launch and measurement settings."""
    launch: LaunchRecord = doc.get("launch") or {}
    manifest: ManifestBlock = doc.get("manifest") or {}
    variant = doc.get("variant")
    spec = {"argv": launch.get("argv") or [],
            "image": manifest.get("image") or (variant.get("image") if variant else None),
            "env": launch.get("env") or {}, "secret_env": launch.get("secret_env") or []}
    return config_hash(spec, manifest.get("settings") or None)


def source(doc: StoredResult, path: str | Path, run: str) -> Source:
    """What a deployment takes from the result document (see the module docstring)."""
    where = f"result {path}"
    if doc.get("status") != "complete":
        failure = doc.get("failure")
        why = (failure.get("reason") if failure else None) or f"status {doc.get('status')!r}"
        raise InputError(f"{where} is not complete ({why}): a deployment needs the figures it is held to; "
                         "set serve_run to a run where the variant is complete, or leave it unset for the newest")
    if doc.get("cluster"):
        raise InputError(f"{where} is a cluster variant (vllm serve inside a Ray cluster): serve.yml deploys one "
                         "unit's container; deploy a single-unit variant")
    launch: LaunchRecord = doc.get("launch") or {}
    manifest: ManifestBlock = doc.get("manifest") or {}
    if not launch.get("argv") or not manifest.get("image") or not isinstance(manifest.get("settings"), Mapping):
        raise InputError(f"{where} has no launch.argv, manifest.image or manifest.settings (written by an older "
                         "sparkbench): re-measure the variant with bench.yml -e bench_force=true")
    digest = recorded_hash(doc)
    if digest != doc.get("config_hash"):
        raise InputError(f"{where}: config_hash {doc.get('config_hash')} does not match its launch and settings "
                         f"({digest}): the document was changed after it was measured; re-measure the variant "
                         "(bench.yml -e bench_force=true) rather than editing a result")
    samples = verdict_mod.samples({**doc}, "single")
    if len(samples) < verdict_mod.MIN_REQUESTS:
        raise InputError(f"{where} has {len(samples)} valid single-stream requests (single.runs); the canary's "
                         f"verdict needs {verdict_mod.MIN_REQUESTS}: re-measure with llm_bench_runs >= "
                         f"{verdict_mod.MIN_REQUESTS} (bench.yml -e llm_bench_runs={verdict_mod.MIN_REQUESTS} "
                         "-e bench_force=true)")
    variant = doc.get("variant")
    return {
        "run": str(run), "path": str(path), "host": str(doc.get("host") or ""),
        "variant": str(variant.get("name") if variant else None),
        "config_hash": digest, "finished_at": doc.get("finished_at"),
        "model": str((variant.get("model") if variant else None) or manifest.get("model") or ""),
        "model_revision": manifest.get("model_revision"), "image": str(manifest["image"]),
        "image_id": manifest.get("image_id"), "image_digest": manifest.get("image_digest"),
        "argv": [str(a) for a in launch["argv"]], "env": dict(launch.get("env") or {}),
        "secret_env": list(launch.get("secret_env") or []), "settings": {**manifest["settings"]},
        "samples": samples, SINGLE_DECODE.field: SINGLE_DECODE.read(doc),
        "simulated": bool(doc.get("simulated")), "backend": manifest.get("backend"),
        "hardware": {**((doc.get("profile") or {}).get("hardware") or {})},
        MODEL_MEMORY.field: MODEL_MEMORY.read(doc),
    }
