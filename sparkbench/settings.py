"""The measurement settings: one object, checked once, passed whole.

The inventory's ``llm_bench_*`` variables are read once per host (``from_vars``), checked
(``settings_errors``: one line per problem, naming the variable or profile field and the fix,
before any host is touched), normalised (``normalize``) and then passed whole: into the
configuration hash, the manifest, and measure's command line (``measure_argv``). Every setting is
a row of measure's option table (``sparkbench.measure.options.OPTIONS``): its name, flag, type,
default, bounds and phase are written there and nowhere else; ``DEFAULTS``, the checks, ``normalize``
and ``measure_argv`` are derived from it. Adding a setting means adding a row there (and its value
and comment in ``inventory/group_vars/all/bench.yml``).

Rules: each setting's type and bounds are its row of the option table (docs/MEASUREMENT.md,
"Options", is made from it); the rules across settings are ``options.cross_errors`` (e.g.
``llm_bench_max_runs`` >= ``llm_bench_runs`` and only with a target precision; a rate search needs
rates unless it searches by concurrency). ``bench_workloads: serving`` turns on, where they are at
their defaults, ``SERVING``: the rates, the prefix-cache phase, the multi-turn phase and the
tool-call check. The profiles are checked here too (units: GB, GB/s):

* model profiles: ``download_size_gb``, ``total_params_b``, ``active_params_b``, ``weight_bits``,
  ``max_model_len`` numbers > 0 when present; ``gated`` / ``hybrid`` booleans; ``revision`` a
  non-empty string
* hardware profile: ``memory_bandwidth_gbps`` a number > 0 (null allowed when the profile says
  ``"roofline": false``, e.g. ``x86-cpu``)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from .measure import options as _options
from .measure.options import BY_KEY, SETTINGS, BadValue, parse_value, setting_error
from .measure.shapes import SharedSettings

if TYPE_CHECKING:
    from .cluster.shapes import HostVars
    from .plan_types import HardwareProfile, ModelProfile

_PROFILE_NUMBERS = ("download_size_gb", "total_params_b", "active_params_b", "weight_bits", "max_model_len")
_PROFILE_BOOLS = ("gated", "hybrid")

#: ``llm_bench_tool_choice`` values (measure ``--tool-choice``).
TOOL_CHOICES = BY_KEY["tool_choice"].choices
#: ``llm_bench_search_by`` values (measure ``--search-by``).
SEARCH_BY = BY_KEY["search_by"].choices


class Settings(SharedSettings):
    """The measurement settings, checked and typed (``normalize``; one key per row of measure's option
    table with ``setting``): passed whole into the configuration hash, the manifest and measure's
    command line (``measure_argv``). Most keys are ``SharedSettings`` (the run's ``settings`` block
    records them as they are); here the ones it records in its own form. Rates are numbers,
    ``"inf"`` for an infinite one."""

    request_timeout_s: float
    stall_timeout_s: float
    rates: list[float | str]
    burstiness: float
    slo: dict[str, float]


class SettingsInput(TypedDict, total=False):
    """The measurement settings as the inventory writes them, before ``settings_errors`` and
    ``normalize`` (``from_vars``: ``llm_bench_<key>``, ``DEFAULTS``; a plan's overrides such as
    ``BRACKET_SETTINGS``): each value typed, or as text (``-e llm_bench_runs=8``, ``rates: "1,2"``)."""

    output_tokens: int | str
    runs: int | str
    warmup: int | str
    concurrency: list[int] | str
    context: list[int] | str
    quality: bool | str
    quality_max_tokens: int | str
    image: bool | str
    telemetry: str
    request_timeout_s: float | str
    stall_timeout_s: float | str
    target_precision_pct: float | str | None
    max_runs: int | str | None
    rates: list[float | str] | str
    rate_duration_s: float | str
    rate_requests: int | str | None
    burstiness: float | str
    rate_seed: int | str
    rate_max_concurrency: int | str | None
    slo: dict[str, float] | str
    rate_search: float | str | None
    search_by: str
    prefix_tokens: int | str
    prefix_requests: int | str
    prefix_suffix_tokens: int | str
    prefix_output_tokens: int | str
    turns: int | str
    conversations: int | str
    turn_tokens: int | str
    turn_output_tokens: int | str
    tools: bool | str
    tool_choice: str
    tools_max_tokens: int | str


#: Every measurement setting and its default, from measure's option table.
DEFAULTS: SettingsInput = {o.key: o.inventory_default for o in SETTINGS}

#: The arrival rates of ``bench_workloads: serving`` when ``llm_bench_rates`` is empty
#: [requests/s]: from a light load to beyond what one Spark serves with 256-token answers.
SERVING_RATES = [0.25, 0.5, 1.0, 2.0]
#: What ``bench_workloads: serving`` turns on, each only where the setting is at its default:
#: the arrival rates, an 8192-token shared prefix (a system prompt or a document, the
#: prefix-cache phase), four-turn conversations (the multi-turn phase) and the tool-call check.
SERVING: SettingsInput = {"rates": SERVING_RATES, "prefix_tokens": 8192, "turns": 4, "tools": True}
#: The workloads ``bench_workloads`` may name (a string or a list).
WORKLOADS = ("standard", "serving")


def _typed(key: str, value: Any) -> Any:
    """A setting's typed value (after ``settings_errors`` found nothing)."""
    return parse_value(BY_KEY[key], value)


def settings_errors(settings: SettingsInput, model_profiles: Mapping[str, ModelProfile] | None = None,
                    hardware_profile: HardwareProfile | None = None) -> list[str]:
    """Every problem in the measurement settings (keys without the ``llm_bench_`` prefix) and the
    profiles, as one-line messages naming the field and the fix."""
    settings = settings or {}
    errors = [e for key, value in settings.items() if key in BY_KEY and BY_KEY[key].setting
              for e in [setting_error(BY_KEY[key], value)] if e]
    if not errors:
        typed = {key: _typed(key, value) for key, value in {**DEFAULTS, **settings}.items() if key in BY_KEY}
        errors += [msg for _, msg in _options.cross_errors(typed, lambda k: BY_KEY[k].variable)]
    errors += _profile_errors(model_profiles, hardware_profile)
    return errors


def _profile_errors(model_profiles: Mapping[str, ModelProfile] | None, hardware_profile: HardwareProfile | None
                    ) -> list[str]:
    errors: list[str] = []
    for model, prof in (model_profiles or {}).items():
        where = f"profiles/models/{str(model).replace('/', '__')}.json"
        if not isinstance(prof, Mapping):
            errors.append(f"{where} must hold a JSON object, got {type(prof).__name__}; copy a neighbour in profiles/models/")
            continue
        for key in _PROFILE_NUMBERS:
            if key in prof and prof[key] is not None:
                x = _as_number(prof[key])
                if x is None or x <= 0 or isinstance(prof[key], str):
                    errors.append(f"{where}: field {key} is {prof[key]!r}; it must be a number > 0 (JSON number, no quotes)")
        for key in _PROFILE_BOOLS:
            if key in prof and not isinstance(prof[key], bool):
                errors.append(f"{where}: field {key} is {prof[key]!r}; it must be true or false")
        if "revision" in prof and (not isinstance(prof["revision"], str) or not prof["revision"].strip()):
            errors.append(f"{where}: field revision is {prof['revision']!r}; it must be the pinned commit (a string)")
    if hardware_profile is not None:
        bw = hardware_profile.get("memory_bandwidth_gbps") if isinstance(hardware_profile, Mapping) else None
        x = _as_number(bw)
        # A profile without a roofline (a CPU host: "roofline": false) may leave the bandwidth null.
        no_roofline = isinstance(hardware_profile, Mapping) and hardware_profile.get("roofline") is False
        if (x is None or x <= 0 or isinstance(bw, str)) and not (no_roofline and bw is None):
            errors.append(f"hardware profile field memory_bandwidth_gbps is {bw!r}; it must be a number > 0 (GB/s)")
    return errors


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def workloads(variables: HostVars) -> list[str]:
    """``bench_workloads`` as a list (``standard`` when unset); an unknown name is an input error."""
    from .errors import InputError

    raw = variables.get("bench_workloads") or "standard"
    names = [w.strip() for w in raw.split(",")] if isinstance(raw, str) else [str(w).strip() for w in raw]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise InputError(f"bench_workloads has {', '.join(unknown)}; use {' or '.join(WORKLOADS)} "
                         "(e.g. -e bench_workloads=serving for the arrival-rate sweep with SLO goodput)")
    return [w for w in names if w]


def _at_default(key: str, value: Any) -> bool:
    """Whether a setting still has its default (a value that cannot be read counts as set)."""
    try:
        return _typed(key, value) == _typed(key, DEFAULTS[key])
    except BadValue:
        return False


def from_vars(variables: HostVars) -> SettingsInput:
    """The settings from Ansible variables named ``llm_bench_<key>`` (defaults for missing ones);
    ``bench_workloads: serving`` turns on the ``SERVING`` phases whose settings are at their
    defaults (``llm_bench_rates: [1, 2]`` keeps its own rates, ``llm_bench_turns: 0`` stays the
    default and so becomes 4)."""
    out = {key: variables.get(f"llm_bench_{key}", default) for key, default in DEFAULTS.items()}
    if "serving" in workloads(variables):
        for key, value in SERVING.items():
            if _at_default(key, out[key]):
                out[key] = list(value) if isinstance(value, list) else value
    return out


def _normal(key: str, value: Any) -> Any:
    """The value as the configuration hash and the manifest record it: whole seconds and rates as
    written, "inf" for an infinite rate (JSON has none)."""
    if key == "rates":
        return ["inf" if math.isinf(r) else r for r in value]
    if key == "burstiness" or (BY_KEY[key].kind == "float" and value is not None):
        return float(value)
    return value


def normalize(settings: Settings | SettingsInput) -> Settings:
    """Typed settings (call after ``settings_errors`` returned nothing), in the table's order."""
    raw = {**DEFAULTS, **dict(settings or {})}
    return {o.key: _normal(o.key, _typed(o.key, raw[o.key])) for o in SETTINGS}


def _arg(value: Any) -> str:
    """A value on measure's command line: whole floats without ".0", lists comma-separated."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    if isinstance(value, list):
        return ",".join(r if r == "inf" else _arg(r) for r in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v:g}" for k, v in value.items())
    return str(value)


#: The option groups of measure's command line: a phase's options go on it when the phase runs.
_PHASE_ON = {
    "target_precision": lambda s: s["target_precision_pct"] is not None,
    "rates": lambda s: bool(s["rates"]) or (s["rate_search"] is not None and s["search_by"] == "concurrency"),
    "prefix_cache": lambda s: bool(s["prefix_tokens"]),
    "multi_turn": lambda s: bool(s["turns"]),
    "tools": lambda s: bool(s["tools"]),
}


def _group(o: Any) -> str | None:
    if o.key in ("target_precision_pct", "max_runs"):
        return "target_precision"
    return o.phase if o.phase in _PHASE_ON else None


def measure_argv(settings: Settings | SettingsInput, *, python: list[str] | str, script: str | None = None,
                 base_url: str, model: str, quality_file: str, sandbox_image: str, nvidia_smi: str | None = None,
                 kernel_log: str | None = None, tools_file: str | None = None,
                 refused: Mapping[str, str] | None = None) -> list[str]:
    """measure's command line for one variant (JSON on stdout: ``--out -``), from the option table:
    every setting whose phase runs and whose value is not measure's own default, the run-wide
    options always. ``python``: the interpreter and how measure is started on the host (e.g.
    ``["python3", "-I", "/tmp/x/measure.pyz"]``); ``script`` appended when given.

    ``nvidia_smi`` / ``kernel_log``: measure's ``--nvidia-smi`` / ``--kernel-log`` command lines
    (None: its defaults, the host's ``nvidia-smi`` and ``dmesg``); see ``sparkbench.plan.probe_commands``.
    ``tools_file``: the tool-call check's tools and prompts on the host (None: measure's default,
    the copy inside measure.pyz). ``refused``: phase → the reason preflight refused it for this variant
    (``tools``: measure records the check as skipped with that reason, sending nothing)."""
    s = normalize(settings)
    argv = ([python] if isinstance(python, str) else list(python)) + ([script] if script else [])
    argv += ["--base-url", base_url, "--model", model, "--quality-file", quality_file, "--sandbox-image", sandbox_image]
    for flag, value in (("--nvidia-smi", nvidia_smi), ("--kernel-log", kernel_log)):
        if value is not None:
            argv += [flag, value]
    argv += ["--out", "-"]
    for o in SETTINGS:
        group = _group(o)
        if group is not None and not _PHASE_ON[group](s):
            continue
        value = s[o.key]
        if o.key == "max_runs" and value is None:
            value = 4 * s["runs"]
        if value == [] and group is not None or (o.key == "search_by" and s["rate_search"] is None):
            continue
        if o.kind == "flag":
            argv += [o.flag] if value else []
        elif value is not None and (group is not None or o.kind in ("int", "float", "choice", "int_list")):
            argv += [o.flag, _arg(value) if value != [] else "none"]
    if s["tools"]:
        if tools_file is not None:
            argv += ["--tools-file", tools_file]
        if (refused or {}).get("tools"):
            argv += ["--tools-skip", refused["tools"]]
    return argv
