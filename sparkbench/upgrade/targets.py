"""What an upgrade measures: per resident of the unit, its current variant and its candidate.

The resident's current variant is the variant its deployment was measured as (the source result's
``variant``: build, configuration, model, revision, image, environment, flags), measured again as
``<variant>.current``. The candidate is the same variant with the new image (``upgrade_image``) or
the new model revision (``upgrade_model_revision``), measured under the resident's own name
``<variant>``, so that serve.yml deploys it as the resident it replaces. Both are measured with the
resident's canary settings (its deployment record's ``health_settings``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ..errors import InputError
from ..matrix import EXTRA_KEYS

if TYPE_CHECKING:
    from ..documents.deployment import DeploymentRecord
    from ..matrix import ExtraVariantEntry

#: the current variant's name in the upgrade's run: ``<variant>.current``
CURRENT = ".current"


class Change(TypedDict):
    """What the candidate changes: the image and the model revision, each (from, to)."""

    image: list[str | None]
    model_revision: list[str | None]


class Target(TypedDict):
    """One resident to upgrade: its name, container and address, its two variants, the settings
    both are measured with, and what changes."""

    variant: str
    container: str
    health_url: str | None
    current: ExtraVariantEntry
    candidate: ExtraVariantEntry
    settings: dict[str, object]
    source_run: str | None
    change: Change


def _source_variant(record: DeploymentRecord) -> dict:
    path = record.source.path
    try:
        doc = json.loads(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        raise InputError(f"the deployment record of {record.variant} on {record.host} names its result {path}, which "
                         "is not readable here: run the upgrade from the controller that deployed it (the same "
                         "bench_results_dir)") from None
    variant = doc.get("variant") if isinstance(doc, dict) else None
    if not isinstance(variant, dict) or not variant.get("args"):
        raise InputError(f"result {path} records no variant to measure again (written by an older sparkbench): "
                         f"deploy {record.variant} again from a new bench.yml run, then upgrade")
    return variant


def _entry(variant: dict, name: str) -> ExtraVariantEntry:
    entry = {k: v for k, v in variant.items() if k in EXTRA_KEYS and v is not None}
    entry["name"] = name
    return entry  # type: ignore[return-value]  # the recorded variant's keys, as bench_extra_variants takes them


def target(record: DeploymentRecord, image: str | None, revision: str | None,
           candidate_version: str | None) -> Target:
    """The upgrade of one resident: ``image`` and/or ``revision`` replace its own."""
    variant = _source_variant(record)
    current = _entry(variant, record.variant + CURRENT)
    candidate = _entry(variant, record.variant)
    candidate["replaces"] = True  # the matrix's (or an extra) variant of the resident's name
    old_image, old_rev = variant.get("image") or record.source.image, variant.get("revision")
    if image:
        candidate["image"] = image
        candidate.pop("vllm_version", None)  # the candidate's own, read from its image (below)
    if candidate_version:
        candidate["vllm_version"] = candidate_version
    if revision:
        candidate["revision"] = revision
    if (image or old_image) == old_image and (revision or old_rev) == old_rev:
        raise InputError(f"{record.variant} on {record.host} already runs {old_image}"
                         + (f" at revision {old_rev}" if old_rev else "")
                         + ": name a different upgrade_image or upgrade_model_revision")
    return {"variant": record.variant, "container": str(record.container or ""),
            "health_url": f"{record.base_url}/health" if record.base_url else None,
            "current": current, "candidate": candidate, "settings": dict(record.health_settings or {}),
            "source_run": record.source.run,
            "change": {"image": [old_image, image or old_image], "model_revision": [old_rev, revision or old_rev]}}


def targets(records: Sequence[DeploymentRecord], host: str, *, variant: str | None, image: str | None,
            revision: str | None, candidate_version: str | None) -> list[Target]:
    """The residents of ``host`` to upgrade (``variant``, or every one) with their candidates;
    InputError, naming the variable and the fix, before anything is touched."""
    if not image and not revision:
        raise InputError("upgrade_image is not set: name the candidate image (-e upgrade_image=vllm/vllm-openai:"
                         "v0.26.0), or a new model revision (-e upgrade_model_revision=REV)")
    if not records:
        raise InputError(f"{host} has no resident (no deployment record in state deployed under the controller's "
                         "bench_results_dir/.deployments): deploy one with playbooks/serve.yml first")
    chosen = [r for r in records if not variant or r.variant == variant]
    if not chosen:
        raise InputError(f"upgrade_variant={variant}: not a resident of {host}; its residents: "
                         f"{', '.join(r.variant for r in records)}")
    return [target(r, image, revision, candidate_version) for r in chosen]
