"""The quality checks (--quality): each question of the quality file asked once with the
--quality-max-tokens budget, its final answer judged (generated code run in the sandbox)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common import log
from ..quality import check_quality, final_answer
from ..sandbox import Sandbox

if TYPE_CHECKING:
    from ..session import Session


def run(s: Session) -> None:
    a = s.args
    sandbox = Sandbox(a.sandbox_image)
    log(f"quality: sandbox {sandbox.kind}" + (f" ({sandbox.reason})" if sandbox.reason else ""))
    with s.phase("quality") as span:
        for i, q in enumerate((s.quality_data or {}).get("questions", [])):
            rec = s.generate("quality", [[{"role": "user", "content": q["prompt"]}]], a.quality_max_tokens, False)[0]
            r = rec.stream
            assert r is not None
            span.tokens += r.completion_tokens or 0
            status, details = check_quality(q, r, a.quality_max_tokens, sandbox)
            if r.error:
                s.error("quality", i, r.error)
            s.doc["quality"].append({"id": q["id"], "status": status, "answer": final_answer(r),
                                     "reasoning_tokens": r.reasoning_tokens, "completion_tokens": r.completion_tokens,
                                     "finish_reason": r.finish_reason, "details": details})
            log(f"quality {q['id']}: {status}")
