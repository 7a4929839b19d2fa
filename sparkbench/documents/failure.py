"""Why a variant did not run as planned: the preflight verdict (``preflight``) and the failure of a
variant at any stage (``failure``)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from .base import Block

#: the steps a variant goes through; a failure names the one it was in
Stage = Literal["host", "preflight", "launch", "measure"]


class PreflightFailure(Block):
    id: Any
    reason: Any


class PreflightRefusal(Block):
    id: Any
    phase: Any
    reason: Any


class Preflight(Block):
    verdict: Literal["pass", "fail", "skipped"]
    failures: list[PreflightFailure] = None
    checked: list[Any] = None
    refused: list[PreflightRefusal] = Field(
        None, description="phases preflight refused for this variant (known_issues.yml 'refuses'): the variant ran, "
                          "the phase was skipped with this reason and remedy")


class Failure(Block):
    ("why a variant failed, or why its measurement is incomplete (sparkbench.result)")
    stage: Stage = Field(description="the step the variant was in (set by each step, never read from task names)")
    reason: str
    remedy: Optional[str] = None
    log_excerpt: str = None
    issues: list[str] = Field(None, description="ids of the known_issues.yml entries that matched")
