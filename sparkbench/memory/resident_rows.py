"""The residents already in a unit's memory, as rows of its plan.

Where they come from: the unit's listing of its containers labelled ``sparkbench.resident``
(``sparkbench.residents.residents``: every running resident or candidate) where the playbook
has read it, else the controller's deployment records in state ``deployed``
(``<bench_results_dir>/.deployments/<host>/``, read through their model by
``sparkbench.residents.deployed``). Each one's share is reckoned from the result it was
deployed from (its flags, environment and model profile): the record's ``source.path``, or
``<results>/<run>/<host>/<variant>.json`` from the container's labels. A resident whose result is
not there is listed with its share unknown and not counted (the plan says so).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from .. import residents as residents_mod
from ..package_data import model_profile_file
from ..paths import result_path
from ..result_files import json_object
from .engine import engine_row

if TYPE_CHECKING:
    from ..plan_types import HardwareProfile, ModelProfile
    from ..result_shapes import StoredResult
    from .engine import MemoryRow

#: Profile fields the arithmetic needs of a model (a result's embedded profile may be older).
MODEL_FIELDS = ("attention", "max_model_len")


class PresentResident(TypedDict):
    """A resident on the unit (``present``): its container, variant, port, the run and the result it
    was deployed from (from the unit's listing: the labels; None where one is missing)."""

    name: str | None
    variant: str | None
    port: int | str | None
    run: str | None
    path: str | None


def present(results_dir: str | Path, host: str,
            listing: Sequence[residents_mod.Resident] | None = None) -> tuple[list[PresentResident], str]:
    """``([{name, variant, port, run, path}], where they come from)``: the running containers of the
    unit's ``listing`` when given, else the controller's deployed records."""
    records = residents_mod.deployed(results_dir, host)
    if listing is None:
        where = f"the controller's deployment records ({Path(results_dir) / residents_mod.FOLDER / host})"
        return [{"name": r.container, "variant": r.variant, "port": r.port, "run": r.source.run,
                 "path": r.source.path} for r in records], where
    by_variant = {r.variant: r for r in records}
    out: list[PresentResident] = []
    for c in listing:
        if not c.get("running"):
            continue
        rec = by_variant.get(c.get("variant"))
        src_run, src_path = (rec.source.run, rec.source.path) if rec is not None else (None, None)
        run = c.get("run") or src_run
        path = src_path if src_run == run and src_path else result_path(
            results_dir, str(run), host, str(c.get("variant")))
        out.append({"name": c.get("name"), "variant": c.get("variant"), "port": c.get("port"), "run": run,
                    "path": str(path)})
    return out, "the unit's listing of its resident containers"


def _model(doc: StoredResult, profiles_dir: str | Path) -> ModelProfile | None:
    """The resident's model profile: the result's own where it is complete, else the profiles folder's
    (or the built-in one)."""
    embedded = (doc.get("profile") or {}).get("model") or {}
    if all(k in embedded for k in MODEL_FIELDS):
        return {**embedded}
    variant = doc.get("variant")
    model = (variant.get("model") if variant else None) or (doc.get("manifest") or {}).get("model")
    # a model profile file, unvalidated
    return cast("ModelProfile | None", json_object(model_profile_file(str(model), profiles_dir)) or None) if model else None


def row_from_result(kind: Literal["resident", "engine"], name: str, path: Any, hardware: HardwareProfile,
                    profiles_dir: str | Path, total_gb: float | None) -> MemoryRow:
    """An engine's plan row from the result it serves as measured (its flags, environment and model
    profile); its share unknown (not counted) when the result or the model profile is not there."""
    doc = cast("StoredResult | None", json_object(path) or None)  # a result document, unvalidated
    model = _model(doc, profiles_dir) if doc else None
    if not doc or not model:
        why = f"no result at {path}" if not doc else "no model profile"
        return {"kind": kind, "name": name, "gb": None, "share": f"unknown ({why}): not counted",
                "share_short": "unknown", "problems": []}
    variant = doc.get("variant")
    env = {**((variant.get("env") if variant else None) or {}), **((doc.get("launch") or {}).get("env") or {})}
    return engine_row(kind, name, model, hardware, (variant.get("args") if variant else None) or {}, env, total_gb)


def rows(found: Sequence[PresentResident], hardware: HardwareProfile, profiles_dir: str | Path,
         total_gb: float | None) -> list[MemoryRow]:
    """One plan row per resident (``present``), its share reckoned from its result."""
    return [{**row_from_result("resident", str(f.get("name") or f.get("variant")), f.get("path"), hardware,
                               profiles_dir, total_gb),
             "variant": f.get("variant"), "run": f.get("run"), "port": f.get("port")} for f in found]
