"""Known vLLM pitfalls: check a variant before launch, and explain a failed launch from its log.

Both functions read the same data (``sparkbench/data/known_issues.yml``): each issue has an
``id``, the vLLM ``versions`` it applies to (``">=0.15,<0.27"``; empty = all), optional
``preflight`` conditions and an optional log ``signature`` (a regular expression), a ``reason``
and a ``remedy``.

* ``vllm_preflight(variant, issues, model_profile, hardware_profile)`` → verdict
  ``{verdict: pass|fail|skipped, vllm_version, failures: [{id, reason, remedy}], checked: [ids]}``
* ``vllm_log_match(log_text, issues)`` → ``{id, reason, remedy, line}`` of the first issue whose
  signature matches, or ``None``

Conditions are ``[left, op, right]`` triples; an operand is a reference or a literal:
``flag.<name>`` (the variant's flag, else ``flag_defaults``), ``model.<field>``,
``hardware.<field>``, ``image.flavor``, ``variant.<field>``, ``tables.<table>[<reference>]``.
Operators: ``== != > >= < <= in not_in set unset``. A condition with an unknown operand is
not met (the issue does not apply), so a missing profile field never fails a variant.
``{reference}`` and ``{match.<group>}`` in reason and remedy are replaced by their values (unknown
ones by nothing, so a text can name both the preflight and the log value).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from . import package_data
from .errors import InputError

if TYPE_CHECKING:
    from .launch import FlagValue, Scalar
    from .matrix import Variant
    from .plan_types import HardwareProfile, ModelProfile
    from .settings import Settings

_MISSING = object()
_REF_RE = re.compile(r"^(flag|model|hardware|image|variant|tables|match|settings)\.")
_PLACEHOLDER_RE = re.compile(r"\{((?:flag|model|hardware|image|variant|match|tables|settings)\.[A-Za-z0-9_.\-\[\]]+)\}")
_TABLE_RE = re.compile(r"^tables\.([A-Za-z0-9_]+)\[(.+)\]$")


class ImageFlavor(TypedDict):
    """One entry of known_issues.yml's ``image_flavors``: an image name pattern and its flavour."""

    pattern: str
    flavor: str


class KnownIssue(TypedDict, total=False):
    """One entry of known_issues.yml's ``issues`` (the module docstring): its preflight conditions
    (``[left, op, right]``) and / or log signature, reason and remedy; ``cluster_check`` /
    ``check_reason`` for the cluster check (``sparkbench.cluster``)."""

    id: str
    title: str
    versions: str
    preflight: list[list[Scalar]]
    refuses: str
    signature: str
    reason: str
    remedy: str
    cluster_check: bool
    check_reason: str


class KnownIssues(TypedDict, total=False):
    """sparkbench/data/known_issues.yml as ``load_known_issues`` reads it: what vLLM does when
    a flag is not given, the image flavours, the lookup tables of the conditions, the issues."""

    flag_defaults: dict[str, FlagValue]
    image_flavors: list[ImageFlavor]
    tables: dict[str, dict[str, Scalar]]
    issues: list[KnownIssue]


class PreflightFailure(TypedDict):
    """Why preflight fails a variant: a known issue (``vllm_preflight``), a wrong flag
    (``sparkbench.flags``), the plan's own (a cluster needed, the memory plan, a failed download)."""

    id: str
    reason: str
    remedy: str


class PreflightRefusal(PreflightFailure):
    """A measure.py phase preflight refuses (``refuses: <phase>``); the variant still runs."""

    phase: str


class _PreflightRequired(TypedDict):
    verdict: Literal["pass", "fail", "skipped"]
    failures: list[PreflightFailure]
    checked: list[str]


class Preflight(_PreflightRequired, total=False):
    """A variant's preflight verdict (``vllm_preflight``; the plan adds its own checks and a skipped
    one, ``{verdict: skipped, failures: [], checked: []}``, when preflight is off)."""

    variant: str
    vllm_version: str | None
    refused: list[PreflightRefusal]


class LogMatch(TypedDict):
    """The known issue whose signature matched a log (``vllm_log_match``) and the matched line."""

    id: str
    reason: str
    remedy: str
    line: str


class LaunchFailure(TypedDict):
    """Why a launch failed (``explain_launch``): the known issue (None when none matched), reason,
    remedy, the log line that explains it and an excerpt of the log around it."""

    issue: str | None
    reason: str
    remedy: str
    line: str | None
    log_excerpt: str


def parse_version(text: Any) -> tuple[int, ...] | None:
    """``'v0.25.0'`` / ``'0.25.1rc1'`` / ``'0.26'`` → ``(0, 25, 0)`` / ``(0, 25, 1)`` / ``(0, 26, 0)``."""
    if text is None:
        return None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not found:
        return None
    return tuple(int(g or 0) for g in found.groups())


def version_in_range(version: Any, spec: Any) -> bool | None:
    """True/False for a version against ``">=0.15,<0.27"``; None when the version is unknown."""
    if not spec:
        return True
    parsed = parse_version(version)
    if parsed is None:
        return None
    for clause in str(spec).split(","):
        clause = clause.strip()
        found = re.match(r"^(>=|<=|==|!=|>|<)\s*(.+)$", clause)
        if not found:
            raise InputError(f"vllm_preflight: version range clause {clause!r} is not like '>=0.15' or '<0.27'")
        op, bound_text = found.groups()
        bound = parse_version(bound_text)
        if bound is None:
            raise InputError(f"vllm_preflight: version bound {bound_text!r} is not a version like 0.27.0")
        ok = {">=": parsed >= bound, "<=": parsed <= bound, "==": parsed == bound, "!=": parsed != bound,
              ">": parsed > bound, "<": parsed < bound}[op]
        if not ok:
            return False
    return True


def image_flavor(image: str, flavors: Sequence[ImageFlavor] | None, override: str | None = None) -> str:
    """``official`` / ``ngc`` / ``community`` from the image name (first matching pattern)."""
    if override:
        return str(override)
    for entry in flavors or []:
        if re.search(str(entry.get("pattern", "")), str(image or "")):
            return str(entry.get("flavor", "community"))
    return "community"


def version_from_image(image: str) -> str | None:
    """The vLLM version in an image tag (``vllm/vllm-openai:v0.25.0-aarch64`` → ``0.25.0``)."""
    tag = str(image or "").rsplit("/", 1)[-1]
    if ":" not in tag:
        return None
    found = re.search(r"(?:^|[^0-9])v?(\d+\.\d+(?:\.\d+)?)", tag.split(":", 1)[1])
    return found.group(1) if found else None


class _Context:
    """Resolves references for one variant."""

    def __init__(self, variant: Variant, issues: KnownIssues, model: ModelProfile | None,
                 hardware: HardwareProfile | None, match: Mapping[str, str | None] | None = None,
                 settings: Settings | None = None) -> None:
        self.variant = variant or {}
        self.settings = settings or {}
        self.model = model or {}
        self.hardware = hardware or {}
        self.tables = issues.get("tables") or {}
        self.flag_defaults = issues.get("flag_defaults") or {}
        self.match = match or {}
        # A null flag is left out by vllm_args, so vLLM uses its default: the same here.
        self.flags = {str(k).lstrip("-").replace("_", "-"): v for k, v in (self.variant.get("args") or {}).items()
                      if v is not None}
        self.flavor = image_flavor(self.variant.get("image", ""), issues.get("image_flavors"),
                                   self.variant.get("image_flavor"))

    def resolve(self, operand: Any) -> Any:
        if not isinstance(operand, str) or not _REF_RE.match(operand):
            return operand
        table = _TABLE_RE.match(operand)
        if table:
            key = self.resolve(table.group(2))
            if key is _MISSING:
                return _MISSING
            return (self.tables.get(table.group(1)) or {}).get(str(key), _MISSING)
        scope, _, field = operand.partition(".")
        if scope == "tables":
            return self.tables.get(field, _MISSING)
        if scope == "flag":
            if field in self.flags:
                return self.flags[field]
            if field in self.flag_defaults:
                return self.resolve(self.flag_defaults[field])
            return _MISSING
        source = {"model": self.model, "hardware": self.hardware, "variant": self.variant,
                  "image": {"flavor": self.flavor}, "match": self.match, "settings": self.settings}[scope]
        return source.get(field, _MISSING) if isinstance(source, Mapping) else _MISSING

    def render(self, text: Any) -> str:
        def sub(found: re.Match[str]) -> str:
            value = self.resolve(found.group(1))
            return "" if value is _MISSING or value is None else str(value)
        return _PLACEHOLDER_RE.sub(sub, str(text or ""))


def _as_number(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return value
    return value


def _condition_met(ctx: _Context, cond: Any, issue_id: str) -> bool:
    if not isinstance(cond, Sequence) or isinstance(cond, str) or len(cond) not in (2, 3):
        raise InputError(f"vllm_preflight: issue '{issue_id}' has condition {cond!r}; write [left, op, right]")
    left = ctx.resolve(cond[0])
    op = cond[1]
    if op == "set":
        return left is not _MISSING
    if op == "unset":
        return left is _MISSING
    right = ctx.resolve(cond[2]) if len(cond) == 3 else _MISSING
    if left is _MISSING or right is _MISSING:
        return False
    left, right = _as_number(left), _as_number(right)
    try:
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        if op == "in":
            return left in right
        if op == "not_in":
            return left not in right
        if op in (">", ">=", "<", "<="):
            return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[op]
    except TypeError:
        return False
    raise InputError(f"vllm_preflight: issue '{issue_id}' uses operator {op!r}; use one of == != > >= < <= in not_in set unset")


def _issues_list(issues: Any, filter_name: str) -> tuple[KnownIssues, list[KnownIssue]]:
    if not isinstance(issues, Mapping) or not isinstance(issues.get("issues"), list):
        raise InputError(f"{filter_name}: the known-issues data must be a mapping with an 'issues' list "
                                 "(sparkbench/data/known_issues.yml)")
    return issues, issues["issues"]


def vllm_preflight(variant: Variant, issues: KnownIssues, model_profile: ModelProfile | None = None,
                   hardware_profile: HardwareProfile | None = None, vllm_version: str | None = None,
                   settings: Settings | None = None) -> Preflight:
    """Check a variant against every issue with ``preflight`` conditions.

    ``settings``: the host's measurement settings (``sparkbench.settings.normalize``), for the
    conditions on ``settings.<key>`` (a phase that needs server flags, e.g. the tool-call check).

    An issue with ``refuses: <phase>`` does not fail the variant: it goes into ``refused`` (id,
    reason, remedy, phase) and the plan turns that measure.py phase off with its reason (the
    tool-call check on a server without a tool-call parser).

    The vLLM version is ``vllm_version``, else the variant's ``vllm_version``, else read from the
    image tag; when unknown, version-ranged issues are checked anyway (a false alarm is cheaper
    than a crashed launch, and the remedy says what to change).
    """
    data, entries = _issues_list(issues, "vllm_preflight")
    if not isinstance(variant, Mapping) or not variant.get("name"):
        raise InputError("vllm_preflight: input must be an expanded variant (from variant_matrix)")
    version = vllm_version or variant.get("vllm_version") or version_from_image(variant.get("image", ""))
    result: Preflight = {"variant": variant["name"], "vllm_version": version, "failures": [], "checked": [],
                         "refused": []}
    if variant.get("preflight") is False:
        result["verdict"] = "skipped"
        return result
    ctx = _Context(variant, data, model_profile, hardware_profile, settings=settings)
    for issue in entries:
        conditions = issue.get("preflight")
        if not conditions:
            continue
        issue_id = str(issue.get("id", "?"))
        if version_in_range(version, issue.get("versions")) is False:
            continue
        result["checked"].append(issue_id)
        if all(_condition_met(ctx, cond, issue_id) for cond in conditions):
            found = {"id": issue_id, "reason": ctx.render(issue.get("reason")), "remedy": ctx.render(issue.get("remedy"))}
            if issue.get("refuses"):  # one phase refused (its reason in the result); the variant still runs
                result["refused"].append({**found, "phase": str(issue["refuses"])})
            else:
                result["failures"].append(found)
    result["verdict"] = "fail" if result["failures"] else "pass"
    return result


def vllm_log_match(log_text: Any, issues: KnownIssues) -> LogMatch | None:
    """First issue whose ``signature`` matches the log (``None`` when none does).

    Signatures are matched whatever the version: when vLLM printed the text, that is the cause.
    Only ``{match.<group>}`` placeholders are filled (the values vLLM printed).
    """
    data, entries = _issues_list(issues, "vllm_log_match")
    if isinstance(log_text, (list, tuple)):
        log_text = "\n".join(str(x) for x in log_text)
    text = str(log_text or "")
    for issue in entries:
        signature = issue.get("signature")
        if not signature:
            continue
        found = re.search(signature, text, re.MULTILINE)
        if not found:
            continue
        ctx = _Context({}, data, None, None, match=found.groupdict())
        line_start = text.rfind("\n", 0, found.start()) + 1
        line_end = text.find("\n", found.end())
        return {"id": str(issue.get("id", "?")), "reason": ctx.render(issue.get("reason")),
                "remedy": ctx.render(issue.get("remedy")),
                "line": text[line_start:line_end if line_end != -1 else len(text)].strip()}
    return None


def load_known_issues(path: str | None = None) -> KnownIssues:
    """The known issues (default ``sparkbench/data/known_issues.yml``, the package's) parsed, once
    per change of the file (``sparkbench.package_data.load_yaml``)."""
    data = package_data.load_yaml(path or package_data.KNOWN_ISSUES)
    return _issues_list(data, "known issues")[0]


_ERROR_LINE_RE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Exit)\b:?|error:|ERROR\b|[\w.\-]+: error:).*$",
                            re.MULTILINE)
#: Error lines that only point elsewhere (vLLM's wrappers around the root cause, real 0.32 logs:
#: "RuntimeError: Engine core initialization failed. See root cause above. ..."): used only when
#: the log has no other error line.
_WRAPPER_LINE_RE = re.compile(r"See root cause above|See stack trace \(above\) for the root cause|"
                              r"Engine core initialization failed")


def error_line(text: Any) -> str | None:
    """The last line of a log that reads like an error (``ValueError: …``, ``api_server.py: error: …``,
    ``ERROR …``) and is not a wrapper that points at the root cause above it (vLLM's "Engine core
    initialization failed. See root cause above"); the last wrapper line when there is nothing
    else; None when there is no error line."""
    found = wrapper = None
    for m in _ERROR_LINE_RE.finditer(str(text or "")):
        line = m.group(0).strip()
        if _WRAPPER_LINE_RE.search(line):
            wrapper = line
        else:
            found = line
    return found or wrapper


def log_text_of(log: Any) -> str:
    """The container log as one text: a string as it is, or the registered result of the command
    that read it (``docker logs`` / ``tail``: its ``stdout`` and ``stderr``, each stripped, joined by
    one newline, empty ones left out; a skipped or missing read gives ``""``)."""
    if isinstance(log, Mapping):
        parts = [log.get("stdout"), log.get("stderr")]
    elif isinstance(log, (list, tuple)):
        parts = list(log)
    else:
        return str(log or "")
    return "\n".join(str(p).strip() for p in parts if p is not None and str(p).strip())


def explain_launch(log_text: Any, start_error: Any = "", launch_message: Any = "",
                   issues: KnownIssues | None = None) -> LaunchFailure:
    """Why a launch failed (or, after a failed measurement, why the server stopped serving):
    ``{issue, reason, remedy, line, log_excerpt}`` (``line``: the log line that explains it).

    ``log_text``: the container log, a text or the log command's registered result (its stdout
    and stderr, :func:`log_text_of`). The first known issue whose signature matches Docker's start
    error, the failed task's message or the container log; else the server's own last error line
    from the log; else Docker's start error or the task's message.
    """
    log_text = log_text_of(log_text)
    texts = [str(t).strip() for t in (launch_message, start_error, log_text) if t and str(t).strip()]
    everything = "\n".join(texts)
    match = vllm_log_match(everything, issues or load_known_issues())
    if match:
        # The excerpt around the matched line (a long log goes on after the cause: shutdown, HTTP 500s).
        at = everything.find(match["line"]) if match["line"] else -1
        excerpt = everything[-4000:] if at < 0 or len(everything) - at <= 3000 else everything[max(0, at - 1000):at + 3000]
        return {"issue": match["id"], "reason": match["reason"], "remedy": match["remedy"],
                "line": match["line"], "log_excerpt": excerpt}
    line = error_line(log_text)
    reason = line or str(start_error or "").strip() or str(launch_message or "").strip() \
        or "the server exited before /health answered"
    return {"issue": None, "reason": reason, "line": line,
            "remedy": "read the log excerpt; add its error line as a signature to "
                      "sparkbench/data/known_issues.yml",
            "log_excerpt": everything[-4000:]}
