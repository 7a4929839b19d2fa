"""The server's Prometheus metrics: the text format, vLLM's speculative-decoding, prefix-cache and
per-request decode-time counters, and the figures from two scrapes."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from .figures import MEAN_ACCEPTANCE_LENGTH
from .shapes import ServerTiming

SPEC_PREFIX = "vllm:spec_decode_"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

Sample = tuple[str, dict[str, str], float]

_PROM_FLOATS = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


def _parse_prom_value(text: str) -> float:
    low = text.lower()
    if low in _PROM_FLOATS:
        return _PROM_FLOATS[low]
    return float(text)


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse Prometheus text format 0.0.4 into (name, labels, value) samples.

    Handles comments (# HELP / # TYPE), labels in any order, escaped label values (\\\\, \\",
    \\n), optional timestamps, NaN and +/-Inf, ``_created`` series (kept as ordinary samples).
    Malformed lines are skipped.
    """
    samples: list[tuple[str, dict[str, str], float]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            brace = line.find("{")
            space = line.find(" ")
            labels: dict[str, str] = {}
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace]
                i = brace + 1
                n = len(line)
                while True:
                    while i < n and line[i] in " ,":
                        i += 1
                    if i < n and line[i] == "}":
                        i += 1
                        break
                    eq = line.index("=", i)
                    key = line[i:eq].strip()
                    i = eq + 1
                    while line[i] == " ":
                        i += 1
                    if line[i] != '"':
                        raise ValueError("label value not quoted")
                    i += 1
                    buf = []
                    while True:
                        ch = line[i]
                        if ch == "\\":
                            nxt = line[i + 1]
                            buf.append("\n" if nxt == "n" else nxt)
                            i += 2
                        elif ch == '"':
                            i += 1
                            break
                        else:
                            buf.append(ch)
                            i += 1
                    labels[key] = "".join(buf)
                rest = line[i:].split()
            else:
                parts = line.split()
                name, rest = parts[0], parts[1:]
            if not rest:
                continue
            samples.append((name, labels, _parse_prom_value(rest[0])))
        except (ValueError, IndexError):
            continue
    return samples


class _SpecBase(TypedDict):
    acceptance_per_position: list[float] | None
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None
    num_drafts: int | None


class SpecFigures(_SpecBase, total=False):
    """Speculative-decoding figures over one interval or several; ``spec_delta`` (all
    keys), ``document`` (no counts, with ``reason``, where there is nothing to count)."""

    num_draft_tokens: int | None
    num_accepted_tokens: int | None
    reason: str


class SpecDecodeBlock(SpecFigures):
    """``spec_decode``: over the speed phases, and per phase; ``document.spec_decode_block``."""

    phases_included: list[str]
    by_phase: dict[str, SpecFigures]


@dataclass
class SpecCounters:
    """vLLM speculative-decoding counters summed over engines (label sets), one scrape."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: dict[int, float]


def spec_counters(samples: list[tuple[str, dict[str, str], float]]) -> SpecCounters | None:
    """Sum vLLM's spec-decode counters over all label sets; None when the server has none."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    seen = False
    for name, labels, value in samples:
        if not name.startswith(SPEC_PREFIX):
            continue
        if name == SPEC_DRAFTS:
            drafts += value
            seen = True
        elif name == SPEC_DRAFT_TOKENS:
            draft_tokens += value
        elif name == SPEC_ACCEPTED:
            accepted += value
        elif name == SPEC_PER_POS:
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                continue
            per_pos[pos] = per_pos.get(pos, 0.0) + value
    if not seen:
        return None
    return SpecCounters(drafts, draft_tokens, accepted, per_pos)


def spec_delta(before: SpecCounters | None, after: SpecCounters | None) -> SpecFigures | None:
    """Spec-decode figures over one interval from two scrapes.

    acceptance_per_position[i] = d per_pos[i] / d drafts; mean_acceptance_length = 1 + sum of
    them; draft_acceptance_rate = d accepted / d draft_tokens. Returns None without counters;
    fields are null (with ``reason``) when nothing was drafted or a counter went backwards.
    """
    if before is None or after is None:
        return None
    d_drafts = after.drafts - before.drafts
    d_tokens = after.draft_tokens - before.draft_tokens
    d_acc = after.accepted - before.accepted
    positions = sorted(set(before.per_pos) | set(after.per_pos))
    d_pos = [after.per_pos.get(p, 0.0) - before.per_pos.get(p, 0.0) for p in positions]
    out: SpecFigures = {
        "acceptance_per_position": None,
        MEAN_ACCEPTANCE_LENGTH.field: None,
        "draft_acceptance_rate": None,
        "num_drafts": int(d_drafts) if d_drafts >= 0 else None,
        "num_draft_tokens": int(d_tokens) if d_tokens >= 0 else None,
        "num_accepted_tokens": int(d_acc) if d_acc >= 0 else None,
    }
    if d_drafts < 0 or d_tokens < 0 or d_acc < 0 or any(d < 0 for d in d_pos):
        out["reason"] = "a spec-decode counter went backwards (server restarted?)"
        out["num_drafts"] = out["num_draft_tokens"] = out["num_accepted_tokens"] = None
        return out
    if d_drafts == 0:
        out["reason"] = "no drafts were made during this interval"
        return out
    rates = [d / d_drafts for d in d_pos]
    out["acceptance_per_position"] = rates
    out[MEAN_ACCEPTANCE_LENGTH.field] = 1.0 + sum(rates)
    out["draft_acceptance_rate"] = d_acc / d_tokens if d_tokens > 0 else None
    return out


def sum_spec_deltas(parts: list[tuple[SpecCounters, SpecCounters]]) -> SpecFigures | None:
    """Spec-decode figures over several intervals: deltas are added before dividing."""
    if not parts:
        return None
    zero = SpecCounters(0.0, 0.0, 0.0, {})
    total = SpecCounters(0.0, 0.0, 0.0, {})
    for b, a in parts:
        if a.drafts < b.drafts:
            continue
        total.drafts += a.drafts - b.drafts
        total.draft_tokens += a.draft_tokens - b.draft_tokens
        total.accepted += a.accepted - b.accepted
        for p in set(a.per_pos) | set(b.per_pos):
            total.per_pos[p] = total.per_pos.get(p, 0.0) + a.per_pos.get(p, 0.0) - b.per_pos.get(p, 0.0)
    return spec_delta(zero, total)


PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")


def prefix_cache_counters(samples: list[tuple[str, dict[str, str], float]]
                          ) -> tuple[tuple[float, float] | None, str | None]:
    """((queries, hits), None) from vLLM's ``vllm:prefix_cache_queries`` / ``_hits`` (tokens),
    summed over label sets; ``_total`` (the exposition's counter name) or the bare name;
    (None, why) when the server exposes neither."""
    q = [v for name, _l, v in samples if name in PREFIX_QUERIES]
    h = [v for name, _l, v in samples if name in PREFIX_HITS]
    if not q or not h:
        return None, "the server exposes no vllm:prefix_cache_queries / vllm:prefix_cache_hits counters"
    return (sum(q), sum(h)), None


DECODE_TIME_SUM = "vllm:request_decode_time_seconds_sum"
DECODE_TIME_COUNT = "vllm:request_decode_time_seconds_count"
GENERATION_TOKENS = ("vllm:generation_tokens_total", "vllm:generation_tokens")
#: ``server_timings.origin`` of a timing read from vLLM's metrics
ENGINE_ORIGIN = "vllm:request_decode_time_seconds"


@dataclass
class DecodeCounters:
    """vLLM's per-request decode-time histogram (sum [s] and count) and generated tokens, summed
    over engines (label sets), one scrape."""

    seconds: float
    requests: float
    tokens: float


def decode_counters(samples: list[tuple[str, dict[str, str], float]]) -> DecodeCounters | None:
    """The decode-time counters of one scrape; None when the server exposes no
    ``vllm:request_decode_time_seconds`` histogram or no generated-token counter."""
    secs = [v for name, _l, v in samples if name == DECODE_TIME_SUM]
    count = [v for name, _l, v in samples if name == DECODE_TIME_COUNT]
    tokens = [v for name, _l, v in samples if name in GENERATION_TOKENS]
    if not secs or not count or not tokens:
        return None
    return DecodeCounters(sum(secs), sum(count), sum(tokens))


def engine_timing(before: DecodeCounters | None, after: DecodeCounters | None,
                  completion_tokens: int | None) -> ServerTiming | None:
    """One request's decode timing on the engine's clock, from two scrapes around it: vLLM's
    ``request_decode_time_seconds`` is the time from the request's first generated token to its
    last, so decode = (tokens - 1) / seconds, the formula measure uses on the client's clock.
    None unless exactly one request finished between the scrapes and it generated
    ``completion_tokens`` tokens (the figure is that request's and no other's)."""
    if before is None or after is None or not completion_tokens or completion_tokens < 2:
        return None
    secs, done, tokens = (after.seconds - before.seconds, after.requests - before.requests,
                          after.tokens - before.tokens)
    if done != 1 or tokens != completion_tokens or secs <= 0:
        return None
    return {"predicted_n": int(tokens), "predicted_ms": secs * 1000.0, "predicted_per_second": None,
            "decode_tok_s": (tokens - 1) / secs, "origin": ENGINE_ORIGIN}
