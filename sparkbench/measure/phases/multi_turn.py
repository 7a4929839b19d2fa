"""Multi-turn (--turns): --conversations conversations, each turn re-sending the whole history
(the assistant's real answers) plus --turn-tokens new user tokens; conversations interleaved round
robin, one request at a time; a failed turn ends its conversation (GuideLLM's rule)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..aggregate import MultiTurnBlock, TurnRow, multi_turn_per_turn
from ..common import log
from ..prompts import turn_prompt
from ..shapes import ChatMessage

if TYPE_CHECKING:
    from ..session import Session


def run(s: Session) -> None:
    a = s.args
    n_conv, n_turns, n_new, n_out = a.conversations, a.turns, a.turn_tokens, a.turn_output_tokens
    entry: MultiTurnBlock = {"conversations": n_conv, "turns": n_turns, "turn_tokens": n_new, "output_tokens": n_out,
                             "completed": 0, "failed": 0, "per_turn": [], "per_request": []}
    s.doc["multi_turn"] = entry
    too_long = s.fits(n_turns * (n_new + n_out + 16), "the last turn's context")
    if too_long:
        entry["reason"] = too_long
        s.error("multi_turn", None, too_long)
        return
    cpt = s.prompt_chars_per_token()
    history: list[list[ChatMessage] | None] = [[] for _ in range(n_conv)]
    with s.phase("multi_turn") as span:
        for turn in range(1, n_turns + 1):
            for c in range(n_conv):
                hist = history[c]
                if hist is None:
                    continue
                user: ChatMessage = {"role": "user", "content": turn_prompt(turn, int(n_new * cpt), s.rng)}
                r = s.generate_one("multi_turn", hist + [user], n_out, True)
                span.tokens += r.completion_tokens or 0
                fields = r.run_fields(n_out)
                row: TurnRow = {"conversation": c, "turn": turn, "prompt_tokens": r.prompt_tokens,
                                "ttft_s": r.ttft, "decode_tok_s": r.decode_tok_s,
                                "decode_source": fields["decode_source"],
                                "cached_tokens": r.cached_tokens, "error": r.failure}
                if not r.failure and "decode_reason" in fields:
                    row["decode_reason"] = fields["decode_reason"]
                if r.failure:
                    entry["failed"] += 1
                    s.error("multi_turn", len(entry["per_request"]), r.failure)
                    history[c] = None
                else:
                    entry["completed"] += 1
                    history[c] = hist + [user, {"role": "assistant", "content": r.content}]
                entry["per_request"].append(row)
    entry["per_turn"] = multi_turn_per_turn(entry["per_request"], n_turns)
    if entry["failed"]:
        s.incomplete.append("multi-turn request(s) failed (see errors)")
    first, last = entry["per_turn"][0], entry["per_turn"][-1]
    log(f"multi-turn: {entry['completed']} of {n_conv * n_turns} turns completed; context "
        f"{first['context_tokens']} -> {last['context_tokens']} tokens, TTFT {first['ttft_s'] or 0:.3f} -> "
        f"{last['ttft_s'] or 0:.3f} s, decode {first['decode_tok_s'] or 0:.1f} -> {last['decode_tok_s'] or 0:.1f} tok/s")
