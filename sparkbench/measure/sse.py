"""Server-sent events, parsed after the stream: HTTP chunked framing off, each event's JSON read
into a ``StreamResult`` with the arrival time of the bytes that carried it."""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Callable

from .client import RawStream, error_message
from .shapes import JSONObject, ServerTiming


def _dechunk(raw: RawStream) -> tuple[bytes, Callable[[int], float]]:
    """Body bytes without HTTP framing, and a function: body offset -> arrival time."""
    joined = b"".join(raw.pieces)
    ends: list[int] = []
    acc = 0
    for p in raw.pieces:
        acc += len(p)
        ends.append(acc)
    times = raw.times

    def raw_time(off: int) -> float:
        i = bisect.bisect_right(ends, off)
        return times[min(i, len(times) - 1)]

    if "chunked" not in raw.headers.get("transfer-encoding", "").lower():
        return joined, raw_time
    out: list[bytes] = []
    seg_dec: list[int] = []  # decoded start of each payload segment
    seg_raw: list[int] = []  # raw start of the same segment
    pos = dec = 0
    n = len(joined)
    while pos < n:
        eol = joined.find(b"\r\n", pos)
        if eol == -1:
            break
        try:
            size = int(joined[pos:eol].split(b";")[0].strip() or b"0", 16)
        except ValueError:
            break
        if size == 0:
            break
        start = eol + 2
        chunk = joined[start:start + size]
        seg_dec.append(dec)
        seg_raw.append(start)
        out.append(chunk)
        dec += len(chunk)
        pos = start + size + 2

    def dec_time(off: int) -> float:
        j = bisect.bisect_right(seg_dec, off) - 1
        if j < 0:
            return raw_time(0)
        return raw_time(seg_raw[j] + off - seg_dec[j])

    return b"".join(out), dec_time


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass
class StreamResult:
    """What one streamed chat completion delivered, with client-side arrival times [s]."""

    t_start: float
    status: int | None = None
    error: str | None = None
    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    done: bool = False
    cut: bool = False  # the stream broke off (transport error or closed before finish_reason)
    usage: JSONObject | None = None  # the last ``usage`` object (OpenAI), as the server sent it
    t_first: float | None = None  # first chunk carrying content or reasoning
    t_last: float | None = None  # last chunk carrying content or reasoning
    tokens_first: int | None = None  # running token count on the first carrying chunk
    tokens_last: int | None = None  # running token count on the last carrying chunk
    carrying: int = 0  # number of chunks carrying content or reasoning
    marks: list[tuple[float, int | None]] = field(default_factory=list)  # (time, cumulative tokens)
    usage_marks: int = 0  # carrying chunks whose count came from usage.completion_tokens
    timing_marks: int = 0  # carrying chunks whose count came from timings.predicted_n (llama.cpp)
    timings: JSONObject | None = None  # the last ``timings`` object (llama.cpp), as the server sent it
    system_fingerprint: str | None = None

    @property
    def completion_tokens(self) -> int | None:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return self.usage["completion_tokens"]
        return None

    @property
    def prompt_tokens(self) -> int | None:
        if self.usage and isinstance(self.usage.get("prompt_tokens"), int):
            return self.usage["prompt_tokens"]
        return None

    @property
    def reasoning_tokens(self) -> int | None:
        det = (self.usage or {}).get("completion_tokens_details") or {}
        v = det.get("reasoning_tokens") if isinstance(det, dict) else None
        return v if isinstance(v, int) else None

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start

    def continuous_usage(self) -> bool:
        """True when every chunk that carried text also carried a usage count."""
        return bool(self.marks) and self.usage_marks == len(self.marks)

    def per_chunk_counts(self) -> bool:
        """True when every chunk that carried text carried a running token count (usage or
        llama.cpp's per-token timings)."""
        return bool(self.marks) and all(m[1] is not None for m in self.marks)

    def server_timing(self) -> ServerTiming | None:
        """The server's own per-request decode timing (llama.cpp ``timings``): predicted_n tokens,
        the first to the last over predicted_ms; decode_tok_s = (predicted_n - 1) / predicted_ms,
        the same formula as ours (tokens after the first / time from the first to the last)."""
        t = self.timings or {}
        n, ms = t.get("predicted_n"), t.get("predicted_ms")
        if not isinstance(n, int) or isinstance(n, bool) or not isinstance(ms, (int, float)):
            return None
        out: ServerTiming = {"predicted_n": n, "predicted_ms": float(ms),
                             "predicted_per_second": t.get("predicted_per_second")
                             if isinstance(t.get("predicted_per_second"), (int, float)) else None,
                             "decode_tok_s": (n - 1) / ms * 1000.0 if n >= 2 and ms > 0 else None}
        return out


def parse_sse(raw: RawStream) -> StreamResult:
    """Parse the SSE events of one response (after the fact, off the timing path)."""
    res = StreamResult(t_start=raw.t_start, status=raw.status)
    body, when = _dechunk(raw) if raw.pieces else (b"", lambda off: raw.t_start)
    if raw.status is not None and raw.status != 200:
        res.error = f"HTTP {raw.status}: {error_message(body)}"
        return res
    pos = 0
    for m in _EVENT_END.finditer(body):
        _take_event(res, body[pos:m.start()], when(m.end() - 1))
        pos = m.end()
    if pos < len(body):  # last event without its blank line (stream cut or lenient server)
        _take_event(res, body[pos:], when(len(body) - 1))
    if raw.transport_error and not res.error:
        if res.finish_reason is None:
            res.error = raw.transport_error
            res.cut = True
    if res.error is None and raw.status == 200 and not res.done and (
            not raw.clean_end or res.finish_reason is None):
        res.error = "the stream broke off before it finished (the server closed the connection)"
        res.cut = True
    if res.error is None and raw.status is None:
        res.error = raw.transport_error or "no response"
    return res


def _take_event(res: StreamResult, event: bytes, t: float) -> None:
    data_lines = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            v = line[5:]
            data_lines.append(v[1:] if v.startswith(b" ") else v)
    if not data_lines:
        return
    data = b"\n".join(data_lines).strip()
    if data == b"[DONE]":
        res.done = True
        return
    try:
        obj = json.loads(data)
    except ValueError:
        return
    if not isinstance(obj, dict):
        return
    if obj.get("error"):
        err = obj["error"]
        res.error = "stream error: " + (err.get("message", str(err)) if isinstance(err, dict) else str(err))
        return
    fp = obj.get("system_fingerprint")
    if isinstance(fp, str) and fp:
        res.system_fingerprint = fp
    timings = obj.get("timings")
    if isinstance(timings, dict):
        res.timings = timings
    usage = obj.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(usage, dict):
        res.usage = usage
    pn = timings.get("predicted_n") if isinstance(timings, dict) else None
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return
    ch = choices[0]
    delta = ch.get("delta") or {}
    content = delta.get("content")
    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
    carried = False
    if isinstance(content, str) and content:
        res.content += content
        carried = True
    if isinstance(reasoning, str) and reasoning:
        res.reasoning += reasoning
        carried = True
    if not carried and delta.get("tool_calls"):
        carried = True
    if ch.get("finish_reason"):
        res.finish_reason = ch["finish_reason"]
    if carried:
        ntok: int | None = None
        if isinstance(n, int) and not isinstance(n, bool):
            ntok = n
            res.usage_marks += 1
        elif isinstance(pn, int) and not isinstance(pn, bool):
            ntok = pn  # llama.cpp with timings_per_token: the running count of generated tokens
            res.timing_marks += 1
        if res.t_first is None:
            res.t_first = t
            res.tokens_first = ntok
        res.t_last = t
        res.tokens_last = ntok
        res.carrying += 1
        res.marks.append((t, ntok))
