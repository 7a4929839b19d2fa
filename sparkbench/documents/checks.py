"""The answer checks: the quality prompts (``quality``), the image question (``image``) and the
tool-call check (``tools``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field

from .base import Block, Closed, Count, Int, NonNegative, Positive

ToolCategory = Literal["irrelevance", "simple", "multiple", "parallel"]
ToolBucket = Literal["unparsed", "wrong_tool", "param_type_error", "param_value_error", "should_not_have_called",
                     "request_error"]


class Sandbox(Block):
    kind: Literal["docker", "unshare", "none"]
    protections: list[str]
    image: Optional[str] = None
    reason: str = None


class QualityDetails(Block):
    sandbox: Sandbox = None


class Quality(Block):
    id: str
    status: Literal["pass", "fail", "truncated", "skipped", "error"]
    answer: str
    reasoning_tokens: Optional[Count]
    completion_tokens: Optional[Count]
    finish_reason: Optional[str]
    details: QualityDetails


class ImageCheck(Block):
    status: Literal["pass", "fail", "truncated", "error"]
    answer: str
    expected: str
    shape: str = None
    seed: Int = None
    named: list[str] = None
    finish_reason: Optional[str] = None
    reasoning_tokens: Optional[Int] = None
    completion_tokens: Optional[Int] = None
    spec_decode_active: Optional[bool]
    error: str = None


class ExpectedCall(Block):
    name: str
    arguments: dict[str, Any] = None


class ToolCall(Closed):
    name: Optional[str]
    arguments: Any = Field(description="parsed JSON object, or the raw value when it did not parse")


class ToolPrompt(Closed):
    id: str
    category: ToolCategory
    expected: list[ExpectedCall]
    calls: list[ToolCall]
    verdict: Literal["pass", "fail", "skipped"]
    bucket: Optional[ToolBucket]
    reason: Optional[str]
    finish_reason: Optional[str]
    content_excerpt: Optional[Annotated[str, Field(max_length=200)]] = Field(
        description="the first 200 characters of content, only when unparsed")
    latency_s: Optional[NonNegative] = Field(
        None, description="send to whole response received, seconds (non-streaming)")
    completion_tokens: Optional[Count] = Field(None, description="usage.completion_tokens")


class CategoryCount(Closed):
    passed: Count
    total: Count


class Tools(Closed):
    ("--tools: the tool-call check (docs/MEASUREMENT.md 'Tool calls'); null when the phase is off")
    tool_choice: Literal["auto", "required", "named"]
    file: str
    max_tokens: Positive = None
    passed: Count
    failed: Count
    skipped: Count
    total: Count = Field(description="passed + failed (skipped prompts are not judged)")
    reason: Optional[str] = Field(
        None, description="why the whole check was skipped (the plan's refusal, e.g. no tool-call parser, and its "
                          "fix); null when it ran")
    by_category: dict[ToolCategory, CategoryCount]
    by_bucket: dict[ToolBucket, Positive]
    prompts: list[ToolPrompt]
