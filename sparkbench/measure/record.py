"""One record per request: what every phase keeps of a streamed request, built once from its parsed
stream. Times are the client's reads (perf_counter seconds), token counts the server's ``usage``."""
from __future__ import annotations

from dataclasses import dataclass, field

from .decode_rate import DecodeRate, decode_rate, itl_reason, itl_samples
from .shapes import JSONObject, RunEntry
from .sse import StreamResult

NO_CONTENT = "no chunk carried content or reasoning"


def cached_tokens(usage: JSONObject | None) -> int | None:
    """usage.prompt_tokens_details.cached_tokens when the server sent it (vLLM: only with
    --enable-prompt-tokens-details, and only when some tokens were cached), else None."""
    det = (usage or {}).get("prompt_tokens_details")
    v = det.get("cached_tokens") if isinstance(det, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class RequestRecord:
    """One streamed request: its times, the server's counts, its decode rate and per-token gaps.

    ``error`` is the request's own error (HTTP status, transport, a stream that broke off);
    ``failure`` adds the one rule every phase uses for a request that gave nothing to time: no
    chunk carried content or reasoning."""

    t_start: float
    t_first: float | None
    t_last: float | None
    status: int | None
    error: str | None
    forced: bool
    decode: DecodeRate
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    content: str = ""
    content_chunks: int = 0
    continuous_usage: bool = False
    done: bool = False
    cut: bool = False
    itl: list[float] | None = None  # per-token gaps [s] (decode_rate.itl_samples); None: unknown
    itl_why: str = ""  # why ``itl`` is None
    stream: StreamResult | None = field(default=None, repr=False)

    @classmethod
    def from_stream(cls, r: StreamResult, forced: bool) -> "RequestRecord":
        return cls(t_start=r.t_start, t_first=r.t_first, t_last=r.t_last, status=r.status, error=r.error,
                   forced=forced, decode=decode_rate(r), prompt_tokens=r.prompt_tokens,
                   completion_tokens=r.completion_tokens, reasoning_tokens=r.reasoning_tokens,
                   cached_tokens=cached_tokens(r.usage), finish_reason=r.finish_reason, content=r.content,
                   content_chunks=r.carrying, continuous_usage=r.continuous_usage(), done=r.done, cut=r.cut,
                   itl=None if r.error else itl_samples(r), itl_why=itl_reason(r), stream=r)

    @property
    def failure(self) -> str | None:
        """Why the request gave nothing to time (None when it did)."""
        if self.error:
            return self.error
        return NO_CONTENT if self.t_first is None else None

    @property
    def ttft(self) -> float | None:
        """First content or reasoning chunk - send [s]; None for a failed request."""
        return None if self.error or self.t_first is None else self.t_first - self.t_start

    @property
    def e2e(self) -> float | None:
        """Last content or reasoning chunk - send [s]."""
        return None if self.failure or self.t_last is None else self.t_last - self.t_start

    @property
    def decode_tok_s(self) -> float | None:
        return self.decode.tok_s

    @property
    def lost(self) -> bool:
        """The connection failed or broke off: the server may have gone (check it)."""
        return self.status is None or self.cut

    def run_fields(self, requested: int) -> RunEntry:
        """The ``single.runs[]`` / ``parallel[].per_stream[]`` entry (docs/MEASUREMENT.md)."""
        d, ct = self.decode, self.completion_tokens
        rec: RunEntry = {
            "ttft_s": self.ttft if not self.error else None,
            "decode_tok_s": d.tok_s,
            "valid": d.tok_s is not None,
            "decode_source": d.source if d.tok_s is not None else None,
            "completion_tokens": ct,
            "prompt_tokens": self.prompt_tokens,
            "requested_tokens": requested,
            "first_chunk_tokens": d.first_chunk_tokens,
            "first_chunk_tokens_inferred": d.first_inferred,
            "content_chunks": self.content_chunks,
            "finish_reason": self.finish_reason,
            "forced_length": self.forced,
            "length_ok": (ct == requested) if ct is not None else None,
            "continuous_usage": self.continuous_usage,
            "done_marker": self.done,
            "error": self.error,
        }
        if d.first_max is not None:
            rec["first_chunk_tokens_max"] = d.first_max
        if d.bound is not None:
            rec["decode_bound"] = d.bound
        if d.server is not None:
            rec["server_timings"] = {k: d.server[k] for k in ("predicted_n", "predicted_ms", "predicted_per_second",
                                                              "origin") if k in d.server}
            rec["server_decode_tok_s"] = d.server["decode_tok_s"]
        if d.note:
            rec["chunk_note"] = d.note
        rec["itl_ms"] = [round(x * 1000.0, 3) for x in self.itl] if self.itl else None
        if not self.itl:
            rec["itl_reason"] = (self.itl_why if self.itl is None or self.error
                                 else "fewer than two token arrivals: no gap")
        if d.reason and not self.error:
            rec["decode_reason"] = d.reason
        elif self.error:
            rec["decode_reason"] = "request failed"
        return rec
