"""``bench_interference``: whether and how bench.yml measures a variant beside the unit's residents.

    bench_interference:
      load_rps: 1.0            # the background load: a steady request rate against each resident (req/s)
      runs: 5                  # single-stream requests per co-resident condition (default llm_bench_runs, ≥ 5)
      load_output_tokens: 256  # tokens per load request (default llm_bench_output_tokens)

Unset, empty or ``false``: off. Bad input raises ``InputError`` naming the field and the fix.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from .. import verdict as verdict_mod
from ..errors import InputError

if TYPE_CHECKING:
    from ..settings import Settings


class InterferenceInput(TypedDict, total=False):
    """``bench_interference`` as the inventory writes it (the module docstring; ``-e`` gives text)."""

    load_rps: float | int | str
    runs: int | str
    load_output_tokens: int | str


class InterferenceVariables(TypedDict):
    """The host variable of the interference measurement (``VARIABLES``): a mapping, or off."""

    bench_interference: InterferenceInput | bool | str | None


class InterferenceSettings(TypedDict):
    """``bench_interference`` checked (``settings``): the background load's rate per resident
    (req/s), single-stream requests per co-resident condition, tokens per load request."""

    load_rps: float
    runs: int
    load_output_tokens: int


#: The host variable and its default (off).
VARIABLES: InterferenceVariables = {"bench_interference": None}
FIELDS = ("load_rps", "runs", "load_output_tokens")
SHAPE = "bench_interference: {load_rps: 1.0} (optional: runs: 5, load_output_tokens: 256)"


def _number(value: Any, field: str, integer: bool, least: float, fix: str) -> float:
    """``value`` as a number (a whole one when ``integer``) at least ``least``, else ``InputError``."""
    out = None
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            out = float(value)
    if out is None or not math.isfinite(out) or out < least or (integer and out != int(out)):
        kind = "a whole number" if integer else "a number"
        raise InputError(f"bench_interference.{field} is {value!r}, not {kind} ≥ {least:g}; {fix}")
    return int(out) if integer else out


def settings(value: Any, measure: Settings) -> InterferenceSettings | None:
    """The checked settings (``{load_rps, runs, load_output_tokens}``), None when off; ``measure``:
    the host's measurement settings (the defaults of ``runs`` and ``load_output_tokens``)."""
    if value in (None, "", False, {}) or (isinstance(value, str) and value.strip().lower() in ("false", "no", "off")):
        return None
    if not isinstance(value, Mapping):
        raise InputError(f"bench_interference is {value!r}; write a mapping: {SHAPE}")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise InputError(f"bench_interference has unknown field(s) {', '.join(unknown)}; the fields are "
                         f"{', '.join(FIELDS)}: {SHAPE}")
    if value.get("load_rps") is None:
        raise InputError(f"bench_interference.load_rps is not set; give the background load's request rate: {SHAPE}")
    rps = _number(value["load_rps"], "load_rps", False, 0.0, "set the requests per second each resident serves, e.g. 1")
    if rps <= 0:
        raise InputError("bench_interference.load_rps is 0; set a rate above 0, e.g. 1 (or leave the "
                         "load out by turning bench_interference off)")
    need = verdict_mod.MIN_REQUESTS
    runs = _number(value.get("runs", max(int(measure.get("runs") or need), need)), "runs", True, need,
                   f"a verdict needs {need} requests per side: set runs: {need} or more")
    tokens = _number(value.get("load_output_tokens", measure.get("output_tokens") or 256), "load_output_tokens",
                     True, 1, "set the tokens each load request generates, e.g. 256")
    return {"load_rps": rps, "runs": runs, "load_output_tokens": tokens}
