"""Prefix cache (--prefix-tokens): one shared system prompt (a document, new each run) and a unique
user suffix per request, sent one at a time; the first (cold) request's TTFT against the rest
(warm), the hit rate from the prefix-cache counters' deltas."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..aggregate import PrefixCacheBlock, PrefixRow, prefix_figures, prefix_hits
from ..common import log
from ..metrics import prefix_cache_counters
from ..prompts import context_prompt, suffix_prompt
from ..shapes import ChatMessage
from ..stats import stat4

if TYPE_CHECKING:
    from ..session import Session


def counters(s: Session) -> tuple[tuple[float, float] | None, str | None]:
    """(queries, hits) of vLLM's prefix-cache counters now (tokens, summed over engines), or (None, why)."""
    if not s.metrics_ok:
        return None, s.metrics_reason or "no /metrics endpoint"
    try:
        status, body = s.ep.get("/metrics", timeout=30)
    except OSError as exc:
        return None, f"GET /metrics failed: {exc}"
    if status != 200:
        return None, f"GET /metrics answered HTTP {status}"
    from ..metrics import parse_prometheus
    return prefix_cache_counters(parse_prometheus(body.decode("utf-8", "replace")))


def run(s: Session) -> None:
    a = s.args
    n_pre, n_suf, n_out = a.prefix_tokens, a.prefix_suffix_tokens, a.prefix_output_tokens
    entry: PrefixCacheBlock = {"prefix_tokens": n_pre, "suffix_tokens": n_suf, "output_tokens": n_out,
                               "requests": a.prefix_requests, "completed": 0, "failed": 0, "cold_ttft_s": None,
                               "ttft_s": stat4([]), "prefill_tok_s": None, "hit_rate": None, "hit_tokens": None,
                               "query_tokens": None, "reason": None, "per_request": []}
    s.doc["prefix_cache"] = entry
    too_long = s.fits(n_pre + n_suf + n_out, "shared prefix + suffix")
    if too_long:
        entry["reason"] = too_long
        s.error("prefix", None, too_long)
        return
    cpt = s.prompt_chars_per_token()
    doc_text = context_prompt(int(n_pre * cpt), s.rng)
    with s.phase("prefix") as span:
        c0, why0 = counters(s)
        for i in range(a.prefix_requests):
            msgs: list[ChatMessage] = [{"role": "system", "content": doc_text},
                                       {"role": "user", "content": suffix_prompt(int(n_suf * cpt), s.rng)}]
            r = s.generate("prefix", [msgs], n_out, True)[0]
            span.tokens += r.completion_tokens or 0
            row: PrefixRow = {"i": i, "prompt_tokens": r.prompt_tokens, "ttft_s": None, "e2e_s": None,
                              "cached_tokens": r.cached_tokens, "error": r.failure}
            if r.failure:
                entry["failed"] += 1
                s.error("prefix", i, r.failure)
            else:
                entry["completed"] += 1
                row["ttft_s"], row["e2e_s"] = r.ttft, r.e2e
            entry["per_request"].append(row)
        c1, why1 = counters(s)
    entry.update(prefix_figures(entry["per_request"]))
    entry.update(prefix_hits(c0, c1, why0 or why1))
    if entry["failed"]:
        s.incomplete.append("prefix-cache request(s) failed (see errors)")
    hr = entry["hit_rate"]
    log(f"prefix {n_pre}+{n_suf} tokens: {entry['completed']}/{a.prefix_requests} completed, cold TTFT "
        f"{entry['cold_ttft_s'] or 0:.3f} s, warm TTFT p50 {entry['ttft_s']['p50'] or 0:.3f} s, hit rate "
        + (f"{hr:.3f}" if hr is not None else f"n/a ({entry['reason']})"))
