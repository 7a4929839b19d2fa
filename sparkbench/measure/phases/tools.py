"""The tool-call check (--tools): one non-streaming request per prompt (temperature 0, the prompt's
tools, --tool-choice), each judged BFCL-AST style (``tool_judge.judge_tool_calls``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..client import post_json
from ..common import log
from ..shapes import ChatRequest, ToolSpec
from ..tool_judge import (
    ToolPromptEntry,
    ToolPromptSpec,
    ToolsBlock,
    judge_tool_calls,
    load_tools,
    prompt_tools,
    summarise_tools,
    tool_choice_body,
)

if TYPE_CHECKING:
    from ..session import Session


def _entry(p: ToolPromptSpec, verdict: str = "skipped", reason: str | None = None) -> ToolPromptEntry:
    return {"id": p["id"], "category": p["category"], "expected": list(p.get("expected") or []), "calls": [],
            "verdict": verdict, "bucket": None, "reason": reason, "finish_reason": None, "content_excerpt": None,
            "latency_s": None, "completion_tokens": None}


def _block(s: Session, entries: list[ToolPromptEntry], reason: str | None) -> ToolsBlock:
    a = s.args
    return {"tool_choice": a.tool_choice, "file": a.tools_file, "max_tokens": a.tools_max_tokens,
            "prompts": entries, **summarise_tools(entries), "reason": reason}


def run(s: Session) -> None:
    a = s.args
    data = s.tools_data or load_tools(a.tools_file)
    if a.tools_skip:  # refused before the run (sparkbench's preflight): nothing is sent, the reason is kept
        log(f"tools: skipped ({a.tools_skip})")
        s.doc["tools"] = _block(s, [_entry(p, reason=a.tools_skip) for p in data["prompts"]], a.tools_skip)
        return
    entries: list[ToolPromptEntry] = []
    with s.phase("tools") as span:
        for i, p in enumerate(data["prompts"]):
            entry = _entry(p)
            entries.append(entry)
            span.tokens += ask(s, i, p, data["tools"], entry)
    s.doc["tools"] = _block(s, entries, None)
    judged = [e for e in entries if e["verdict"] != "skipped"]
    if judged and all(e["bucket"] == "request_error" for e in judged):
        s.incomplete.append("every tool-call request failed (see tools.prompts[].reason)")


def ask(s: Session, i: int, p: ToolPromptSpec, tools: list[ToolSpec], entry: ToolPromptEntry) -> int:
    """One prompt asked and judged into ``entry``; returns its completion tokens."""
    choice = s.args.tool_choice
    expected = entry["expected"]
    if choice != "auto" and not expected:
        entry["reason"] = f"tool_choice {choice} forces a call, so a prompt that needs none cannot be judged"
        log(f"tools {p['id']}: skipped ({entry['reason']})")
        return 0
    if choice == "named":  # one named function gives one call: judged against the first expected call
        expected = entry["expected"] = expected[:1]
    offered = prompt_tools(p, tools)
    body: ChatRequest = {"model": s.model,
                         "messages": p.get("messages") or [{"role": "user", "content": p["prompt"]}],
                         "tools": offered, "tool_choice": tool_choice_body(choice, p), "temperature": 0,
                         "max_tokens": s.args.tools_max_tokens, "stream": False}
    status, resp, err, elapsed = post_json(s.ep, "/v1/chat/completions", body, s.args.request_timeout)
    entry["latency_s"] = elapsed
    if err is not None:
        entry.update(verdict="fail", bucket="request_error", reason=err)
        s.error("tools", i, err)
        if status is None:
            s.check_alive("tools")
        return 0
    choice0 = ((resp or {}).get("choices") or [{}])[0] if isinstance(resp, dict) else {}
    usage = (resp or {}).get("usage") or {}
    tokens = 0
    if isinstance(usage.get("completion_tokens"), int):
        entry["completion_tokens"] = tokens = usage["completion_tokens"]
    entry["finish_reason"] = choice0.get("finish_reason") if isinstance(choice0, dict) else None
    entry.update(judge_tool_calls({**p, "expected": expected}, offered,
                                  choice0.get("message") if isinstance(choice0, dict) else None,
                                  entry["finish_reason"]))
    log(f"tools {p['id']}: {entry['verdict']}" + (f" ({entry['bucket']}: {entry['reason']})" if entry["bucket"] else ""))
    return tokens
