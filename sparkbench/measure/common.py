"""What every module of measure shares: versions, exit codes, the run's exceptions, the log."""
from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .shapes import JSONObject

SCRIPT_VERSION = "1.2.0"
SCHEMA_VERSION = "1"

EXIT_COMPLETE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3


class Unreachable(Exception):
    """The server cannot be reached or refuses the probe (exit 2)."""


class Abort(Exception):
    """The run cannot go on: the server died or stalled (exit 3, status incomplete)."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (exit 3, status incomplete). BaseException so no handler eats it."""


_SECRETS: list[str] = []


def register_secret(secret: str) -> None:
    """A value that must never reach the output or the log (the API key)."""
    _SECRETS.append(secret)


def redact(text: str) -> str:
    """Replace the API key (should a server echo it back) with [redacted]."""
    for secret in _SECRETS:
        text = text.replace(secret, "[redacted]")
    return text


def log(msg: str) -> None:
    """Progress line on stderr (stdout is reserved for the JSON with --out -)."""
    sys.stderr.write(redact(f"[measure] {msg}\n"))
    sys.stderr.flush()


def utc_now() -> str:
    """ISO 8601 UTC timestamp with seconds precision, e.g. 2026-11-30T03:00:00Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clean_json(obj: Any) -> Any:
    """Replace NaN/Inf (not valid JSON) with None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def json_object(text: str) -> JSONObject:
    """``text`` parsed as a JSON object; ValueError saying ``not JSON (why)`` or ``not a JSON object``,
    for the caller to put what it read in front."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def inf_str(v: float) -> float | str:
    """inf as the string "inf" (JSON has no infinity), any other number as it is."""
    return "inf" if isinstance(v, float) and math.isinf(v) else v
