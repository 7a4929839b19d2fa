"""Context depth: for each --context depth > 0, one request of about that many prompt tokens;
prefill tok/s = prompt tokens / TTFT. Each answer refines the session's characters per token."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common import log
from ..prompts import context_prompt
from ..shapes import ContextEntry

if TYPE_CHECKING:
    from ..session import Session

CONTEXT_OUTPUT_TOKENS = 16  # tokens generated per context-depth request (only TTFT matters)


def run(s: Session) -> None:
    for depth in s.args.context:
        if depth > 0:
            depth_request(s, depth)


def depth_request(s: Session, depth: int) -> None:
    phase = f"context_{depth}"
    mml = s.doc["server"]["max_model_len"]
    entry: ContextEntry = {"depth": depth, "prompt_tokens": None, "prefill_tok_s": None, "ttft_s": None,
                           "error": None}
    if mml and depth + CONTEXT_OUTPUT_TOKENS + 64 > mml:
        entry["error"] = f"depth {depth} + output does not fit max_model_len {mml}"
        s.doc["context"].append(entry)
        s.error(phase, None, entry["error"])
        return
    cpt = s.prompt_chars_per_token()
    with s.phase(phase) as span:
        prompt = context_prompt(int(depth * cpt), s.rng)
        r = s.generate(phase, [[{"role": "user", "content": prompt}]], CONTEXT_OUTPUT_TOKENS, True)[0]
        if r.error:
            entry["error"] = r.error
            s.error(phase, 0, r.error)
        else:
            entry["ttft_s"] = r.ttft
            entry["prompt_tokens"] = r.prompt_tokens
            if r.prompt_tokens and r.ttft:
                entry["prefill_tok_s"] = r.prompt_tokens / r.ttft
                s.chars_per_token = len(prompt) / r.prompt_tokens
            else:
                entry["prefill_reason"] = "server sent no usage.prompt_tokens"
            log(f"context {depth}: {entry['prompt_tokens']} prompt tokens, TTFT {r.ttft:.3f} s")
        s.doc["context"].append(entry)
        span.tokens = r.completion_tokens or 0
