"""The variant matrix: builds × configurations (+ extra variants) → expanded variants.

The inventory writes the source article's matrix compactly::

    bench_builds:   [{name: nvidia, model: nvidia/Qwen3.6-35B-A3B-NVFP4, args: {quantization: modelopt}}, ...]
    bench_configs:  [{name: bare}, {name: mtp2, args: {speculative-config: {...}}}, ...]

and this filter expands it into one mapping per variant, named ``<build>-<config>``::

    {name, build, config, model, revision, image, vllm_version, env, args, preflight, kind, index}

Precedence (later wins): common args/env/image → build → configuration → extra variant.
A flag set to ``null`` at a later level removes it. Pure function, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

from .errors import InputError
from .launch import normalize_args

if TYPE_CHECKING:
    from .launch import EnvValues, FlagValue, FlagValues
    from .plan_types import ModelProfile

NAME_RE = re.compile(r"^[a-z0-9._-]+$")
_BUILD_KEYS = {"name", "model", "revision", "image", "image_flavor", "vllm_version", "env", "args", "description"}
_CONFIG_KEYS = {"name", "image", "image_flavor", "vllm_version", "env", "args", "description"}
EXTRA_KEYS = {"name", "build", "config", "model", "revision", "image", "image_flavor", "vllm_version", "env",
              "args", "description", "preflight", "replaces"}


class ConfigEntry(TypedDict, total=False):
    """One configuration of ``bench_configs`` as the inventory writes it (the keys ``_CONFIG_KEYS``
    allows; ``_check_entry`` checks it), a layer of ``variant_matrix``."""

    name: str
    image: str
    image_flavor: str
    vllm_version: str
    env: EnvValues | None
    args: dict[str, FlagValue] | None
    description: str


class BuildEntry(ConfigEntry, total=False):
    """One build of ``bench_builds`` as the inventory writes it (``_BUILD_KEYS``): a configuration's
    keys and the model with its revision."""

    model: str
    revision: str


class ExtraVariantEntry(BuildEntry, total=False):
    """One variant of ``bench_extra_variants`` (``EXTRA_KEYS``; also ``noprefix_variants``' and the
    backend comparison's): a build's keys, the build and configuration it starts from, ``preflight``."""

    build: str
    config: str
    preflight: bool
    #: this entry stands in for the variant of the same name (the matrix's or an earlier extra
    #: one): an upgrade's candidate, measured under the resident's own name
    replaces: bool


class _VariantRequired(TypedDict):
    name: str
    build: str
    config: str
    model: str
    revision: str | None
    image: str
    vllm_version: str | None
    env: dict[str, str]
    args: FlagValues
    preflight: bool
    kind: Literal["matrix", "extra"]


class Variant(_VariantRequired, total=False):
    """One expanded variant (``variant_matrix``, the module docstring; ``with_tool_flags`` adds the
    tool-call flags): ``image_flavor`` / ``description`` where a layer sets one, ``index`` its place
    in the matrix."""

    image_flavor: str
    description: str
    index: int


_Entry = TypeVar("_Entry", bound=ConfigEntry)


def _err(msg: str) -> InputError:
    return InputError(f"variant matrix: {msg}")


def _type_name(value: Any) -> str:
    """YAML's word for a value's type (Ansible's lazy containers read as list / mapping)."""
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return "list"
    return {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
            "NoneType": "null"}.get(type(value).__name__, type(value).__name__)


# Flags whose value vLLM parses as a JSON object.
_JSON_FLAGS = ("speculative-config", "compilation-config", "kv-transfer-config", "hf-overrides")


def _check_json_flags(name: str, args: Mapping[str, FlagValue]) -> None:
    for flag in _JSON_FLAGS:
        value = args.get(flag)
        if value is None or isinstance(value, Mapping):
            continue
        if not isinstance(value, str):
            raise _err(f"variant '{name}': args.{flag} must be a mapping (or a JSON object string), "
                       f"got {_type_name(value)}; write e.g. {flag}: {{method: mtp, num_speculative_tokens: 2}}")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _err(f"variant '{name}': args.{flag} is not valid JSON ({exc.msg} at column {exc.colno}); "
                       f"write it as a YAML mapping, e.g. {flag}: {{method: mtp, num_speculative_tokens: 2}}") from None
        if not isinstance(parsed, Mapping):
            raise _err(f"variant '{name}': args.{flag} must be a JSON object, got {_type_name(parsed)}")


def _check_entry(kind: str, idx: int, entry: Any, allowed: set[str]) -> ConfigEntry:
    where = f"{kind}[{idx}]"
    if not isinstance(entry, Mapping):
        raise _err(f"{where} must be a mapping with at least 'name', got {_type_name(entry)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _err(f"{where}.name {name!r} is not valid; use lowercase letters, digits, '.', '_' or '-'")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise _err(f"{where} ('{name}') has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    for key in ("args", "env"):
        if entry.get(key) is not None and not isinstance(entry[key], Mapping):
            raise _err(f"{where}.{key} ('{name}') must be a mapping, got {_type_name(entry[key])}")
    return entry


def _merge_args(*layers: Mapping[str, FlagValue] | None) -> FlagValues:
    out: FlagValues = {}
    for layer in layers:
        for key, value in normalize_args(layer).items():
            out.pop(key, None)  # a later layer moves the flag to its own position
            out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def _merge_env(*layers: EnvValues | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if value is None:
                out.pop(str(key), None)
            else:
                out[str(key)] = str(value)
    return out


def _first(*values: Any) -> Any:
    for value in values:
        if value not in (None, ""):
            return value
    return None


@dataclass(frozen=True)
class _Defaults:
    """What the matrix's variants inherit below their build: the common flags, environment, image
    and vLLM version, and the model profiles (``profiles`` None: not checked)."""

    common_args: Mapping[str, FlagValue] | None
    env: EnvValues | None
    image: str | None
    vllm_version: str | None
    profiles: Mapping[str, ModelProfile] | None


def _named(kind: str, entries: Sequence[_Entry], allowed: set[str], what: str) -> dict[str, _Entry]:
    """The checked entries of ``bench_builds`` / ``bench_configs`` by name (names unique; a build has a model)."""
    by_name: dict[str, _Entry] = {}
    for i, entry in enumerate(entries):
        _check_entry(kind, i, entry, allowed)
        if kind == "builds" and not entry.get("model"):
            raise _err(f"builds[{i}] ('{entry['name']}') has no model; set e.g. model: nvidia/Qwen3.6-35B-A3B-NVFP4")
        if entry["name"] in by_name:
            raise _err(f"{kind}[{i}].name '{entry['name']}' is listed twice; {what} names must be unique")
        by_name[entry["name"]] = entry
    return by_name


def _expand(build: BuildEntry, config: ConfigEntry, extra: ExtraVariantEntry | None,
            name: str, kind: Literal["matrix", "extra"], defaults: _Defaults) -> Variant:
    """One variant: ``defaults`` → build → configuration → extra variant, the later level winning."""
    extra = extra or {}
    model = _first(extra.get("model"), build["model"])
    revision = _first(extra.get("revision"), build.get("revision"))
    if defaults.profiles is not None:
        if model not in defaults.profiles:
            raise _err(f"variant '{name}': no profile for model {model}; add profiles/models/"
                       f"{model.replace('/', '__')}.json")
        revision = _first(revision, defaults.profiles[model].get("revision"))
    variant_image = _first(extra.get("image"), config.get("image"), build.get("image"), defaults.image)
    if not variant_image:
        raise _err(f"variant '{name}' has no image; set bench_image or the build's image")
    out: Variant = {
        "name": name,
        "build": build["name"],
        "config": config["name"],
        "model": model,
        "revision": revision,
        "image": variant_image,
        "vllm_version": _first(extra.get("vllm_version"), config.get("vllm_version"), build.get("vllm_version"),
                               defaults.vllm_version),
        "env": _merge_env(defaults.env, build.get("env"), config.get("env"), extra.get("env")),
        "args": _merge_args(defaults.common_args, build.get("args"), config.get("args"), extra.get("args")),
        "preflight": bool(extra.get("preflight", True)),
        "kind": kind,
    }
    _check_json_flags(name, out["args"])
    flavor = _first(extra.get("image_flavor"), config.get("image_flavor"), build.get("image_flavor"))
    if flavor:
        out["image_flavor"] = flavor
    description = _first(extra.get("description"), config.get("description"), build.get("description"))
    if description:
        out["description"] = description
    return out


def _extras(extra_variants: Sequence[ExtraVariantEntry] | None, build_map: Mapping[str, BuildEntry],
            config_map: Mapping[str, ConfigEntry], defaults: _Defaults) -> list[Variant]:
    """The extra variants, each on a listed build and configuration (default: the first one)."""
    variants = []
    for i, extra in enumerate(extra_variants or []):
        _check_entry("extra_variants", i, extra, EXTRA_KEYS)
        if extra.get("build") not in build_map:
            raise _err(f"extra_variants[{i}] ('{extra['name']}') build {extra.get('build')!r} is not one of "
                       f"{', '.join(build_map)}; set build: to a listed build")
        config_name = extra.get("config", next(iter(config_map)))
        if config_name not in config_map:
            raise _err(f"extra_variants[{i}] ('{extra['name']}') config {config_name!r} is not one of "
                       f"{', '.join(config_map)}; set config: to a listed configuration")
        variants.append(_expand(build_map[extra["build"]], config_map[config_name], extra, extra["name"], "extra",
                                defaults))
    return variants


def _selected(variants: list[Variant], select: Sequence[str] | str | None) -> list[Variant]:
    """The variants named in ``select`` (a list, or names separated by commas or spaces; all when empty)."""
    if not select:
        return variants
    names = {v["name"] for v in variants}
    if isinstance(select, str):
        select = [s for s in re.split(r"[,\s]+", select) if s]
    unknown = [s for s in select if s not in names]
    if unknown:
        raise _err(f"selected variant(s) {', '.join(unknown)} not in the matrix; "
                   f"choose from {', '.join(sorted(names))}")
    wanted = set(select)
    return [v for v in variants if v["name"] in wanted]


def variant_matrix(builds: Sequence[BuildEntry], configs: Sequence[ConfigEntry] | None = None,
                   common_args: Mapping[str, FlagValue] | None = None,
                   extra_variants: Sequence[ExtraVariantEntry] | None = None,
                   select: Sequence[str] | str | None = None, image: str | None = None,
                   env: EnvValues | None = None, vllm_version: str | None = None,
                   profiles: Mapping[str, ModelProfile] | None = None) -> list[Variant]:
    """Expand builds × configs, append extra variants, keep ``select`` (all when empty).

    ``profiles`` (model id → model profile) fills ``revision`` from the profile when the build
    does not pin one, and every model must have a profile when it is given.
    """
    if not isinstance(builds, Sequence) or isinstance(builds, (str, bytes)) or not builds:
        raise _err("bench_builds must be a non-empty list of builds ({name, model, ...})")
    configs = list(configs or [{"name": "default"}])
    build_map = _named("builds", builds, _BUILD_KEYS, "build")
    config_map = _named("configs", configs, _CONFIG_KEYS, "configuration")
    defaults = _Defaults(common_args=common_args, env=env, image=image, vllm_version=vllm_version, profiles=profiles)
    variants = [_expand(build, config, None, f"{build['name']}-{config['name']}", "matrix", defaults)
                for build in builds for config in configs]
    extras = _extras(extra_variants, build_map, config_map, defaults)
    replaced = {e["name"] for e in extra_variants or [] if e.get("replaces") is True}
    variants = [v for v in variants if v["name"] not in replaced]
    variants += [v for v, e in zip(extras, extra_variants or []) if e.get("replaces") is True or v["name"] not in replaced]
    seen: set[str] = set()
    for variant in variants:
        if variant["name"] in seen:
            raise _err(f"variant name '{variant['name']}' occurs twice; rename the extra variant")
        seen.add(variant["name"])
    for index, variant in enumerate(variants):
        variant["index"] = index
    return _selected(variants, select)


#: The name suffix and the flag of the prefix-caching pair ``bench_workloads: serving`` adds.
NOPREFIX_SUFFIX = "-noprefix"
NOPREFIX_ARGS = {"enable-prefix-caching": False}


def noprefix_variants(builds: Sequence[BuildEntry], configs: Sequence[ConfigEntry] | None,
                      extra_variants: Sequence[ExtraVariantEntry] | None = None) -> list[ExtraVariantEntry]:
    """The prefix-caching pair of ``bench_workloads: serving``: per build, an extra variant
    ``<build>-<first config>-noprefix``, the same as ``<build>-<first config>`` but with
    ``--no-enable-prefix-caching`` (``bench_common_args`` turns caching on for every variant), so
    the report can compare TTFT and prefill with and without it. Builds already given such a
    variant in ``bench_extra_variants`` (by name) get none."""
    first = (configs or [{"name": "default"}])[0]
    cname = str(first.get("name", "default")) if isinstance(first, Mapping) else "default"
    taken = {str(e.get("name")) for e in (extra_variants or []) if isinstance(e, Mapping)}
    out: list[ExtraVariantEntry] = []
    for build in builds or []:
        if not isinstance(build, Mapping) or not build.get("name"):
            continue
        name = f"{build['name']}-{cname}{NOPREFIX_SUFFIX}"
        if name not in taken:
            out.append({"name": name, "build": build["name"], "config": cname, "args": dict(NOPREFIX_ARGS),
                        "description": f"{build['name']}-{cname} with prefix caching off (the serving pair)"})
    return out


def with_tool_flags(variant: Variant, model_profile: ModelProfile | None) -> Variant:
    """The variant with the server flags the tool-call check needs:
    ``--enable-auto-tool-choice --tool-call-parser <the model profile's tool_call_parser>``
    (vLLM's parser for the model's native call format; ``../shared/reference/serving-workloads.md``
    §6). Every tool choice needs both on vLLM 0.32, measured on its CPU build: without a parser
    ``required`` and named choices are refused too (HTTP 400 ``tool_choice="required" requires
    --tool-call-parser to be set``), and the parser is only loaded with
    ``--enable-auto-tool-choice``. A parser the variant names itself wins; a profile without one
    leaves the variant as it is (the plan's preflight then refuses the check with the fix)."""
    args = dict(variant.get("args") or {})
    parser = (model_profile or {}).get("tool_call_parser")
    if args.get("tool-call-parser") is None and parser:
        args["tool-call-parser"] = parser
    if args.get("tool-call-parser") is not None and args.get("enable-auto-tool-choice") is None:
        args["enable-auto-tool-choice"] = True
    return {**variant, "args": args}
