"""The decode rate of one stream and its per-token gaps, from a parsed ``StreamResult``:
token counts from the server, times from the client's reads."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .shapes import DecodeBound, DecodeSource, ServerTiming
from .sse import StreamResult


@dataclass
class DecodeRate:
    """The decode figure of one stream and how it was obtained (``decode_rate``).

    ``source``: ``usage`` (per-chunk usage counts, client timestamps), ``timings_per_token``
    (llama.cpp's running ``timings.predicted_n`` on every chunk, client timestamps),
    ``chunk_count`` (no per-chunk counts, final usage == content chunks: one token a chunk),
    ``server_timings`` (the server's own per-request timing: llama.cpp ``timings``),
    ``server_metrics`` (vLLM's per-request decode time from its metrics, single stream, where the
    client's reads could not time the decode: ``with_engine_timing``), or
    ``chunk_count_bounded`` (k more tokens than content chunks: the figure assumes the first chunk
    held one token; ``bound`` gives the range for a first chunk of 1 … k + 1 tokens).
    """

    tok_s: float | None
    first_chunk_tokens: int | None
    reason: str | None = None
    source: DecodeSource | None = None
    first_inferred: bool = False
    first_max: int | None = None
    bound: DecodeBound | None = None
    server: ServerTiming | None = None
    note: str | None = None
    retry: bool = False  # another attempt could give a figure (a burst, an error), not a structural gap


def decode_rate(res: StreamResult) -> DecodeRate:
    """decode = (tokens delivered by the last carrying chunk - tokens delivered by the first)
    / (t_last - t_first), token counts from the server, times from the client's reads.

    With per-chunk counts (usage, or llama.cpp's running timings) both counts are read from
    those chunks. Without them: one token a chunk when the final usage equals the number of
    content chunks; else the server's own timing when it sent one; else, with k more tokens
    than chunks, the figure for a one-token first chunk with its bound (first chunk 1 … k+1).
    """
    server = res.server_timing()
    if res.error:
        return DecodeRate(None, None, "request failed", retry=True, server=server)
    if res.t_first is None:
        return DecodeRate(None, None, "no chunk carried content or reasoning", retry=True, server=server)
    ct = res.completion_tokens
    dt = (res.t_last or 0.0) - res.t_first
    burst = (f"the whole stream arrived in one read {res.ttft:.3f} s after the request"
             f"{f' ({ct} tokens)' if ct is not None else ''}: no decode time")
    if res.per_chunk_counts():
        first, last = res.tokens_first, res.tokens_last
        assert first is not None and last is not None
        source = "usage" if res.continuous_usage() else "timings_per_token"
        note = None
        if ct is not None and ct > last:
            note = (f"the server counted {ct - last} token(s) after the last content chunk "
                    f"that produced no content")
        n = last - first
        if dt <= 0:
            return DecodeRate(None, first, burst, source, note=note, retry=True, server=server)
        if n <= 0:
            return DecodeRate(None, first, "fewer than two token arrivals: decode time undefined", source,
                          note=note, retry=True, server=server)
        return DecodeRate(n / dt, first, None, source, note=note, server=server)
    if ct is None:
        if server and server["decode_tok_s"] is not None:
            return DecodeRate(server["decode_tok_s"], None, None, "server_timings", server=server)
        return DecodeRate(None, None, "server sent no usage: token counts unknown", server=server)
    chunks = res.carrying
    seen = f"{ct} tokens in {chunks} content chunk{'s' if chunks != 1 else ''}"
    if ct == chunks:
        if dt <= 0 or ct < 2:
            if server and server["decode_tok_s"] is not None:
                return DecodeRate(server["decode_tok_s"], 1, None, "server_timings", first_inferred=True,
                              server=server)
            return DecodeRate(None, 1, burst if dt <= 0 else "fewer than two token arrivals: decode time "
                          "undefined", "chunk_count", first_inferred=True, retry=True, server=server)
        return DecodeRate((ct - 1) / dt, 1, None, "chunk_count", first_inferred=True, server=server)
    if ct < chunks:
        why = (f"server sent no per-chunk token counts and {seen}: more chunks than tokens, so "
               f"the tokens per chunk are unknown")
        if server and server["decode_tok_s"] is not None:
            return DecodeRate(server["decode_tok_s"], None, None, "server_timings", note=why, server=server)
        return DecodeRate(None, None, why, server=server)
    k = ct - chunks  # chunks that carried more than one token (or tokens that produced no chunk)
    note = (f"server sent no per-chunk token counts: {seen}, so {k} token(s) came together with "
            f"another in one chunk or produced no chunk; the first chunk held 1 to {k + 1} tokens")
    if server and server["decode_tok_s"] is not None:
        return DecodeRate(server["decode_tok_s"], 1, None, "server_timings", first_inferred=True,
                      first_max=k + 1, note=note, server=server)
    if dt <= 0:
        return DecodeRate(None, 1, burst, None, first_inferred=True, first_max=k + 1, note=note, retry=True)
    hi = (ct - 1) / dt
    lo = (ct - 1 - k) / dt
    return DecodeRate(hi, 1, None, "chunk_count_bounded", first_inferred=True, first_max=k + 1, note=note,
                  bound={"low": lo, "high": hi, "missing_chunks": k})

#: The client's first-to-last read may be shorter than the engine's first-to-last token by
#: scheduling jitter; below this share of it the reads were bunched and time nothing.
BUNCHED_SHARE = 0.5


def with_engine_timing(d: DecodeRate, res: StreamResult, timing: ServerTiming | None) -> DecodeRate:
    """The decode figure of a single-stream request given the engine's own timing of it
    (``metrics.engine_timing``), recorded beside the client's figure. The engine's figure
    (source ``server_metrics``) replaces the client's only where the client's reads could not
    time the decode: the stream arrived in one read or one chunk, or the reads spanned less than
    ``BUNCHED_SHARE`` of the engine's first-to-last token time (a busy client, proxy or API
    process delivered the tokens in a bunch; tokens cannot arrive faster than they were made)."""
    if timing is None or res.error or d.server is not None or timing.get("decode_tok_s") is None:
        return d
    engine_ms = float(timing["predicted_ms"])
    client_ms = ((res.t_last or 0.0) - (res.t_first or 0.0)) * 1000.0
    why = None
    if d.tok_s is None and d.retry and res.t_first is not None:
        why = f"{d.reason}; the figure is the engine's own decode time for this request"
    elif d.tok_s is not None and client_ms < BUNCHED_SHARE * engine_ms:
        why = (f"the client read the tokens within {client_ms:.1f} ms of the first, the engine made them "
               f"over {engine_ms:.1f} ms: the reads were bunched, so the figure is the engine's")
    if why is None:
        return replace(d, server=timing)
    return DecodeRate(timing["decode_tok_s"], d.first_chunk_tokens, source="server_metrics",
                      first_inferred=d.first_inferred, first_max=d.first_max, server=timing,
                      note="; ".join(x for x in (d.note, why) if x))


def itl_samples(res: StreamResult) -> list[float] | None:
    """Per-token inter-token latencies [s]: a gap before a chunk of k tokens gives k samples
    of gap/k. None when per-chunk token counts are unknown or the stream has no gap (one
    chunk, or everything in one read)."""
    if not res.marks or res.t_last is None or res.t_first is None or res.t_last <= res.t_first:
        return None
    if res.per_chunk_counts():
        out: list[float] = []
        prev_t, prev_n = res.marks[0]
        for t, n in res.marks[1:]:
            k = (n or 0) - (prev_n or 0)
            if k <= 0:
                continue
            out.extend([(t - prev_t) / k] * k)
            prev_t, prev_n = t, n
        return out
    if res.completion_tokens == res.carrying:
        ts = [m[0] for m in res.marks]
        return [b - a for a, b in zip(ts, ts[1:])]
    return None

def itl_reason(res: StreamResult) -> str:
    """Why itl_samples(res) is None."""
    if res.error:
        return "request failed"
    if not res.marks:
        return "no chunk carried content or reasoning"
    if res.t_last is not None and res.t_first is not None and res.t_last <= res.t_first:
        return "the whole stream arrived in one read: no gaps"
    ct = res.completion_tokens
    if ct is None:
        return "server sent no usage: token counts unknown"
    return (f"server sent no per-chunk token counts and {ct} tokens came in {res.carrying} "
            f"content chunks: tokens per gap unknown")
