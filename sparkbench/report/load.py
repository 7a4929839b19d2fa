"""Loading a run: exactly ``<run>/<host>/<variant>.json``, each checked; a bad file becomes a
:class:`LoadError` naming the file and the fix while the other files are still reported.

A document of the current schema version is read into its model
(:func:`sparkbench.documents.load.load_result`): one that fails it is named with each wrong field
and the reason, and left out. A document in the shape before the typed models (``schema_version``
the number 1: the seed's published figures, hand-made) is checked by its structure only
(:func:`check_document`) and rendered from what it has.

Bracket documents (``<run>/<host>/<variant>.bracket.json``: the reference variant measured again
at the end of the host's sequence, see ``sparkbench.plan``) are kept apart: ``Run.results``
never holds them (they are not variants); ``Run.brackets`` does, for the drift section
(``sparkbench.report.drift``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DocumentError
from ..package_data import hardware_profile_file, model_profile_file
from ..paths import UPGRADE_SUFFIX
from ..result import SCHEMA_VERSION, with_probe_after

STATUSES = ("complete", "incomplete", "failed")
NAME_RE = re.compile(r"^[a-z0-9._-]+$")
#: Folders under a run directory that hold report output, not hosts.
OUTPUT_DIRS = {"charts"}
#: A bracket document's file name ends so: ``<variant>.bracket.json``.
BRACKET_SUFFIX = ".bracket.json"


@dataclass
class LoadError:
    """One result file that could not be used: ``path`` (relative to the run) and a one-line message."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Run:
    """A loaded run: its directory, id, usable result documents and the files that were not usable."""

    path: Path
    results: list[dict] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    brackets: list[dict] = field(default_factory=list)  # <variant>.bracket.json documents, never in results

    @property
    def run_id(self) -> str:
        """The run id = the run directory's name."""
        return self.path.name


class RunNotFound(Exception):
    """The run directory does not exist or holds no ``<host>/<variant>.json`` file."""


def _host_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in Path(run_dir).glob("*/*.json")
                  if p.is_file() and p.parent.name not in OUTPUT_DIRS and not p.parent.name.startswith(".")
                  and not p.name.endswith(UPGRADE_SUFFIX))


def result_files(run_dir: Path) -> list[Path]:
    """The run's result files: ``<run_dir>/<host>/<variant>.json``, sorted (report outputs and
    bracket documents skipped)."""
    return [p for p in _host_files(run_dir) if not p.name.endswith(BRACKET_SUFFIX)]


def bracket_files(run_dir: Path) -> list[Path]:
    """The run's bracket documents: ``<run_dir>/<host>/<variant>.bracket.json``, sorted."""
    return [p for p in _host_files(run_dir) if p.name.endswith(BRACKET_SUFFIX)]


def check_document(doc: object, host: str, variant: str) -> str | None:
    """Why a parsed result cannot be used (one line), or None when it can."""
    if not isinstance(doc, dict):
        return f"top level is a JSON {type(doc).__name__}, not an object"
    status = doc.get("status")
    if status not in STATUSES:
        return f"field 'status' is {status!r}; expected one of {', '.join(STATUSES)}"
    if "host" in doc and doc["host"] != host:
        return f"field 'host' is {doc['host']!r} but the file is in folder {host!r}"
    v = doc.get("variant")
    name = v.get("name") if isinstance(v, dict) else v
    if name is not None and name != variant:
        return f"field 'variant.name' is {name!r} but the file is named {variant}.json"
    for key in ("single", "spec_decode", "image", "telemetry", "failure", "server_startup", "profile", "manifest",
                "cluster"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"field {key!r} must be an object or null, got {type(doc[key]).__name__}"
    for key in ("parallel", "quality", "errors", "context"):
        if doc.get(key) is not None and not isinstance(doc[key], list):
            return f"field {key!r} must be a list or null, got {type(doc[key]).__name__}"
    return None


def model_problem(doc: dict) -> str | None:
    """Why a document of the current schema version fails its model (the wrong fields and why), or
    None when it fits or is of the shape before the models."""
    if doc.get("schema_version") != SCHEMA_VERSION:
        return None
    from ..documents.load import load_result

    try:
        load_result(doc)
    except DocumentError as exc:
        return str(exc)
    return None


def load_run(run_dir: str | Path) -> Run:
    """Load every ``<host>/<variant>.json`` of ``run_dir``.

    A document without ``host`` or ``variant.name`` gets them from its folder and file name. Raises
    :class:`RunNotFound` when the directory is missing or has no result file at all."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunNotFound(f"run directory {path} does not exist; pass results/<run-id> of a stored run")
    files = result_files(path)
    if not files:
        raise RunNotFound(f"run directory {path} has no <host>/<variant>.json result file; "
                          f"is it a run directory (results/<run-id>)?")
    run = Run(path=path)
    fix = "re-run that variant with the same run id and bench_force=true, or delete the file"
    for f in files:
        doc = _load_one(run, f, f.stem, fix)
        if doc is not None:
            run.results.append(doc)
    for f in bracket_files(path):
        variant = f.name[:-len(BRACKET_SUFFIX)]
        doc = _load_one(run, f, variant, "re-run the host's sequence (bench_bracket=true) or delete the file")
        if doc is None:
            continue
        of = doc.get("bracket").get("of") if isinstance(doc.get("bracket"), dict) else None
        if of != variant:
            run.errors.append(LoadError(str(f.relative_to(path)), f"field 'bracket.of' is {of!r} but the file is "
                                        f"named {variant}.bracket.json; delete the file or re-run the host"))
            continue
        run.brackets.append(doc)
    return run


def _load_one(run: Run, f: Path, variant: str, fix: str) -> dict | None:
    """One checked document (host and variant name filled in from its place), or None with the
    problem added to ``run.errors``."""
    rel = str(f.relative_to(run.path))
    host = f.parent.name
    try:
        text = f.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        run.errors.append(LoadError(rel, f"unreadable ({exc.__class__.__name__}: {exc}); "
                                         f"check its permissions or {fix}"))
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        run.errors.append(LoadError(rel, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {fix}"))
        return None
    problem = check_document(doc, host, variant) or model_problem(doc)
    if problem:
        run.errors.append(LoadError(rel, f"{problem}; {fix}"))
        return None
    doc = with_probe_after(doc, f)  # the bandwidth probe after it, from its own file
    doc.setdefault("host", host)
    if not isinstance(doc.get("variant"), dict):
        doc["variant"] = {"name": doc.get("variant") or variant}
    doc["variant"].setdefault("name", variant)
    return doc


def apply_profiles(results: list[dict], profiles_dir: str | Path) -> int:
    """Fill a missing ``profile`` from ``profiles_dir`` (``hardware/<name>.json``, default
    ``dgx-spark``; ``models/<org>__<name>.json`` for the variant's model), else from the built-in
    profiles (``sparkbench.package_data``). Returns how many results got a profile; a result that
    already has one keeps it."""
    filled = 0
    for r in results:
        prof = r.get("profile") if isinstance(r.get("profile"), dict) else {}
        model = (r.get("variant") or {}).get("model") or (r.get("server") or {}).get("model")
        changed = False
        if not prof.get("hardware"):
            name = (prof.get("hardware_name") or "dgx-spark")
            hw_file = hardware_profile_file(name, profiles_dir)
            if hw_file.is_file():
                prof["hardware"] = json.loads(hw_file.read_text(encoding="utf-8"))
                changed = True
        if not prof.get("model") and model:
            m_file = model_profile_file(model, profiles_dir)
            if m_file.is_file():
                prof["model"] = json.loads(m_file.read_text(encoding="utf-8"))
                changed = True
        if changed:
            r["profile"] = prof
            filled += 1
    return filled
