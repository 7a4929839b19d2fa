"""Why a host failed as a whole: the host failure object bench.yml records and the failure
documents (stage ``host``), the report ("Hosts without results") and the runner carry.

:func:`explain` builds it from the failed task's name and its whole registered result (Ansible's
``ansible_failed_result``, or the connection probe's result when the host is unreachable)::

    {"task", "reason", "remedy", "log_excerpt", "issue", "summary"}

- ``reason``: the task's name, its message, the return code and the last line of its stderr (else
  stdout) where the message does not already say it — ``Spark host | probe GPU and driver:
  non-zero return code (rc 127): /bin/bash: line 1: nvidia-smi: command not found``. A loop's
  failure is its first failed item's. An unreachable host: ``unreachable: <message>``.
- ``remedy``: the first known host pitfall whose signature matches the task's name, message,
  stderr and stdout (``sparkbench/data/host_issues.yml``, section ``host``), else
  :data:`DEFAULT_REMEDY`.
- ``log_excerpt``: the tail of stderr and stdout (stripped, joined by a newline, no trailing one).
- ``issue``: the matched pitfall's id or None. ``summary``: ``<reason>; remedy: <remedy>``, one
  line (the report's "Hosts without results", the runner's host line).

Secrets never get in: a ``no_log`` result keeps only Ansible's censored message, the module's
arguments are never read, and every text goes through :func:`sparkbench.secrets.redact_text`.
Pure (no Ansible import); the filters ``sparkbench_host_failure`` and ``sparkbench_host_failures``
(``filter_plugins/sparkbench_failures.py``) are its adapters.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from . import package_data
from .secrets import redact_text

if TYPE_CHECKING:
    from .cluster.shapes import HostVars

#: The remedy when no known pitfall matches.
DEFAULT_REMEDY = ("fix the host problem the reason names (the failed task's full output is above it in the play), "
                  "then re-run with the same bench_run_id")
EXCERPT_CHARS = 4000
#: How much of one stderr/stdout line goes into the reason.
LINE_CHARS = 300
UNREACHABLE_TASK = "connection"


class _PitfallRequired(TypedDict):
    id: str
    signature: str
    remedy: str


class HostPitfall(_PitfallRequired, total=False):
    """One known host pitfall (``host:`` of ``sparkbench/data/host_issues.yml``, ``load_pitfalls``):
    a signature (regular expression) and its remedy; ``connection``: for an unreachable host only."""

    connection: bool


class TaskResult(TypedDict, total=False):
    """A task's registered result as Ansible gives it, the keys sparkbench reads: here a failed task's
    (``ansible_failed_result``, the connection probe's, or one item of a loop's ``results``; a module's
    own keys, its arguments among them, are never read), in ``sparkbench.interference`` a measure run's."""

    results: list[TaskResult]
    failed: bool
    unreachable: bool
    msg: str
    reason: str
    censored: str
    rc: int
    stderr: str
    stderr_lines: list[str]
    module_stderr: str
    stdout: str
    stdout_lines: list[str]
    module_stdout: str
    item: object  # a loop's item: whatever the loop runs over
    _ansible_item_label: object


class HostFailure(TypedDict):
    """Why a host failed as a whole (``explain``, the module docstring): recorded by bench.yml, in the
    failure documents (stage ``host``), the report's "Hosts without results" and the runner's view."""

    task: str
    reason: str
    remedy: str
    log_excerpt: str
    issue: str | None
    summary: str


def load_pitfalls(path: str | os.PathLike | None = None) -> list[HostPitfall]:
    """The ``host`` section of the pitfalls file (default ``sparkbench/data/host_issues.yml``, the
    package's), each entry checked (``id``, ``signature`` a valid regular expression, ``remedy``);
    parsed once per change of the file (``sparkbench.package_data.load_yaml``)."""
    where = str(path or package_data.HOST_ISSUES)
    data = package_data.load_yaml(where) or {}
    entries = data.get("host") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise ValueError(f"{where}: expected a 'host:' list of pitfalls")
    for i, e in enumerate(entries):
        if not isinstance(e, Mapping) or not all(isinstance(e.get(k), str) and e.get(k) for k in
                                                 ("id", "signature", "remedy")):
            raise ValueError(f"{where}: host[{i}] needs id, signature and remedy (strings)")
        try:
            re.compile(e["signature"])
        except re.error as exc:
            raise ValueError(f"{where}: host[{i}] ({e['id']}): signature is not a regular expression: {exc}") from None
    return entries


def failed_item(result: TaskResult | None) -> TaskResult:
    """The part of a registered result that failed: a loop's first failed item (``results[]``),
    else the result itself (``{}`` for none)."""
    result = result if isinstance(result, Mapping) else {}
    items = result.get("results")
    if isinstance(items, list):
        for item in items:
            if isinstance(item, Mapping) and item.get("failed"):
                return item
    return result


def _text(value: Any) -> str:
    """A stdout/stderr value as text (a string, or Ansible's ``*_lines`` list)."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v) for v in value)
    return str(value)


def _streams(item: TaskResult) -> tuple[str, str]:
    """(stderr, stdout) of a failed result, stripped; a module crash's module_stderr/stdout too."""
    err = _text(item.get("stderr") or item.get("stderr_lines") or item.get("module_stderr")).strip()
    out = _text(item.get("stdout") or item.get("stdout_lines") or item.get("module_stdout")).strip()
    return err, out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:LINE_CHARS] if lines else ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def match_pitfall(text: str, pitfalls: Iterable[HostPitfall], unreachable: bool = False) -> HostPitfall | None:
    """The first pitfall whose ``signature`` is found in ``text`` (case-insensitive), else None;
    ``connection`` pitfalls only for an ``unreachable`` host, the others only for one that answered."""
    for entry in pitfalls:
        if bool(entry.get("connection")) == unreachable and re.search(entry["signature"], text, flags=re.IGNORECASE):
            return entry
    return None


def explain(task: Any, result: TaskResult | None, host: str = "", *,
            pitfalls: Iterable[HostPitfall] | None = None,
            secret_values: Iterable[str] = ()) -> HostFailure:
    """The host failure object (see the module's docstring) of ``task`` (the failed task's name)
    whose registered result is ``result``; ``host`` fills ``{host}`` in the remedy."""
    result = result if isinstance(result, Mapping) else {}
    values = [str(v) for v in secret_values if v]
    task = _one_line(task or "") or "provisioning"
    item = failed_item(result)
    unreachable = bool(result.get("unreachable") or item.get("unreachable"))
    msg = _one_line(item.get("msg") or item.get("reason") or result.get("msg") or "")
    if "censored" in item or "censored" in result:  # no_log: Ansible's own message, nothing else
        msg, err, out = _one_line(item.get("censored") or result.get("censored")), "", ""
    else:
        err, out = _streams(item)
    cause = _last_line(err) or _last_line(out)
    if unreachable:
        reason = f"unreachable: {msg or 'no connection'}"
    else:
        reason = f"{task}: {msg or 'failed'}"
        rc = item.get("rc")
        if isinstance(rc, int) and rc != 0 and f"rc {rc}" not in reason:
            reason += f" (rc {rc})"
        label = item.get("_ansible_item_label", item.get("item")) if item is not result else None
        if isinstance(label, (str, int, float)) and str(label).strip():
            reason += f" [item: {_one_line(label)[:LINE_CHARS]}]"
        if cause and cause not in reason:
            reason += f": {cause}"
    excerpt = "\n".join(t for t in (err, out) if t)[-EXCERPT_CHARS:].strip()
    everything = "\n".join((task, msg, err, out))
    entry = match_pitfall(everything, load_pitfalls() if pitfalls is None else pitfalls, unreachable)
    remedy = _one_line(str(entry["remedy"]).replace("{host}", host or "the host")) if entry else DEFAULT_REMEDY
    reason = redact_text(reason, values)
    remedy = redact_text(remedy, values)
    return {"task": task if not unreachable else UNREACHABLE_TASK, "reason": reason, "remedy": remedy,
            "log_excerpt": redact_text(excerpt, values) if excerpt else "",
            "issue": str(entry["id"]) if entry else None, "summary": f"{reason}; remedy: {remedy}"}


def collect(hosts: Iterable[str], variables_of: Mapping[str, HostVars], fact: str = "bench_host_failure",
            field: str | None = None) -> dict[str, HostFailure | str | None]:
    """``{host: failure}`` of the ``hosts`` whose variables (``variables_of[host]``: Ansible's
    hostvars) hold a host failure object in ``fact``; ``field`` (e.g. ``summary``): that field
    instead of the whole object."""
    out: dict[str, HostFailure | str | None] = {}
    for host in hosts or []:
        try:
            hv = variables_of[host]
            failure = hv[fact] if fact in hv else None
        except (KeyError, TypeError):
            continue
        if isinstance(failure, Mapping) and failure.get("reason"):
            out[str(host)] = failure.get(field) if field else dict(failure)
    return out
