#!/usr/bin/env python3
"""sparkbench measurement script: the seed article's method against any OpenAI-compatible server.

One file, standard library only, Python >= 3.10. Ansible copies it onto the host under test and
runs it next to the server; it also works by hand against vLLM, the sparkbench simulator, SGLang,
llama.cpp or any other OpenAI-compatible endpoint.

    python3 measure.py --base-url http://127.0.0.1:8000 --out result.json

Definitions (docs/MEASUREMENT.md has the full text):

* decode tok/s of one request = (completion_tokens - tokens in the first chunk)
  / (t_last_chunk - t_first_chunk), token counts from the server's ``usage`` (continuous usage
  stats) or llama.cpp's ``timings``, never from counting chunks; without per-chunk counts the
  server's own timing, or the figure with its bound (``decode_source`` says which). A run without
  a figure keeps ``decode_tok_s: null`` and its reason, and is re-run (at most 2 x --runs).
* itl_ms of one request = its per-token gaps [ms]: a gap before a chunk of k tokens counts as k
  gaps of gap/k (per-chunk token counts needed; else null with ``itl_reason``).
* precision (--target-precision PCT) = 100 x half-width of the 95 % bootstrap interval of the
  median decode rate (2000 resamples of whole requests, seed 0) / median; more single-stream
  runs until it is <= PCT or --max-runs runs were attempted.
* TTFT [s] = arrival of the first chunk that carries content or reasoning - request start.
* combined tok/s at N parallel = sum of completion_tokens / (last token time - first request start).
* spec decode per-position acceptance = delta accepted_per_pos{position=i} / delta num_drafts;
  mean acceptance length = 1 + sum; draft acceptance rate = delta accepted / delta draft_tokens.
* prefill tok/s = usage.prompt_tokens / TTFT.
* arrival rates (--rate, vllm bench serve's definitions): gaps ~ gamma(K, 1/(rate K)), rescaled so
  the last send is at N/rate; per request TPOT = (e2e - ttft)/(n - 1) (0 when n <= 1); good = completed
  and every --slo metric <= its limit; goodput = good / (last completion - first send);
  slo_met_share = good / requests; schedule error = actual send - scheduled send.
* tool calls (--tools, BFCL-AST buckets): per prompt pass, skipped (a no-call prompt under a forced
  tool_choice) or fail with the first bucket that applies: request_error, unparsed,
  should_not_have_called, wrong_tool, param_type_error (vs the tool's JSON schema),
  param_value_error (vs the acceptable values); parallel calls match in any order.

Exit codes: 0 complete, 1 failed (no single-stream request succeeded), 2 bad arguments or server
unreachable, 3 incomplete (server died or stalled, SIGINT/SIGTERM, an arrival-rate request failed,
every tool-call request failed).
"""
from __future__ import annotations

import argparse
import base64
import bisect
import http.client
import json
import math
import os
import platform
import random
import re
import selectors
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import urlsplit

SCRIPT_VERSION = "1.2.0"
SCHEMA_VERSION = "1"

EXIT_COMPLETE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3

SPEC_PREFIX = "vllm:spec_decode_"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

CONTEXT_OUTPUT_TOKENS = 16  # tokens generated per context-depth request (only TTFT matters)
SANDBOX_TIMEOUT_S = 20.0
CHECK_S = 0.05  # how often the stream reader checks timeouts and stalls [s]
SANDBOX_USER = 65534  # "nobody": the unshare sandbox drops to it when measure.py runs as root


class Unreachable(Exception):
    """The server cannot be reached or refuses the probe (exit 2)."""


class Abort(Exception):
    """The run cannot go on: the server died or stalled (exit 3, status incomplete)."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (exit 3, status incomplete). BaseException so no handler eats it."""


_SECRETS: list[str] = []


def redact(text: str) -> str:
    """Replace the API key (should a server echo it back) with [redacted]."""
    for secret in _SECRETS:
        text = text.replace(secret, "[redacted]")
    return text


def log(msg: str) -> None:
    """Progress line on stderr (stdout is reserved for the JSON with --out -)."""
    sys.stderr.write(redact(f"[measure] {msg}\n"))
    sys.stderr.flush()


def utc_now() -> str:
    """ISO 8601 UTC timestamp with seconds precision, e.g. 2026-11-30T03:00:00Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------------------
# Prometheus text exposition parser
# --------------------------------------------------------------------------------------------

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


def spec_delta(before: SpecCounters | None, after: SpecCounters | None) -> dict[str, Any] | None:
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
    out: dict[str, Any] = {
        "acceptance_per_position": None,
        "mean_acceptance_length": None,
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
    out["mean_acceptance_length"] = 1.0 + sum(rates)
    out["draft_acceptance_rate"] = d_acc / d_tokens if d_tokens > 0 else None
    return out


def sum_spec_deltas(parts: list[tuple[SpecCounters, SpecCounters]]) -> dict[str, Any] | None:
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


# --------------------------------------------------------------------------------------------
# HTTP: a small client for probes, and a selectors-based SSE reader for generations
# --------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """Where the server is: scheme, host, port and an optional path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str
    api_key: str | None

    @classmethod
    def from_url(cls, url: str, api_key: str | None) -> "Endpoint":
        parts = urlsplit(url)
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname or "", port, prefix, api_key)

    @property
    def netloc(self) -> str:
        """host:port, with an IPv6 address in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def display(self) -> str:
        """The base URL without credentials."""
        return f"{self.scheme}://{self.netloc}{self.prefix}"

    def headers(self) -> dict[str, str]:
        h = {"Host": self.netloc, "User-Agent": f"sparkbench-measure/{SCRIPT_VERSION}"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        """GET prefix+path; returns (status, body). Raises OSError on transport errors."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", self.prefix + path, headers=self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read()
        except http.client.HTTPException as exc:
            raise OSError(f"bad HTTP response: {exc}") from exc
        finally:
            conn.close()


@dataclass
class RawStream:
    """Bytes of one streamed response as they arrived: body pieces and their arrival times."""

    t_start: float = 0.0
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    transport_error: str | None = None
    clean_end: bool = False  # body ended by its own framing ([DONE], chunk terminator, length, EOF)


class _Conn:
    """State of one in-flight streamed request inside the selectors loop."""

    __slots__ = ("idx", "sock", "raw", "head", "mode", "remaining", "tail", "last_byte", "deadline", "tls")

    def __init__(self, idx: int, sock: socket.socket, raw: RawStream, deadline: float) -> None:
        self.idx = idx
        self.sock = sock
        self.raw = raw
        self.head = b""
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0
        self.tail = b""
        self.last_byte = raw.t_start
        self.deadline = deadline
        self.tls = isinstance(sock, ssl.SSLSocket)


def _build_post(ep: Endpoint, path: str, body: bytes, extra: dict[str, str] | None = None) -> bytes:
    h = ep.headers()
    if extra:
        h.update(extra)
    h.update({
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Content-Length": str(len(body)),
        "Connection": "close",
    })
    head = f"POST {ep.prefix}{path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    return head.encode("latin-1") + b"\r\n" + body


def _open(ep: Endpoint, timeout: float) -> socket.socket:
    sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ep.scheme == "https":
        ctx = ssl.create_default_context()
        sock = ctx.wrap_socket(sock, server_hostname=ep.host)
    return sock


def stream_requests(ep: Endpoint, bodies: list[bytes], request_timeout: float,
                    stall_timeout: float, path: str = "/v1/chat/completions") -> list[RawStream]:
    """Send every body at once and follow all responses in one thread with ``selectors``.

    Per received segment the loop only does recv(), perf_counter(), two list appends and an
    end-of-body check; SSE framing and JSON are parsed after the stream ends (decode_stream), so
    timestamps sit next to the socket read whatever the chunk rate. Raises Abort when no stream
    has received a byte for ``stall_timeout`` seconds.
    """
    sel = selectors.DefaultSelector()
    results = [RawStream() for _ in bodies]
    conns: dict[int, _Conn] = {}
    try:
        for i, body in enumerate(bodies):
            raw = results[i]
            raw.t_start = time.perf_counter()
            try:
                sock = _open(ep, min(30.0, request_timeout))
                sock.sendall(_build_post(ep, path, body))
                sock.setblocking(False)
            except (OSError, ssl.SSLError) as exc:
                raw.transport_error = f"cannot send the request: {exc.strerror or exc}"
                continue
            c = _Conn(i, sock, raw, raw.t_start + request_timeout)
            conns[sock.fileno()] = c
            sel.register(sock, selectors.EVENT_READ, c)
            # read what earlier requests already received, so a long wave of sends does not
            # delay their timestamps
            for key, _ in sel.select(0):
                _read_ready(key.data)
                if key.data.mode == "done":
                    sel.unregister(key.data.sock)
                    key.data.sock.close()
                    del conns[key.fd]
        # Bookkeeping (timeouts, stall) runs at most every CHECK_S, never per chunk.
        select = sel.select
        perf = time.perf_counter
        next_check = 0.0
        while conns:
            for key, _ in select(CHECK_S):
                c = key.data
                _read_ready(c)
                if c.mode == "done":
                    sel.unregister(c.sock)
                    c.sock.close()
                    del conns[key.fd]
            now = perf()
            if now < next_check:
                continue
            next_check = now + CHECK_S
            _expire(sel, conns, now, request_timeout, stall_timeout)
    finally:
        _close_all(sel, conns)
    return results


def _expire(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], now: float, request_timeout: float,
            stall_timeout: float) -> None:
    """Bookkeeping of the open requests (every CHECK_S, never per chunk): close the ones past their
    deadline with the reason; raise Abort when none has received a byte for ``stall_timeout`` s."""
    for fd, c in list(conns.items()):
        if now >= c.deadline:
            c.raw.transport_error = f"request timed out after {request_timeout:g} s (--request-timeout)"
            sel.unregister(c.sock)
            c.sock.close()
            del conns[fd]
    if conns and all(now - c.last_byte >= stall_timeout for c in conns.values()):
        raise Abort(f"server stalled: no bytes for {stall_timeout:g} s (--stall-timeout) "
                    f"on {len(conns)} open request(s)")


def _close_all(sel: selectors.BaseSelector, conns: dict[int, "_Conn"]) -> None:
    """Close every open request and the selector."""
    for c in conns.values():
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
    sel.close()


def stream_scheduled(ep: Endpoint, bodies: list[bytes], offsets: list[float], request_timeout: float,
                     stall_timeout: float, max_concurrency: int | None = None,
                     request_ids: list[str] | None = None,
                     path: str = "/v1/chat/completions") -> tuple[list[RawStream], float]:
    """Send body i at ``t0 + offsets[i]`` (perf_counter) and follow every response, all in one
    thread with ``selectors`` (the arrival-rate phase; ``stream_requests`` sends all at once).

    Between sends the loop waits in select() until the next send is due (the last 1.5 ms by
    polling, as epoll rounds timeouts up to whole ms, so a send goes out within tens of
    microseconds of its time); received segments are read and stamped exactly as in
    ``stream_requests``. ``max_concurrency`` holds a due request
    until fewer than that many are in flight (vLLM's --max-concurrency semaphore). Each
    RawStream's ``t_start`` is the actual send time (perf_counter, just before connect). Returns
    (streams, t0). Raises Abort when requests are open and none has received a byte for
    ``stall_timeout`` seconds.
    """
    sel = selectors.DefaultSelector()
    results = [RawStream() for _ in bodies]
    conns: dict[int, _Conn] = {}
    perf = time.perf_counter
    order = sorted(range(len(bodies)), key=lambda i: offsets[i])
    nxt = 0
    t0 = perf()

    def drop(fd: int, c: _Conn) -> None:
        sel.unregister(c.sock)
        c.sock.close()
        del conns[fd]

    def read_some(timeout: float) -> None:
        for key, _ in sel.select(timeout):
            c = key.data
            _read_ready(c)
            if c.mode == "done":
                drop(key.fd, c)

    try:
        next_check = 0.0
        while nxt < len(order) or conns:
            now = perf()
            # send every request that is due (and allowed by the concurrency limit)
            while nxt < len(order) and t0 + offsets[order[nxt]] <= now and (
                    max_concurrency is None or len(conns) < max_concurrency):
                i = order[nxt]
                nxt += 1
                raw = results[i]
                raw.t_start = perf()
                extra = {"X-Request-Id": request_ids[i]} if request_ids else None
                try:
                    sock = _open(ep, min(30.0, request_timeout))
                    sock.sendall(_build_post(ep, path, bodies[i], extra))
                    sock.setblocking(False)
                except (OSError, ssl.SSLError) as exc:
                    raw.transport_error = f"cannot send the request: {exc.strerror or exc}"
                    continue
                c = _Conn(i, sock, raw, raw.t_start + request_timeout)
                conns[sock.fileno()] = c
                sel.register(sock, selectors.EVENT_READ, c)
                now = perf()
            # wait for bytes until the next send is due
            # (epoll rounds its timeout up to whole ms: the last 1.5 ms before a send are polled)
            wait = CHECK_S
            if nxt < len(order) and (max_concurrency is None or len(conns) < max_concurrency):
                due = t0 + offsets[order[nxt]] - now
                wait = min(wait, due - 0.0015 if due > 0.002 else 0.0)
            if conns:
                read_some(wait)
            elif wait > 0:
                time.sleep(wait)
            now = perf()
            if now < next_check:
                continue
            next_check = now + CHECK_S
            _expire(sel, conns, now, request_timeout, stall_timeout)
    finally:
        _close_all(sel, conns)
    return results, t0


def _read_ready(c: _Conn) -> None:
    """Drain a readable socket; record each segment with the time it was read."""
    while True:
        try:
            data = c.sock.recv(262144)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        except (OSError, ssl.SSLError) as exc:
            c.raw.transport_error = f"connection error mid-stream: {exc}"
            c.mode = "done"
            return
        t = time.perf_counter()
        if not data:
            if c.raw.status is None:
                c.raw.transport_error = "server closed the connection before answering"
            elif c.mode == "close":
                c.raw.clean_end = True  # a close-delimited body ends with EOF
            c.mode = "done"
            return
        c.last_byte = t
        if c.raw.status is None:
            _take_head(c, data, t)
        else:
            _take_body(c, data, t)
        if c.mode == "done":
            return
        if c.tls and c.sock.pending():
            continue
        return


def _take_head(c: _Conn, data: bytes, t: float) -> None:
    c.head += data
    end = c.head.find(b"\r\n\r\n")
    if end == -1:
        if len(c.head) > 65536:
            c.raw.transport_error = "response header too long"
            c.mode = "done"
        return
    lines = c.head[:end].decode("latin-1").split("\r\n")
    try:
        c.raw.status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        c.raw.transport_error = f"not an HTTP response: {lines[0][:80]!r}"
        c.mode = "done"
        return
    for line in lines[1:]:
        k, _, v = line.partition(":")
        c.raw.headers[k.strip().lower()] = v.strip()
    if "chunked" in c.raw.headers.get("transfer-encoding", "").lower():
        c.mode = "chunked"
    elif "content-length" in c.raw.headers:
        c.mode = "length"
        c.remaining = int(c.raw.headers["content-length"])
    else:
        c.mode = "close"
    rest = c.head[end + 4:]
    c.head = b""
    if c.mode == "length" and c.remaining == 0:
        c.mode = "done"
        c.raw.clean_end = True
        return
    if rest:
        _take_body(c, rest, t)


def _take_body(c: _Conn, data: bytes, t: float) -> None:
    c.raw.pieces.append(data)
    c.raw.times.append(t)
    if c.mode == "length":
        c.remaining -= len(data)
        if c.remaining <= 0:
            c.mode = "done"
            c.raw.clean_end = True
        return
    tail = c.tail + data[-48:]
    c.tail = tail[-48:]
    if c.mode == "chunked" and tail.endswith(b"\r\n0\r\n\r\n"):
        c.mode = "done"
        c.raw.clean_end = True
    elif c.raw.status == 200 and (b"\ndata: [DONE]" in tail or b"\ndata:[DONE]" in tail):
        c.mode = "done"
        c.raw.clean_end = True


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
class Decode:
    """The decode figure of one stream and how it was obtained (StreamResult.decode_info).

    ``source``: ``usage`` (per-chunk usage counts, client timestamps), ``timings_per_token``
    (llama.cpp's running ``timings.predicted_n`` on every chunk, client timestamps),
    ``chunk_count`` (no per-chunk counts, final usage == content chunks: one token a chunk),
    ``server_timings`` (the server's own per-request timing: llama.cpp ``timings``), or
    ``chunk_count_bounded`` (k more tokens than content chunks: the figure assumes the first chunk
    held one token; ``bound`` gives the range for a first chunk of 1 … k + 1 tokens).
    """

    tok_s: float | None
    first_chunk_tokens: int | None
    reason: str | None = None
    source: str | None = None
    first_inferred: bool = False
    first_max: int | None = None
    bound: dict[str, Any] | None = None
    server: dict[str, Any] | None = None
    note: str | None = None
    retry: bool = False  # another attempt could give a figure (a burst, an error), not a structural gap


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
    usage: dict[str, Any] | None = None
    t_first: float | None = None  # first chunk carrying content or reasoning
    t_last: float | None = None  # last chunk carrying content or reasoning
    tokens_first: int | None = None  # running token count on the first carrying chunk
    tokens_last: int | None = None  # running token count on the last carrying chunk
    carrying: int = 0  # number of chunks carrying content or reasoning
    marks: list[tuple[float, int | None]] = field(default_factory=list)  # (time, cumulative tokens)
    usage_marks: int = 0  # carrying chunks whose count came from usage.completion_tokens
    timing_marks: int = 0  # carrying chunks whose count came from timings.predicted_n (llama.cpp)
    timings: dict[str, Any] | None = None  # the last ``timings`` object (llama.cpp)
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

    def server_timing(self) -> dict[str, Any] | None:
        """The server's own per-request decode timing (llama.cpp ``timings``): predicted_n tokens,
        the first to the last over predicted_ms; decode_tok_s = (predicted_n - 1) / predicted_ms,
        the same formula as ours (tokens after the first / time from the first to the last)."""
        t = self.timings or {}
        n, ms = t.get("predicted_n"), t.get("predicted_ms")
        if not isinstance(n, int) or isinstance(n, bool) or not isinstance(ms, (int, float)):
            return None
        out: dict[str, Any] = {"predicted_n": n, "predicted_ms": float(ms),
                               "predicted_per_second": t.get("predicted_per_second")
                               if isinstance(t.get("predicted_per_second"), (int, float)) else None,
                               "decode_tok_s": (n - 1) / ms * 1000.0 if n >= 2 and ms > 0 else None}
        return out

    def decode(self) -> tuple[float | None, int | None, str | None]:
        """(decode tok/s, tokens in the first chunk, reason when no figure); see decode_info."""
        d = self.decode_info()
        return d.tok_s, d.first_chunk_tokens, d.reason

    def decode_info(self) -> Decode:
        """decode = (tokens delivered by the last carrying chunk - tokens delivered by the first)
        / (t_last - t_first), token counts from the server, times from the client's reads.

        With per-chunk counts (usage, or llama.cpp's running timings) both counts are read from
        those chunks. Without them: one token a chunk when the final usage equals the number of
        content chunks; else the server's own timing when it sent one; else, with k more tokens
        than chunks, the figure for a one-token first chunk with its bound (first chunk 1 … k+1).
        """
        server = self.server_timing()
        if self.error:
            return Decode(None, None, "request failed", retry=True, server=server)
        if self.t_first is None:
            return Decode(None, None, "no chunk carried content or reasoning", retry=True, server=server)
        ct = self.completion_tokens
        dt = (self.t_last or 0.0) - self.t_first
        burst = (f"the whole stream arrived in one read {self.ttft:.3f} s after the request"
                 f"{f' ({ct} tokens)' if ct is not None else ''}: no decode time")
        if self.per_chunk_counts():
            first, last = self.tokens_first, self.tokens_last
            assert first is not None and last is not None
            source = "usage" if self.continuous_usage() else "timings_per_token"
            note = None
            if ct is not None and ct > last:
                note = (f"the server counted {ct - last} token(s) after the last content chunk "
                        f"that produced no content")
            n = last - first
            if dt <= 0:
                return Decode(None, first, burst, source, note=note, retry=True, server=server)
            if n <= 0:
                return Decode(None, first, "fewer than two token arrivals: decode time undefined", source,
                              note=note, retry=True, server=server)
            return Decode(n / dt, first, None, source, note=note, server=server)
        if ct is None:
            if server and server["decode_tok_s"] is not None:
                return Decode(server["decode_tok_s"], None, None, "server_timings", server=server)
            return Decode(None, None, "server sent no usage: token counts unknown", server=server)
        chunks = self.carrying
        seen = f"{ct} tokens in {chunks} content chunk{'s' if chunks != 1 else ''}"
        if ct == chunks:
            if dt <= 0 or ct < 2:
                if server and server["decode_tok_s"] is not None:
                    return Decode(server["decode_tok_s"], 1, None, "server_timings", first_inferred=True,
                                  server=server)
                return Decode(None, 1, burst if dt <= 0 else "fewer than two token arrivals: decode time "
                              "undefined", "chunk_count", first_inferred=True, retry=True, server=server)
            return Decode((ct - 1) / dt, 1, None, "chunk_count", first_inferred=True, server=server)
        if ct < chunks:
            why = (f"server sent no per-chunk token counts and {seen}: more chunks than tokens, so "
                   f"the tokens per chunk are unknown")
            if server and server["decode_tok_s"] is not None:
                return Decode(server["decode_tok_s"], None, None, "server_timings", note=why, server=server)
            return Decode(None, None, why, server=server)
        k = ct - chunks  # chunks that carried more than one token (or tokens that produced no chunk)
        note = (f"server sent no per-chunk token counts: {seen}, so {k} token(s) came together with "
                f"another in one chunk or produced no chunk; the first chunk held 1 to {k + 1} tokens")
        if server and server["decode_tok_s"] is not None:
            return Decode(server["decode_tok_s"], 1, None, "server_timings", first_inferred=True,
                          first_max=k + 1, note=note, server=server)
        if dt <= 0:
            return Decode(None, 1, burst, None, first_inferred=True, first_max=k + 1, note=note, retry=True)
        hi = (ct - 1) / dt
        lo = (ct - 1 - k) / dt
        return Decode(hi, 1, None, "chunk_count_bounded", first_inferred=True, first_max=k + 1, note=note,
                      bound={"low": lo, "high": hi, "missing_chunks": k})

    def itl_samples(self) -> list[float] | None:
        """Per-token inter-token latencies [s]: a gap before a chunk of k tokens gives k samples
        of gap/k. None when per-chunk token counts are unknown or the stream has no gap (one
        chunk, or everything in one read)."""
        if not self.marks or self.t_last is None or self.t_first is None or self.t_last <= self.t_first:
            return None
        if self.per_chunk_counts():
            out: list[float] = []
            prev_t, prev_n = self.marks[0]
            for t, n in self.marks[1:]:
                k = (n or 0) - (prev_n or 0)
                if k <= 0:
                    continue
                out.extend([(t - prev_t) / k] * k)
                prev_t, prev_n = t, n
            return out
        if self.completion_tokens == self.carrying:
            ts = [m[0] for m in self.marks]
            return [b - a for a, b in zip(ts, ts[1:])]
        return None

    def itl_reason(self) -> str:
        """Why itl_samples() is None."""
        if self.error:
            return "request failed"
        if not self.marks:
            return "no chunk carried content or reasoning"
        if self.t_last is not None and self.t_first is not None and self.t_last <= self.t_first:
            return "the whole stream arrived in one read: no gaps"
        ct = self.completion_tokens
        if ct is None:
            return "server sent no usage: token counts unknown"
        return (f"server sent no per-chunk token counts and {ct} tokens came in {self.carrying} "
                f"content chunks: tokens per gap unknown")


def decode_stream(raw: RawStream) -> StreamResult:
    """Parse the SSE events of one response (after the fact, off the timing path)."""
    res = StreamResult(t_start=raw.t_start, status=raw.status)
    body, when = _dechunk(raw) if raw.pieces else (b"", lambda off: raw.t_start)
    if raw.status is not None and raw.status != 200:
        res.error = f"HTTP {raw.status}: {_error_message(body)}"
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


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("detail") or err)
        elif isinstance(obj, dict) and "detail" in obj:
            text = str(obj["detail"])
        else:
            text = str(err)
    except ValueError:
        pass
    text = " ".join(text.split())
    return text[:300] or "(empty body)"


# --------------------------------------------------------------------------------------------
# Prompts: real text, varied per request
# --------------------------------------------------------------------------------------------

TOPICS = [
    "how a lighthouse keeper's work changed when lamps were electrified",
    "the way bees find flowers and tell the hive where they are",
    "why bread dough rises and what bakers do to control it",
    "how a river shapes its valley over thousands of years",
    "the history of mechanical clocks and the escapement",
    "how sailors navigated across oceans before satellites",
    "what happens inside a volcano before it erupts",
    "how a city water supply is cleaned and delivered to homes",
    "the life cycle of a forest after a wildfire",
    "how printing with movable type spread across Europe",
    "why the sky is blue at noon and red at sunset",
    "how a bicycle stays upright while it moves",
    "the way coral reefs grow and why they are fragile",
    "how trains were signalled safely before computers",
    "what makes a good cup of tea, from leaf to pot",
    "how glaciers carve mountains and leave lakes behind",
]

PASSAGES = [
    "The harbour town woke slowly. Fishing boats came in with the tide, gulls followed them in "
    "long loops, and the first carts rattled over the cobbles towards the market. The baker had "
    "been up since three, and the smell of fresh loaves drifted down the hill to the quay, where "
    "the harbour master was already arguing with a captain about the price of a berth.",
    "In the mountains the weather changes without warning. A clear morning can turn to fog by "
    "noon, and walkers who set out in shirtsleeves find themselves searching for the next cairn "
    "in a grey wall of cloud. Experienced guides carry a map, a compass and a spare layer, and "
    "they turn back early rather than late, because the mountain will still be there next year.",
    "A library is a machine for remembering. Each shelf holds the patient work of people who "
    "wrote things down so that others would not have to start again from nothing. Readers come "
    "and go, borrowing a week of someone else's thinking, and the catalogue keeps track of it "
    "all with a quiet order that has changed very little in a hundred years.",
    "The old railway line was closed decades ago, but the embankment remains, and in spring it "
    "fills with wild flowers. Children cycle along the cinder path where goods trains once "
    "carried coal to the coast, and the brick bridges, too solid to demolish, now frame views "
    "of fields and distant church towers that the engine drivers would have known well.",
    "Cooking rice well is a small art. Rinse the grains until the water runs almost clear, "
    "measure the water by the knuckle or by the cup, bring it to the boil and then lower the "
    "heat and leave the lid alone. Ten minutes of rest after the heat is off matters as much as "
    "the cooking, because the steam finishes the work evenly through the pot.",
    "Astronomers in the seventeenth century ground their own lenses, and a good telescope was "
    "the product of patience as much as skill. They recorded the moons of Jupiter night after "
    "night, noticing that the little points of light vanished and reappeared on a schedule, and "
    "from those timings came one of the first estimates of the speed of light.",
    "A workshop tells the story of its owner. The tools hang in outline on the wall, each in its "
    "place, and the bench carries the marks of years of sawing, planing and gluing. Offcuts are "
    "kept in a box under the window because a small piece of good oak is always useful, and the "
    "sawdust in the corner smells of cedar and pine and linseed oil.",
    "Markets in the old quarter open before dawn. Traders lay out tomatoes, peppers, herbs and "
    "cheeses in careful rows, and regular customers know which stall has the best olives and "
    "which one sells yesterday's bread at half price. By ten the crowd is thick, by two the "
    "stalls are packed away, and the square is swept clean for the evening cafes.",
]


def make_nonce(rng: random.Random) -> str:
    """A short unique tag put first in every prompt so prefix caching cannot reuse a request."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


SPEED_TOPIC = TOPICS[0]  # every speed prompt explains the same topic, so all have one token length
SPEED_TAG_DIGITS = 12


def speed_tag(rng: random.Random) -> str:
    """A unique tag of SPEED_TAG_DIGITS single digits separated by spaces ("4 0 7 …").

    One digit between spaces is one fixed-size unit in common tokenizers (digits are split or
    kept as " d" tokens alike), so every tag has the same token length while its content differs.
    """
    return " ".join(rng.choice("0123456789") for _ in range(SPEED_TAG_DIGITS))


def speed_prompt(rng: random.Random) -> str:
    """A real-text instruction of one fixed token length: the same instruction every time,
    preceded by a unique tag so prefix caching cannot reuse an earlier request."""
    return (f"Request {speed_tag(rng)}. Write a long, detailed and well organised explanation of "
            f"{SPEED_TOPIC}. Use full paragraphs of plain prose and keep going until you have covered "
            f"the subject thoroughly.")


def context_prompt(chars: int, rng: random.Random) -> str:
    """About ``chars`` characters of real prose (rotating passages), then a short question."""
    head = f"Document {make_nonce(rng)}. Read the following notes and then answer the question.\n\n"
    parts = [head]
    total = len(head)
    k = rng.randrange(len(PASSAGES))
    sec = 1
    while total < chars:
        p = f"Section {sec}. {PASSAGES[k % len(PASSAGES)]}\n\n"
        parts.append(p)
        total += len(p)
        k += 1
        sec += 1
    parts.append("Question: in one sentence, what is the first section about?")
    return "".join(parts)


def chat_body(model: str, messages: list[dict[str, Any]], max_tokens: int, forced: bool,
              level: int, timings_per_token: bool = False) -> bytes:
    """A streamed chat completion request.

    level 0: include_usage + continuous_usage_stats (+ min_tokens/ignore_eos when forced, and
    llama.cpp's timings_per_token when asked); level 1: include_usage only, no extensions;
    level 2: no stream_options at all.
    """
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                            "max_tokens": max_tokens}
    if level == 0:
        body["max_completion_tokens"] = max_tokens
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if forced:
            body["min_tokens"] = max_tokens
            body["ignore_eos"] = True
        if timings_per_token:
            body["timings_per_token"] = True
    elif level == 1:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------------------------
# Prefix-cache and multi-turn workloads (docs/MEASUREMENT.md "Prefix caching", "Multi-turn")
# --------------------------------------------------------------------------------------------

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


def cached_tokens(usage: dict[str, Any] | None) -> int | None:
    """usage.prompt_tokens_details.cached_tokens when the server sent it (vLLM: only with
    --enable-prompt-tokens-details, and only when some tokens were cached), else None."""
    det = (usage or {}).get("prompt_tokens_details")
    v = det.get("cached_tokens") if isinstance(det, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _prose(chars: int, rng: random.Random) -> str:
    """About ``chars`` characters of real prose from the passages, starting at a random one."""
    parts: list[str] = []
    total = 0
    k = rng.randrange(len(PASSAGES))
    while total < chars:
        parts.append(PASSAGES[k % len(PASSAGES)])
        total += len(parts[-1]) + 1
        k += 1
    return " ".join(parts)[:max(chars, 1)]


def suffix_prompt(chars: int, rng: random.Random) -> str:
    """A prefix-phase user message: a unique tag first (no two requests share it), then prose."""
    head = f"Request {make_nonce(rng)}. About the document above: "
    return head + _prose(max(chars - len(head) - 40, 1), rng) + " Answer in one sentence."


def turn_prompt(turn: int, chars: int, rng: random.Random) -> str:
    """A multi-turn user message: the first starts with a unique tag (each conversation its own
    history, none shared with another run), every turn brings about ``chars`` characters of prose."""
    head = (f"Conversation {make_nonce(rng)}. " if turn == 1 else "") + f"Turn {turn}. Here are more notes: "
    return head + _prose(max(chars - len(head) - 40, 1), rng) + " What stands out so far?"


def count_waves(spans: list[tuple[float, float]]) -> tuple[int, int]:
    """(waves, queued) of one parallel wave from each request's (t_first, t_last).

    A request is *queued* when its first token came after another request of the wave had
    delivered its last one, and later than the wave's earliest first token by more than half the
    median stream duration (t_last - t_first), so a stream that ended early (a burst, a short
    stream) does not count as a slot freed. ``waves`` is the longest chain of requests each
    starting after the previous one finished: 8 requests on 4 slots give 2.
    """
    order = sorted(spans)
    if not order:
        return 0, 0
    durations = sorted(tl - tf for tf, tl in order)
    half = 0.5 * durations[len(durations) // 2] if len(durations) % 2 else \
        0.25 * (durations[len(durations) // 2 - 1] + durations[len(durations) // 2])
    first0 = order[0][0]
    depth: list[int] = []
    queued = 0
    for j, (tf, _tl) in enumerate(order):
        late = half > 0 and tf - first0 > half
        before = [depth[i] for i in range(j) if order[i][1] < tf] if late else []
        depth.append(1 + max(before, default=0))
        queued += bool(before)
    return max(depth), queued


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """q-th percentile (0..100) with linear interpolation between closest ranks (numpy default)."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def pcts(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99)}


def median(values: list[float]) -> float | None:
    return percentile(values, 50)


def bootstrap_medians(values: list[float], resamples: int, rng: random.Random) -> list[float]:
    """Medians of ``resamples`` bootstrap resamples of ``values`` (drawn with replacement, same
    size), sorted ascending. Each value is one whole request (its decode rate), so gaps inside
    a request are never resampled apart. Empty when ``values`` is empty."""
    if not values:
        return []
    k = len(values)
    out = []
    for _ in range(resamples):
        s = sorted(rng.choices(values, k=k))
        mid = k // 2
        out.append(s[mid] if k % 2 else (s[mid - 1] + s[mid]) / 2.0)
    out.sort()
    return out


PRECISION_RESAMPLES = 2000  # bootstrap resamples behind --target-precision
PRECISION_SEED = 0  # fixed seed: the same runs always give the same achieved precision


def median_precision_pct(values: list[float], resamples: int = PRECISION_RESAMPLES,
                         seed: int = PRECISION_SEED) -> float | None:
    """Half-width of the 95 % bootstrap interval of the median, in % of the median:
    100 x (q97.5 - q2.5) / 2 / median, q the percentiles of ``bootstrap_medians(values,
    resamples, Random(seed))`` (whole requests resampled). None with fewer than 2 values or a
    median <= 0."""
    if len(values) < 2:
        return None
    mid = median(values)
    if not mid or mid <= 0:
        return None
    meds = bootstrap_medians(values, resamples, random.Random(seed))
    lo, hi = percentile(meds, 2.5), percentile(meds, 97.5)
    assert lo is not None and hi is not None
    return 100.0 * (hi - lo) / 2.0 / mid


# --------------------------------------------------------------------------------------------
# Quality checks and the sandbox
# --------------------------------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_CODE = re.compile(r"```[ \t]*(?:python3?|py)[^\n]*\n(.*?)```", re.S | re.I)


def final_answer(res: StreamResult) -> str:
    """The answer with reasoning excluded: content minus any inline <think>...</think> block."""
    return _THINK.sub("", res.content).strip()


def japanese_ratio(text: str) -> float:
    """Share of non-whitespace characters in Japanese scripts (kana, CJK, CJK punctuation)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    jp = 0
    for c in chars:
        o = ord(c)
        if (0x3000 <= o <= 0x30FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
                or 0xFF00 <= o <= 0xFFEF or 0xF900 <= o <= 0xFAFF):
            jp += 1
    return jp / len(chars)


def last_number(text: str) -> float | None:
    """The last number in the text (full-width digits and thousands separators understood)."""
    norm = unicodedata.normalize("NFKC", text)
    norm = re.sub(r"(?<=\d),(?=\d{3})", "", norm)
    found = re.findall(r"-?\d+(?:\.\d+)?", norm)
    return float(found[-1]) if found else None


# Inside new mount (+network) namespaces: make every mount read-only, put a 16 MiB tmpfs on the
# working directory, then exec the interpreter. Runs only in the new namespace (private
# propagation), so the host's mounts are untouched. Exit 97 when the root cannot be made read-only.
_RO_SCRIPT = """mount --make-rprivate / 2>/dev/null
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -r); do mount -o remount,bind,ro "$m" 2>/dev/null; done
mount -t tmpfs -o size=16m,mode=0777 sparkbench-sandbox "$PWD" || exit 97
cd "$PWD" || exit 97
mount -o remount,bind,ro / || exit 97
exec "$@"
"""


class Sandbox:
    """Runs untrusted Python: Docker (preferred), else unshare user+net namespace, else nothing."""

    def __init__(self, image: str | None) -> None:
        self.kind = "none"
        self.protections: list[str] = []
        self.reason: str | None = None
        self.image = image
        self.python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        docker = shutil.which("docker")
        reasons = []
        if image and docker:
            r = subprocess.run([docker, "image", "inspect", image], capture_output=True, timeout=60)
            if r.returncode == 0:
                self.kind = "docker"
                self.docker = docker
                self.protections = ["network:none", "read-only-rootfs", "memory:256m", "pids-limit:64",
                                    "cap-drop:ALL", "no-new-privileges", f"user:{SANDBOX_USER}",
                                    f"timeout:{SANDBOX_TIMEOUT_S:g}s"]
                return
            reasons.append(f"sandbox image {image!r} is not on this host (not pulled)")
        elif image:
            reasons.append("docker is not installed")
        else:
            reasons.append("no --sandbox-image given")
        unshare = shutil.which("unshare")
        if unshare and self.python:
            self.unshare = unshare
            self.setpriv = shutil.which("setpriv")
            self.kind = "unshare"
            errors = []
            for variant in ("readonly", "plain"):
                if variant == "readonly" and os.geteuid() == 0 and not self.setpriv:
                    continue
                self.variant = variant
                self.protections = self._protections(variant)
                ok, out = self.run("print(6 * 7)\n")
                if ok and out.strip() == "42":
                    return
                errors.append(f"{variant}: {out.strip()[-120:]}")
            reasons.append("unshare sandbox does not work here: " + "; ".join(errors))
        else:
            reasons.append("unshare or python3 not found")
        self.kind = "none"
        self.protections = []
        self.reason = "; ".join(reasons)

    def _protections(self, variant: str) -> list[str]:
        root = os.geteuid() == 0
        out = [] if (root and variant == "readonly") else ["user-namespace"]
        out.append("network-namespace:no-network")
        if variant == "readonly":
            out += ["mount-namespace:read-only-filesystem", "tmpfs-cwd:16MiB"]
        else:
            out.append("empty-temp-cwd")
        out += [f"rlimit-cpu:{int(SANDBOX_TIMEOUT_S)}s", "rlimit-as:512MiB", "rlimit-fsize:1MiB",
                "isolated-python", f"timeout:{SANDBOX_TIMEOUT_S:g}s"]
        if root:
            out.append(f"uid:{SANDBOX_USER}")
        return out

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "protections": list(self.protections)}
        if self.kind == "docker":
            d["image"] = self.image
        if self.reason and self.kind == "none":
            d["reason"] = self.reason
        return d

    def run(self, code: str) -> tuple[bool, str]:
        """Run ``code`` with python3 in the sandbox; (exit status 0, stdout+stderr tail)."""
        if self.kind == "docker":
            name = f"sparkbench-sandbox-{os.getpid()}-{random.randrange(1 << 30)}"
            cmd = [self.docker, "run", "--rm", "-i", "--name", name, "--network", "none", "--read-only",
                   "--memory", "256m", "--pids-limit", "64", "--cap-drop", "ALL",
                   "--security-opt", "no-new-privileges", "--user", f"{SANDBOX_USER}:{SANDBOX_USER}",
                   "--entrypoint", "python3", self.image or "", "-"]  # vLLM images' entrypoint is `vllm serve`
            try:
                r = subprocess.run(cmd, input=code.encode(), capture_output=True, timeout=SANDBOX_TIMEOUT_S + 30)
            except subprocess.TimeoutExpired:
                subprocess.run([self.docker, "rm", "-f", name], capture_output=True, timeout=60)
                return False, "timed out"
            except BaseException:  # interrupted: never leave the container running
                subprocess.run([self.docker, "rm", "-f", name], capture_output=True, timeout=60)
                raise
            return r.returncode == 0, (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
        if self.kind == "unshare":
            with tempfile.TemporaryDirectory(prefix="sparkbench-sandbox-") as tmp:
                root = os.geteuid() == 0
                readonly = self.variant == "readonly"
                if root and not readonly:
                    os.chown(tmp, SANDBOX_USER, SANDBOX_USER)

                def limits() -> None:
                    import resource
                    resource.setrlimit(resource.RLIMIT_CPU, (int(SANDBOX_TIMEOUT_S), int(SANDBOX_TIMEOUT_S)))
                    resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
                    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
                    if root and not readonly:
                        os.setgroups([])
                        os.setgid(SANDBOX_USER)
                        os.setuid(SANDBOX_USER)

                py = [self.python or "python3", "-I", "-"]
                if readonly and root:
                    # root needs no user namespace: mount + network namespaces, every mount
                    # read-only, then drop to nobody for the interpreter
                    cmd = [self.unshare, "--propagation", "private", "-mn", "sh", "-c", _RO_SCRIPT, "sandbox",
                           self.setpriv or "setpriv", f"--reuid={SANDBOX_USER}", f"--regid={SANDBOX_USER}",
                           "--clear-groups", *py]
                elif readonly:
                    cmd = [self.unshare, "--propagation", "private", "-rmn", "sh", "-c", _RO_SCRIPT, "sandbox", *py]
                else:
                    cmd = [self.unshare, "-rn", *py]
                env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": tmp, "LANG": "C.UTF-8"}
                try:
                    r = subprocess.run(cmd, input=code.encode(), capture_output=True, cwd=tmp, env=env,
                                       timeout=SANDBOX_TIMEOUT_S + 5, preexec_fn=limits)
                except subprocess.TimeoutExpired:
                    return False, "timed out"
                except OSError as exc:
                    return False, str(exc)
                return r.returncode == 0, (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
        return False, "no sandbox"


def check_quality(q: dict[str, Any], res: StreamResult, budget: int, sandbox: Sandbox | None
                  ) -> tuple[str, dict[str, Any]]:
    """Status (pass/fail/truncated/skipped/error) and details for one quality question."""
    check = q.get("check") or {}
    kind = check.get("type")
    answer = final_answer(res)
    details: dict[str, Any] = {"check": kind}
    if res.error:
        details["error"] = res.error
        return "error", details
    if res.finish_reason == "length" and not answer:
        details["reason"] = f"hit the {budget}-token budget before any answer content"
        return "truncated", details
    if kind == "max_chars_and_contains":
        limit = int(check.get("max_chars", 50))
        must = list(check.get("must_contain", []))
        details.update({"chars": len(answer), "max_chars": limit,
                        "missing": [m for m in must if m not in answer]})
        ok = len(answer) <= limit and not details["missing"]
        return ("pass" if ok else "fail"), details
    if kind == "japanese_text":
        ratio = japanese_ratio(answer)
        need = float(check.get("min_japanese_ratio", 0.5))
        details.update({"japanese_ratio": round(ratio, 4), "min_japanese_ratio": need,
                        "chars": len(answer), "finished": res.finish_reason != "length"})
        ok = bool(answer) and ratio >= need and res.finish_reason != "length"
        return ("pass" if ok else "fail"), details
    if kind == "final_number":
        expected = check.get("expected")
        got = last_number(answer)
        details.update({"expected": expected, "found": got})
        ok = got is not None and expected is not None and abs(got - float(expected)) < 1e-9
        return ("pass" if ok else "fail"), details
    if kind == "python_function":
        fn = check.get("function", "")
        m = _CODE.search(answer)
        details["sandbox"] = sandbox.describe() if sandbox else {"kind": "none", "protections": []}
        if not m:
            details["reason"] = "no ```python code block in the answer"
            return "fail", details
        code = m.group(1)
        details["defines_function"] = bool(re.search(rf"^\s*(async\s+)?def\s+{re.escape(fn)}\s*\(", code, re.M))
        if not details["defines_function"]:
            details["reason"] = f"the code block does not define {fn}()"
            return "fail", details
        if sandbox is None or sandbox.kind == "none":
            details["reason"] = "no sandbox available: the code was not run"
            return "skipped", details
        program = code + "\n\n" + "\n".join(check.get("asserts", [])) + "\nprint('SPARKBENCH_ASSERTS_OK')\n"
        ok, out = sandbox.run(program)
        passed = ok and "SPARKBENCH_ASSERTS_OK" in out
        details["asserts"] = len(check.get("asserts", []))
        if not passed:
            details["output_tail"] = out[-500:]
        return ("pass" if passed else "fail"), details
    details["reason"] = f"unknown check type {kind!r} in the quality file"
    return "error", details


# --------------------------------------------------------------------------------------------
# Image: a PNG made in-process
# --------------------------------------------------------------------------------------------


def make_png(width: int, height: int, background: list[int], colour: list[int], shape: str) -> bytes:
    """An RGB PNG: a filled ``shape`` (square/circle/triangle) in ``colour`` on ``background``."""
    rows = []
    cx, cy = width / 2.0, height / 2.0
    r = min(width, height) * 0.3
    bg = bytes(background[:3])
    fg = bytes(colour[:3])
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            px, py = x + 0.5, y + 0.5
            if shape == "circle":
                inside = (px - cx) ** 2 + (py - cy) ** 2 <= r * r
            elif shape == "triangle":
                top, bottom = cy - r, cy + r
                inside = top <= py <= bottom and abs(px - cx) <= (py - top) / 2.0 * 1.15
            else:
                inside = abs(px - cx) <= r and abs(py - cy) <= r
            row += fg if inside else bg
        rows.append(bytes(row))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + chunk(b"IEND", b""))


def names_colour(answer: str, expected: str, palette: list[str]) -> tuple[bool, list[str]]:
    """Whole-word, case-insensitive: the expected colour is named and no other palette colour."""
    low = answer.lower()
    named = [c for c in palette if re.search(rf"\b{re.escape(c.lower())}\b", low)]
    return named == [expected], named


# --------------------------------------------------------------------------------------------
# Telemetry: nvidia-smi sampler + /proc/meminfo
# --------------------------------------------------------------------------------------------

# The first eight are the original field set (older documents, fixtures and scripts print them in
# this order); the clock fields follow, so a reply with only the first eight still parses.
SMI_FIELDS = ["index", "name", "power.draw", "temperature.gpu", "clocks.sm", "utilization.gpu",
              "memory.used", "memory.total", "clocks.current.graphics", "clocks.max.graphics",
              "clocks_event_reasons.active"]
SMI_FIELDS_LEGACY = SMI_FIELDS[:8]
# Query sets tried in order: a driver that does not know a field answers exit 2 'Field "x" is not
# a valid field to query' (tests/fixtures/measure/nvidia-smi-invalid-field-stderr.txt); the event
# reasons have their new name from driver 535.54.03, the old one before.
SMI_QUERIES = [SMI_FIELDS, SMI_FIELDS[:10] + ["clocks_throttle_reasons.active"], SMI_FIELDS_LEGACY]
# header names nvidia-smi prints for the query names above (it shows the canonical name)
SMI_ALIASES = {"clocks.current.sm": "clocks.sm", "temperature.gpu.current": "temperature.gpu",
               "power.draw.instant": "power.draw", "power.draw.average": "power.draw",
               "clocks.gr": "clocks.current.graphics", "clocks.max.gr": "clocks.max.graphics",
               "clocks_throttle_reasons.active": "clocks_event_reasons.active"}
_SMI_TEXT = {"name", "uuid", "pci.bus_id", "pstate", "clocks_event_reasons.active", "driver_version"}
_SMI_KNOWN = set(SMI_FIELDS) | set(SMI_ALIASES) | _SMI_TEXT
_NA = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "", "[gpu is lost]"}


def _smi_number(text: str) -> float | None:
    t = text.strip()
    if t.lower() in _NA:
        return None
    m = re.match(r"^-?\d+(?:\.\d+)?", t)
    return float(m.group(0)) if m else None


def parse_nvidia_smi_csv(text: str, fields: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` output.

    With a header line the columns are matched by name (units such as ``[W]`` stripped, canonical
    names mapped back by SMI_ALIASES); without one the order of ``fields`` (default SMI_FIELDS) is
    assumed, or the eight-field SMI_FIELDS_LEGACY order when a row has eight cells. Lines that are
    not data rows (comments, command lines) are skipped. ``[N/A]`` becomes None; text fields
    (name, clocks_event_reasons.active, ...) stay strings. One dict per GPU row.
    """
    cols = [SMI_ALIASES.get(c, c) for c in (fields or SMI_FIELDS)]
    header = False
    rows = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or s.startswith("$"):
            continue
        cells = [c.strip() for c in s.split(",")]
        names = [c.split(" [")[0].strip() for c in cells]
        if _smi_number(cells[0]) is None and any(n in _SMI_KNOWN for n in names):
            cols = [SMI_ALIASES.get(n, n) for n in names]
            header = True
            continue
        use = cols
        if len(cells) != len(cols):
            if header or len(cells) != len(SMI_FIELDS_LEGACY):
                continue
            use = SMI_FIELDS_LEGACY
        row: dict[str, Any] = {}
        for name, cell in zip(use, cells):
            if name in _SMI_TEXT:
                row[name] = None if cell.lower() in _NA else cell
            else:
                row[name] = _smi_number(cell)
        if not any(k in row for k in ("power.draw", "temperature.gpu", "clocks.current.graphics",
                                      "clocks_event_reasons.active")):
            continue
        rows.append(row)
    return rows


def _meminfo_kb(path: str) -> dict[str, float] | None:
    """/proc/meminfo's numeric fields as {name: kB}; None when the file cannot be read."""
    vals: dict[str, float] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if parts and _smi_number(parts[0]) is not None:
                    vals[k.strip()] = float(parts[0])
    except OSError:
        return None
    return vals


def read_meminfo(path: str = "/proc/meminfo") -> float | None:
    """Used memory [MiB] = MemTotal - MemAvailable from /proc/meminfo (unified memory on a Spark)."""
    vals = _meminfo_kb(path)
    if vals and "MemTotal" in vals and "MemAvailable" in vals:
        return (vals["MemTotal"] - vals["MemAvailable"]) / 1024.0
    return None


def aggregate_gpus(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """One sample across GPUs: power summed [W], temperature max [C], SM clock mean [MHz],
    utilization mean [%], GPU memory used summed [MiB] (None where every GPU reads N/A)."""

    def vals(k: str) -> list[float]:
        return [r[k] for r in rows if isinstance(r.get(k), (int, float))]

    p, t, c, u, m = (vals("power.draw"), vals("temperature.gpu"), vals("clocks.sm"),
                     vals("utilization.gpu"), vals("memory.used"))
    return {"power_w": sum(p) if p else None, "temperature_c": max(t) if t else None,
            "sm_clock_mhz": sum(c) / len(c) if c else None,
            "utilization_pct": sum(u) / len(u) if u else None,
            "gpu_memory_used_mib": sum(m) if m else None}


def aggregate_clocks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The clock fields of one sample across GPUs: ``graphics_clock_mhz`` = mean of
    ``clocks.current.graphics`` [MHz] (``clocks.sm`` where the graphics clock is not reported, as in
    the eight-field set), ``max_graphics_clock_mhz`` = the highest ``clocks.max.graphics`` [MHz]
    (None when not reported), ``clock_event_reasons`` = the distinct raw reason strings."""
    gr = [r["clocks.current.graphics"] for r in rows if isinstance(r.get("clocks.current.graphics"), (int, float))]
    if not gr:
        gr = [r["clocks.sm"] for r in rows if isinstance(r.get("clocks.sm"), (int, float))]
    mx = [r["clocks.max.graphics"] for r in rows if isinstance(r.get("clocks.max.graphics"), (int, float))]
    reasons = sorted({r["clocks_event_reasons.active"] for r in rows if r.get("clocks_event_reasons.active")})
    return {"graphics_clock_mhz": sum(gr) / len(gr) if gr else None,
            "max_graphics_clock_mhz": max(mx) if mx else None, "clock_event_reasons": reasons}


class Telemetry:
    """Samples nvidia-smi once a second in a thread; per phase statistics and energy.

    ``argv`` is the nvidia-smi command (``["nvidia-smi"]``, or ``docker exec C nvidia-smi`` split);
    the query options are appended. :meth:`probe` takes the first sample synchronously (it picks
    the query set the driver knows and gives the idle reference); :meth:`start` starts the thread.
    :meth:`in_flight` marks the spans during which requests were on the wire (the Measurement
    calls it around every request batch), so samples can be judged "under load" later."""

    def __init__(self, smi: str | list[str], interval: float = 1.0) -> None:
        self.argv = [smi] if isinstance(smi, str) else list(smi)
        self.smi = self.argv[0]
        self.interval = interval
        self.query = list(SMI_QUERIES[0])
        self.last_error: str | None = None
        self.lock = threading.Lock()
        self.phase: str | None = None
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.bounds: dict[str, list[float]] = {}
        self.flight: list[list[float]] = []  # [start, end] perf_counter spans with requests in flight
        self.gpu_names: list[str] = []
        self.idle: dict[str, Any] | None = None
        self.stop_ev = threading.Event()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def sample_once(self) -> dict[str, Any] | None:
        """One sample (``t`` = midpoint of the nvidia-smi call, perf_counter seconds), or None with
        ``last_error`` saying why."""
        while True:
            t0 = time.perf_counter()
            try:
                r = subprocess.run(self.argv + ["--query-gpu=" + ",".join(self.query),
                                                "--format=csv,noheader,nounits"], capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.last_error = f"{' '.join(self.argv)}: {exc}"
                return None
            t1 = time.perf_counter()
            err = r.stderr.decode("utf-8", "replace").strip()
            if r.returncode != 0 and "not a valid field" in err:
                idx = SMI_QUERIES.index(self.query) if self.query in SMI_QUERIES else len(SMI_QUERIES) - 1
                if idx + 1 < len(SMI_QUERIES):
                    self.query = list(SMI_QUERIES[idx + 1])
                    continue
            if r.returncode != 0:
                self.last_error = (f"{' '.join(self.argv)} exited {r.returncode}: "
                                   + (err.splitlines()[-1] if err else "no message"))
                return None
            break
        rows = parse_nvidia_smi_csv(r.stdout.decode("utf-8", "replace"), self.query)
        if not rows:
            self.last_error = f"{' '.join(self.argv)}: no GPU row in its answer"
            return None
        if not self.gpu_names:
            self.gpu_names = [str(x.get("name")) for x in rows if x.get("name")]
        s: dict[str, Any] = aggregate_gpus(rows)
        s.update(aggregate_clocks(rows))
        s["memory_used_mib"] = read_meminfo()
        s["t"] = (t0 + t1) / 2.0
        return s

    def probe(self) -> str | None:
        """The first sample, before any request (the idle reference); None, or why it failed."""
        self.idle = self.sample_once()
        return None if self.idle is not None else (self.last_error or "no answer")

    def start(self) -> None:
        self.thread.start()

    def in_flight(self, on: bool) -> None:
        """Requests go on the wire (True) or have all finished (False)."""
        now = time.perf_counter()
        with self.lock:
            if on:
                self.flight.append([now, math.inf])
            elif self.flight and self.flight[-1][1] == math.inf:
                self.flight[-1][1] = now

    def _loop(self) -> None:
        while not self.stop_ev.is_set():
            s = self.sample_once()
            with self.lock:
                if s is not None and self.phase is not None:
                    self.samples[self.phase].append(s)
            self.wake.wait(self.interval)
            self.wake.clear()

    def begin(self, phase: str) -> None:
        with self.lock:
            self.phase = phase
            self.samples[phase] = []
            self.bounds[phase] = [time.perf_counter(), 0.0]
        self.wake.set()

    def end(self, phase: str) -> None:
        with self.lock:
            if self.phase == phase:
                self.phase = None
                self.bounds[phase][1] = time.perf_counter()

    def close(self) -> None:
        self.stop_ev.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout=15)

    def summary(self, phase: str, tokens: int | None) -> dict[str, Any]:
        """Per-phase statistics; energy_j = mean power [W] x phase duration [s];
        tokens_per_joule = completion tokens of the phase / energy_j; graphics_clock_mhz
        {mean, max, p50} over the phase's samples [MHz], max_graphics_clock_mhz the highest
        reported maximum, clock_event_reasons the distinct raw reason values."""
        with self.lock:
            ss = list(self.samples.get(phase, []))
            t0, t1 = self.bounds.get(phase, [0.0, 0.0])
        dur = max(0.0, t1 - t0)

        def stat(k: str) -> dict[str, float | None]:
            v = [s[k] for s in ss if isinstance(s.get(k), (int, float))]
            return {"mean": sum(v) / len(v) if v else None, "max": max(v) if v else None}

        power = stat("power_w")
        energy = power["mean"] * dur if power["mean"] is not None else None
        gpu_mem = stat("gpu_memory_used_mib")
        gclk = stat("graphics_clock_mhz")
        gclk["p50"] = median([s["graphics_clock_mhz"] for s in ss if isinstance(s.get("graphics_clock_mhz"), (int, float))])
        mx = [s["max_graphics_clock_mhz"] for s in ss if isinstance(s.get("max_graphics_clock_mhz"), (int, float))]
        return {
            "samples": len(ss), "duration_s": dur, "power_w": power,
            "temperature_c": stat("temperature_c"), "sm_clock_mhz": stat("sm_clock_mhz"),
            "graphics_clock_mhz": gclk, "max_graphics_clock_mhz": max(mx) if mx else None,
            "clock_event_reasons": sorted({x for s in ss for x in s.get("clock_event_reasons") or []}),
            "utilization_pct": stat("utilization_pct"),
            "memory_used_mib": stat("memory_used_mib"), "memory_source": "/proc/meminfo",
            "gpu_memory_used_mib": gpu_mem if gpu_mem["mean"] is not None else None,
            "energy_j": energy, "completion_tokens": tokens,
            "tokens_per_joule": (tokens / energy) if (energy and tokens) else None,
        }

    def load_samples(self) -> list[dict[str, Any]]:
        """The samples of every phase that were taken while requests were in flight."""
        with self.lock:
            spans = [(a, b) for a, b in self.flight]
            ss = [s for v in self.samples.values() for s in v]
        return [s for s in ss if any(a <= s["t"] <= b for a, b in spans)]


# --------------------------------------------------------------------------------------------
# Run protocol: memory and swap before/after, the clock under load, kernel-log lines
# --------------------------------------------------------------------------------------------

#: clock_capped: the median graphics clock under load is below this share of the GPU's reported
#: maximum. spark-gpu-throttle-check (hoesing, 6a27755) fails a GB10 below 1400 of 3003 MHz
#: (46.6 %) under an SGEMM load; a healthy GB10 runs 2424-2483 MHz (81-83 %) under load and a
#: USB-PD-capped one 500-850 MHz (17-28 %). 50 % (1501 MHz on a GB10) sits between the two.
CLOCK_CAPPED_SHARE = 0.50
#: A sample counts as "under load" when it was taken while requests were in flight AND the GPU
#: was busy: utilization.gpu >= this [%] where the driver reports it, else (no utilization) a
#: graphics clock above CLOCK_IDLE_FACTOR x the idle reference clock taken before the first request.
LOAD_UTILIZATION_PCT = 50.0
CLOCK_IDLE_FACTOR = 1.5
#: The clock is judged only on at least this many samples under load (one reading proves little).
CLOCK_MIN_SAMPLES = 2
#: host_swapped: pswpin + pswpout grew by more than this many pages during the measured phases.
SWAP_PAGES_THRESHOLD = 256
KERNEL_LINES_KEPT = 200
XID_RE = re.compile(r"NVRM: Xid")
OOM_RE = re.compile(r"Out of memory: Killed process|oom-kill")
MEMINFO_KEYS = {"mem_total_mib": "MemTotal", "mem_available_mib": "MemAvailable", "mem_free_mib": "MemFree",
                "cached_mib": "Cached", "swap_total_mib": "SwapTotal", "swap_free_mib": "SwapFree"}


def read_meminfo_fields(path: str = "/proc/meminfo") -> dict[str, float | None] | None:
    """/proc/meminfo in MiB (kB / 1024, 1 decimal): MemTotal, MemAvailable, MemFree, Cached (page
    cache), SwapTotal, SwapFree and swap_used_mib = SwapTotal - SwapFree; None when unreadable."""
    vals = _meminfo_kb(path)
    if not vals or "MemTotal" not in vals:
        return None
    out: dict[str, float | None] = {key: (round(vals[src] / 1024.0, 1) if src in vals else None)
                                    for key, src in MEMINFO_KEYS.items()}
    st, sf = out["swap_total_mib"], out["swap_free_mib"]
    out["swap_used_mib"] = round(st - sf, 1) if st is not None and sf is not None else None
    return out


def read_vmstat(path: str = "/proc/vmstat") -> dict[str, int] | None:
    """``pswpin`` and ``pswpout`` (pages swapped in / out since boot) from /proc/vmstat; None when
    unreadable or absent."""
    vals: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] in ("pswpin", "pswpout") and parts[1].isdigit():
                    vals[parts[0]] = int(parts[1])
    except OSError:
        return None
    return vals if len(vals) == 2 else None


def swap_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, Any] | None:
    """Pages swapped in and out between two /proc/vmstat readings."""
    if not before or not after:
        return None
    return {"pswpin": max(0, after["pswpin"] - before["pswpin"]),
            "pswpout": max(0, after["pswpout"] - before["pswpout"]), "source": "/proc/vmstat"}


def read_kernel_log(argv: list[str], timeout: float = 15) -> tuple[list[str] | None, str | None]:
    """The kernel ring buffer as lines (``dmesg``, or ``docker exec C dmesg``), or (None, why)."""
    name = " ".join(argv)
    if not argv or shutil.which(argv[0]) is None:
        return None, f"{argv[0] if argv else 'kernel log command'} not found on this host (--kernel-log)"
    try:
        r = subprocess.run(argv, capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{name}: {exc}"
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()
        return None, f"{name} exited {r.returncode}: {err.splitlines()[-1] if err else 'no message'}"
    return r.stdout.decode("utf-8", "replace").splitlines(), None


def new_kernel_lines(before: list[str], after: list[str]) -> list[str]:
    """Lines of ``after`` that ``before`` did not hold (dmesg lines carry their timestamp, so a
    line seen again is the same message)."""
    seen = set(before)
    return [line for line in after if line.strip() and line not in seen]


def judge_clock(samples: list[dict[str, Any]], idle: dict[str, Any] | None) -> dict[str, Any]:
    """The clock under load from the samples taken while requests were in flight.

    A sample is under load when utilization.gpu >= LOAD_UTILIZATION_PCT, or, where the driver
    reports no utilization, when its graphics clock exceeds CLOCK_IDLE_FACTOR x the idle clock
    (with neither, every in-flight sample counts). ``under_load_mhz`` = median graphics clock of
    those samples [MHz]; ``max_mhz`` = the highest clocks.max.graphics reported [MHz];
    ``share_of_max`` = under_load_mhz / max_mhz; ``idle_mhz`` = the reference sample taken before
    the first request. ``reason`` says why a figure is missing."""
    idle_mhz = (idle or {}).get("graphics_clock_mhz")
    maxima = [s["max_graphics_clock_mhz"] for s in samples + ([idle] if idle else [])
              if isinstance(s.get("max_graphics_clock_mhz"), (int, float))]
    loaded = []
    for s in samples:
        clk, util = s.get("graphics_clock_mhz"), s.get("utilization_pct")
        if not isinstance(clk, (int, float)):
            continue
        if isinstance(util, (int, float)):
            busy = util >= LOAD_UTILIZATION_PCT
        elif isinstance(idle_mhz, (int, float)):
            busy = clk > CLOCK_IDLE_FACTOR * idle_mhz
        else:
            busy = True
        if busy:
            loaded.append(clk)
    under = median(loaded)
    top = max(maxima) if maxima else None
    out: dict[str, Any] = {"max_mhz": top, "under_load_mhz": under,
                           "share_of_max": round(under / top, 4) if under is not None and top else None,
                           "samples_under_load": len(loaded), "idle_mhz": idle_mhz, "reason": None}
    if not samples:
        out["reason"] = "no GPU sample was taken while requests were in flight"
    elif not loaded:
        out["reason"] = (f"none of the {len(samples)} samples taken while requests were in flight had the GPU "
                         f"busy (utilization >= {LOAD_UTILIZATION_PCT:.0f} %)")
    elif top is None:
        out["reason"] = "the driver reports no clocks.max.graphics: the clock is not judged"
    elif len(loaded) < CLOCK_MIN_SAMPLES:
        out["reason"] = f"only {len(loaded)} sample under load: the clock is not judged (needs {CLOCK_MIN_SAMPLES})"
    return out


def protocol_flags(clock: dict[str, Any] | None, swap: dict[str, Any] | None,
                   kernel: dict[str, Any] | None) -> list[dict[str, str]]:
    """The run-protocol flags, each ``{code, reason}``:

    * ``clock_capped``: at least CLOCK_MIN_SAMPLES samples under load and their median graphics
      clock < CLOCK_CAPPED_SHARE (50 %) x the reported maximum (the throttle check's 1400 of
      3003 MHz is 46.6 %);
    * ``host_swapped``: pswpin + pswpout grew by more than SWAP_PAGES_THRESHOLD pages;
    * ``gpu_xid`` / ``oom_kill``: new ``NVRM: Xid`` / OOM-killer lines in the kernel log.
    """
    flags: list[dict[str, str]] = []
    if clock and clock.get("share_of_max") is not None and clock["samples_under_load"] >= CLOCK_MIN_SAMPLES:
        if clock["share_of_max"] < CLOCK_CAPPED_SHARE:
            flags.append({"code": "clock_capped", "reason": (
                f"clock {clock['under_load_mhz']:.0f} of {clock['max_mhz']:.0f} MHz under load "
                f"({100 * clock['share_of_max']:.0f} % of the maximum, below {100 * CLOCK_CAPPED_SHARE:.0f} %; "
                f"median of {clock['samples_under_load']} samples)")})
    if swap:
        moved = swap["pswpin"] + swap["pswpout"]
        if moved > SWAP_PAGES_THRESHOLD:
            flags.append({"code": "host_swapped", "reason": (
                f"the host swapped during the measured phases: {swap['pswpin']} pages in, {swap['pswpout']} out "
                f"(/proc/vmstat; more than {SWAP_PAGES_THRESHOLD})")})
    if kernel:
        if kernel.get("xid"):
            flags.append({"code": "gpu_xid", "reason": f"GPU Xid in the kernel log: {kernel['xid'][0].strip()}"
                          + (f" (+{len(kernel['xid']) - 1} more)" if len(kernel["xid"]) > 1 else "")})
        if kernel.get("oom"):
            flags.append({"code": "oom_kill", "reason": f"OOM killer in the kernel log: {kernel['oom'][0].strip()}"
                          + (f" (+{len(kernel['oom']) - 1} more)" if len(kernel["oom"]) > 1 else "")})
    return flags


# --------------------------------------------------------------------------------------------
# The measurement
# --------------------------------------------------------------------------------------------


def _number(kind: type, minimum: float, strict: bool, what: str, name: str, maximum: float | None = None,
            allow_inf: bool = False) -> Callable[[str], Any]:
    """An argparse type: ``kind`` (int or float) at least ``minimum`` (above it when ``strict``), at
    most ``maximum`` when given; NaN never, infinity only with ``allow_inf``."""
    def conv(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        bad_float = isinstance(v, float) and (math.isnan(v) or (math.isinf(v) and not allow_inf))
        if (v <= minimum if strict else v < minimum) or bad_float or (maximum is not None and v > maximum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    conv.__name__ = name
    return conv


def _positive_int(name: str) -> Callable[[str], int]:
    return _number(int, 1, False, "a positive integer (>= 1)", name)


_non_negative_int = _number(int, 0, False, "an integer >= 0", "non-negative int")
_positive_float = _number(float, 0.0, True, "a positive number of seconds", "seconds")
_positive_pct = _number(float, 0.0, True, "a positive percentage (e.g. 1.5)", "percent")


def _int_list(minimum: int, what: str) -> Callable[[str], list[int]]:
    def conv(text: str) -> list[int]:
        if text.strip().lower() in ("none", ""):
            return []
        out = []
        for part in text.split(","):
            try:
                v = int(part.strip())
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"must be a comma-separated list of {what} or 'none', got {text!r}") from None
            if v < minimum:
                raise argparse.ArgumentTypeError(f"values must be >= {minimum}, got {v} in {text!r}")
            out.append(v)
        return out
    conv.__name__ = what
    return conv



# --------------------------------------------------------------------------------------------
# Arrival-rate phase: schedules, SLOs, goodput (definitions of vllm bench serve)
# --------------------------------------------------------------------------------------------

RATE_SEARCH_STEPS = 6  # extra rates --rate-search may try after the listed ones
CONCURRENCY_SEARCH_STEPS = 8  # levels --search-by concurrency may try in all
CONCURRENCY_SEARCH_MAX = 256  # the highest in-flight level it tries
SLO_KEYS = ("ttft", "tpot", "e2e")


def rate_schedule(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send offsets [s] of ``n`` requests at ``rate`` req/s, as vllm bench serve (0.25+) makes them.

    Gaps ~ gamma(shape=burstiness, scale=1/(rate*burstiness)) (burstiness 1: Poisson, exponential
    gaps; inf: constant 1/rate), the first request after one gap too; the cumulative delays are then
    rescaled so the last request goes out at exactly n/rate s. ``rate`` inf: every offset 0.
    ``random.Random(seed).gammavariate`` draws the gaps, so one seed gives one schedule.
    """
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(seed)
    delays: list[float] = []
    acc = 0.0
    for _ in range(n):
        gap = 1.0 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        acc += gap
        delays.append(acc)
    if delays and delays[-1] > 0:
        k = (n / rate) / delays[-1]
        delays = [d * k for d in delays]
    return delays


def inf_str(v: float) -> float | str:
    """inf as the string "inf" (JSON has no infinity), any other number as it is."""
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def request_tpot(e2e: float, ttft: float, output_tokens: int | None) -> float | None:
    """vLLM's per-request TPOT: (e2e - ttft) / (output_tokens - 1), 0 when output_tokens <= 1."""
    if output_tokens is None:
        return None
    if output_tokens <= 1:
        return 0.0
    return (e2e - ttft) / (output_tokens - 1)


def meets_slo(slo: dict[str, float] | None, ttft: float | None, tpot: float | None, e2e: float | None) -> bool:
    """A completed request is good when every given metric is <= its SLO (a missing figure fails)."""
    got = {"ttft": ttft, "tpot": tpot, "e2e": e2e}
    return all(got[k] is not None and got[k] <= v for k, v in (slo or {}).items())


def stat4(values: list[float]) -> dict[str, float | None]:
    out = pcts(values)
    out["mean"] = sum(values) / len(values) if values else None
    return out


def _rate_list(text: str) -> list[float]:
    out: list[float] = []
    for part in text.split(","):
        part = part.strip().lower()
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a comma-separated list of request rates (req/s, "
                                             f"> 0, or inf), got {text!r}") from None
        if math.isnan(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"rates must be > 0 (or inf), got {part!r} in {text!r}")
        out.append(v)
    return out


_rate_list.__name__ = "rate list"


_burstiness = _number(float, 0.0, True, "a positive number (1 = Poisson) or inf", "burstiness", allow_inf=True)


def _slo(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split(","):
        key, eq, val = part.strip().partition("=")
        key = key.strip().lower()
        if not eq or key not in SLO_KEYS:
            raise argparse.ArgumentTypeError(f"must be KEY=SECONDS items, comma-separated, keys among "
                                             f"{', '.join(SLO_KEYS)} (e.g. ttft=2,tpot=0.05,e2e=30), got {text!r}")
        try:
            v = float(val)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key}: {val!r} is not a number of seconds") from None
        if not math.isfinite(v) or v < 0:
            raise argparse.ArgumentTypeError(f"{key}: must be a number of seconds >= 0, got {val!r}")
        if key in out:
            raise argparse.ArgumentTypeError(f"{key} given twice in {text!r}")
        out[key] = v
    return out


_slo.__name__ = "SLO"


_share = _number(float, 0.0, True, "a share between 0 and 1 (e.g. 0.9)", "share", maximum=1.0)


def load_replay(path: str) -> list[dict[str, Any]]:
    """--replay FILE.jsonl: one request a line, {"offset_s", "prompt" | "prompt_tokens",
    "output_tokens"}; raises ValueError naming the option and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ValueError(f"argument --replay: cannot read {path}: {exc}") from None
    out = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"argument --replay: {path} line {no}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: not a JSON object")
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


def _base_url(text: str) -> str:
    p = urlsplit(text)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL with a host, got {text!r}")
    try:
        p.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"has an invalid port: {text!r}") from None
    return text.rstrip("/")


def default_quality_file() -> str:
    """quality.json next to this script (as Ansible copies it), else ../profiles/quality.json."""
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "quality.json")
    if os.path.exists(beside):
        return beside
    return os.path.normpath(os.path.join(here, "..", "profiles", "quality.json"))


def default_profiles_dir() -> str:
    """profiles/ of the repository this script is in (../profiles) when present, else the
    script's own directory (where Ansible copies it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(here, "..", "profiles"))
    return repo if os.path.isdir(repo) else here


def _bandwidth(profile: Any) -> float | None:
    if not isinstance(profile, dict):
        return None
    for key in ("memory_bandwidth_gbps", "bandwidth_gbs"):
        v = profile.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def hardware_names(profiles_dir: str) -> list[str]:
    """Hardware profile names available in ``profiles_dir`` (hardware/*.json, or *.json that
    are hardware profiles when the directory has no hardware/ folder)."""
    sub = os.path.join(profiles_dir, "hardware")
    names = []
    for d in (sub, profiles_dir) if not os.path.isdir(sub) else (sub,):
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        for e in entries:
            if not e.endswith(".json"):
                continue
            if d != sub:
                try:
                    with open(os.path.join(d, e), encoding="utf-8") as f:
                        if _bandwidth(json.load(f)) is None:
                            continue
                except (OSError, ValueError):
                    continue
            names.append(e[:-5])
    return names


def load_hardware(spec: str, profiles_dir: str) -> tuple[dict[str, Any], str]:
    """The hardware profile named by --hardware (a name in profiles_dir, or a JSON file) and its
    path. Raises ValueError with a one-line message that names the option."""
    as_file = spec.endswith(".json") or os.sep in spec or os.path.isfile(spec)
    if as_file:
        path = spec
        if not os.path.isfile(path):
            raise ValueError(f"argument --hardware: file {spec} does not exist")
    else:
        path = ""
        for cand in (os.path.join(profiles_dir, "hardware", spec + ".json"),
                     os.path.join(profiles_dir, spec + ".json")):
            if os.path.isfile(cand):
                path = cand
                break
        if not path:
            names = hardware_names(profiles_dir)
            raise ValueError(f"argument --hardware: no hardware profile {spec!r} in {profiles_dir} "
                             f"(--profiles-dir); available: {', '.join(names) if names else 'none'}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"argument --hardware: cannot read {path}: {exc}") from None
    if _bandwidth(data) is None:
        raise ValueError(f"argument --hardware: {path} is not a hardware profile (it needs a positive "
                         f"memory_bandwidth_gbps)")
    return data, os.path.abspath(path)


def load_model_profile(model: str, profiles_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    """profiles_dir/models/<org>__<name>.json for a served model id, when it exists."""
    name = model.replace("/", "__") + ".json"
    for cand in (os.path.join(profiles_dir, "models", name), os.path.join(profiles_dir, name)):
        if os.path.isfile(cand):
            try:
                with open(cand, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data, os.path.abspath(cand)
    return None, None


def _command(name: str) -> Callable[[str], str]:
    """A command line option (kept as given, shell-split where used): it must split and not be empty."""
    def conv(text: str) -> str:
        try:
            parts = shlex.split(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not a command line ({exc}); fix the quoting") from None
        if not parts:
            raise argparse.ArgumentTypeError(f"--{name} needs a command, e.g. --{name} 'docker exec NAME {name}'"
                                             if name == "nvidia-smi" else f"--{name} needs a command, e.g. dmesg")
        return text
    return conv


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="measure.py",
        description="Measure an OpenAI-compatible LLM server the sparkbench way (seed article method): "
                    "forced-length decode speed, parallel throughput, context prefill, speculative "
                    "decoding acceptance, quality and image checks, GPU telemetry.",
        epilog="Exit status: 0 complete, 1 failed, 2 bad arguments or server unreachable, 3 incomplete. "
               "See docs/MEASUREMENT.md.")
    p.add_argument("--base-url", required=True, type=_base_url, help="server URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model id (default: the first model of /v1/models)")
    p.add_argument("--api-key", default=None,
                   help="Bearer token (default: $SPARKBENCH_API_KEY); never written to the output")
    p.add_argument("--output-tokens", type=_positive_int("output-tokens"), default=256,
                   help="tokens forced per speed request (default 256)")
    p.add_argument("--runs", type=_positive_int("runs"), default=5,
                   help="single-stream runs (default 5: the fewest per side a verdict can use)")
    p.add_argument("--target-precision", type=_positive_pct, default=None, metavar="PCT",
                   help="after --runs valid runs, keep measuring single-stream requests until the 95 %% "
                        "bootstrap interval of the median decode rate has a half-width <= PCT %% of the "
                        "median (or --max-runs); default off")
    p.add_argument("--max-runs", type=_positive_int("max-runs"), default=None, metavar="N",
                   help="most single-stream runs in all with --target-precision (default 4 x --runs)")
    p.add_argument("--warmup", type=_non_negative_int, default=1, help="warm-up requests, not counted (default 1)")
    p.add_argument("--concurrency", type=_int_list(1, "positive integers"), default=[2, 4, 8],
                   help="parallel levels, e.g. 2,4,8, or 'none' (default 2,4,8)")
    p.add_argument("--context", type=_int_list(0, "token depths"), default=[0],
                   help="prompt depths in tokens for prefill tok/s, e.g. 4096,16384 (default 0 = skip)")
    p.add_argument("--quality", action="store_true", help="run the four quality checks")
    p.add_argument("--quality-max-tokens", type=_positive_int("quality-max-tokens"), default=4096,
                   help="token budget of each quality and image request (default 4096)")
    p.add_argument("--quality-file", default=None,
                   help="quality prompts and checks (default: quality.json beside this script, "
                        "else ../profiles/quality.json)")
    p.add_argument("--sandbox-image", default=None,
                   help="Docker image already on this host (with python3) to run generated code in")
    p.add_argument("--image", action="store_true", help="run the image-input check")
    p.add_argument("--telemetry", choices=["auto", "off"], default="auto",
                   help="sample nvidia-smi once a second per phase when it exists (default auto)")
    p.add_argument("--nvidia-smi", default=None, metavar="CMD", type=_command("nvidia-smi"),
                   help="the nvidia-smi command line, shell-split, e.g. 'docker exec C nvidia-smi' (default: "
                        "nvidia-smi from PATH); 'none': this host has no GPU (telemetry off)")
    p.add_argument("--kernel-log", default="dmesg", metavar="CMD", type=_command("kernel-log"),
                   help="command printing the kernel log, shell-split, for new GPU Xid and OOM-killer lines "
                        "(default dmesg; 'off' to skip)")
    p.add_argument("--request-timeout", type=_positive_float, default=600.0,
                   help="seconds one request may take (default 600)")
    p.add_argument("--stall-timeout", type=_positive_float, default=60.0,
                   help="seconds without a byte before the run stops as incomplete (default 60)")
    p.add_argument("--hardware", default=None, metavar="NAME|FILE",
                   help="hardware profile (a name in --profiles-dir, e.g. dgx-spark, or a JSON file): "
                        "the result carries it as profile.hardware so the roofline can be computed")
    p.add_argument("--profiles-dir", default=None, metavar="DIR",
                   help="where --hardware names and model profiles are looked up (default: profiles/ of "
                        "this script's repository, else this script's directory)")
    p.add_argument("--rate", type=_rate_list, default=None, metavar="LIST",
                   help="arrival-rate phase: request rates in req/s, comma-separated, e.g. 0.5,1,2,4 "
                        "('inf' sends all at once; default off)")
    p.add_argument("--rate-duration", type=_positive_float, default=30.0, metavar="S",
                   help="seconds over which each rate's requests are scheduled: round(rate x S) requests, "
                        "at least 1 (default 30)")
    p.add_argument("--rate-requests", type=_positive_int("rate-requests"), default=None, metavar="N",
                   help="requests per rate instead of --rate-duration (needed for inf)")
    p.add_argument("--burstiness", type=_burstiness, default=1.0, metavar="K",
                   help="gamma shape of the gaps as vllm bench serve: 1 = Poisson, < 1 burstier, "
                        "inf = constant gaps (default 1)")
    p.add_argument("--rate-seed", type=_non_negative_int, default=0, metavar="N",
                   help="seed of the arrival schedule (default 0)")
    p.add_argument("--rate-max-concurrency", type=_positive_int("rate-max-concurrency"), default=None,
                   metavar="N", help="at most N rate-phase requests in flight (vllm's --max-concurrency; "
                                     "default no limit)")
    p.add_argument("--slo", type=_slo, default=None, metavar="ttft=S,tpot=S,e2e=S",
                   help="service-level objectives in seconds, any subset: a request is good when it "
                        "completed and meets every one (goodput, slo_met_share)")
    p.add_argument("--rate-search", type=_share, default=None, metavar="TARGET",
                   help=f"after the --rate list, try up to {RATE_SEARCH_STEPS} more rates to find the highest "
                        "whose slo_met_share >= TARGET (0-1; needs --slo and --rate)")
    p.add_argument("--search-by", choices=["rate", "concurrency"], default="rate",
                   help="what --rate-search varies: the arrival rate (default), or the number of requests in "
                        "flight (closed loop: rate inf with --rate-max-concurrency N; starts at "
                        f"--rate-max-concurrency or 1, at most {CONCURRENCY_SEARCH_STEPS} levels up to "
                        f"{CONCURRENCY_SEARCH_MAX}; --rate-requests per level, default max(8, 4 N))")
    p.add_argument("--replay", default=None, metavar="FILE.jsonl",
                   help="arrival-rate phase from a workload file: lines {offset_s, prompt | prompt_tokens, "
                        "output_tokens}, each sent at its offset")
    p.add_argument("--tools", action="store_true",
                   help="run the tool-call check (prompts and tools from --tools-file; BFCL-style verdicts)")
    p.add_argument("--tools-skip", default=None, metavar="REASON",
                   help="with --tools: send nothing and record every prompt as skipped with REASON (the plan's "
                        "refusal of a check the server cannot answer, e.g. no tool-call parser, with its fix)")
    p.add_argument("--tools-file", default=None, metavar="FILE",
                   help="tools and prompts (default: tools.json beside this script, else ../profiles/tools.json)")
    p.add_argument("--tool-choice", choices=["auto", "required", "named"], default="auto",
                   help="tool_choice of the check's requests: auto (needs the server's --enable-auto-tool-choice "
                        "--tool-call-parser), required or named (structured outputs; prompts that need no call "
                        "are skipped) (default auto)")
    p.add_argument("--tools-max-tokens", type=_positive_int("tools-max-tokens"), default=512,
                   help="max_tokens of each tool-call request (default 512)")
    p.add_argument("--prefix-tokens", type=_non_negative_int, default=0, metavar="N",
                   help="prefix-cache phase: tokens of the system prompt every request shares "
                        "(default 0 = off)")
    p.add_argument("--prefix-requests", type=_positive_int("prefix-requests"), default=8, metavar="N",
                   help="prefix-cache requests, sent one at a time; the first is cold (default 8)")
    p.add_argument("--prefix-suffix-tokens", type=_positive_int("prefix-suffix-tokens"), default=64, metavar="N",
                   help="each prefix-cache request's own user suffix in tokens (default 64)")
    p.add_argument("--prefix-output-tokens", type=_positive_int("prefix-output-tokens"), default=16, metavar="N",
                   help="tokens forced per prefix-cache request (default 16)")
    p.add_argument("--turns", type=_non_negative_int, default=0, metavar="N",
                   help="multi-turn phase: turns per conversation, each re-sending the history "
                        "(default 0 = off)")
    p.add_argument("--conversations", type=_positive_int("conversations"), default=2, metavar="N",
                   help="multi-turn conversations, interleaved round robin (default 2)")
    p.add_argument("--turn-tokens", type=_positive_int("turn-tokens"), default=256, metavar="N",
                   help="new user tokens per turn (default 256)")
    p.add_argument("--turn-output-tokens", type=_positive_int("turn-output-tokens"), default=64, metavar="N",
                   help="tokens forced per turn's answer (default 64)")
    p.add_argument("--out", required=True, help="output JSON file, or - for stdout")
    return p


def load_quality(path: str) -> dict[str, Any]:
    """Read and sanity-check the quality file; raise ValueError with a one-line message."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"--quality-file: {path} does not exist (give --quality-file PATH)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"--quality-file: cannot read {path}: {exc}") from None
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not all(isinstance(q, dict) and q.get("id") and q.get("prompt") for q in qs):
        raise ValueError(f"--quality-file: {path} needs a 'questions' list of objects with 'id' and 'prompt'")
    img = data.get("image")
    if img is not None and not (isinstance(img, dict) and isinstance(img.get("colours"), dict) and img["colours"]):
        raise ValueError(f"--quality-file: {path}: 'image' needs a non-empty 'colours' object")
    return data


# --------------------------------------------------------------------------------------------
# Tool-call check (--tools): BFCL-AST style judging of OpenAI tool_calls

TOOL_BUCKETS = ("unparsed", "wrong_tool", "param_type_error", "param_value_error", "should_not_have_called",
                "request_error")
TOOL_CATEGORIES = ("irrelevance", "simple", "multiple", "parallel")
# Call-looking text left in ``content`` when no parser (or the wrong one) read it: Hermes/Qwen
# JSON in <tool_call>, Qwen3 XML, gpt-oss harmony, Mistral [TOOL_CALLS], Llama <|python_tag|>,
# a bare {"name": ..., "arguments"/"parameters": ...} object, a pythonic [fn(k=v)] list.
TOOL_TEXT_RE = re.compile(
    r"<tool_call>|</tool_call>|<function=|<parameter=|to=functions\.|<\|call\|>|\[TOOL_CALLS\]|<\|python_tag\|>"
    r"|\{\s*\"name\"\s*:\s*\"[^\"]+\"\s*,\s*\"(?:arguments|parameters)\"\s*:|^\s*\[\s*[A-Za-z_]\w*\(\w+\s*=")
TOOL_EXCERPT = 200


def default_tools_file() -> str:
    """tools.json next to this script (as Ansible copies it), else ../profiles/tools.json."""
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "tools.json")
    if os.path.exists(beside):
        return beside
    return os.path.normpath(os.path.join(here, "..", "profiles", "tools.json"))


def load_tools(path: str) -> dict[str, Any]:
    """Read and sanity-check the tools file; raise ValueError with a one-line message."""
    what = f"--tools-file: {path}"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{what} does not exist (give --tools-file PATH)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tools-file: cannot read {path}: {exc}") from None
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{what} needs a non-empty 'tools' list")
    names = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and isinstance(fn.get("parameters"), dict)):
            raise ValueError(f"{what}: each tool needs {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
        names.append(fn["name"])
    prompts = data.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"{what} needs a non-empty 'prompts' list")
    for p in prompts:
        if not isinstance(p, dict) or not p.get("id") or not (p.get("prompt") or p.get("messages")):
            raise ValueError(f"{what}: each prompt needs 'id' and 'prompt' or 'messages'")
        if p.get("category") not in TOOL_CATEGORIES:
            raise ValueError(f"{what}: prompt {p['id']}: 'category' must be one of {', '.join(TOOL_CATEGORIES)}")
        exp = p.get("expected")
        if not isinstance(exp, list) or not all(isinstance(e, dict) and e.get("name") in names for e in exp):
            raise ValueError(f"{what}: prompt {p['id']}: 'expected' must list calls of the file's tools")
        for sub in p.get("tools") or []:
            if sub not in names:
                raise ValueError(f"{what}: prompt {p['id']}: offers unknown tool {sub!r}")
    return data


def prompt_tools(prompt: dict[str, Any], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools a prompt offers: its 'tools' subset (by name), else all of them."""
    sub = prompt.get("tools")
    if not sub:
        return list(tools)
    return [t for t in tools if t["function"]["name"] in sub]


def _json_type_ok(value: Any, typ: Any) -> bool:
    """JSON-schema ``type`` check of a parsed JSON value (2.0 counts as an integer, booleans are
    not numbers)."""
    if isinstance(typ, list):
        return any(_json_type_ok(value, t) for t in typ)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "array":
        return isinstance(value, list)
    if typ == "object":
        return isinstance(value, dict)
    if typ == "null":
        return value is None
    return True  # no type or an unknown one: not checked


def schema_errors(args: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """Why ``args`` does not fit a tool's ``parameters`` schema (required, extra, type, enum,
    minimum/maximum), one reason per problem; empty when it fits."""
    props = params.get("properties") or {}
    errs = [f"required argument {k!r} missing" for k in params.get("required") or [] if k not in args]
    extra_ok = params.get("additionalProperties", False) is not False
    for k, v in args.items():
        sch = props.get(k)
        if sch is None:
            if not extra_ok:
                errs.append(f"argument {k!r} is not in the schema")
            continue
        if "type" in sch and not _json_type_ok(v, sch["type"]):
            errs.append(f"argument {k!r} = {json.dumps(v)[:60]} is not of type {sch['type']}")
            continue
        if "enum" in sch and v not in sch["enum"]:
            errs.append(f"argument {k!r} = {json.dumps(v)[:60]} is not one of {sch['enum']}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "minimum" in sch and v < sch["minimum"]:
                errs.append(f"argument {k!r} = {v} is below the minimum {sch['minimum']}")
            if "maximum" in sch and v > sch["maximum"]:
                errs.append(f"argument {k!r} = {v} is above the maximum {sch['maximum']}")
    return errs


def _value_matches(value: Any, acceptable: list[Any]) -> bool:
    for want in acceptable:
        if isinstance(want, str) and isinstance(value, str):
            if value.strip().casefold() == want.strip().casefold():
                return True
        elif isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            if math.isclose(float(value), float(want), rel_tol=1e-9, abs_tol=1e-9):
                return True
        elif value == want:
            return True
    return False


def _judge_one(call: dict[str, Any], exp: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> tuple[int, str, str]:
    """(severity, bucket, reason) of one call against one expected call; severity 0 = pass."""
    name = call["name"]
    if name != exp["name"]:
        why = "not an offered tool" if name not in schemas else "a different tool"
        return 3, "wrong_tool", f"called {name!r} ({why}), expected {exp['name']!r}"
    errs = schema_errors(call["arguments"], schemas.get(name) or {})
    if errs:
        return 2, "param_type_error", f"{name}: " + "; ".join(errs)
    bad = []
    for k, acceptable in (exp.get("arguments") or {}).items():
        acceptable = acceptable if isinstance(acceptable, list) else [acceptable]
        if k not in call["arguments"]:
            if "" not in acceptable and None not in acceptable:
                bad.append(f"{k!r} missing, expected one of {acceptable}")
        elif not _value_matches(call["arguments"][k], acceptable):
            bad.append(f"{k!r} = {json.dumps(call['arguments'][k])[:60]}, expected one of {acceptable}")
    if bad:
        return 1, "param_value_error", f"{name}: " + "; ".join(bad)
    return 0, "", ""


def _match_calls(calls: list[dict[str, Any]], expected: list[dict[str, Any]],
                 schemas: dict[str, dict[str, Any]]) -> tuple[int, str, str]:
    """Best assignment of calls to expected calls (any order): the worst pair of the assignment
    with the least total severity; (severity, bucket, reason)."""
    import itertools
    best: tuple[int, int, str, str] | None = None
    for perm in itertools.permutations(range(len(calls))):
        judged = [_judge_one(calls[i], expected[j], schemas) for j, i in enumerate(perm)]
        total = sum(s for s, _, _ in judged)
        worst = max(judged, key=lambda x: x[0])
        if best is None or total < best[0]:
            best = (total, worst[0], worst[1], "; ".join(r for s, _, r in judged if s))
        if total == 0:
            break
    assert best is not None
    return best[1], best[2], best[3]


def judge_tool_calls(prompt: dict[str, Any], tools: list[dict[str, Any]], message: dict[str, Any] | None,
                     finish_reason: str | None) -> dict[str, Any]:
    """Judge one chat completion ``message`` against the prompt's expected calls, BFCL-AST style.

    Returns ``{"verdict": pass|fail, "bucket", "reason", "calls", "content_excerpt"}``. Buckets:
    unparsed (no ``tool_calls`` but call-looking text in ``content``, arguments not a JSON object,
    a malformed entry, or nothing at all because the output was cut at max_tokens), wrong_tool (wrong name or number of calls), param_type_error (an
    argument missing, extra, of the wrong JSON type or outside its enum/range: the tool's schema),
    param_value_error (schema-valid but not an acceptable value), should_not_have_called (a call
    on a prompt that needs none). Parallel calls match in any order.
    """
    message = message if isinstance(message, dict) else {}
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    expected = prompt.get("expected") or []
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    out: dict[str, Any] = {"verdict": "pass", "bucket": None, "reason": None, "calls": [], "content_excerpt": None}

    def fail(bucket: str, reason: str, excerpt: bool = False) -> dict[str, Any]:
        out.update(verdict="fail", bucket=bucket, reason=reason)
        if excerpt:
            out["content_excerpt"] = content[:TOOL_EXCERPT]
        return out

    raw = message.get("tool_calls")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        return fail("unparsed", f"tool_calls is a {type(raw).__name__}, not a list", excerpt=True)
    calls: list[dict[str, Any]] = []
    broken: list[str] = []
    for i, tc in enumerate(raw):
        fn = tc.get("function") if isinstance(tc, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            out["calls"].append({"name": name if isinstance(name, str) else None,
                                 "arguments": fn.get("arguments") if isinstance(fn, dict) else None})
            broken.append(f"tool_calls[{i}] has no function name")
            continue
        args = fn.get("arguments")
        parsed: Any = args
        if isinstance(args, str):
            try:
                parsed = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                out["calls"].append({"name": name, "arguments": args})
                broken.append(f"{name}: arguments are not JSON ({exc})")
                continue
        if not isinstance(parsed, dict):
            out["calls"].append({"name": name, "arguments": args})
            broken.append(f"{name}: arguments are not a JSON object")
            continue
        out["calls"].append({"name": name, "arguments": parsed})
        calls.append({"name": name, "arguments": parsed})
    if broken:
        return fail("unparsed", "; ".join(broken) + (" (finish_reason length: truncated)"
                                                     if finish_reason == "length" else ""))
    if not raw and TOOL_TEXT_RE.search(content or ""):
        return fail("unparsed", "no tool_calls, but call-looking text in content (no tool-call parser, "
                                "or one that does not read this model's format)"
                    + (" (finish_reason length: truncated)" if finish_reason == "length" else ""), excerpt=True)
    if not raw and expected and finish_reason == "length" and not (content or "").strip():
        return fail("unparsed", "no tool_calls and no content: the output was cut at max_tokens before a call "
                                "was complete (finish_reason length)", excerpt=True)
    if not expected:
        if calls:
            return fail("should_not_have_called", f"{len(calls)} call(s) ({', '.join(c['name'] for c in calls)}) "
                                                  "where none is needed")
        return out
    if len(calls) != len(expected):
        got = ", ".join(c["name"] for c in calls) or "none"
        trunc = " (finish_reason length: truncated)" if finish_reason == "length" else ""
        return fail("wrong_tool", f"{len(calls)} call(s) ({got}), expected {len(expected)} "
                                  f"({', '.join(e['name'] for e in expected)}){trunc}")
    if len(calls) > 6:  # permutations stay cheap
        return fail("wrong_tool", f"{len(calls)} calls: too many to match")
    sev, bucket, reason = _match_calls(calls, expected, schemas)
    if sev:
        return fail(bucket, reason)
    return out


def tool_choice_body(choice: str, prompt: dict[str, Any]) -> Any:
    """The request's ``tool_choice``: "auto", "required", or the prompt's first expected tool
    named ({"type": "function", "function": {"name": ...}})."""
    if choice == "named":
        return {"type": "function", "function": {"name": prompt["expected"][0]["name"]}}
    return choice


def summarise_tools(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """passed/failed/skipped/total, by_category {cat: {passed, total}} (skipped prompts not in
    total) and by_bucket {bucket: n} of the judged prompts."""
    passed = sum(1 for e in entries if e["verdict"] == "pass")
    failed = sum(1 for e in entries if e["verdict"] == "fail")
    skipped = sum(1 for e in entries if e["verdict"] == "skipped")
    by_cat: dict[str, dict[str, int]] = {}
    by_bucket: dict[str, int] = {}
    for e in entries:
        if e["verdict"] == "skipped":
            continue
        c = by_cat.setdefault(e["category"], {"passed": 0, "total": 0})
        c["total"] += 1
        c["passed"] += e["verdict"] == "pass"
        if e["bucket"]:
            by_bucket[e["bucket"]] = by_bucket.get(e["bucket"], 0) + 1
    return {"passed": passed, "failed": failed, "skipped": skipped, "total": passed + failed,
            "by_category": by_cat, "by_bucket": by_bucket}


class Measurement:
    """Runs every phase and builds the result document."""

    def __init__(self, args: argparse.Namespace, api_key: str | None) -> None:
        self.args = args
        self.ep = Endpoint.from_url(args.base_url, api_key)
        self.rng = random.Random()
        self.level = 0  # request compatibility level, see chat_body
        self.level_known = False
        self.metrics_ok = False
        self.metrics_reason: str | None = None
        self.spec_phases: dict[str, tuple[SpecCounters | None, SpecCounters | None]] = {}
        self.phase_tokens: dict[str, int] = {}
        self.telemetry: Telemetry | None = None
        self.telemetry_reason: str | None = None
        self.proto: dict[str, Any] = {"memory_before": None, "vm_before": None, "vm_after": None,
                                      "kernel_before": None, "kernel_reason": None}
        self.quality_data: dict[str, Any] | None = None
        self.hardware: tuple[dict[str, Any], str] | None = None
        self.llamacpp = False  # the server looks like llama.cpp's llama-server
        self.server_slots: int | None = None
        self.warmup_prompt_tokens: int | None = None
        self.forcing_warning: dict[str, Any] | None = None
        self.model = ""
        self.doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "status": "incomplete",
            "simulated": False,
            "server": {"version": None, "model": None, "max_model_len": None,
                       "base_url": self.ep.display, "simulated": False},
            "client": {"host": socket.gethostname(), "python": platform.python_version(),
                       "script_version": SCRIPT_VERSION},
            "settings": self.settings(),
            "started_at": utc_now(),
            "finished_at": None,
            "warnings": [],
            "single": None,
            "parallel": [],
            "context": [],
            "spec_decode": None,
            "spec_decode_reason": "not measured",
            "quality": [],
            "image": None,
            "telemetry": None,
            "telemetry_reason": "not measured",
            "rates": None,
            "rate_search": None,
            "prefix_cache": None,
            "multi_turn": None,
            "tools": None,
            "errors": [],
        }
        self.replay_data: list[dict[str, Any]] | None = None
        self.prefix_failed = False  # a prefix-cache or multi-turn request failed (status incomplete)
        self.tools_data: dict[str, Any] | None = None
        self.tools_all_errored = False
        self.rate_failed = 0

    def settings(self) -> dict[str, Any]:
        a = self.args
        return {
            "base_url": self.ep.display, "model": a.model, "api_key_set": bool(self.ep.api_key),
            "output_tokens": a.output_tokens, "runs": a.runs, "warmup": a.warmup,
            "concurrency": a.concurrency, "context": a.context, "quality": a.quality,
            "quality_max_tokens": a.quality_max_tokens, "quality_file": a.quality_file,
            "sandbox_image": a.sandbox_image, "image": a.image, "telemetry": a.telemetry,
            "nvidia_smi": getattr(a, "nvidia_smi", None), "kernel_log": getattr(a, "kernel_log", "dmesg"),
            "request_timeout": a.request_timeout, "stall_timeout": a.stall_timeout, "out": a.out,
            "hardware": getattr(a, "hardware", None), "profiles_dir": getattr(a, "profiles_dir", None),
            "target_precision_pct": getattr(a, "target_precision", None),
            "max_runs": getattr(a, "max_runs", None),
            "rate": [inf_str(r) for r in a.rate] if getattr(a, "rate", None) else None,
            "rate_duration_s": getattr(a, "rate_duration", 30.0),
            "rate_requests": getattr(a, "rate_requests", None), "burstiness": inf_str(getattr(a, "burstiness", 1.0)),
            "rate_seed": getattr(a, "rate_seed", 0), "rate_max_concurrency": getattr(a, "rate_max_concurrency", None),
            "slo": getattr(a, "slo", None), "rate_search": getattr(a, "rate_search", None),
            "search_by": getattr(a, "search_by", "rate"),
            "replay": getattr(a, "replay", None),
            "prefix_tokens": getattr(a, "prefix_tokens", 0), "prefix_requests": getattr(a, "prefix_requests", 8),
            "prefix_suffix_tokens": getattr(a, "prefix_suffix_tokens", 64),
            "prefix_output_tokens": getattr(a, "prefix_output_tokens", 16),
            "turns": getattr(a, "turns", 0), "conversations": getattr(a, "conversations", 2),
            "turn_tokens": getattr(a, "turn_tokens", 256), "turn_output_tokens": getattr(a, "turn_output_tokens", 64),
            "tools": getattr(a, "tools", False), "tools_file": getattr(a, "tools_file", None),
            "tools_skip": getattr(a, "tools_skip", None),
            "tool_choice": getattr(a, "tool_choice", "auto"), "tools_max_tokens": getattr(a, "tools_max_tokens", 512),
        }

    # ---- errors, warnings and reachability ----------------------------------------------------

    def error(self, phase: str, request: int | None, message: str) -> None:
        self.doc["errors"].append({"phase": phase, "request": request, "message": message})
        log(f"{phase}: request {request}: {message}")

    def warn(self, code: str, message: str, **extra: Any) -> dict[str, Any]:
        """A warning about the whole result: once in ``warnings`` and once on stderr."""
        w: dict[str, Any] = {"code": code, "message": message, **extra}
        self.doc["warnings"].append(w)
        log(f"WARNING: {message}")
        return w

    def check_alive(self, phase: str) -> None:
        """After a transport error: if the server no longer answers, stop the run (incomplete)."""
        try:
            self.ep.get("/v1/models", timeout=10)
        except OSError as exc:
            raise Abort(f"server stopped answering during {phase}: {exc}") from None

    def _get_json(self, path: str, timeout: float = 15) -> Any:
        """GET a JSON document; None when the route is absent or the answer is not JSON."""
        try:
            status, body = self.ep.get(path, timeout=timeout)
            if status != 200:
                return None
            return json.loads(body)
        except (OSError, ValueError):
            return None

    # ---- probe --------------------------------------------------------------------------------

    def probe(self) -> None:
        """/health, /v1/models, /version (else llama.cpp's /props); decides the model. Raises Unreachable."""
        a = self.args
        try:
            status, _ = self.ep.get("/health", timeout=15)
        except OSError as exc:
            raise Unreachable(f"cannot reach the server at {self.ep.display}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        if status not in (200, 404):
            raise Unreachable(f"server at {self.ep.display} is not ready: GET /health answered HTTP {status}")
        try:
            status, body = self.ep.get("/v1/models", timeout=30)
        except OSError as exc:
            raise Unreachable(f"GET /v1/models failed at {self.ep.display}: {exc}") from None
        if status == 401:
            raise Unreachable("the server wants an API key (HTTP 401 on /v1/models): "
                              "give --api-key or set SPARKBENCH_API_KEY")
        if status != 200:
            raise Unreachable(f"GET /v1/models answered HTTP {status}: {_error_message(body)}")
        try:
            models = [m for m in json.loads(body).get("data", []) if isinstance(m, dict) and m.get("id")]
        except (ValueError, AttributeError):
            raise Unreachable("GET /v1/models did not return a JSON model list") from None
        if not models:
            raise Unreachable("GET /v1/models lists no model")
        chosen = models[0]
        if a.model:
            match = [m for m in models if m["id"] == a.model]
            if not match:
                raise Unreachable(f"--model {a.model!r} is not served; /v1/models lists: "
                                  + ", ".join(m["id"] for m in models))
            chosen = match[0]
        self.model = chosen["id"]
        srv = self.doc["server"]
        srv["model"] = self.model
        mml = chosen.get("max_model_len")
        meta = chosen.get("meta") if isinstance(chosen.get("meta"), dict) else {}
        self.llamacpp = chosen.get("owned_by") == "llamacpp" or bool(meta)
        if isinstance(mml, int) and not isinstance(mml, bool) and mml > 0:
            srv["max_model_len"], srv["max_model_len_source"] = mml, "/v1/models max_model_len"
        elif isinstance(meta.get("n_ctx"), int) and meta["n_ctx"] > 0:  # llama.cpp
            srv["max_model_len"], srv["max_model_len_source"] = meta["n_ctx"], "/v1/models meta.n_ctx"
        v = self._get_json("/version")
        if isinstance(v, dict):
            if v.get("version") is not None:
                srv["version"], srv["version_source"] = str(v["version"]), "/version"
            sim = v.get("simulated") is True
            srv["simulated"] = sim
            self.doc["simulated"] = sim
        if srv["version"] is None or self.llamacpp:
            self.probe_llamacpp(srv)
        self.doc["settings"]["model"] = self.model
        log(f"server {self.ep.display}: model {self.model}, version {srv['version']}"
            + (" (SIMULATED)" if srv["simulated"] else "")
            + (f", {self.server_slots} slots" if self.server_slots else ""))
        try:
            status, body = self.ep.get("/metrics", timeout=30)
            if status == 200:
                self.metrics_ok = True
            else:
                self.metrics_reason = f"GET /metrics answered HTTP {status}"
        except OSError as exc:
            self.metrics_reason = f"GET /metrics failed: {exc}"
        if self.hardware:
            hw, path = self.hardware
            model, mpath = load_model_profile(self.model, self.args.profiles_dir)
            self.doc["profile"] = {"hardware": hw, "model": model, "hardware_file": path, "model_file": mpath}
            if model is None:
                self.warn("no_model_profile", f"no model profile for {self.model} in {self.args.profiles_dir}"
                          f"/models: the result carries profile.hardware only, so no roofline yet")

    def probe_llamacpp(self, srv: dict[str, Any]) -> None:
        """llama.cpp's llama-server: /props (total_slots, build_info, n_ctx), else /slots."""
        props = self._get_json("/props")
        if isinstance(props, dict):
            slots = props.get("total_slots")
            if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
                self.server_slots = slots
                srv["slots"], srv["slots_source"] = slots, "/props total_slots"
                self.llamacpp = True
            build = props.get("build_info")
            if srv["version"] is None and isinstance(build, str) and build:
                srv["version"], srv["version_source"] = build, "/props build_info"
            gen = props.get("default_generation_settings")
            n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
            if srv["max_model_len"] is None and isinstance(n_ctx, int) and n_ctx > 0:
                srv["max_model_len"], srv["max_model_len_source"] = n_ctx, "/props n_ctx"
        if self.server_slots is None and self.llamacpp:
            slots = self._get_json("/slots")
            if isinstance(slots, list) and slots:
                self.server_slots = len(slots)
                srv["slots"], srv["slots_source"] = len(slots), "/slots"

    def scrape(self) -> SpecCounters | None:
        if not self.metrics_ok:
            return None
        try:
            status, body = self.ep.get("/metrics", timeout=30)
        except OSError:
            return None
        if status != 200:
            return None
        return spec_counters(parse_prometheus(body.decode("utf-8", "replace")))

    # ---- phases -------------------------------------------------------------------------------

    def begin(self, phase: str) -> SpecCounters | None:
        if self.telemetry:
            self.telemetry.begin(phase)
        if self.proto["vm_before"] is None:  # swap is counted over the measured phases only
            self.proto["vm_before"] = read_vmstat()
        return self.scrape()

    def end(self, phase: str, before: SpecCounters | None, tokens: int) -> None:
        if self.telemetry:
            self.telemetry.end(phase)
        self.proto["vm_after"] = read_vmstat()
        self.spec_phases[phase] = (before, self.scrape())
        self.phase_tokens[phase] = tokens

    def generate(self, phase: str, messages_list: list[list[dict[str, Any]]], max_tokens: int,
                 forced: bool) -> tuple[list[StreamResult], bool]:
        """Stream a set of requests at once; returns results and whether forcing was used.

        On the first request the server decides the compatibility level: HTTP 400/422 with our
        vLLM extensions -> retry without them (forced_length false), then without stream_options.
        """
        a = self.args
        while True:
            bodies = [chat_body(self.model, m, max_tokens, forced, self.level, self.llamacpp)
                      for m in messages_list]
            if self.telemetry:
                self.telemetry.in_flight(True)
            try:
                raws = stream_requests(self.ep, bodies, a.request_timeout, a.stall_timeout)
            finally:
                if self.telemetry:
                    self.telemetry.in_flight(False)
            results = [decode_stream(r) for r in raws]
            rejected = [r for r in results if r.status in (400, 422)]
            if not self.level_known and rejected and len(rejected) == len(results) and self.level < 2:
                log(f"{phase}: server rejected the request ({rejected[0].error}); "
                    f"retrying without {'vLLM extensions' if self.level == 0 else 'stream_options'}")
                self.level += 1
                continue
            if any(r.status == 200 for r in results):
                self.level_known = True
            self.note_fingerprint(results)
            if any(r.status is None or r.cut for r in results):
                self.check_alive(phase)
            return results, forced and self.level == 0

    def note_fingerprint(self, results: list[StreamResult]) -> None:
        """Record the server's system_fingerprint; it is the version when the server has no
        /version (llama.cpp names its build there, e.g. b6123-abcdef)."""
        srv = self.doc["server"]
        for r in results:
            if r.system_fingerprint and not srv.get("system_fingerprint"):
                srv["system_fingerprint"] = r.system_fingerprint
                if srv["version"] is None:
                    srv["version"], srv["version_source"] = r.system_fingerprint, "system_fingerprint"
                    log(f"server version {r.system_fingerprint} (from system_fingerprint)")

    def speed_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": speed_prompt(self.rng)}]

    def warmup(self) -> None:
        a = self.args
        for i in range(a.warmup):
            res, _ = self.generate("warmup", [self.speed_messages()], a.output_tokens, True)
            r = res[0]
            if r.error:
                self.error("warmup", i, r.error)
            else:
                if r.prompt_tokens is not None and self.warmup_prompt_tokens is None:
                    self.warmup_prompt_tokens = r.prompt_tokens
                log(f"warmup {i + 1}/{a.warmup}: {r.completion_tokens} tokens, "
                    f"{r.prompt_tokens} prompt tokens")

    def run_record(self, r: StreamResult, forced: bool) -> dict[str, Any]:
        d = r.decode_info()
        ct = r.completion_tokens
        rec: dict[str, Any] = {
            "ttft_s": r.ttft if not r.error else None,
            "decode_tok_s": d.tok_s,
            "valid": d.tok_s is not None,
            "decode_source": d.source if d.tok_s is not None else None,
            "completion_tokens": ct,
            "prompt_tokens": r.prompt_tokens,
            "requested_tokens": self.args.output_tokens,
            "first_chunk_tokens": d.first_chunk_tokens,
            "first_chunk_tokens_inferred": d.first_inferred,
            "content_chunks": r.carrying,
            "finish_reason": r.finish_reason,
            "forced_length": forced,
            "length_ok": (ct == self.args.output_tokens) if ct is not None else None,
            "continuous_usage": r.continuous_usage(),
            "done_marker": r.done,
            "error": r.error,
        }
        if d.first_max is not None:
            rec["first_chunk_tokens_max"] = d.first_max
        if d.bound is not None:
            rec["decode_bound"] = d.bound
        if d.server is not None:
            rec["server_timings"] = {k: d.server[k] for k in ("predicted_n", "predicted_ms", "predicted_per_second")}
            rec["server_decode_tok_s"] = d.server["decode_tok_s"]
        if d.note:
            rec["chunk_note"] = d.note
        samples = None if r.error else r.itl_samples()
        rec["itl_ms"] = [round(x * 1000.0, 3) for x in samples] if samples else None
        if not samples:
            rec["itl_reason"] = (r.itl_reason() if samples is None or r.error
                                 else "fewer than two token arrivals: no gap")
        if d.reason and not r.error:
            rec["decode_reason"] = d.reason
        elif r.error:
            rec["decode_reason"] = "request failed"
        return rec

    def check_length(self, phase: str, i: int, rec: dict[str, Any]) -> None:
        """A completed speed request that is not the requested length: listed in errors, and
        the forcing problem said once at the top of the result (warnings) and on stderr."""
        if rec["error"] or rec["length_ok"] is not False:
            return
        a = self.args
        self.error(phase, i, f"asked for {a.output_tokens} tokens, server generated "
                             f"{rec['completion_tokens']} (length not forced)")
        if self.forcing_warning is None:
            if rec["forced_length"]:
                msg = (f"the server accepted but ignored the length-forcing fields (min_tokens, ignore_eos): "
                       f"asked for {a.output_tokens} tokens, got {rec['completion_tokens']} "
                       f"(finish_reason {rec['finish_reason']}); figures come from shorter streams")
            else:
                msg = (f"the server does not take the length-forcing fields (min_tokens, ignore_eos), so "
                       f"lengths are not forced: asked for {a.output_tokens} tokens, got "
                       f"{rec['completion_tokens']}; figures come from shorter streams")
            self.forcing_warning = self.warn("length_not_forced", msg, requests=0)
        self.forcing_warning["requests"] += 1

    def single(self) -> None:
        a = self.args
        before = self.begin("single")
        runs: list[dict[str, Any]] = []
        tokens = 0
        self.doc["single"] = {"decode_tok_s_median": None, "decode_tok_s_min": None,
                              "decode_tok_s_max": None, "ttft_s_median": None,
                              "requested_runs": a.runs, "attempted_runs": 0, "valid_runs": 0, "n": 0,
                              "warmup_prompt_tokens": self.warmup_prompt_tokens, "runs": runs}
        limit = 2 * a.runs
        retryable = False
        attempt = 0
        while attempt < limit and self.doc["single"]["valid_runs"] < a.runs:
            if attempt >= a.runs and not retryable:
                break
            if attempt == a.runs:
                bad = attempt - self.doc["single"]["valid_runs"]
                log(f"single: {bad} of {attempt} runs gave no decode figure; re-running until "
                    f"{a.runs} are valid (at most {limit} runs)")
            label = f"{attempt + 1}/{a.runs}" if attempt < a.runs else f"re-run {attempt + 1 - a.runs}"
            rec, r = self.single_run(attempt, label)
            tokens += r.completion_tokens or 0
            if not rec["valid"] and r.decode_info().retry:
                retryable = True
            attempt += 1
        if getattr(a, "target_precision", None) is not None:
            tokens += self.single_precision(attempt)
        else:
            self.doc["single"]["precision"] = None
        s = self.doc["single"]
        if s["valid_runs"] < a.runs and s["runs"]:
            self.warn("single_runs_short", f"single stream: {s['valid_runs']} valid of {s['attempted_runs']} "
                      f"attempted runs ({a.runs} requested); the median is over {s['valid_runs']}",
                      valid=s["valid_runs"], attempted=s["attempted_runs"], requested=a.runs)
        if s.get("prompt_tokens_uniform") is False:
            self.warn("prompt_lengths_differ", "single stream: the speed prompts did not all have one token "
                      "length (see single.runs[].prompt_tokens)")
        self.end("single", before, tokens)

    def single_run(self, attempt: int, label: str) -> tuple[dict[str, Any], StreamResult]:
        """One single-stream request: recorded in single.runs[], summarised, logged."""
        a = self.args
        res, forced = self.generate("single", [self.speed_messages()], a.output_tokens, True)
        r = res[0]
        rec = self.run_record(r, forced)
        rec["attempt"] = attempt
        self.doc["single"]["runs"].append(rec)
        if r.error:
            self.error("single", attempt, r.error)
        self.check_length("single", attempt, rec)
        self.summarise_single()
        if not r.error:
            dec = (f"{rec['decode_tok_s']:.2f} tok/s" if rec["decode_tok_s"] is not None
                   else f"no decode figure ({rec.get('decode_reason')})")
            med = self.doc["single"]["decode_tok_s_median"]
            log(f"single {label}: decode {dec}, TTFT {rec['ttft_s']:.3f} s"
                + (f" (median so far {med:.2f} tok/s)" if med else ""))
        else:
            log(f"single {label}: failed")
        return rec, r

    def single_precision(self, attempt: int) -> int:
        """--target-precision: after --runs valid runs, more single-stream requests until the
        95 % bootstrap interval of the median decode rate has a half-width <= target % of the
        median (``median_precision_pct``), or --max-runs attempted runs in all. Records
        ``single.precision`` = {target_pct, achieved_pct, runs_used, reached, max_runs, resamples,
        seed}; returns the completion tokens of the extra requests."""
        a = self.args
        s = self.doc["single"]
        target = float(a.target_precision)
        max_runs = a.max_runs or 4 * a.runs
        tokens = 0

        def achieved() -> float | None:
            return median_precision_pct([r["decode_tok_s"] for r in s["runs"] if r["decode_tok_s"] is not None])

        pct = achieved()
        if s["valid_runs"] < a.runs:
            log(f"single precision: only {s['valid_runs']} of {a.runs} runs are valid; not extending")
        else:
            extra = 0
            while (pct is None or pct > target) and attempt < max_runs:
                log(f"single precision: median known to ±{pct:.2f} % after {s['valid_runs']} runs; target "
                    f"±{target:g} %, at most {max_runs} runs" if pct is not None else
                    f"single precision: no interval yet; target ±{target:g} %, at most {max_runs} runs")
                extra += 1
                rec, r = self.single_run(attempt, f"precision run {extra}")
                attempt += 1
                tokens += r.completion_tokens or 0
                if not rec["valid"] and not r.decode_info().retry:
                    log("single precision: the request gave no decode figure and another would not either; stopping")
                    break
                pct = achieved()
        reached = pct is not None and pct <= target
        s["precision"] = {"target_pct": target, "achieved_pct": None if pct is None else round(pct, 3),
                          "runs_used": len(s["runs"]), "reached": reached, "max_runs": max_runs,
                          "resamples": PRECISION_RESAMPLES, "seed": PRECISION_SEED}
        log(f"single precision: {'reached' if reached else 'NOT reached'}: median known to "
            + (f"±{pct:.2f} %" if pct is not None else "(no interval: fewer than 2 valid runs)")
            + f" (target ±{target:g} %) with {len(s['runs'])} runs")
        return tokens

    def summarise_single(self) -> None:
        s = self.doc["single"]
        valid = [r for r in s["runs"] if r["decode_tok_s"] is not None]
        decs = [r["decode_tok_s"] for r in valid]
        ttfts = [r["ttft_s"] for r in s["runs"] if r["ttft_s"] is not None]
        s["decode_tok_s_median"] = median(decs)
        s["decode_tok_s_min"] = min(decs) if decs else None
        s["decode_tok_s_max"] = max(decs) if decs else None
        s["ttft_s_median"] = median(ttfts)
        s["ttft_n"] = len(ttfts)
        s["attempted_runs"] = len(s["runs"])
        s["valid_runs"] = s["n"] = len(valid)
        s["decode_sources"] = sorted({r["decode_source"] for r in valid if r.get("decode_source")})
        if any("decode_bound" in r for r in valid):
            lows = [r.get("decode_bound", {}).get("low", r["decode_tok_s"]) for r in valid]
            highs = [r.get("decode_bound", {}).get("high", r["decode_tok_s"]) for r in valid]
            s["decode_tok_s_median_bound"] = {"low": median(lows), "high": median(highs)}
        else:
            s.pop("decode_tok_s_median_bound", None)
        prompts = {r["prompt_tokens"] for r in s["runs"] if r.get("prompt_tokens") is not None}
        if self.warmup_prompt_tokens is not None and prompts:
            prompts.add(self.warmup_prompt_tokens)
        s["prompt_tokens"] = next(iter(prompts)) if len(prompts) == 1 else None
        s["prompt_tokens_uniform"] = (len(prompts) == 1) if prompts else None
        if not decs and s["runs"]:
            reasons = {r.get("decode_reason") or r.get("error") for r in s["runs"]}
            s["decode_reason"] = "; ".join(sorted(x for x in reasons if x))
        else:
            s.pop("decode_reason", None)

    def parallel(self, n: int) -> None:
        a = self.args
        phase = f"parallel_{n}"
        before = self.begin(phase)
        msgs = [self.speed_messages() for _ in range(n)]
        res, forced = self.generate(phase, msgs, a.output_tokens, True)
        ok = [r for r in res if not r.error]
        streams: list[dict[str, Any]] = []
        for i, r in enumerate(res):
            rec = self.run_record(r, forced)
            rec["request"] = i
            streams.append(rec)
            if r.error:
                self.error(phase, i, r.error)
            self.check_length(phase, i, rec)
        per_stream = [s["decode_tok_s"] for s in streams if s["decode_tok_s"] is not None]
        ttfts = [r.ttft for r in ok if r.ttft is not None]
        itl: list[float] = []
        itl_streams = 0
        itl_missing: list[str] = []
        for r in ok:
            samples = r.itl_samples()
            if not samples:
                itl_missing.append(r.itl_reason() if samples is None else "fewer than two token arrivals")
            else:
                itl.extend(samples)
                itl_streams += 1
        tokens = [r.completion_tokens for r in ok]
        prompts = {s["prompt_tokens"] for s in streams if s["prompt_tokens"] is not None}
        entry: dict[str, Any] = {
            "concurrency": n, "requests": n, "completed": len(ok), "errors": n - len(ok),
            "combined_tok_s": None, "per_stream_decode_tok_s": per_stream,
            "per_stream_decode_tok_s_median": median(per_stream),
            "per_stream_n": len(per_stream),
            "per_stream": streams,
            "ttft_s": pcts(ttfts), "itl_s": pcts(itl), "itl_streams": itl_streams,
            "forced_length": forced,
            "length_ok": all(t == a.output_tokens for t in tokens) if ok and None not in tokens else None,
            "prompt_tokens_uniform": (len(prompts) == 1) if prompts else None,
            "server_slots": self.server_slots,
        }
        if itl_missing:
            why = "; ".join(sorted(set(itl_missing)))
            entry["itl_reason"] = (f"{len(itl_missing)} of {len(ok)} completed streams have no per-token "
                                   f"gaps ({why})" + ("" if itl_streams else ": no ITL figure"))
        elif not ok:
            entry["itl_reason"] = "no request completed"
        if len(per_stream) < n:
            log(f"{phase}: {n - len(per_stream)} of {n} streams have no decode figure: "
                + "; ".join(sorted({s.get('decode_reason') or 'unknown' for s in streams
                                    if s['decode_tok_s'] is None})))
        spans = [(r.t_first, r.t_last) for r in ok if r.t_first is not None and r.t_last is not None]
        waves, queued = count_waves(spans)
        entry["waves_observed"] = waves if spans else None
        entry["queued_requests"] = queued
        lasts = [r.t_last for r in ok if r.t_last is not None]
        if ok and None not in tokens and lasts:
            span = max(lasts) - min(r.t_start for r in res)
            total = sum(t for t in tokens if t is not None)
            entry["completion_tokens"] = total
            entry["wall_s"] = span
            entry["combined_tok_s"] = total / span if span > 0 else None
        else:
            entry["combined_reason"] = ("no request completed" if not ok
                                        else "server sent no usage: token counts unknown")
        self.doc["parallel"].append(entry)
        self.end(phase, before, sum(t or 0 for t in tokens))
        if (self.server_slots and n > self.server_slots) or waves > 1:
            slots = f"the server has {self.server_slots} slots" if self.server_slots else "the server queued requests"
            self.warn("parallel_waves", f"parallel {n}: {slots}; the wave ran as {waves} waves "
                      f"({queued} of {len(spans)} requests got their first token after another had "
                      f"finished), so this is not {n} streams at once", concurrency=n, waves=waves,
                      server_slots=self.server_slots)
        comb = entry["combined_tok_s"]
        if comb:
            log(f"parallel {n}: combined {comb:.2f} tok/s, {entry['completed']}/{n} completed, "
                f"{len(per_stream)} per-stream figures")
        else:
            log(f"parallel {n}: no combined figure ({entry.get('combined_reason')})")

    def context(self, depth: int, chars_per_token: float) -> float:
        phase = f"context_{depth}"
        mml = self.doc["server"]["max_model_len"]
        entry: dict[str, Any] = {"depth": depth, "prompt_tokens": None, "prefill_tok_s": None,
                                 "ttft_s": None, "error": None}
        if mml and depth + CONTEXT_OUTPUT_TOKENS + 64 > mml:
            entry["error"] = f"depth {depth} + output does not fit max_model_len {mml}"
            self.doc["context"].append(entry)
            self.error(phase, None, entry["error"])
            return chars_per_token
        before = self.begin(phase)
        prompt = context_prompt(int(depth * chars_per_token), self.rng)
        res, _ = self.generate(phase, [[{"role": "user", "content": prompt}]], CONTEXT_OUTPUT_TOKENS, True)
        r = res[0]
        if r.error:
            entry["error"] = r.error
            self.error(phase, 0, r.error)
        else:
            entry["ttft_s"] = r.ttft
            entry["prompt_tokens"] = r.prompt_tokens
            if r.prompt_tokens and r.ttft:
                entry["prefill_tok_s"] = r.prompt_tokens / r.ttft
                chars_per_token = len(prompt) / r.prompt_tokens
            else:
                entry["prefill_reason"] = "server sent no usage.prompt_tokens"
            log(f"context {depth}: {entry['prompt_tokens']} prompt tokens, TTFT {r.ttft:.3f} s")
        self.doc["context"].append(entry)
        self.end(phase, before, r.completion_tokens or 0)
        return chars_per_token

    def post_chat(self, body: dict[str, Any]) -> tuple[int | None, Any, str | None, float]:
        """One non-streaming chat completion: (HTTP status or None, parsed JSON body or None,
        error message or None, seconds from send to the whole response received)."""
        data = json.dumps(body).encode("utf-8")
        cls = http.client.HTTPSConnection if self.ep.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.ep.host, self.ep.port, timeout=self.args.request_timeout)
        t0 = time.monotonic()
        try:
            conn.request("POST", self.ep.prefix + "/v1/chat/completions", body=data,
                         headers={**self.ep.headers(), "Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            elapsed = time.monotonic() - t0
        except (OSError, http.client.HTTPException) as exc:
            return None, None, f"transport error: {exc}", time.monotonic() - t0
        finally:
            conn.close()
        if resp.status != 200:
            return resp.status, None, f"HTTP {resp.status}: {_error_message(raw)}", elapsed
        try:
            return resp.status, json.loads(raw), None, elapsed
        except ValueError:
            return resp.status, None, "HTTP 200 with a body that is not JSON", elapsed

    def tools_phase(self) -> None:
        """The tool-call check: one non-streaming request per prompt (temperature 0, the prompt's
        tools, --tool-choice), each judged by judge_tool_calls; the ``tools`` block."""
        a = self.args
        data = self.tools_data or load_tools(a.tools_file)
        tools = data["tools"]
        choice = a.tool_choice
        entries: list[dict[str, Any]] = []
        skip = getattr(a, "tools_skip", None)
        if skip:  # refused before the run (sparkbench's preflight): nothing is sent, the reason is kept
            entries = [{"id": p["id"], "category": p["category"], "expected": list(p.get("expected") or []),
                        "calls": [], "verdict": "skipped", "bucket": None, "reason": skip, "finish_reason": None,
                        "content_excerpt": None, "latency_s": None, "completion_tokens": None}
                       for p in data["prompts"]]
            log(f"tools: skipped ({skip})")
            self.doc["tools"] = {"tool_choice": choice, "file": a.tools_file, "max_tokens": a.tools_max_tokens,
                                 "prompts": entries, **summarise_tools(entries), "reason": skip}
            return
        before = self.begin("tools")
        tokens = 0
        for i, p in enumerate(data["prompts"]):
            expected = list(p.get("expected") or [])
            entry: dict[str, Any] = {"id": p["id"], "category": p["category"], "expected": expected, "calls": [],
                                     "verdict": "skipped", "bucket": None, "reason": None, "finish_reason": None,
                                     "content_excerpt": None, "latency_s": None, "completion_tokens": None}
            entries.append(entry)
            if choice != "auto" and not expected:
                entry["reason"] = (f"tool_choice {choice} forces a call, so a prompt that needs none cannot be "
                                   "judged")
                log(f"tools {p['id']}: skipped ({entry['reason']})")
                continue
            if choice == "named":
                # One named function gives one call: judged against the first expected call.
                expected = entry["expected"] = expected[:1]
            offered = prompt_tools(p, tools)
            messages = p.get("messages") or [{"role": "user", "content": p["prompt"]}]
            body = {"model": self.model, "messages": messages, "tools": offered,
                    "tool_choice": tool_choice_body(choice, p), "temperature": 0, "max_tokens": a.tools_max_tokens,
                    "stream": False}
            status, resp, err, elapsed = self.post_chat(body)
            entry["latency_s"] = elapsed
            if err is not None:
                entry.update(verdict="fail", bucket="request_error", reason=err)
                self.error("tools", i, err)
                if status is None:
                    self.check_alive("tools")
                continue
            choice0 = ((resp or {}).get("choices") or [{}])[0] if isinstance(resp, dict) else {}
            usage = (resp or {}).get("usage") or {}
            if isinstance(usage.get("completion_tokens"), int):
                entry["completion_tokens"] = usage["completion_tokens"]
                tokens += usage["completion_tokens"]
            entry["finish_reason"] = choice0.get("finish_reason") if isinstance(choice0, dict) else None
            verdict = judge_tool_calls({**p, "expected": expected}, offered,
                                       choice0.get("message") if isinstance(choice0, dict) else None,
                                       entry["finish_reason"])
            entry.update(verdict)
            log(f"tools {p['id']}: {entry['verdict']}" + (f" ({entry['bucket']}: {entry['reason']})"
                                                           if entry["bucket"] else ""))
        self.end("tools", before, tokens)
        summary = summarise_tools(entries)
        self.doc["tools"] = {"tool_choice": choice, "file": a.tools_file, "max_tokens": a.tools_max_tokens,
                             "prompts": entries, **summary, "reason": None}
        judged = [e for e in entries if e["verdict"] != "skipped"]
        self.tools_all_errored = bool(judged) and all(e["bucket"] == "request_error" for e in judged)

    def quality(self) -> None:
        a = self.args
        data = self.quality_data or {}
        sandbox = Sandbox(a.sandbox_image)
        log(f"quality: sandbox {sandbox.kind}" + (f" ({sandbox.reason})" if sandbox.reason else ""))
        before = self.begin("quality")
        tokens = 0
        for i, q in enumerate(data.get("questions", [])):
            res, _ = self.generate("quality", [[{"role": "user", "content": q["prompt"]}]],
                                   a.quality_max_tokens, False)
            r = res[0]
            tokens += r.completion_tokens or 0
            status, details = check_quality(q, r, a.quality_max_tokens, sandbox)
            if r.error:
                self.error("quality", i, r.error)
            self.doc["quality"].append({
                "id": q["id"], "status": status, "answer": final_answer(r),
                "reasoning_tokens": r.reasoning_tokens, "completion_tokens": r.completion_tokens,
                "finish_reason": r.finish_reason, "details": details})
            log(f"quality {q['id']}: {status}")
        self.end("quality", before, tokens)

    def image(self) -> None:
        a = self.args
        img = (self.quality_data or {}).get("image") or {}
        palette = list(img["colours"].keys())
        seed = self.rng.randrange(1 << 31)
        pick = random.Random(seed)
        colour = pick.choice(palette)
        shape = pick.choice(["square", "circle", "triangle"])
        w, h = (img.get("size") or [64, 64])[:2]
        png = make_png(int(w), int(h), img.get("background") or [255, 255, 255], img["colours"][colour], shape)
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        msgs = [{"role": "user", "content": [{"type": "text", "text": img.get("prompt", "What colour is the shape?")},
                                             {"type": "image_url", "image_url": {"url": url}}]}]
        before = self.begin("image")
        res, _ = self.generate("image", [msgs], a.quality_max_tokens, False)
        r = res[0]
        self.end("image", before, r.completion_tokens or 0)
        answer = final_answer(r)
        entry: dict[str, Any] = {"status": "error", "answer": answer, "expected": colour, "shape": shape,
                                 "seed": seed, "named": [], "finish_reason": r.finish_reason,
                                 "reasoning_tokens": r.reasoning_tokens,
                                 "completion_tokens": r.completion_tokens, "spec_decode_active": None}
        b, af = self.spec_phases["image"]
        if b is not None and af is not None:
            entry["spec_decode_active"] = af.drafts > b.drafts
        if r.error:
            entry["error"] = r.error
            self.error("image", 0, r.error)
        elif r.finish_reason == "length" and not answer:
            entry["status"] = "truncated"
        else:
            ok, named = names_colour(answer, colour, palette)
            entry["named"] = named
            entry["status"] = "pass" if ok else "fail"
        self.doc["image"] = entry
        log(f"image: {entry['status']} (expected {colour}, answer {answer[:40]!r})")

    # ---- prefix-cache and multi-turn phases (docs/MEASUREMENT.md "Prefix caching", "Multi-turn") --

    def prefix_counters(self) -> tuple[tuple[float, float] | None, str | None]:
        """(queries, hits) of vLLM's prefix-cache counters now (tokens, summed over engines), or
        (None, why). The exposition names counters ``<name>_total``; the bare name is accepted too."""
        if not self.metrics_ok:
            return None, self.metrics_reason or "no /metrics endpoint"
        try:
            status, body = self.ep.get("/metrics", timeout=30)
        except OSError as exc:
            return None, f"GET /metrics failed: {exc}"
        if status != 200:
            return None, f"GET /metrics answered HTTP {status}"
        return prefix_cache_counters(parse_prometheus(body.decode("utf-8", "replace")))

    def _fit(self, tokens: int, what: str) -> str | None:
        mml = self.doc["server"]["max_model_len"]
        if mml and tokens + 64 > mml:
            return f"{what} ({tokens} tokens with the output) does not fit max_model_len {mml}"
        return None

    def prefix_phase(self, chars_per_token: float) -> None:
        """--prefix-tokens: one shared system prompt (a document, new each run) and a unique user
        suffix per request, sent one at a time; TTFT of the first (cold) request against the rest
        (warm), the hit rate from the prefix-cache counters' deltas."""
        a = self.args
        n_pre, n_suf, n_out = a.prefix_tokens, a.prefix_suffix_tokens, a.prefix_output_tokens
        entry: dict[str, Any] = {"prefix_tokens": n_pre, "suffix_tokens": n_suf, "output_tokens": n_out,
                                 "requests": a.prefix_requests, "completed": 0, "failed": 0,
                                 "cold_ttft_s": None, "ttft_s": stat4([]), "prefill_tok_s": None,
                                 "hit_rate": None, "hit_tokens": None, "query_tokens": None, "reason": None,
                                 "per_request": []}
        self.doc["prefix_cache"] = entry
        too_long = self._fit(n_pre + n_suf + n_out, "shared prefix + suffix")
        if too_long:
            entry["reason"] = too_long
            self.error("prefix", None, too_long)
            return
        doc_text = context_prompt(int(n_pre * chars_per_token), self.rng)
        before = self.begin("prefix")
        c0, why0 = self.prefix_counters()
        tokens = 0
        warm_ttft: list[float] = []
        warm_rate: list[float] = []
        for i in range(a.prefix_requests):
            msgs = [{"role": "system", "content": doc_text},
                    {"role": "user", "content": suffix_prompt(int(n_suf * chars_per_token), self.rng)}]
            res, _ = self.generate("prefix", [msgs], n_out, True)
            r = res[0]
            tokens += r.completion_tokens or 0
            rec: dict[str, Any] = {"i": i, "prompt_tokens": r.prompt_tokens, "ttft_s": None, "e2e_s": None,
                                   "cached_tokens": cached_tokens(r.usage), "error": r.error}
            if r.error or r.t_first is None:
                rec["error"] = r.error or "no chunk carried content or reasoning"
                entry["failed"] += 1
                self.error("prefix", i, rec["error"])
            else:
                entry["completed"] += 1
                rec["ttft_s"] = r.ttft
                rec["e2e_s"] = (r.t_last - r.t_start) if r.t_last is not None else None
                if i == 0:
                    entry["cold_ttft_s"] = r.ttft
                else:
                    warm_ttft.append(r.ttft)
                    if r.prompt_tokens and r.ttft:
                        warm_rate.append(r.prompt_tokens / r.ttft)
            entry["per_request"].append(rec)
        c1, why1 = self.prefix_counters()
        self.end("prefix", before, tokens)
        entry["ttft_s"] = stat4(warm_ttft)
        entry["prefill_tok_s"] = median(warm_rate)
        if c0 is None or c1 is None:
            entry["reason"] = why0 or why1
        else:
            dq, dh = c1[0] - c0[0], c1[1] - c0[1]
            entry["query_tokens"], entry["hit_tokens"] = int(dq), int(dh)
            if dq > 0:
                entry["hit_rate"] = dh / dq
            else:
                entry["reason"] = ("the server counted no prefix-cache queries during the phase "
                                   "(prefix caching off, e.g. --no-enable-prefix-caching)")
        if entry["failed"]:
            self.prefix_failed = True
        hr = entry["hit_rate"]
        log(f"prefix {n_pre}+{n_suf} tokens: {entry['completed']}/{a.prefix_requests} completed, cold TTFT "
            f"{entry['cold_ttft_s'] or 0:.3f} s, warm TTFT p50 {entry['ttft_s']['p50'] or 0:.3f} s, hit rate "
            + (f"{hr:.3f}" if hr is not None else f"n/a ({entry['reason']})"))

    def multi_turn(self, chars_per_token: float) -> None:
        """--turns: --conversations conversations, each turn re-sending the whole history (the
        assistant's real answers) plus --turn-tokens new user tokens; conversations interleaved
        round robin, one request at a time; a failed turn ends its conversation."""
        a = self.args
        n_conv, n_turns, n_new, n_out = a.conversations, a.turns, a.turn_tokens, a.turn_output_tokens
        entry: dict[str, Any] = {"conversations": n_conv, "turns": n_turns, "turn_tokens": n_new,
                                 "output_tokens": n_out, "completed": 0, "failed": 0, "per_turn": [],
                                 "per_request": []}
        self.doc["multi_turn"] = entry
        too_long = self._fit(n_turns * (n_new + n_out + 16), "the last turn's context")
        if too_long:
            entry["reason"] = too_long
            self.error("multi_turn", None, too_long)
            return
        before = self.begin("multi_turn")
        history: list[list[dict[str, Any]] | None] = [[] for _ in range(n_conv)]
        tokens = 0
        for turn in range(1, n_turns + 1):
            for c in range(n_conv):
                hist = history[c]
                if hist is None:
                    continue
                user = {"role": "user", "content": turn_prompt(turn, int(n_new * chars_per_token), self.rng)}
                res, forced = self.generate("multi_turn", [hist + [user]], n_out, True)
                r = res[0]
                tokens += r.completion_tokens or 0
                rec = self.run_record(r, forced)
                row: dict[str, Any] = {"conversation": c, "turn": turn, "prompt_tokens": r.prompt_tokens,
                                       "ttft_s": rec["ttft_s"], "decode_tok_s": rec["decode_tok_s"],
                                       "cached_tokens": cached_tokens(r.usage), "error": r.error}
                if r.error or r.t_first is None:
                    row["error"] = r.error or "no chunk carried content or reasoning"
                    entry["failed"] += 1
                    self.error("multi_turn", len(entry["per_request"]), row["error"])
                    history[c] = None  # GuideLLM's rule: a failed turn cancels the rest of its conversation
                else:
                    entry["completed"] += 1
                    history[c] = hist + [user, {"role": "assistant", "content": r.content}]
                entry["per_request"].append(row)
        self.end("multi_turn", before, tokens)
        for turn in range(1, n_turns + 1):
            rows = [p for p in entry["per_request"] if p["turn"] == turn and not p["error"]]
            entry["per_turn"].append({
                "turn": turn, "requests": len(rows),
                "context_tokens": median([p["prompt_tokens"] for p in rows if p["prompt_tokens"] is not None]),
                "ttft_s": median([p["ttft_s"] for p in rows if p["ttft_s"] is not None]),
                "decode_tok_s": median([p["decode_tok_s"] for p in rows if p["decode_tok_s"] is not None]),
                "prefill_tok_s": median([p["prompt_tokens"] / p["ttft_s"] for p in rows
                                         if p["prompt_tokens"] and p["ttft_s"]])})
        if entry["failed"]:
            self.prefix_failed = True
        first, last = entry["per_turn"][0], entry["per_turn"][-1]
        log(f"multi-turn: {entry['completed']} of {n_conv * n_turns} turns completed; context "
            f"{first['context_tokens']} -> {last['context_tokens']} tokens, TTFT {first['ttft_s'] or 0:.3f} -> "
            f"{last['ttft_s'] or 0:.3f} s, decode {first['decode_tok_s'] or 0:.1f} -> {last['decode_tok_s'] or 0:.1f} tok/s")

    # ---- arrival-rate phase ---------------------------------------------------------------------

    def rate_phase(self, rate: float | None, chars_per_token: float, search: bool = False,
                   concurrency: int | None = None) -> dict[str, Any]:
        """One arrival-rate block: requests sent on their schedule (one thread, stream_scheduled),
        ttft/tpot/e2e per request from the client's reads, goodput against --slo. ``rate`` None:
        the --replay workload."""
        a = self.args
        slo = a.slo
        if rate is None:
            rows = self.replay_data or []
            offsets = [r["offset_s"] for r in rows]
            outs = [r["output_tokens"] or a.output_tokens for r in rows]
            msgs = []
            for r in rows:
                text = r["prompt"] or context_prompt(int(r["prompt_tokens"] * chars_per_token), self.rng)
                msgs.append([{"role": "user", "content": text}])
            span = max(offsets)
            label, phase = f"replay {a.replay}", "rate_replay"
            nominal: Any = len(rows) / span if span > 0 else "inf"
        else:
            n = a.rate_requests or max(1, round(rate * a.rate_duration))
            if concurrency is not None:  # --search-by concurrency: closed loop at this level
                n = a.rate_requests or max(8, 4 * concurrency)
            offsets = rate_schedule(n, rate, a.burstiness, a.rate_seed)
            outs = [a.output_tokens] * n
            msgs = [self.speed_messages() for _ in range(n)]
            label, phase = f"rate {rate:g} req/s", f"rate_{rate:g}"
            if concurrency is not None:
                label, phase = f"rate {rate:g} req/s, {concurrency} in flight", f"rate_{rate:g}_c{concurrency}"
            nominal = "inf" if math.isinf(rate) else rate
        n = len(offsets)
        tag = make_nonce(self.rng)
        ids = [f"sb-{tag}-{i}" for i in range(n)]
        bodies = [chat_body(self.model, m, o, True, self.level, self.llamacpp) for m, o in zip(msgs, outs)]
        log(f"{label}: {n} requests over {max(offsets) if offsets else 0:.2f} s")
        before = self.begin(phase)
        if self.telemetry:
            self.telemetry.in_flight(True)
        anchor_perf, anchor_epoch = time.perf_counter(), time.time()
        try:
            raws, t0 = stream_scheduled(self.ep, bodies, offsets, a.request_timeout, a.stall_timeout,
                                        concurrency or a.rate_max_concurrency, ids)
        finally:
            if self.telemetry:
                self.telemetry.in_flight(False)

        def epoch(t: float) -> float:
            return anchor_epoch + (t - anchor_perf)

        results = [decode_stream(r) for r in raws]
        self.note_fingerprint(results)
        per: list[dict[str, Any]] = []
        ttfts: list[float] = []
        tpots: list[float] = []
        e2es: list[float] = []
        sched_err: list[float] = []
        good = completed = failed = tokens = 0
        for i, r in enumerate(results):
            sent = r.t_start if r.t_start else None
            rec: dict[str, Any] = {"id": ids[i], "scheduled_s": offsets[i],
                                   "sent": epoch(sent) if sent else None,
                                   "schedule_error_ms": (sent - t0 - offsets[i]) * 1000.0 if sent else None,
                                   "ttft_s": None, "tpot_s": None, "e2e_s": None,
                                   "output_tokens": r.completion_tokens, "good": False if slo else None,
                                   "error": None}
            if rec["schedule_error_ms"] is not None:
                sched_err.append(rec["schedule_error_ms"])
            if r.error or r.t_first is None or r.t_last is None:
                rec["error"] = r.error or "no chunk carried content or reasoning"
                failed += 1
                self.error(phase, i, rec["error"])
            else:
                completed += 1
                ttft, e2e = r.t_first - r.t_start, r.t_last - r.t_start
                tpot = request_tpot(e2e, ttft, r.completion_tokens)
                rec.update({"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "end": epoch(r.t_last)})
                ttfts.append(ttft)
                e2es.append(e2e)
                if tpot is not None:
                    tpots.append(tpot)
                else:
                    rec["tpot_reason"] = "server sent no usage: output tokens unknown"
                tokens += r.completion_tokens or 0
                rec["good"] = meets_slo(slo, ttft, tpot, e2e) if slo else None
                good += bool(rec["good"])
            per.append(rec)
        sends = [r.t_start for r in results if r.t_start]
        ends = [r.t_last for r in results if not r.error and r.t_last is not None]
        start = min(sends) if sends else None
        end = max(ends) if ends else None
        duration = (end - start) if start is not None and end is not None and end > start else None
        entry: dict[str, Any] = {
            "rate": nominal, "burstiness": inf_str(a.burstiness) if rate is not None else None,
            "seed": a.rate_seed if rate is not None else None, "requests": n, "completed": completed,
            "failed": failed, "start": epoch(start) if start is not None else None,
            "end": epoch(end) if end is not None else None, "duration_s": duration,
            "achieved_rate": n / duration if duration else None,
            "output_tok_s": tokens / duration if duration else None,
            "ttft_s": stat4(ttfts), "tpot_s": stat4(tpots), "e2e_s": stat4(e2es),
            "schedule_error_ms": {"p50": percentile(sched_err, 50), "p99": percentile(sched_err, 99),
                                  "max": max(sched_err) if sched_err else None},
            "slo": dict(slo) if slo else None,
            "goodput": (good / duration if duration else 0.0) if slo else None,
            "slo_met_share": good / n if slo and n else None,
            "search": search, "max_concurrency": concurrency or a.rate_max_concurrency,
            "output_tokens": a.output_tokens if rate is not None else None,
            "per_request": per,
        }
        if rate is None:
            entry["replay"] = a.replay
        if duration is None:
            entry["duration_reason"] = ("no request completed" if not completed
                                        else "no time between first send and last completion")
        if failed:
            reasons = sorted({p["error"] for p in per if p["error"]})
            entry["failed_reason"] = f"{failed} of {n} requests failed: " + "; ".join(reasons)[:500]
            self.rate_failed += failed
        self.end(phase, before, tokens)
        if any(r.status is None or r.cut for r in results):
            self.check_alive(phase)
        self.doc["rates"] = (self.doc["rates"] or []) + [entry]
        gp = entry["goodput"]
        log(f"{label}: {completed}/{n} completed, achieved {entry['achieved_rate'] or 0:.3f} req/s, "
            f"schedule error p99 {entry['schedule_error_ms']['p99'] or 0:.3f} ms"
            + (f", goodput {gp:.3f} req/s, SLO met by {entry['slo_met_share']:.3f}" if gp is not None else ""))
        return entry

    def rates(self, chars_per_token: float) -> None:
        """--rate LIST (each in order), --replay, then --rate-search."""
        a = self.args
        tried: list[tuple[float, float]] = []  # (rate, slo_met_share)
        for rate in a.rate or []:
            e = self.rate_phase(rate, chars_per_token)
            if e["slo_met_share"] is not None and not math.isinf(rate):
                tried.append((rate, e["slo_met_share"]))
        if a.replay:
            self.rate_phase(None, chars_per_token)
        if a.rate_search is not None and getattr(a, "search_by", "rate") == "concurrency":
            self.concurrency_search(a.rate_search, chars_per_token)
        elif a.rate_search is not None:
            self.rate_search(a.rate_search, tried, chars_per_token)

    def concurrency_search(self, target: float, chars_per_token: float) -> None:
        """--search-by concurrency: the highest number of requests in flight N whose closed-loop
        slo_met_share >= target. Each level is a rate-phase entry at rate inf with max_concurrency N
        (vLLM's --request-rate inf --max-concurrency N), --rate-requests requests (default max(8, 4 N)).
        Levels: start at --rate-max-concurrency (default 1); while none failed, double the highest
        (at most CONCURRENCY_SEARCH_MAX); while none passed, halve the lowest; then bisect the integers
        between the highest passing and the lowest failing level above it until they are adjacent;
        at most CONCURRENCY_SEARCH_STEPS levels in all."""
        a = self.args
        tried: list[tuple[int, float]] = []

        def bounds() -> tuple[int | None, int | None]:
            ok = [c for c, sh in tried if sh >= target]
            lo = max(ok) if ok else None
            bad = [c for c, sh in tried if sh < target and (lo is None or c > lo)]
            return lo, (min(bad) if bad else None)

        for _ in range(CONCURRENCY_SEARCH_STEPS):
            lo, hi = bounds()
            if not tried:
                nxt = min(a.rate_max_concurrency or 1, CONCURRENCY_SEARCH_MAX)
            elif hi is None:
                nxt = min(2 * lo, CONCURRENCY_SEARCH_MAX)
            elif lo is None:
                nxt = hi // 2
            else:
                nxt = (lo + hi) // 2
            if nxt < 1 or any(c == nxt for c, _ in tried):
                break
            e = self.rate_phase(math.inf, chars_per_token, search=True, concurrency=nxt)
            tried.append((nxt, e["slo_met_share"] or 0.0))
        lo, _ = bounds()
        self.doc["rate_search"] = {"target_share": target, "by": "concurrency", "best_rate": None,
                                   "best_concurrency": lo, "tried": [c for c, _ in tried], "extra_rates": [],
                                   "max_steps": CONCURRENCY_SEARCH_STEPS}
        log(f"concurrency search: most requests in flight with SLO share >= {target:g}: "
            + (f"{lo}" if lo is not None else "none of the levels tried"))

    def rate_search(self, target: float, tried: list[tuple[float, float]], chars_per_token: float) -> None:
        """Highest rate whose slo_met_share >= target, from the listed rates and at most
        RATE_SEARCH_STEPS more: while no tried rate fails, double the highest; while none passes,
        halve the lowest; then bisect between the highest passing and the lowest failing rate above it,
        stopping early when they are within 5 % of each other."""
        def bounds() -> tuple[float | None, float | None]:
            ok = [r for r, sh in tried if sh >= target]
            lo = max(ok) if ok else None
            bad = [r for r, sh in tried if sh < target and (lo is None or r > lo)]
            return lo, (min(bad) if bad else None)

        extra: list[float] = []
        for _ in range(RATE_SEARCH_STEPS):
            lo, hi = bounds()
            if lo is None and hi is None:
                break
            if hi is None:
                nxt = 2 * lo
            elif lo is None:
                nxt = hi / 2
            else:
                if hi - lo <= 0.05 * hi:
                    break
                nxt = (lo + hi) / 2
            nxt = float(f"{nxt:.4g}")
            if any(r == nxt for r, _ in tried):
                break
            e = self.rate_phase(nxt, chars_per_token, search=True)
            tried.append((nxt, e["slo_met_share"] or 0.0))
            extra.append(nxt)
        lo, _ = bounds()
        self.doc["rate_search"] = {"target_share": target, "by": "rate", "best_rate": lo, "best_concurrency": None,
                                   "tried": [r for r, _ in tried], "extra_rates": extra,
                                   "max_steps": RATE_SEARCH_STEPS}
        log(f"rate search: highest rate with SLO share >= {target:g}: "
            + (f"{lo:g} req/s" if lo is not None else "none of the rates tried"))

    # ---- assembly -----------------------------------------------------------------------------

    def finish(self, status: str) -> dict[str, Any]:
        doc = self.doc
        doc["status"] = status
        doc["finished_at"] = utc_now()
        # spec decode
        spec_present = any(b is not None or a is not None for b, a in self.spec_phases.values())
        if not self.spec_phases:
            doc["spec_decode"] = None
            doc["spec_decode_reason"] = "not measured: the run stopped before any phase"
        elif not self.metrics_ok:
            doc["spec_decode"] = None
            doc["spec_decode_reason"] = self.metrics_reason or "no /metrics endpoint"
        elif not spec_present:
            doc["spec_decode"] = None
            doc["spec_decode_reason"] = ("the server exposes no vllm:spec_decode_* counters "
                                         "(speculative decoding off, or not vLLM)")
        else:
            speed = [(b, a) for ph, (b, a) in self.spec_phases.items()
                     if (ph == "single" or ph.startswith("parallel_")) and b is not None and a is not None]
            top = sum_spec_deltas(speed) or {"acceptance_per_position": None, "mean_acceptance_length": None,
                                             "draft_acceptance_rate": None, "num_drafts": None,
                                             "reason": "no speed phase was measured"}
            by_phase = {}
            for ph, (b, a) in self.spec_phases.items():
                by_phase[ph] = spec_delta(b, a) or {
                    "acceptance_per_position": None, "mean_acceptance_length": None,
                    "draft_acceptance_rate": None, "num_drafts": None, "reason": "scrape failed"}
            top["phases_included"] = [ph for ph in self.spec_phases if ph == "single" or ph.startswith("parallel_")]
            top["by_phase"] = by_phase
            doc["spec_decode"] = top
            doc["spec_decode_reason"] = None
        # telemetry
        tel = self.telemetry
        if tel:
            tel.close()
            phases = {ph: tel.summary(ph, self.phase_tokens.get(ph)) for ph in tel.samples}
            doc["telemetry"] = {"source": "nvidia-smi", "command": " ".join(tel.argv),
                                "interval_s": tel.interval, "query": ",".join(tel.query),
                                "gpu_names": tel.gpu_names, "phases": phases}
            doc["telemetry_reason"] = None
            self.telemetry = None
        elif doc["telemetry"] is None:
            doc["telemetry_reason"] = self.telemetry_reason or "not measured"
        self.finish_protocol(tel)
        return clean_json(doc)

    def start_protocol(self) -> None:
        """Before anything else: /proc/meminfo and the kernel log as they were."""
        self.proto["memory_before"] = read_meminfo_fields()
        kl = getattr(self.args, "kernel_log", "dmesg") or "dmesg"
        if kl.strip().lower() in ("off", "none"):
            self.proto["kernel_reason"] = "--kernel-log off"
            return
        self.proto["kernel_argv"] = shlex.split(kl)
        self.proto["kernel_before"], self.proto["kernel_reason"] = read_kernel_log(self.proto["kernel_argv"])

    def finish_protocol(self, tel: Telemetry | None) -> None:
        """The ``protocol`` block (memory before/after, swap over the measured phases, the clock
        under load, new kernel-log lines, flags); each flag is also appended to ``warnings``."""
        pr = self.proto
        kernel, kreason = None, pr["kernel_reason"]
        if pr["kernel_before"] is not None:
            after, why = read_kernel_log(pr["kernel_argv"])
            if after is None:
                kreason = f"kernel log readable at the start but not at the end: {why}"
            else:
                new = new_kernel_lines(pr["kernel_before"], after)
                kernel = {"source": " ".join(pr["kernel_argv"]), "new_lines": new[-KERNEL_LINES_KEPT:],
                          "new_lines_total": len(new), "xid": [x for x in new if XID_RE.search(x)],
                          "oom": [x for x in new if OOM_RE.search(x)]}
        if tel is not None:
            clock = judge_clock(tel.load_samples(), tel.idle)
        else:
            clock = {"max_mhz": None, "under_load_mhz": None, "share_of_max": None, "samples_under_load": 0,
                     "idle_mhz": None, "reason": f"no telemetry: {self.telemetry_reason or 'not measured'}"}
        swap = swap_delta(pr["vm_before"], pr["vm_after"])
        flags = protocol_flags(clock, swap, kernel)
        self.doc["protocol"] = {"memory_before": pr["memory_before"], "memory_after": read_meminfo_fields(),
                                "swap": swap, "clock": clock, "kernel_log": kernel,
                                "kernel_log_reason": None if kernel is not None else kreason,
                                "drop_caches": None, "flags": flags}
        for fl in flags:
            self.warn(fl["code"], fl["reason"])

    def start_telemetry(self) -> None:
        """nvidia-smi from --nvidia-smi (shell-split) or PATH; the first sample is the idle reference."""
        a = self.args
        cmd = getattr(a, "nvidia_smi", None)
        if cmd is not None and cmd.strip().lower() == "none":
            self.telemetry_reason = "no GPU on this host (--nvidia-smi none)"
            return
        if a.telemetry != "auto":
            self.telemetry_reason = "--telemetry off"
            return
        if cmd is None:
            smi = shutil.which("nvidia-smi")
            if not smi:
                self.telemetry_reason = "nvidia-smi not found on this host"
                return
            argv = [smi]
        else:
            argv = shlex.split(cmd)
            if not argv or shutil.which(argv[0]) is None:
                self.telemetry_reason = f"--nvidia-smi {cmd!r}: {argv[0] if argv else 'the command'} not found"
                return
        tel = Telemetry(argv)
        why = tel.probe()
        if why:
            self.telemetry_reason = f"nvidia-smi did not answer: {why}"
            log(f"telemetry off: {self.telemetry_reason}")
            return
        tel.start()
        self.telemetry = tel

    def run(self) -> str:
        """All phases in order; returns the final status. Raises Unreachable/Abort/Interrupted."""
        a = self.args
        self.start_protocol()
        self.probe()
        self.start_telemetry()
        mml = self.doc["server"]["max_model_len"]
        if mml and a.output_tokens + 64 > mml:
            raise Unreachable(f"--output-tokens {a.output_tokens} does not fit the server's max_model_len "
                              f"{mml} (with the prompt): give a smaller --output-tokens")
        self.warmup()
        self.single()
        if all(r["error"] for r in self.doc["single"]["runs"]):
            return "failed"
        for n in a.concurrency:
            self.parallel(n)
        cpt = 4.0
        first = next((r for r in self.doc["single"]["runs"] if r.get("prompt_tokens")), None)
        if first:
            cpt = len(speed_prompt(random.Random(0))) / first["prompt_tokens"]
        for depth in a.context:
            if depth > 0:
                cpt = self.context(depth, cpt)
        if getattr(a, "prefix_tokens", 0):
            self.prefix_phase(cpt)
        if getattr(a, "turns", 0):
            self.multi_turn(cpt)
        if a.rate or a.replay or (a.rate_search is not None and getattr(a, "search_by", "rate") == "concurrency"):
            self.rates(cpt)
        if getattr(a, "tools", False):
            self.tools_phase()
        if a.quality:
            self.quality()
        if a.image:
            self.image()
        if self.rate_failed:
            log(f"incomplete: {self.rate_failed} arrival-rate request(s) failed (see rates[].failed_reason)")
            return "incomplete"
        if self.prefix_failed:
            log("incomplete: prefix-cache or multi-turn request(s) failed (see errors)")
            return "incomplete"
        if self.tools_all_errored:
            log("incomplete: every tool-call request failed (see tools.prompts[].reason)")
            return "incomplete"
        return "complete"


def clean_json(obj: Any) -> Any:
    """Replace NaN/Inf (not valid JSON) with None, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def write_out(path: str, doc: dict[str, Any]) -> None:
    text = redact(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".measure-", suffix=".json", dir=d)  # created 0600
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it: the umask decides
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    api_key = args.api_key or os.environ.get("SPARKBENCH_API_KEY") or None
    if api_key:
        _SECRETS.append(api_key)
    if args.out != "-":
        d = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(d):
            parser.error(f"argument --out: directory {d} does not exist")
    if args.max_runs is not None and args.max_runs < args.runs:
        parser.error(f"argument --max-runs: {args.max_runs} is fewer than --runs {args.runs}; give "
                     f"--max-runs >= {args.runs} (default 4 x --runs)")
    if args.max_runs is not None and args.target_precision is None:
        parser.error("argument --max-runs: it only bounds --target-precision; give --target-precision PCT too")
    if args.target_precision is not None and args.max_runs is None:
        args.max_runs = 4 * args.runs
    if args.search_by == "concurrency" and (args.rate_search is None or args.slo is None):
        parser.error("argument --search-by: concurrency searches with --rate-search TARGET and needs --slo, "
                     "e.g. --search-by concurrency --rate-search 0.9 --slo ttft=2,e2e=30")
    if args.rate_search is not None and args.search_by == "rate" and (not args.rate or args.slo is None):
        parser.error("argument --rate-search: it needs --slo (what a good request is) and --rate (the "
                     "starting rates), e.g. --rate 1,4 --slo ttft=2,e2e=30 --rate-search 0.9")
    if args.rate and any(math.isinf(r) for r in args.rate) and args.rate_requests is None:
        parser.error("argument --rate: an inf rate sends every request at once, so it needs --rate-requests N")
    if args.quality_file is None:
        args.quality_file = default_quality_file()
    if args.profiles_dir is None:
        args.profiles_dir = default_profiles_dir()
    elif not os.path.isdir(args.profiles_dir):
        parser.error(f"argument --profiles-dir: {args.profiles_dir} is not a directory")
    hardware = None
    if args.hardware:
        try:
            hardware = load_hardware(args.hardware, args.profiles_dir)
        except ValueError as exc:
            parser.error(str(exc))
    m = Measurement(args, api_key)
    m.hardware = hardware
    if args.replay:
        try:
            m.replay_data = load_replay(args.replay)
        except ValueError as exc:
            parser.error(str(exc))
    if args.tools_file is None:
        args.tools_file = default_tools_file()
    if args.tools:
        try:
            m.tools_data = load_tools(args.tools_file)
        except ValueError as exc:
            parser.error(str(exc))
    if args.quality or args.image:
        try:
            m.quality_data = load_quality(args.quality_file)
        except ValueError as exc:
            parser.error(str(exc))
        if args.image and not m.quality_data.get("image"):
            parser.error(f"argument --image: {args.quality_file} has no 'image' section")

    def on_signal(signum: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = EXIT_COMPLETE
    try:
        status = m.run()
        code = {"failed": EXIT_FAILED, "incomplete": EXIT_INCOMPLETE}.get(status, EXIT_COMPLETE)
        if status == "failed":
            log("failed: no single-stream request succeeded")
    except (Unreachable, Abort, Interrupted) as exc:
        # Stop listening for signals, record why the run ended, and say it on one stderr line.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if isinstance(exc, Unreachable):
            phase, message, status, code, word = "probe", str(exc), "failed", EXIT_USAGE, "error"
        elif isinstance(exc, Abort):
            phase, message, status, code, word = "run", str(exc), "incomplete", EXIT_INCOMPLETE, "incomplete"
        else:
            phase, message, status, code, word = ("run", f"interrupted by {exc}", "incomplete",
                                                  EXIT_INCOMPLETE, "incomplete")
        m.doc["errors"].append({"phase": phase, "request": None, "message": message})
        sys.stderr.write(redact(f"measure.py: {word}: {message}\n"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    doc = m.finish(status)
    try:
        write_out(args.out, doc)
    except OSError as exc:
        sys.stderr.write(f"measure.py: error: cannot write --out {args.out}: {exc}\n")
        return EXIT_USAGE
    if args.out != "-":
        log(f"{status}: wrote {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
