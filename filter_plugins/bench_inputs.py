"""The ``bench_input_errors`` filter: bad measurement settings and profile fields, found on the
controller before any host is touched (playbooks/tasks/plan.yml asserts the list is empty).

``settings | bench_input_errors(model_profiles, hardware_profile)`` → a list of one-line
messages, each naming the variable or profile field and the fix; ``[]`` when everything is
usable. Pure function, no I/O.

Rules (units: tokens, requests, seconds, GB, GB/s):

* ``llm_bench_output_tokens``, ``llm_bench_runs``, ``llm_bench_quality_max_tokens``: integer ≥ 1
* ``llm_bench_warmup``: integer ≥ 0
* ``llm_bench_concurrency``: list of integers ≥ 1 (``[]`` = no parallel phase)
* ``llm_bench_context``: list of integers ≥ 0
* ``llm_bench_request_timeout_s``, ``llm_bench_stall_timeout_s``: number > 0
* model profiles: ``download_size_gb``, ``total_params_b``, ``active_params_b``, ``weight_bits``,
  ``max_model_len`` numbers > 0 when present; ``gated`` / ``hybrid`` booleans; ``revision`` a
  non-empty string
* hardware profile: ``memory_bandwidth_gbps`` a number > 0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_POSITIVE_INTS = ("output_tokens", "runs", "quality_max_tokens")
_NON_NEGATIVE_INTS = ("warmup",)
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


def bench_input_errors(settings: Mapping[str, Any], model_profiles: Mapping[str, Any] | None = None,
                       hardware_profile: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem in the measurement settings (keys without the ``llm_bench_`` prefix) and the
    profiles, as one-line messages naming the field and the fix."""
    errors: list[str] = []
    settings = settings or {}
    for key in _POSITIVE_INTS:
        if key in settings:
            n = _as_int(settings[key])
            if n is None or n < 1:
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a whole number >= 1 (e.g. "
                              f"{ {'output_tokens': 256, 'runs': 3, 'quality_max_tokens': 4096}[key] })")
    for key in _NON_NEGATIVE_INTS:
        if key in settings:
            n = _as_int(settings[key])
            if n is None or n < 0:
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a whole number >= 0 (e.g. 1)")
    for key in _POSITIVE_NUMBERS:
        if key in settings:
            x = _as_number(settings[key])
            if x is None or x <= 0:
                errors.append(f"llm_bench_{key} is {settings[key]!r}; it must be a number of seconds > 0")
    if "concurrency" in settings:
        items = _int_list(settings["concurrency"])
        bad = None if items is not None else settings["concurrency"]
        for item in items or []:
            n = _as_int(item)
            if n is None or n < 1:
                bad = item
                break
        if bad is not None:
            errors.append(f"llm_bench_concurrency has {bad!r}; it must be a list of parallel levels >= 1 "
                          f"(e.g. [2, 4, 8]) or [] for none")
    if "context" in settings:
        items = _int_list(settings["context"])
        bad = None if items is not None else settings["context"]
        for item in items or []:
            n = _as_int(item)
            if n is None or n < 0:
                bad = item
                break
        if bad is not None:
            errors.append(f"llm_bench_context has {bad!r}; it must be a list of prompt depths >= 0 tokens "
                          f"(e.g. [0] or [4096, 16384])")
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
        if x is None or x <= 0 or isinstance(bw, str):
            errors.append(f"hardware profile field memory_bandwidth_gbps is {bw!r}; it must be a number > 0 (GB/s)")
    return errors


def bench_stored_result(text: Any) -> dict[str, Any]:
    """A stored result file's text → its JSON object; ``{}`` when the file is corrupt (not JSON,
    or not an object), so a resumed run re-measures that variant and overwrites the file
    instead of failing the whole host."""
    if isinstance(text, Mapping):
        return dict(text)
    try:
        import json
        doc = json.loads(str(text))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class FilterModule:
    """Input checks run on the controller before any host is touched."""

    def filters(self) -> dict[str, Any]:
        return {"bench_input_errors": bench_input_errors, "bench_stored_result": bench_stored_result}
