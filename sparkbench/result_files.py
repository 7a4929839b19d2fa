"""Result files as they lie, unvalidated: a stored JSON object (``json_object``), measure's document
from its stdout (``parse_measured``), where the bandwidth probe after a result lies
(``probe_after_path``). ``sparkbench.result`` writes and validates them; the plan, the memory plan
and the co-residence block read them here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .measure.shapes import JSONObject
    from .result_shapes import StoredResult

#: the folder beside a host's result files that holds each document's probe after it
PROBE_AFTER_DIR = "probe-after"


def json_object(path: Any) -> JSONObject:
    """The JSON object in the file ``path`` as it lies there (not validated); ``{}`` when missing,
    corrupt or not an object."""
    try:
        doc = json.loads(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def parse_measured(stdout: object) -> StoredResult | None:
    """measure.py's JSON document from its stdout, or None when it wrote none (not validated here:
    the document it completes is, before it is written)."""
    if isinstance(stdout, Mapping):
        return cast("StoredResult", dict(stdout))
    try:
        doc = json.loads(str(stdout or ""))
    except ValueError:
        return None
    return cast("StoredResult", doc) if isinstance(doc, dict) else None


def probe_after_path(path: str | Path) -> Path:
    """Where the bandwidth probe after the result ``path`` is written: ``<host>/probe-after/<file>``
    (a file of its own, so that the result is written once; ``*/*.json`` globs of a run never see it)."""
    p = Path(path)
    return p.parent / PROBE_AFTER_DIR / p.name
