"""The tool-call check's judge (BFCL-AST buckets) and its tools file."""
from __future__ import annotations

import itertools
import json
import math
import re
from typing import Literal, TypedDict

from .profiles import data_file, read_json
from .shapes import JSON, ChatMessage, JSONObject, NamedToolChoice, ToolSpec

# --------------------------------------------------------------------------------------------
# Tool-call check (--tools): BFCL-AST style judging of OpenAI tool_calls

TOOL_BUCKETS = ("unparsed", "wrong_tool", "param_type_error", "param_value_error", "should_not_have_called",
                "request_error")
TOOL_CATEGORIES = ("irrelevance", "simple", "multiple", "parallel")
# Call-looking text left in ``content`` when no parser (or the wrong one) read it: Hermes/Qwen
# JSON in <tool_call>, Qwen3 XML, gpt-oss harmony, Mistral [TOOL_CALLS], Llama <|python_tag|>,
# a bare {"name": ..., "arguments"/"parameters": ...} object, a pythonic [fn(k=v)] list.
TOOL_TEXT_RE = re.compile(
    r"<tool_call>|</tool_call>|<function=|<parameter=|to=functions\.|<\|call\|>|\[TOOL_CALLS\]|<\|python_tag\|>"
    r"|\{\s*\"name\"\s*:\s*\"[^\"]+\"\s*,\s*\"(?:arguments|parameters)\"\s*:|^\s*\[\s*[A-Za-z_]\w*\(\w+\s*=")
TOOL_EXCERPT = 200


# ---- the tools file and the result's block ---------------------------------------------------------
class _ExpectedCallBase(TypedDict):
    name: str


class ExpectedCall(_ExpectedCallBase, total=False):
    """A call a tool prompt expects: the tool, and per argument its acceptable value(s) (the tools file)."""

    arguments: JSONObject


class _PromptSpecBase(TypedDict):
    id: str
    category: str
    expected: list[ExpectedCall]


class ToolPromptSpec(_PromptSpecBase, total=False):
    """One prompt of the tools file: its text (``prompt``) or ``messages``, the tools it offers
    (names; all when absent); asked by ``phases.tools``."""

    prompt: str
    messages: list[ChatMessage]
    tools: list[str]


class ToolsFile(TypedDict):
    """The tools file as ``load_tools`` checked it (its other keys are notes)."""

    tools: list[ToolSpec]
    prompts: list[ToolPromptSpec]


class ParsedCall(TypedDict):
    """A call whose arguments parsed to a JSON object, as ``judge_tool_calls`` matches it."""

    name: str
    arguments: JSONObject


class ToolCallEntry(TypedDict):
    """``tools.prompts[].calls[]``: one call as the model made it (``arguments`` parsed when it is a
    JSON object, else as sent); ``judge_tool_calls``."""

    name: str | None
    arguments: JSON


class ToolVerdict(TypedDict):
    """One prompt's verdict, BFCL-AST buckets; ``judge_tool_calls``."""

    verdict: Literal["pass", "fail", "skipped"]
    bucket: str | None
    reason: str | None
    calls: list[ToolCallEntry]
    content_excerpt: str | None


class ToolPromptEntry(ToolVerdict):
    """``tools.prompts[]``: one tool prompt, asked and judged (or skipped); ``phases.tools``."""

    id: str
    category: str
    expected: list[ExpectedCall]
    finish_reason: str | None
    latency_s: float | None
    completion_tokens: int | None


class CategoryCount(TypedDict):
    """``tools.by_category.<category>``: judged prompts that passed, of all judged; ``summarise_tools``."""

    passed: int
    total: int


class ToolsSummary(TypedDict):
    """The tool-call check's counts; ``summarise_tools``."""

    passed: int
    failed: int
    skipped: int
    total: int
    by_category: dict[str, CategoryCount]
    by_bucket: dict[str, int]


class ToolsBlock(ToolsSummary):
    """``tools``: the tool-call check; ``phases.tools``."""

    tool_choice: str
    file: str
    max_tokens: int
    prompts: list[ToolPromptEntry]
    reason: str | None


def default_tools_file() -> str:
    """measure.pyz's own tools.json, else the one beside the package, else sparkbench's own."""
    return data_file("tools.json")


def load_tools(path: str) -> ToolsFile:
    """Read and sanity-check the tools file; raise ValueError with a one-line message."""
    what = f"--tools-file: {path}"
    data = read_json(path, "--tools-file")
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{what} needs a non-empty 'tools' list")
    names = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and isinstance(fn.get("parameters"), dict)):
            raise ValueError(f"{what}: each tool needs {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
        names.append(fn["name"])
    prompts = data.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"{what} needs a non-empty 'prompts' list")
    for p in prompts:
        if not isinstance(p, dict) or not p.get("id") or not (p.get("prompt") or p.get("messages")):
            raise ValueError(f"{what}: each prompt needs 'id' and 'prompt' or 'messages'")
        if p.get("category") not in TOOL_CATEGORIES:
            raise ValueError(f"{what}: prompt {p['id']}: 'category' must be one of {', '.join(TOOL_CATEGORIES)}")
        exp = p.get("expected")
        if not isinstance(exp, list) or not all(isinstance(e, dict) and e.get("name") in names for e in exp):
            raise ValueError(f"{what}: prompt {p['id']}: 'expected' must list calls of the file's tools")
        for sub in p.get("tools") or []:
            if sub not in names:
                raise ValueError(f"{what}: prompt {p['id']}: offers unknown tool {sub!r}")
    return data


def prompt_tools(prompt: ToolPromptSpec, tools: list[ToolSpec]) -> list[ToolSpec]:
    """The tools a prompt offers: its 'tools' subset (by name), else all of them."""
    sub = prompt.get("tools")
    if not sub:
        return list(tools)
    return [t for t in tools if t["function"]["name"] in sub]


def _json_type_ok(value: JSON, typ: JSON) -> bool:
    """JSON-schema ``type`` check of a parsed JSON value (2.0 counts as an integer, booleans are
    not numbers)."""
    if isinstance(typ, list):
        return any(_json_type_ok(value, t) for t in typ)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "array":
        return isinstance(value, list)
    if typ == "object":
        return isinstance(value, dict)
    if typ == "null":
        return value is None
    return True  # no type or an unknown one: not checked


def schema_errors(args: JSONObject, params: JSONObject) -> list[str]:
    """Why ``args`` does not fit a tool's ``parameters`` schema (required, extra, type, enum,
    minimum/maximum), one reason per problem; empty when it fits."""
    props = params.get("properties") or {}
    errs = [f"required argument {k!r} missing" for k in params.get("required") or [] if k not in args]
    extra_ok = params.get("additionalProperties", False) is not False
    for k, v in args.items():
        sch = props.get(k)
        if sch is None:
            if not extra_ok:
                errs.append(f"argument {k!r} is not in the schema")
            continue
        if "type" in sch and not _json_type_ok(v, sch["type"]):
            errs.append(f"argument {k!r} = {json.dumps(v)[:60]} is not of type {sch['type']}")
            continue
        if "enum" in sch and v not in sch["enum"]:
            errs.append(f"argument {k!r} = {json.dumps(v)[:60]} is not one of {sch['enum']}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "minimum" in sch and v < sch["minimum"]:
                errs.append(f"argument {k!r} = {v} is below the minimum {sch['minimum']}")
            if "maximum" in sch and v > sch["maximum"]:
                errs.append(f"argument {k!r} = {v} is above the maximum {sch['maximum']}")
    return errs


def _value_matches(value: JSON, acceptable: list[JSON]) -> bool:
    for want in acceptable:
        if isinstance(want, str) and isinstance(value, str):
            if value.strip().casefold() == want.strip().casefold():
                return True
        elif isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            if math.isclose(float(value), float(want), rel_tol=1e-9, abs_tol=1e-9):
                return True
        elif value == want:
            return True
    return False


def _judge_one(call: ParsedCall, exp: ExpectedCall, schemas: dict[str, JSONObject]) -> tuple[int, str, str]:
    """(severity, bucket, reason) of one call against one expected call; severity 0 = pass."""
    name = call["name"]
    if name != exp["name"]:
        why = "not an offered tool" if name not in schemas else "a different tool"
        return 3, "wrong_tool", f"called {name!r} ({why}), expected {exp['name']!r}"
    errs = schema_errors(call["arguments"], schemas.get(name) or {})
    if errs:
        return 2, "param_type_error", f"{name}: " + "; ".join(errs)
    bad = []
    for k, acceptable in (exp.get("arguments") or {}).items():
        acceptable = acceptable if isinstance(acceptable, list) else [acceptable]
        if k not in call["arguments"]:
            if "" not in acceptable and None not in acceptable:
                bad.append(f"{k!r} missing, expected one of {acceptable}")
        elif not _value_matches(call["arguments"][k], acceptable):
            bad.append(f"{k!r} = {json.dumps(call['arguments'][k])[:60]}, expected one of {acceptable}")
    if bad:
        return 1, "param_value_error", f"{name}: " + "; ".join(bad)
    return 0, "", ""


def _match_calls(calls: list[ParsedCall], expected: list[ExpectedCall],
                 schemas: dict[str, JSONObject]) -> tuple[int, str, str]:
    """Best assignment of calls to expected calls (any order): the worst pair of the assignment
    with the least total severity; (severity, bucket, reason)."""
    best: tuple[int, int, str, str] | None = None
    for perm in itertools.permutations(range(len(calls))):
        judged = [_judge_one(calls[i], expected[j], schemas) for j, i in enumerate(perm)]
        total = sum(s for s, _, _ in judged)
        worst = max(judged, key=lambda x: x[0])
        if best is None or total < best[0]:
            best = (total, worst[0], worst[1], "; ".join(r for s, _, r in judged if s))
        if total == 0:
            break
    assert best is not None
    return best[1], best[2], best[3]


def judge_tool_calls(prompt: ToolPromptSpec, tools: list[ToolSpec], message: JSON,
                     finish_reason: str | None) -> ToolVerdict:
    """Judge one chat completion ``message`` against the prompt's expected calls, BFCL-AST style.

    Returns ``{"verdict": pass|fail, "bucket", "reason", "calls", "content_excerpt"}``. Buckets:
    unparsed (no ``tool_calls`` but call-looking text in ``content``, arguments not a JSON object,
    a malformed entry, or nothing at all because the output was cut at max_tokens), wrong_tool (wrong name or number of calls), param_type_error (an
    argument missing, extra, of the wrong JSON type or outside its enum/range: the tool's schema),
    param_value_error (schema-valid but not an acceptable value), should_not_have_called (a call
    on a prompt that needs none). Parallel calls match in any order.
    """
    message = message if isinstance(message, dict) else {}
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    expected = prompt.get("expected") or []
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    out: ToolVerdict = {"verdict": "pass", "bucket": None, "reason": None, "calls": [], "content_excerpt": None}

    def fail(bucket: str, reason: str, excerpt: bool = False) -> ToolVerdict:
        out.update(verdict="fail", bucket=bucket, reason=reason)
        if excerpt:
            out["content_excerpt"] = content[:TOOL_EXCERPT]
        return out

    raw = message.get("tool_calls")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        return fail("unparsed", f"tool_calls is a {type(raw).__name__}, not a list", excerpt=True)
    calls: list[ParsedCall] = []
    broken: list[str] = []
    for i, tc in enumerate(raw):
        fn = tc.get("function") if isinstance(tc, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            out["calls"].append({"name": name if isinstance(name, str) else None,
                                 "arguments": fn.get("arguments") if isinstance(fn, dict) else None})
            broken.append(f"tool_calls[{i}] has no function name")
            continue
        args = fn.get("arguments")
        parsed: JSON = args
        if isinstance(args, str):
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                out["calls"].append({"name": name, "arguments": args})
                broken.append(f"{name}: arguments are not JSON ({exc})")
                continue
        if not isinstance(parsed, dict):
            out["calls"].append({"name": name, "arguments": args})
            broken.append(f"{name}: arguments are not a JSON object")
            continue
        out["calls"].append({"name": name, "arguments": parsed})
        calls.append({"name": name, "arguments": parsed})
    if broken:
        return fail("unparsed", "; ".join(broken) + (" (finish_reason length: truncated)"
                                                     if finish_reason == "length" else ""))
    if not raw and TOOL_TEXT_RE.search(content or ""):
        return fail("unparsed", "no tool_calls, but call-looking text in content (no tool-call parser, "
                                "or one that does not read this model's format)"
                    + (" (finish_reason length: truncated)" if finish_reason == "length" else ""), excerpt=True)
    if not raw and expected and finish_reason == "length" and not (content or "").strip():
        return fail("unparsed", "no tool_calls and no content: the output was cut at max_tokens before a call "
                                "was complete (finish_reason length)", excerpt=True)
    if not expected:
        if calls:
            return fail("should_not_have_called", f"{len(calls)} call(s) ({', '.join(c['name'] for c in calls)}) "
                                                  "where none is needed")
        return out
    if len(calls) != len(expected):
        got = ", ".join(c["name"] for c in calls) or "none"
        trunc = " (finish_reason length: truncated)" if finish_reason == "length" else ""
        return fail("wrong_tool", f"{len(calls)} call(s) ({got}), expected {len(expected)} "
                                  f"({', '.join(e['name'] for e in expected)}){trunc}")
    if len(calls) > 6:  # permutations stay cheap
        return fail("wrong_tool", f"{len(calls)} calls: too many to match")
    sev, bucket, reason = _match_calls(calls, expected, schemas)
    if sev:
        return fail(bucket, reason)
    return out


def tool_choice_body(choice: str, prompt: ToolPromptSpec) -> str | NamedToolChoice:
    """The request's ``tool_choice``: "auto", "required", or the prompt's first expected tool
    named ({"type": "function", "function": {"name": ...}})."""
    if choice == "named":
        return {"type": "function", "function": {"name": prompt["expected"][0]["name"]}}
    return choice


def summarise_tools(entries: list[ToolPromptEntry]) -> ToolsSummary:
    """passed/failed/skipped/total, by_category {cat: {passed, total}} (skipped prompts not in
    total) and by_bucket {bucket: n} of the judged prompts."""
    passed = sum(1 for e in entries if e["verdict"] == "pass")
    failed = sum(1 for e in entries if e["verdict"] == "fail")
    skipped = sum(1 for e in entries if e["verdict"] == "skipped")
    by_cat: dict[str, CategoryCount] = {}
    by_bucket: dict[str, int] = {}
    for e in entries:
        if e["verdict"] == "skipped":
            continue
        c = by_cat.setdefault(e["category"], {"passed": 0, "total": 0})
        c["total"] += 1
        c["passed"] += e["verdict"] == "pass"
        if e["bucket"]:
            by_bucket[e["bucket"]] = by_bucket.get(e["bucket"], 0) + 1
    return {"passed": passed, "failed": failed, "skipped": skipped, "total": passed + failed,
            "by_category": by_cat, "by_bucket": by_bucket}
