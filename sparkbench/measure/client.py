"""The HTTP client: a small GET for probes, one non-streaming POST, and the selectors loops that
stream generations. The loops only receive bytes and timestamp them (``RawStream``); SSE is parsed
afterwards (``sse.parse_sse``), so timestamps sit next to the socket read whatever the chunk rate."""
from __future__ import annotations

import http.client
import json
import selectors
import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .common import SCRIPT_VERSION, Abort, Interrupted
from .shapes import JSON, ChatRequest

CHECK_S = 0.05  # how often the stream reader checks timeouts and stalls [s]


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


def _send(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], ep: Endpoint, path: str, body: bytes, i: int,
          raw: RawStream, request_timeout: float, extra: dict[str, str] | None = None) -> bool:
    """Open a connection, send request ``i`` (``raw.t_start`` = just before connect) and register it
    for reading; False, with the reason in ``raw``, when it could not be sent."""
    raw.t_start = time.perf_counter()
    try:
        sock = _open(ep, min(30.0, request_timeout))
        sock.sendall(_build_post(ep, path, body, extra))
        sock.setblocking(False)
    except (OSError, ssl.SSLError) as exc:
        raw.transport_error = f"cannot send the request: {exc.strerror or exc}"
        return False
    c = _Conn(i, sock, raw, raw.t_start + request_timeout)
    conns[sock.fileno()] = c
    sel.register(sock, selectors.EVENT_READ, c)
    return True


def stream_requests(ep: Endpoint, bodies: list[bytes], request_timeout: float,
                    stall_timeout: float, path: str = "/v1/chat/completions") -> list[RawStream]:
    """Send every body at once and follow all responses in one thread with ``selectors``.

    Per received segment the loop only does recv(), perf_counter(), two list appends and an
    end-of-body check; SSE framing and JSON are parsed after the stream ends (``sse.parse_sse``), so
    timestamps sit next to the socket read whatever the chunk rate. Raises Abort when no stream
    has received a byte for ``stall_timeout`` seconds.
    """
    sel = selectors.DefaultSelector()
    results = [RawStream() for _ in bodies]
    conns: dict[int, _Conn] = {}
    try:
        for i, body in enumerate(bodies):
            if not _send(sel, conns, ep, path, body, i, results[i], request_timeout):
                continue
            # read what earlier requests already received, so a long wave of sends does not
            # delay their timestamps
            _read_some(sel, conns, 0)
        # Bookkeeping (timeouts, stall) runs at most every CHECK_S, never per chunk.
        next_check = 0.0
        while conns:
            _read_some(sel, conns, CHECK_S)
            next_check = _bookkeep(sel, conns, next_check, request_timeout, stall_timeout)
    finally:
        _close_all(sel, conns)
    return results


def _read_some(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], timeout: float) -> None:
    """Read every socket that is ready within ``timeout`` s; drop the requests that finished."""
    for key, _ in sel.select(timeout):
        _read_ready(key.data)
        if key.data.mode == "done":
            _drop(sel, conns, key.fd)


def _bookkeep(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], next_check: float, request_timeout: float,
              stall_timeout: float) -> float:
    """At most every CHECK_S: expire the requests past their deadline, raise Abort on a stall;
    returns when to check next."""
    now = time.perf_counter()
    if now < next_check:
        return next_check
    _expire(sel, conns, now, request_timeout, stall_timeout)
    return now + CHECK_S


def _drop(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], fd: int) -> None:
    """A finished request: unregistered, closed, forgotten."""
    c = conns.pop(fd)
    sel.unregister(c.sock)
    c.sock.close()


def _expire(sel: selectors.BaseSelector, conns: dict[int, "_Conn"], now: float, request_timeout: float,
            stall_timeout: float) -> None:
    """Bookkeeping of the open requests (every CHECK_S, never per chunk): close the ones past their
    deadline with the reason; raise Abort when none has received a byte for ``stall_timeout`` s."""
    for fd, c in list(conns.items()):
        if now >= c.deadline:
            c.raw.transport_error = f"request timed out after {request_timeout:g} s (--request-timeout)"
            _drop(sel, conns, fd)
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

    try:
        next_check = 0.0
        while nxt < len(order) or conns:
            now = perf()
            # send every request that is due (and allowed by the concurrency limit)
            while nxt < len(order) and t0 + offsets[order[nxt]] <= now and (
                    max_concurrency is None or len(conns) < max_concurrency):
                i = order[nxt]
                nxt += 1
                extra = {"X-Request-Id": request_ids[i]} if request_ids else None
                if _send(sel, conns, ep, path, bodies[i], i, results[i], request_timeout, extra):
                    now = perf()
            # wait for bytes until the next send is due
            # (epoll rounds its timeout up to whole ms: the last 1.5 ms before a send are polled)
            wait = CHECK_S
            if nxt < len(order) and (max_concurrency is None or len(conns) < max_concurrency):
                due = t0 + offsets[order[nxt]] - now
                wait = min(wait, due - 0.0015 if due > 0.002 else 0.0)
            if conns:
                _read_some(sel, conns, wait)
            elif wait > 0:
                time.sleep(wait)
            next_check = _bookkeep(sel, conns, next_check, request_timeout, stall_timeout)
    except Interrupted as exc:
        # Stopped by a signal (a background load stopped after its measurement): what was sent
        # before it, for the rate phase to record (phases/rates.py).
        exc.partial = (sorted(order[:nxt]), results, t0)
        raise
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



def post_json(ep: Endpoint, path: str, body: ChatRequest, timeout: float
              ) -> tuple[int | None, JSON, str | None, float]:
    """One non-streaming POST: (HTTP status or None, parsed JSON body or None, error message or
    None, seconds from send to the whole response received)."""
    data = json.dumps(body).encode("utf-8")
    cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    conn = cls(ep.host, ep.port, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request("POST", ep.prefix + path, body=data, headers={**ep.headers(), "Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        elapsed = time.monotonic() - t0
    except (OSError, http.client.HTTPException) as exc:
        return None, None, f"transport error: {exc}", time.monotonic() - t0
    finally:
        conn.close()
    if resp.status != 200:
        return resp.status, None, f"HTTP {resp.status}: {error_message(raw)}", elapsed
    try:
        return resp.status, json.loads(raw), None, elapsed
    except ValueError:
        return resp.status, None, "HTTP 200 with a body that is not JSON", elapsed


def error_message(body: bytes) -> str:
    """The message of an error body (OpenAI's error.message, FastAPI's detail), on one line, at most 300 chars."""
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
