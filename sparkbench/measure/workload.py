"""The arrival-rate phase's workload file (``--replay FILE.jsonl``): one request a line."""
from __future__ import annotations

import math
from typing import TypedDict

from .common import json_object


class ReplayRow(TypedDict):
    """One request of the --replay file: its send offset [s], its prompt or the prompt's length in
    tokens (the other None), its output length (None: --output-tokens); ``load_replay``."""

    offset_s: float
    prompt: str | None
    prompt_tokens: int | None
    output_tokens: int | None


def load_replay(path: str) -> list[ReplayRow]:
    """--replay FILE.jsonl: one request a line, {"offset_s", "prompt" | "prompt_tokens",
    "output_tokens"}; raises ValueError naming the option and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ValueError(f"argument --replay: cannot read {path}: {exc}") from None
    out: list[ReplayRow] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"argument --replay: {path} line {no}"
        try:
            obj = json_object(line)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        off = obj.get("offset_s")
        if isinstance(off, bool) or not isinstance(off, (int, float)) or not math.isfinite(off) or off < 0:
            raise ValueError(f"{where}: offset_s must be a number of seconds >= 0")
        prompt, ptok = obj.get("prompt"), obj.get("prompt_tokens")
        if not (isinstance(prompt, str) and prompt) and not (isinstance(ptok, int) and not isinstance(ptok, bool)
                                                               and ptok > 0):
            raise ValueError(f"{where}: needs \"prompt\" (a string) or \"prompt_tokens\" (an integer > 0)")
        otok = obj.get("output_tokens")
        if otok is not None and (isinstance(otok, bool) or not isinstance(otok, int) or otok < 1):
            raise ValueError(f"{where}: output_tokens must be an integer >= 1")
        out.append({"offset_s": float(off), "prompt": prompt if isinstance(prompt, str) and prompt else None,
                    "prompt_tokens": ptok if not (isinstance(prompt, str) and prompt) else None,
                    "output_tokens": otok})
    if not out:
        raise ValueError(f"argument --replay: {path} has no requests")
    return out

