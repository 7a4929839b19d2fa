#!/usr/bin/env python3
"""Dump the argument schema of `vllm serve` from an installed vLLM, as JSON on stdout.

Run inside the image whose vLLM it describes (nothing is started, no model is loaded):

    docker run --rm -v "$PWD/images/vllm-cpu/dump_arg_schema.py:/dump.py:ro" \
      --entrypoint python3 sparkbench/vllm-cpu:v0.32.0 /dump.py > sparkbench/data/vllm_args/0.32.0.json

It walks vLLM's own parser -- the one `vllm serve` and `python -m vllm.entrypoints.openai.api_server`
build: `make_arg_parser(FlexibleArgumentParser())` -- and writes, per option: the flags (long and
short, `--no-x` for booleans), dest, the value type (unwrapping vLLM's optional_type/parse_type
closures to the innermost parser), choices, nargs, const, default, whether it is a boolean switch
(store_true/store_false/BooleanOptionalAction), whether it is deprecated, and the numeric bounds
(gt/ge/lt/le, multiple_of, min/max length) that the config dataclass field behind it declares with
pydantic (e.g. CacheConfig.gpu_memory_utilization: gt 0, le 1). Bounds enforced only in code
(__post_init__, validators) are not visible this way.

Deterministic: options sorted by their first long flag, keys sorted, no timestamps or host values.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

BOUND_ATTRS = ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length")


def jsonable(value, depth=0):
    if depth > 6:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth + 1)
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v, depth + 1) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, type):
        return value.__name__
    return repr(value)


def innermost(fn, seen=None):
    """Follow vLLM's wrapper closures (optional_type, parse_type) to the parser they call."""
    seen = seen or set()
    if id(fn) in seen:
        return fn
    seen.add(id(fn))
    cells = getattr(fn, "__closure__", None) or ()
    if getattr(fn, "__name__", "") in ("_optional_type", "_parse_type") and cells:
        for cell in cells:
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            if callable(inner):
                return innermost(inner, seen)
    return fn


def type_info(action):
    t = action.type
    if t is None:
        return None, False
    optional = getattr(t, "__name__", "") == "_optional_type"
    inner = innermost(t)
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or repr(inner)
    if name.startswith("_compute_kwargs.<locals>.parse_dataclass"):
        name = "json:dataclass"
    else:
        name = name.replace(".<locals>.", ".")
    return name, optional


def kind_of(action, tname, boolean):
    if boolean:
        return "bool"
    if action.choices is not None:
        return "choice"
    if action.nargs == 0:
        return "flag"
    t = (tname or "str").lower()
    if t in ("int", "human_readable_int", "human_readable_int_or_auto"):
        return "int"
    if t == "float":
        return "float"
    if t.startswith("json") or t in ("loads", "union_dict_and_str") or "dict" in t:
        return "json"
    return "str"


def config_classes():
    import vllm.config as vc
    out = {}
    for attr in dir(vc):
        obj = getattr(vc, attr)
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and attr.endswith("Config"):
            out[attr] = obj
    return out


def field_bounds(cls, field_name):
    pf = getattr(cls, "__pydantic_fields__", None) or {}
    info = pf.get(field_name)
    if info is None:
        return {}
    bounds = {}
    for meta in getattr(info, "metadata", []) or []:
        for attr in BOUND_ATTRS:
            v = getattr(meta, attr, None)
            if v is not None and not callable(v):
                bounds[attr] = jsonable(v)
    return bounds


def locate_field(cls, action, compute):
    """The config field behind an option of cls's argument group."""
    names = {f.name for f in dataclasses.fields(cls)}
    if action.dest in names:
        return action.dest
    try:
        kwargs = compute(cls)
    except Exception:
        return None
    hits = [n for n, kw in kwargs.items()
            if kw.get("type") is not None and kw.get("type") is action.type
            and kw.get("type") not in (int, float, str)]
    if len(hits) == 1:
        return hits[0]
    hits = [n for n, kw in kwargs.items()
            if kw.get("help") and kw.get("help") == action.help]
    return hits[0] if len(hits) == 1 else None


def main() -> int:
    import vllm
    from vllm.engine import arg_utils
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        parser_origin = "vllm.entrypoints.launchers.cli_args.make_arg_parser"
    except ImportError:  # older layouts
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        parser_origin = "vllm.entrypoints.openai.cli_args.make_arg_parser"

    arg_utils.NEEDS_HELP = True  # help texts are only attached when --help is being shown
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    deprecated = getattr(parser, "_deprecated", set())
    classes = config_classes()
    compute = getattr(arg_utils, "_compute_kwargs", None) or arg_utils.get_kwargs

    group_of = {}
    for group in parser._action_groups:
        for a in group._group_actions:
            group_of[id(a)] = group.title

    options = []
    positionals = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        boolean = isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                 argparse.BooleanOptionalAction))
        tname, optional = type_info(a)
        group = group_of.get(id(a))
        entry = {
            "dest": a.dest,
            "flags": list(a.option_strings),
            "action": type(a).__name__,
            "type": tname,
            "kind": kind_of(a, tname, boolean),
            "accepts_none": optional,
            "boolean": boolean,
            "choices": None if a.choices is None else [jsonable(c) for c in a.choices],
            "nargs": a.nargs,
            "const": jsonable(a.const),
            "default": jsonable(a.default),
            "required": bool(a.required),
            "deprecated": (a in deprecated or bool(getattr(a, "deprecated", False))
                           or type(a).__name__.startswith("Deprecated")
                           or " is deprecated" in (a.help or "").lower()),
            "group": group,
            "help": " ".join((a.help or "").replace("%%", "%").split())[:240] or None,
        }
        cls = classes.get(group or "")
        if cls is not None:
            field = locate_field(cls, a, compute)
            if field:
                entry["config_field"] = f"{cls.__name__}.{field}"
                bounds = field_bounds(cls, field)
                if bounds:
                    entry["bounds"] = bounds
        if not a.option_strings:
            positionals.append(entry)
            continue
        long_flags = [f for f in a.option_strings if f.startswith("--") and not f.startswith("--no-")]
        entry["name"] = (long_flags or a.option_strings)[0]
        options.append(entry)

    options.sort(key=lambda e: e["name"])
    doc = {
        "vllm_version": vllm.__version__,
        "python": "%d.%d" % sys.version_info[:2],
        "source": {
            "extracted_from": f"the installed vLLM {vllm.__version__} wheel's own `vllm serve` parser: "
                              f"{parser_origin}(vllm.utils.argparse_utils.FlexibleArgumentParser()), "
                              "walked by images/vllm-cpu/dump_arg_schema.py; bounds from the pydantic "
                              "Field constraints of the vllm.config dataclass field behind each option",
            "image": os.environ.get("SPARKBENCH_SCHEMA_IMAGE", "sparkbench/vllm-cpu:v" + vllm.__version__),
            "command": "docker run --rm -v \"$PWD/images/vllm-cpu/dump_arg_schema.py:/dump.py:ro\" "
                       "--entrypoint python3 sparkbench/vllm-cpu:v" + vllm.__version__ +
                       " /dump.py > sparkbench/data/vllm_args/" + vllm.__version__ + ".json",
            "not_covered": "checks made in code after parsing (config __post_init__, validators, "
                           "platform checks) are not part of this schema",
        },
        "positionals": positionals,
        "options": options,
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
