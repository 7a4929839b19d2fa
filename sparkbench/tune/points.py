"""The points of a tune's space and the variant each one is.

The space's keys span a grid (``itertools.product`` in the order the keys and values are written);
point ``i`` of the grid is named ``<base>.p<i>`` (two digits at least), so the same space gives
the same names on every run and a resumed tune finds its results. A point is the base variant
with its values set: a flag's value, a key inside a flag's JSON value (``speculative-config.
num_speculative_tokens``: the base's mapping with that key changed), or an environment variable.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict

from ..errors import InputError
from ..flags import flag_problems
from ..launch import normalize_flag
from .space import ENV_PREFIX, PointValue, TuneSpace

if TYPE_CHECKING:
    from ..launch import FlagValue, FlagValues
    from ..matrix import ExtraVariantEntry, Variant


class Point(TypedDict):
    """One point of the grid: its index, its variant's name and each key's value."""

    index: int
    name: str
    values: dict[str, PointValue]


def point_name(base: str, index: int, count: int) -> str:
    """``<base>.p<index>``, the index zero-padded to the grid's width (at least two digits)."""
    return f"{base}.p{index:0{max(2, len(str(count - 1)))}d}"


def grid(space: TuneSpace) -> list[Point]:
    """Every point of the space, in grid order."""
    keys = space.keys
    combos = list(itertools.product(*(space.space[k] for k in keys)))
    return [{"index": i, "name": point_name(space.base, i, len(combos)), "values": dict(zip(keys, combo))}
            for i, combo in enumerate(combos)]


def _split(key: str) -> tuple[str, str | None]:
    """``flag.inner`` → (flag, inner); ``flag`` → (flag, None)."""
    flag, _, inner = key.partition(".")
    return normalize_flag(flag), inner or None


def _json_value(value: FlagValue | None, key: str) -> dict[str, FlagValue]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise InputError(f"space.{key}: the base's --{key.partition('.')[0]} is {value!r}, not a JSON object to set "
                     f"'{key.partition('.')[2]}' in")


def with_values(args: Mapping[str, FlagValue], env: Mapping[str, str], values: Mapping[str, PointValue]
                ) -> tuple[FlagValues, dict[str, str]]:
    """The base's ``args`` and ``env`` with a point's ``values`` set (a flag set to None is removed)."""
    new_args: FlagValues = dict(args)
    new_env = dict(env)
    for key, value in values.items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX):]
            if value is None:
                new_env.pop(name, None)
            else:
                new_env[name] = str(value).lower() if isinstance(value, bool) else str(value)
            continue
        flag, inner = _split(key)
        if inner is None:
            new_args[flag] = value
        else:
            mapping = _json_value(new_args.get(flag), key)
            mapping[inner] = value
            new_args[flag] = mapping
    return {k: v for k, v in new_args.items() if v is not None}, new_env


def point_variant(point: Point, base: Variant) -> ExtraVariantEntry:
    """The extra variant that measures ``point``: the base's build and configuration, its flags and
    environment with the point's values (``bench_extra_variants`` takes it as it is)."""
    args, env = with_values(base.get("args") or {}, base.get("env") or {}, point["values"])
    entry: ExtraVariantEntry = {"name": point["name"], "build": str(base.get("build") or ""),
                                "config": str(base.get("config") or ""), "args": args, "env": env}
    if base.get("image"):
        entry["image"] = base["image"]
    return entry


def value_problems(space: TuneSpace, base: Variant, version: str | None) -> list[str]:
    """Each value the image's vLLM would refuse, as ``space.<key>: <why>`` (flags checked against
    ``version``'s argument table; environment variables are not checked)."""
    out = []
    for key, values in space.space.items():
        if key.startswith(ENV_PREFIX):
            continue
        flag, inner = _split(key)
        for value in values:
            if inner is None:
                probe: FlagValue = value
            else:
                probe = {**_json_value((base.get("args") or {}).get(flag), key), inner: value}
            for problem in flag_problems({flag: probe}, version):
                line = f"space.{key}: {problem['reason']}; {problem['remedy']}"
                if line not in out:
                    out.append(line)
    return out
