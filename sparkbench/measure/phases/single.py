"""Single stream: --runs speed requests one at a time (re-run while a run gave no figure for a
reason another attempt could change, at most 2 x --runs), then --target-precision. Where the
server exposes vLLM's per-request decode time, each request is timed on the engine's clock too
(``Session.generate_one``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..aggregate import summarise_single
from ..common import log
from ..figures import SINGLE_DECODE, TTFT
from ..record import RequestRecord
from ..shapes import RunEntry
from ..stats import PRECISION_RESAMPLES, PRECISION_SEED, median_precision_pct

if TYPE_CHECKING:
    from ..session import PhaseSpan, Session


def run(s: Session) -> str | None:
    """The ``single`` block; ``failed`` when no request succeeded."""
    a = s.args
    with s.phase("single") as span:
        block = s.doc[SINGLE_DECODE.block] = {
            SINGLE_DECODE.field: None, SINGLE_DECODE.low: None, SINGLE_DECODE.high: None, TTFT.field: None,
            "requested_runs": a.runs, "attempted_runs": 0, "valid_runs": 0, "n": 0,
            "warmup_prompt_tokens": s.warmup_prompt_tokens, "runs": []}
        attempt = _runs(s, span)
        if a.target_precision is not None:
            precision(s, span, attempt)
        else:
            block["precision"] = None
        if block["valid_runs"] < a.runs and block["runs"]:
            s.warn("single_runs_short", f"single stream: {block['valid_runs']} valid of {block['attempted_runs']} "
                   f"attempted runs ({a.runs} requested); the median is over {block['valid_runs']}",
                   valid=block["valid_runs"], attempted=block["attempted_runs"], requested=a.runs)
        if block.get("prompt_tokens_uniform") is False:
            s.warn("prompt_lengths_differ", "single stream: the speed prompts did not all have one token "
                   "length (see single.runs[].prompt_tokens)")
    return "failed" if all(r["error"] for r in block["runs"]) else None


def _runs(s: Session, span: PhaseSpan) -> int:
    """--runs runs, re-run while a run failed retryably (at most 2 x --runs); returns the attempts."""
    a = s.args
    block = s.doc["single"]
    limit, retryable, attempt = 2 * a.runs, False, 0
    while attempt < limit and block["valid_runs"] < a.runs:
        if attempt >= a.runs and not retryable:
            break
        if attempt == a.runs:
            log(f"single: {attempt - block['valid_runs']} of {attempt} runs gave no decode figure; re-running "
                f"until {a.runs} are valid (at most {limit} runs)")
        label = f"{attempt + 1}/{a.runs}" if attempt < a.runs else f"re-run {attempt + 1 - a.runs}"
        rec, r = one_run(s, attempt, label)
        span.tokens += r.completion_tokens or 0
        if not rec["valid"] and r.decode.retry:
            retryable = True
        attempt += 1
    return attempt


def one_run(s: Session, attempt: int, label: str) -> tuple[RunEntry, RequestRecord]:
    """One single-stream request: recorded in single.runs[], summarised, logged."""
    a = s.args
    r = s.generate_one("single", s.speed_messages(), a.output_tokens, True)
    rec = r.run_fields(a.output_tokens)
    rec["attempt"] = attempt
    block = s.doc["single"]
    block["runs"].append(rec)
    if r.error:
        s.error("single", attempt, r.error)
    s.check_length("single", attempt, rec)
    summarise_single(block, s.warmup_prompt_tokens)
    if r.error:
        log(f"single {label}: failed")
        return rec, r
    dec = (f"{rec['decode_tok_s']:.2f} tok/s" if rec["decode_tok_s"] is not None
           else f"no decode figure ({rec.get('decode_reason')})")
    med = block[SINGLE_DECODE.field]
    log(f"single {label}: decode {dec}, TTFT {rec['ttft_s']:.3f} s" + (f" (median so far {med:.2f} tok/s)" if med else ""))
    return rec, r


def precision(s: Session, span: PhaseSpan, attempt: int) -> None:
    """--target-precision: after --runs valid runs, more single-stream requests until the 95 %
    bootstrap interval of the median decode rate has a half-width <= target % of the median
    (``stats.median_precision_pct``), or --max-runs attempted runs in all. Records
    ``single.precision`` = {target_pct, achieved_pct, runs_used, reached, max_runs, resamples, seed}."""
    a = s.args
    block = s.doc["single"]
    target, max_runs = float(a.target_precision), a.max_runs or 4 * a.runs

    def achieved() -> float | None:
        return median_precision_pct([r["decode_tok_s"] for r in block["runs"] if r["decode_tok_s"] is not None])

    pct = achieved()
    if block["valid_runs"] < a.runs:
        log(f"single precision: only {block['valid_runs']} of {a.runs} runs are valid; not extending")
    else:
        extra = 0
        while (pct is None or pct > target) and attempt < max_runs:
            log(f"single precision: median known to ±{pct:.2f} % after {block['valid_runs']} runs; target "
                f"±{target:g} %, at most {max_runs} runs" if pct is not None else
                f"single precision: no interval yet; target ±{target:g} %, at most {max_runs} runs")
            extra += 1
            rec, r = one_run(s, attempt, f"precision run {extra}")
            attempt += 1
            span.tokens += r.completion_tokens or 0
            if not rec["valid"] and not r.decode.retry:
                log("single precision: the request gave no decode figure and another would not either; stopping")
                break
            pct = achieved()
    reached = pct is not None and pct <= target
    block["precision"] = {"target_pct": target, "achieved_pct": None if pct is None else round(pct, 3),
                          "runs_used": len(block["runs"]), "reached": reached, "max_runs": max_runs,
                          "resamples": PRECISION_RESAMPLES, "seed": PRECISION_SEED}
    log(f"single precision: {'reached' if reached else 'NOT reached'}: median known to "
        + (f"±{pct:.2f} %" if pct is not None else "(no interval: fewer than 2 valid runs)")
        + f" (target ±{target:g} %) with {len(block['runs'])} runs")
