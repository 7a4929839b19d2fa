"""Warm-up: --warmup speed requests before anything is measured (not counted)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common import log

if TYPE_CHECKING:
    from ..session import Session


def run(s: Session) -> None:
    a = s.args
    for i in range(a.warmup):
        r = s.generate("warmup", [s.speed_messages()], a.output_tokens, True)[0]
        if r.error:
            s.error("warmup", i, r.error)
            continue
        if r.prompt_tokens is not None and s.warmup_prompt_tokens is None:
            s.warmup_prompt_tokens = r.prompt_tokens
        log(f"warmup {i + 1}/{a.warmup}: {r.completion_tokens} tokens, {r.prompt_tokens} prompt tokens")
