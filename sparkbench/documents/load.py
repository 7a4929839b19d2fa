"""Reading a document into its model: the result document (``load_result`` →
:class:`~sparkbench.documents.result.ResultDocument`), the health document (``load_health`` →
:class:`~sparkbench.documents.health.HealthDocument`) and the deployment record
(``load_deployment`` → :class:`~sparkbench.documents.deployment.DeploymentRecord`).

Each takes the document (a dict) or its file and returns the model, or raises ``DocumentError``
whose message names every wrong field by its path in the document (``single.runs[0].decode_tok_s``)
with the reason, e.g.::

    result document does not match its model: single.runs[0].decode_tok_s: Input should be a valid
    number (got 'fast'); kernels.bogus: unknown key (this block takes no other keys)

The result model accepts what ``schema/result.schema.json`` accepts (both come from the same models).
Keys a block lets through stay on the model (``model_extra``); ``model_dump(exclude_unset=True)``
gives the document back. Each model is imported when its loader first runs (the health and
deployment loaders do not build the result's models).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from pydantic import BaseModel, ValidationError

from ..errors import DocumentError

if TYPE_CHECKING:
    from .deployment import DeploymentRecord
    from .health import HealthDocument
    from .result import ResultDocument

_Model = TypeVar("_Model", bound=BaseModel)
#: a document as data (a dict) or its JSON file
Source = Union[dict[str, Any], str, os.PathLike]

#: problems named in the message (all of them are in ``DocumentError.problems``)
SHOWN = 5
#: a location step pydantic adds for a branch of a union (``literal['inf']``, ``constrained-float``, ...)
_UNION_BRANCH = re.compile(r"^(literal\[.*\]|function-\w+\[.*\]|constrained-\w+|float|int|str|bool|none)$")


def field_path(loc: tuple[Any, ...]) -> str:
    """``('single', 'runs', 0, 'decode_tok_s')`` → ``single.runs[0].decode_tok_s`` (a union's
    branch left out); ``(top level)`` for the document itself."""
    out = ""
    for step in loc:
        if isinstance(step, int):
            out += f"[{step}]"
        elif not _UNION_BRANCH.match(str(step)):
            out += f".{step}" if out else str(step)
    return out or "(top level)"


def _reason(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key (this block takes no other keys)"
    if kind == "missing":
        return "required key missing"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    value = error.get("input")
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return f"{error['msg']} (got {shown})"


def problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """(field path, reason) per wrong field; a union's branches' reasons joined with "or"."""
    by_path: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        reasons = by_path.setdefault(field_path(error["loc"]), [])
        reason = _reason(error)
        if reason not in reasons:
            reasons.append(reason)
    return [(path, " or ".join(reasons)) for path, reasons in by_path.items()]


def _read(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise DocumentError(f"{path}: not JSON ({exc})") from None


def _load(model: type[_Model], what: str, data: Source) -> _Model:
    """``data`` (a dict, or the path of its JSON file) as ``model``; else :class:`DocumentError`
    naming each wrong field's path and why (``what``: the document's name in the message)."""
    source = ""
    if isinstance(data, (str, os.PathLike)):
        source = f"{data}: "
        data = _read(Path(data), what)
    if not isinstance(data, dict):
        raise DocumentError(f"{source}a {what} is a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = problems_of(exc)
        shown = "; ".join(f"{path}: {reason}" for path, reason in problems[:SHOWN])
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        raise DocumentError(f"{source}{what} does not match its model: {shown}{more}", problems) from None


def load_result(data: Source) -> ResultDocument:
    """The document (a dict, or the path of its JSON file) as a :class:`ResultDocument`; else
    :class:`DocumentError` naming each wrong field's path and why."""
    from .result import ResultDocument

    return _load(ResultDocument, "result document", data)


def load_health(data: Source) -> HealthDocument:
    """A health document (``results/<run>/health.json``, or its dict) as a :class:`HealthDocument`
    (without ``schema_version``: version 1); else :class:`DocumentError` naming each wrong field."""
    from .health import HealthDocument

    return _load(HealthDocument, "health document", data)


def load_deployment(data: Source) -> DeploymentRecord:
    """A deployment record (its file under ``.deployments/<host>/``, or its dict) as a
    :class:`DeploymentRecord` (without ``schema_version``: version 1); else :class:`DocumentError`
    naming each wrong field."""
    from .deployment import DeploymentRecord

    return _load(DeploymentRecord, "deployment record", data)
