"""The measurement settings: one object, checked once, passed whole.

The inventory's ``llm_bench_*`` variables are read once per host (``from_vars``), checked
(``settings_errors``: one line per problem, naming the variable or profile field and the fix,
before any host is touched), normalised (``normalize``) and then passed whole: into the
configuration hash, the manifest, and measure.py's command line (``measure_argv``). Adding a
setting means adding it to ``DEFAULTS`` (and to measure.py's options) and nowhere else.

Rules (units: tokens, requests, seconds, GB, GB/s):

* ``llm_bench_output_tokens``, ``llm_bench_runs``, ``llm_bench_quality_max_tokens``: integer ≥ 1
* ``llm_bench_warmup``: integer ≥ 0
* ``llm_bench_concurrency``: list of integers ≥ 1 (``[]`` = no parallel phase)
* ``llm_bench_context``: list of integers ≥ 0
* ``llm_bench_request_timeout_s``, ``llm_bench_stall_timeout_s``: number > 0
* ``llm_bench_target_precision_pct``: null (off) or a number > 0 [% of the median]: more
  single-stream runs until the 95 % bootstrap interval of the median decode rate has at most this
  half-width (measure.py ``--target-precision``)
* ``llm_bench_max_runs``: null (4 × runs) or a whole number >= ``llm_bench_runs``; only with a
  target precision (measure.py ``--max-runs``)
* ``llm_bench_rates``: list of request rates > 0 [requests/s] or ``inf`` (``[]`` = no arrival-rate
  phase); ``bench_workloads: serving`` turns on ``SERVING_RATES`` when it is empty
* ``llm_bench_rate_duration_s`` number > 0 [s]; ``llm_bench_rate_requests`` null (rate × duration)
  or a whole number >= 1; ``llm_bench_burstiness`` number > 0 (1 = Poisson); ``llm_bench_rate_seed``
  whole number >= 0; ``llm_bench_rate_search`` null (off) or a share in (0, 1]
* ``llm_bench_slo``: a mapping with any of ``ttft``, ``tpot``, ``e2e`` [s], each a number >= 0
  (goodput counts the requests meeting every one)
* ``llm_bench_search_by``: ``rate`` or ``concurrency`` (what ``llm_bench_rate_search`` varies; a
  rate search needs ``llm_bench_rates``, a concurrency search runs closed-loop without them);
  ``llm_bench_rate_max_concurrency``: null or a whole number >= 1 (requests in flight at most;
  the concurrency search's first level)
* ``llm_bench_prefix_tokens``: whole number >= 0 [tokens] of the shared prefix (0 = no prefix-cache
  phase); ``llm_bench_prefix_requests`` >= 2, ``llm_bench_prefix_suffix_tokens`` >= 1,
  ``llm_bench_prefix_output_tokens`` >= 1
* ``llm_bench_turns``: whole number >= 0 of turns per conversation (0 = no multi-turn phase);
  ``llm_bench_conversations``, ``llm_bench_turn_tokens``, ``llm_bench_turn_output_tokens`` >= 1
* ``llm_bench_tools``: boolean, the tool-call check (the plan adds ``--enable-auto-tool-choice
  --tool-call-parser`` from the model profile: vLLM 0.32 needs both for every tool choice);
  ``llm_bench_tool_choice``: ``auto`` (the model decides), ``required`` or ``named`` (a call is
  forced, its arguments constrained by structured outputs); ``llm_bench_tools_max_tokens`` >= 1
* ``bench_workloads: serving`` turns on, where they are at their defaults, ``SERVING``: the rates,
  the prefix-cache phase, the multi-turn phase and the tool-call check
* model profiles: ``download_size_gb``, ``total_params_b``, ``active_params_b``, ``weight_bits``,
  ``max_model_len`` numbers > 0 when present; ``gated`` / ``hybrid`` booleans; ``revision`` a
  non-empty string
* hardware profile: ``memory_bandwidth_gbps`` a number > 0 (null allowed when the profile says
  ``"roofline": false``, e.g. ``x86-cpu``)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

_POSITIVE_INTS = ("output_tokens", "runs", "quality_max_tokens", "prefix_suffix_tokens", "prefix_output_tokens",
                  "conversations", "turn_tokens", "turn_output_tokens", "tools_max_tokens")
_NON_NEGATIVE_INTS = ("warmup", "prefix_tokens", "turns")
_EXAMPLES = {"output_tokens": 256, "runs": 5, "quality_max_tokens": 4096, "prefix_suffix_tokens": 64,
             "prefix_output_tokens": 16, "conversations": 2, "turn_tokens": 256, "turn_output_tokens": 64,
             "tools_max_tokens": 512, "warmup": 1, "prefix_tokens": 4096, "turns": 4}
_POSITIVE_NUMBERS = ("request_timeout_s", "stall_timeout_s")
_PROFILE_NUMBERS = ("download_size_gb", "total_params_b", "active_params_b", "weight_bits", "max_model_len")
_PROFILE_BOOLS = ("gated", "hybrid")


def _as_int(value: Any) -> int | None:
    """An integer from an int or a digit string (``-e`` gives strings); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _int_list(value: Any) -> list[Any] | None:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, Sequence):
        return list(value)
    return None


_OK = object()


def _optional(value: Any) -> Any:
    """None for an unset optional setting (None, "", or "null"/"none" as ``-e`` spells it)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none", "~")):
        return None
    return value


def _bad_item(value: Any, minimum: int) -> Any:
    """The first item of a list setting that is not a whole number >= minimum (the value itself
    when it is not a list); ``_OK`` when every item is fine."""
    items = _int_list(value)
    if items is None:
        return value
    for item in items:
        n = _as_int(item)
        if n is None or n < minimum:
            return item
    return _OK


def settings_errors(settings: Mapping[str, Any], model_profiles: Mapping[str, Any] | None = None,
                       hardware_profile: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem in the measurement settings (keys without the ``llm_bench_`` prefix) and the
    profiles, as one-line messages naming the field and the fix."""
    errors: list[str] = []
    settings = settings or {}
    for key in _POSITIVE_INTS:
        if key in settings:
            n = _as_int(settings[key])
            if n is None or n < 1:
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a whole number >= 1 "
                              f"(e.g. {_EXAMPLES[key]})")
    for key in _NON_NEGATIVE_INTS:
        if key in settings:
            n = _as_int(settings[key])
            if n is None or n < 0:
                off = "" if key == "warmup" else "; 0 = off"
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a whole number >= 0 "
                              f"(e.g. {_EXAMPLES[key]}{off})")
    for key in _POSITIVE_NUMBERS:
        if key in settings:
            x = _as_number(settings[key])
            if x is None or x <= 0:
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a number of seconds > 0")
    target = _optional(settings.get("target_precision_pct"))
    if target is not None and ((x := _as_number(target)) is None or x <= 0 or not math.isfinite(x)):
        errors.append(f"llm_bench_target_precision_pct is {target!r}; it must be null (off) or a percentage "
                      f"> 0 of the median (e.g. 1.5)")
    max_runs = _optional(settings.get("max_runs"))
    if max_runs is not None:
        n, runs = _as_int(max_runs), _as_int(settings.get("runs", DEFAULTS["runs"]))
        if n is None or n < 1:
            errors.append(f"llm_bench_max_runs is {max_runs!r}; it must be null (4 × llm_bench_runs) or a whole "
                          f"number >= llm_bench_runs (e.g. 20)")
        elif runs is not None and n < runs:
            errors.append(f"llm_bench_max_runs is {n}, fewer than llm_bench_runs {runs}; set it >= {runs} "
                          f"or null (4 × llm_bench_runs)")
        elif target is None:
            errors.append(f"llm_bench_max_runs is {n} but llm_bench_target_precision_pct is null: the limit "
                          f"only applies to a target precision; set llm_bench_target_precision_pct or "
                          f"leave llm_bench_max_runs null")
    for key, minimum, what in (("concurrency", 1, "a list of parallel levels >= 1 (e.g. [2, 4, 8]) or [] for none"),
                               ("context", 0, "a list of prompt depths >= 0 tokens (e.g. [0] or [4096, 16384])")):
        if key in settings:
            bad = _bad_item(settings[key], minimum)
            if bad is not _OK:
                errors.append(f"llm_bench_{key} has {bad!r}; it must be {what}")
    errors += _rate_errors(settings)
    errors += _workload_errors(settings)
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


def _rate_errors(settings: Mapping[str, Any]) -> list[str]:
    """The arrival-rate settings' problems (see the module docstring)."""
    errors: list[str] = []
    rates = _int_list(settings.get("rates", [])) if "rates" in settings else []
    if rates is None:
        errors.append(f"llm_bench_rates is {settings['rates']!r}; it must be a list of request rates > 0 per second "
                      "(e.g. [0.5, 1, 2]) or [] for none")
    else:
        for r in rates:
            x = None if str(r).strip().lower() == "inf" else _as_number(r)
            if str(r).strip().lower() != "inf" and (x is None or x <= 0 or not math.isfinite(x)):
                errors.append(f"llm_bench_rates has {r!r}; each rate must be a number of requests per second > 0 "
                              "or inf (e.g. [0.5, 1, 2])")
                break
    for key, what in (("rate_duration_s", "a number of seconds > 0 (e.g. 30)"), ("burstiness", "a number > 0 (1 = Poisson)")):
        if key in settings and ((x := _as_number(settings[key])) is None or x <= 0):
            errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be {what}")
    req = _optional(settings.get("rate_requests"))
    if req is not None and ((n := _as_int(req)) is None or n < 1):
        errors.append(f"llm_bench_rate_requests is {req!r}; it must be null (rate × llm_bench_rate_duration_s) "
                      "or a whole number >= 1")
    if "rate_seed" in settings and ((n := _as_int(settings["rate_seed"])) is None or n < 0):
        errors.append(f"llm_bench_rate_seed is {settings['rate_seed']!r}; it must be a whole number >= 0")
    search = _optional(settings.get("rate_search"))
    if search is not None and ((x := _as_number(search)) is None or not 0 < x <= 1):
        errors.append(f"llm_bench_rate_search is {search!r}; it must be null (off) or a share of requests meeting "
                      "the SLO in (0, 1] (e.g. 0.9)")
    slo = settings.get("slo", DEFAULTS["slo"])
    if not isinstance(slo, Mapping) or not slo:
        errors.append(f"llm_bench_slo is {slo!r}; it must be a mapping of ttft / tpot / e2e to seconds "
                      "(e.g. {ttft: 2, tpot: 0.05, e2e: 30})")
    else:
        for key, value in slo.items():
            x = _as_number(value)
            if key not in ("ttft", "tpot", "e2e") or x is None or x < 0:
                errors.append(f"llm_bench_slo has {key}: {value!r}; use ttft, tpot or e2e with a number of seconds >= 0")
    return errors


def _workload_errors(settings: Mapping[str, Any]) -> list[str]:
    """The prefix-cache, multi-turn, tool-call and search settings' problems (module docstring)."""
    errors: list[str] = []
    if "prefix_requests" in settings and ((n := _as_int(settings["prefix_requests"])) is None or n < 2):
        errors.append(f"llm_bench_prefix_requests is {settings['prefix_requests']!r}; it must be a whole number >= 2 "
                      "(the first request fills the cache, the others are measured; e.g. 8)")
    if "tools" in settings and not isinstance(settings["tools"], bool) and \
            str(settings["tools"]).strip().lower() not in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        errors.append(f"llm_bench_tools is {settings['tools']!r}; it must be true or false")
    if "tool_choice" in settings and str(settings["tool_choice"]) not in TOOL_CHOICES:
        errors.append(f"llm_bench_tool_choice is {settings['tool_choice']!r}; use {', '.join(TOOL_CHOICES)} (auto: the "
                      "model decides; required and named force a call)")
    if "search_by" in settings and str(settings["search_by"]) not in SEARCH_BY:
        errors.append(f"llm_bench_search_by is {settings['search_by']!r}; use rate or concurrency (what "
                      "llm_bench_rate_search varies)")
    elif str(settings.get("search_by", "rate")) == "rate" and _optional(settings.get("rate_search")) is not None \
            and not (_int_list(settings.get("rates", [])) or []):
        errors.append("llm_bench_rate_search is set but llm_bench_rates is empty: the rate search starts from the "
                      "listed rates; list some (e.g. [0.5, 1, 2]), or set llm_bench_search_by: concurrency")
    conc = _optional(settings.get("rate_max_concurrency"))
    if conc is not None and ((n := _as_int(conc)) is None or n < 1):
        errors.append(f"llm_bench_rate_max_concurrency is {conc!r}; it must be null (no limit) or a whole number >= 1 "
                      "(at most that many arrival-rate requests in flight; the concurrency search's first level)")
    return errors


#: ``llm_bench_tool_choice`` values (measure.py ``--tool-choice``).
TOOL_CHOICES = ("auto", "required", "named")
#: ``llm_bench_search_by`` values (measure.py ``--search-by``).
SEARCH_BY = ("rate", "concurrency")

#: Every measurement setting, its default (roles/llm_bench/defaults/main.yml documents each) and
#: the measure.py option it becomes (None: handled by measure_argv itself).
DEFAULTS: dict[str, Any] = {
    "output_tokens": 256,
    "runs": 5,
    "warmup": 1,
    "concurrency": [2, 4, 8],
    "context": [0],
    "quality": True,
    "quality_max_tokens": 4096,
    "image": True,
    "telemetry": "auto",
    "request_timeout_s": 600,
    "stall_timeout_s": 60,
    "target_precision_pct": None,
    "max_runs": None,
    "rates": [],
    "rate_duration_s": 30,
    "rate_requests": None,
    "burstiness": 1.0,
    "rate_seed": 0,
    "slo": {"ttft": 2.0, "tpot": 0.05, "e2e": 30.0},
    "rate_search": None,
    "search_by": "rate",
    "rate_max_concurrency": None,
    "prefix_tokens": 0,
    "prefix_requests": 8,
    "prefix_suffix_tokens": 64,
    "prefix_output_tokens": 16,
    "turns": 0,
    "conversations": 2,
    "turn_tokens": 256,
    "turn_output_tokens": 64,
    "tools": False,
    "tool_choice": "auto",
    "tools_max_tokens": 512,
}

#: The arrival rates of ``bench_workloads: serving`` when ``llm_bench_rates`` is empty
#: [requests/s]: from a light load to beyond what one Spark serves with 256-token answers.
SERVING_RATES = [0.25, 0.5, 1.0, 2.0]
#: What ``bench_workloads: serving`` turns on, each only where the setting is at its default:
#: the arrival rates, an 8192-token shared prefix (a system prompt or a document, the
#: prefix-cache phase), four-turn conversations (the multi-turn phase) and the tool-call check.
SERVING: dict[str, Any] = {"rates": SERVING_RATES, "prefix_tokens": 8192, "turns": 4, "tools": True}
#: The workloads ``bench_workloads`` may name (a string or a list).
WORKLOADS = ("standard", "serving")
_OPTIONS = {"output_tokens": "--output-tokens", "runs": "--runs", "warmup": "--warmup",
            "quality_max_tokens": "--quality-max-tokens", "telemetry": "--telemetry",
            "request_timeout_s": "--request-timeout", "stall_timeout_s": "--stall-timeout"}


def workloads(variables: Mapping[str, Any]) -> list[str]:
    """``bench_workloads`` as a list (``standard`` when unset); an unknown name is an input error."""
    from .errors import InputError

    raw = variables.get("bench_workloads") or "standard"
    names = [w.strip() for w in raw.split(",")] if isinstance(raw, str) else [str(w).strip() for w in raw]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        raise InputError(f"bench_workloads has {', '.join(unknown)}; use {' or '.join(WORKLOADS)} "
                         "(e.g. -e bench_workloads=serving for the arrival-rate sweep with SLO goodput)")
    return [w for w in names if w]


def from_vars(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The settings from Ansible variables named ``llm_bench_<key>`` (defaults for missing ones);
    ``bench_workloads: serving`` turns on the ``SERVING`` phases whose settings are at their
    defaults (``llm_bench_rates: [1, 2]`` keeps its own rates, ``llm_bench_turns: 0`` stays the
    default and so becomes 4)."""
    out = {key: variables.get(f"llm_bench_{key}", default) for key, default in DEFAULTS.items()}
    if "serving" in workloads(variables):
        for key, value in SERVING.items():
            current = out[key]
            unset = (not (_int_list(current) or []) if key == "rates" else
                     (not _bool(current)) if key == "tools" else _as_int(current) == DEFAULTS[key])
            if unset:
                out[key] = list(value) if isinstance(value, list) else value
    return out


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def normalize(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Typed settings (call after ``settings_errors`` returned nothing)."""
    raw = {**DEFAULTS, **dict(settings or {})}
    out: dict[str, Any] = {}
    for key in ("output_tokens", "runs", "warmup", "quality_max_tokens"):
        out[key] = int(raw[key])
    for key in ("concurrency", "context"):
        out[key] = [int(x) for x in (_int_list(raw[key]) or [])]
    for key in ("quality", "image"):
        out[key] = _bool(raw[key])
    out["telemetry"] = str(raw["telemetry"])
    for key in ("request_timeout_s", "stall_timeout_s"):
        out[key] = float(raw[key])
    target, max_runs = _optional(raw["target_precision_pct"]), _optional(raw["max_runs"])
    out["target_precision_pct"] = None if target is None else float(target)
    out["max_runs"] = None if max_runs is None else int(max_runs)
    out["rates"] = ["inf" if str(r).strip().lower() == "inf" else float(r) for r in (_int_list(raw["rates"]) or [])]
    out["rate_duration_s"] = float(raw["rate_duration_s"])
    req, search = _optional(raw["rate_requests"]), _optional(raw["rate_search"])
    out["rate_requests"] = None if req is None else int(req)
    out["burstiness"] = float(raw["burstiness"])
    out["rate_seed"] = int(raw["rate_seed"])
    out["slo"] = {str(k): float(v) for k, v in dict(raw["slo"] or {}).items()}
    out["rate_search"] = None if search is None else float(search)
    out["search_by"] = str(raw["search_by"])
    conc = _optional(raw["rate_max_concurrency"])
    out["rate_max_concurrency"] = None if conc is None else int(conc)
    for key in ("prefix_tokens", "prefix_requests", "prefix_suffix_tokens", "prefix_output_tokens", "turns",
                "conversations", "turn_tokens", "turn_output_tokens", "tools_max_tokens"):
        out[key] = int(raw[key])
    out["tools"] = _bool(raw["tools"])
    out["tool_choice"] = str(raw["tool_choice"])
    return out


def measure_argv(settings: Mapping[str, Any], *, python: str, script: str, base_url: str, model: str,
                 quality_file: str, sandbox_image: str, nvidia_smi: str | None = None,
                 kernel_log: str | None = None, tools_file: str | None = None,
                 refused: Mapping[str, str] | None = None) -> list[str]:
    """measure.py's command line for one variant (JSON on stdout: ``--out -``).

    ``nvidia_smi`` / ``kernel_log``: measure.py's ``--nvidia-smi`` / ``--kernel-log`` command lines
    (None: its defaults, the host's ``nvidia-smi`` and ``dmesg``); see ``sparkbench.plan.probe_commands``.
    ``tools_file``: the tool-call check's tools and prompts on the host (None: measure.py's default,
    tools.json beside it). ``refused``: phase → the reason preflight refused it for this variant
    (``tools``: measure.py records the check as skipped with that reason, sending nothing)."""
    s = normalize(settings)
    argv = [python, script, "--base-url", base_url, "--model", model]
    for key, option in _OPTIONS.items():
        value = s[key]
        argv += [option, str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)]
    argv += ["--concurrency", ",".join(str(n) for n in s["concurrency"]) or "none",
             "--context", ",".join(str(n) for n in s["context"]) or "0",
             "--quality-file", quality_file, "--sandbox-image", sandbox_image]
    if nvidia_smi is not None:
        argv += ["--nvidia-smi", nvidia_smi]
    if kernel_log is not None:
        argv += ["--kernel-log", kernel_log]
    argv += ["--out", "-"]
    if s["quality"]:
        argv.append("--quality")
    if s["image"]:
        argv.append("--image")
    if s["target_precision_pct"] is not None:
        argv += ["--target-precision", f"{s['target_precision_pct']:g}",
                 "--max-runs", str(s["max_runs"] or 4 * s["runs"])]
    by_concurrency = s["rate_search"] is not None and s["search_by"] == "concurrency"
    if s["rates"] or by_concurrency:  # the arrival-rate phase (bench_workloads: serving), or a closed-loop search
        if s["rates"]:
            argv += ["--rate", ",".join(r if r == "inf" else f"{r:g}" for r in s["rates"])]
        argv += ["--rate-duration", f"{s['rate_duration_s']:g}", "--burstiness", f"{s['burstiness']:g}",
                 "--rate-seed", str(s["rate_seed"]),
                 "--slo", ",".join(f"{k}={v:g}" for k, v in s["slo"].items())]
        if s["rate_requests"] is not None:
            argv += ["--rate-requests", str(s["rate_requests"])]
        if s["rate_max_concurrency"] is not None:
            argv += ["--rate-max-concurrency", str(s["rate_max_concurrency"])]
        if s["rate_search"] is not None:
            argv += ["--rate-search", f"{s['rate_search']:g}", "--search-by", s["search_by"]]
    if s["prefix_tokens"]:  # the prefix-cache phase
        argv += ["--prefix-tokens", str(s["prefix_tokens"]), "--prefix-requests", str(s["prefix_requests"]),
                 "--prefix-suffix-tokens", str(s["prefix_suffix_tokens"]),
                 "--prefix-output-tokens", str(s["prefix_output_tokens"])]
    if s["turns"]:  # the multi-turn phase
        argv += ["--turns", str(s["turns"]), "--conversations", str(s["conversations"]),
                 "--turn-tokens", str(s["turn_tokens"]), "--turn-output-tokens", str(s["turn_output_tokens"])]
    if s["tools"]:  # the tool-call check
        argv += ["--tools", "--tool-choice", s["tool_choice"], "--tools-max-tokens", str(s["tools_max_tokens"])]
        if tools_file is not None:
            argv += ["--tools-file", tools_file]
        if (refused or {}).get("tools"):
            argv += ["--tools-skip", refused["tools"]]
    return argv
