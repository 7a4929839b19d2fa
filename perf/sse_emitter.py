#!/usr/bin/env python3
"""A load source that is never the bottleneck: replays pre-rendered vLLM SSE chunks.

Used by `perf/client_capacity.py` to find how many chunks per second `scripts/measure.py`
follows. It answers `POST /v1/chat/completions` (stream) with frames rendered before the request
arrives, in vLLM's chunk format (``chat.completion.chunk``, ``continuous_usage_stats``: every
chunk carries ``usage``; shapes from vLLM 0.25/0.26, see shared reference vllm.md §3.2), framed
with HTTP/1.1 chunked transfer encoding as uvicorn sends them.

Pacing: token chunk j of a stream (j = 0 … M−1) is sent at ``t_first + j / rate`` (deadline
based: sleep until ~1 ms before, then spin), so the true decode rate of a stream is

    decode tok/s = tokens_per_chunk × rate      (chunks/s × tokens a chunk)

With ``rate = 0`` every frame of the response is handed to the kernel in one ``sendall``
("as fast as possible"): the client's own parsing speed is then the only limit.

The emitter records its own send timestamps (``time.perf_counter``, CLOCK_MONOTONIC on Linux)
and serves them at ``GET /emitter/requests``: per request the scheduled rate, the first and last
token-chunk send times, the actual send rate (M − 1) / (t_last − t_first) and the largest lag of
a send behind its deadline (a lag means the client or the emitter could not keep up).

    python3 perf/sse_emitter.py --port 18400 --rate 10000 --tokens-per-chunk 1

Standard library only. ``POST /emitter/config`` with ``{"rate": R, "tokens_per_chunk": k,
"ttft_ms": t}`` changes the pacing of later requests; ``POST /emitter/reset`` clears the log.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

VERSION = "0.25.0"
WORD = " tok"


@dataclass
class Pacing:
    """How the emitter streams: ``rate`` token chunks/s per stream (0 = as fast as possible),
    ``tokens_per_chunk`` tokens in each token chunk (1 = bare, > 1 = MTP-like), ``ttft_ms``
    delay between the role chunk and the first token chunk."""

    rate: float = 1000.0
    tokens_per_chunk: int = 1
    ttft_ms: float = 5.0


@dataclass
class RequestLog:
    """The emitter's own timeline of one streamed request (seconds, time.perf_counter)."""

    request_id: str
    rate: float
    tokens_per_chunk: int
    chunks: int
    completion_tokens: int
    t_request: float
    t_first: float = 0.0
    t_last: float = 0.0
    max_lag_s: float = 0.0
    sends: list[float] = field(default_factory=list)

    def summary(self, full: bool = False) -> dict[str, Any]:
        """JSON view; ``send_rate`` = (chunks − 1) / (t_last − t_first) token chunks/s."""
        span = self.t_last - self.t_first
        d = {"request_id": self.request_id, "rate": self.rate,
             "tokens_per_chunk": self.tokens_per_chunk, "chunks": self.chunks,
             "completion_tokens": self.completion_tokens, "t_request": self.t_request,
             "t_first": self.t_first, "t_last": self.t_last, "max_lag_s": self.max_lag_s,
             "send_rate": (self.chunks - 1) / span if span > 0 and self.chunks > 1 else None}
        if full:
            d["sends"] = self.sends
        return d


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame around one SSE event ``data: …\\n\\n``."""
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def render_stream(model: str, output_tokens: int, tokens_per_chunk: int, prompt_tokens: int,
                  request_id: str | None = None, created: int | None = None,
                  include_usage: bool = True, continuous: bool = True) -> list[bytes]:
    """All frames of one streamed chat completion, in send order, ready for the socket.

    Frames: the role chunk, ⌈output_tokens / tokens_per_chunk⌉ token chunks (the last one with
    ``finish_reason: "length"``), the usage-only chunk (``choices: []``) when ``include_usage``,
    then ``data: [DONE]`` and the chunked-encoding terminator. With ``continuous`` every chunk
    carries ``usage`` whose ``completion_tokens`` counts the tokens sent so far (vLLM's
    continuous_usage_stats).
    """
    if output_tokens < 1 or tokens_per_chunk < 1:
        raise ValueError("output_tokens and tokens_per_chunk must be ≥ 1")
    rid = "chatcmpl-" + (request_id or uuid.uuid4().hex[:16])
    created = int(time.time()) if created is None else created
    head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

    def usage(done: int) -> dict[str, int]:
        return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + done,
                "completion_tokens": done}

    frames: list[bytes] = []
    role = dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}])
    if include_usage and continuous:
        role["usage"] = usage(0)
    frames.append(_frame(_dumps(role)))
    done = 0
    while done < output_tokens:
        k = min(tokens_per_chunk, output_tokens - done)
        done += k
        choice: dict[str, Any] = {"index": 0, "delta": {"content": WORD * k}, "logprobs": None,
                                  "finish_reason": None}
        if done == output_tokens:
            choice["finish_reason"] = "length"
            choice["stop_reason"] = None
        choice["token_ids"] = None
        chunk = dict(head, choices=[choice])
        if include_usage and continuous:
            chunk["usage"] = usage(done)
        frames.append(_frame(_dumps(chunk)))
    if include_usage:
        frames.append(_frame(_dumps(dict(head, choices=[], usage=usage(done)))))
    frames.append(_frame(b"[DONE]") + b"0\r\n\r\n")
    return frames


class Emitter:
    """State shared by the connection handlers: pacing, the model name and the request log."""

    def __init__(self, model: str, pacing: Pacing, keep_sends: bool = True) -> None:
        self.model = model
        self.pacing = pacing
        self.keep_sends = keep_sends
        self.lock = threading.Lock()
        self.log: list[RequestLog] = []
        self.generation_tokens = 0
        self.cache: dict[tuple[int, int, int], list[bytes]] = {}

    def frames(self, output_tokens: int, tpc: int, prompt_tokens: int) -> list[bytes]:
        """Pre-rendered frames for this shape (rendered once, replayed for every request)."""
        key = (output_tokens, tpc, prompt_tokens)
        with self.lock:
            fr = self.cache.get(key)
            if fr is None:
                fr = render_stream(self.model, output_tokens, tpc, prompt_tokens,
                                   request_id="0" * 16, created=int(time.time()))
                self.cache[key] = fr
        return fr


class Handler(socketserver.BaseRequestHandler):
    """Minimal HTTP/1.1 with keep-alive: reads one request at a time and answers it."""

    server: "EmitterServer"

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                return
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            while len(buf) < length:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            body, buf = buf[:length], buf[length:]
            keep = headers.get("connection", "").lower() != "close"
            if not self.dispatch(sock, method, target, body):
                return
            if not keep:
                return

    def send(self, sock: socket.socket, status: str, ctype: str, body: bytes) -> None:
        sock.sendall(b"HTTP/1.1 %s\r\nserver: sse-emitter\r\ncontent-type: %s\r\n"
                     b"content-length: %d\r\n\r\n%s" % (status.encode(), ctype.encode(),
                                                         len(body), body))

    def dispatch(self, sock: socket.socket, method: str, target: str, body: bytes) -> bool:
        em = self.server.emitter
        path, _, query = target.partition("?")
        if method == "GET" and path in ("/health", "/ping"):
            self.send(sock, "200 OK", "application/json", b"")
        elif method == "GET" and path == "/version":
            self.send(sock, "200 OK", "application/json",
                      _dumps({"version": VERSION, "simulated": True, "emitter": True}))
        elif method == "GET" and path == "/v1/models":
            self.send(sock, "200 OK", "application/json", _dumps(
                {"object": "list", "data": [{"id": em.model, "object": "model", "created": 0,
                                             "owned_by": "vllm", "root": em.model,
                                             "parent": None, "max_model_len": 1 << 20}]}))
        elif method == "GET" and path == "/metrics":
            text = ("# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
                    "# TYPE vllm:generation_tokens_total counter\n"
                    f'vllm:generation_tokens_total{{engine="0",model_name="{em.model}"}} '
                    f"{float(em.generation_tokens)}\n")
            self.send(sock, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text.encode())
        elif method == "GET" and path == "/emitter/requests":
            with em.lock:
                out = [r.summary(full="full=1" in query) for r in em.log]
            self.send(sock, "200 OK", "application/json", _dumps(out))
        elif method == "POST" and path == "/emitter/reset":
            with em.lock:
                em.log.clear()
            self.send(sock, "200 OK", "application/json", b"{}")
        elif method == "POST" and path == "/emitter/config":
            cfg = json.loads(body or b"{}")
            with em.lock:
                for key in ("rate", "tokens_per_chunk", "ttft_ms"):
                    if key in cfg:
                        setattr(em.pacing, key, type(getattr(em.pacing, key))(cfg[key]))
            self.send(sock, "200 OK", "application/json", _dumps(em.pacing.__dict__))
        elif method == "POST" and path == "/v1/chat/completions":
            return self.chat(sock, body)
        else:
            self.send(sock, "404 Not Found", "application/json",
                      _dumps({"error": {"message": f"Not Found: {path}", "type": "NotFoundError",
                                        "param": None, "code": 404}}))
        return True

    def chat(self, sock: socket.socket, body: bytes) -> bool:
        em = self.server.emitter
        t_request = time.perf_counter()
        req = json.loads(body or b"{}")
        n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 256)
        pacing = Pacing(**em.pacing.__dict__)
        prompt_tokens = 16
        frames = em.frames(n, pacing.tokens_per_chunk, prompt_tokens)
        if not req.get("stream"):
            text = WORD * n
            self.send(sock, "200 OK", "application/json", _dumps({
                "id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion",
                "created": int(time.time()), "model": em.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": "length", "stop_reason": None}],
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n,
                          "completion_tokens": n}}))
            return True
        rid = uuid.uuid4().hex[:16]
        token_frames = frames[1:-2]
        log = RequestLog(rid, pacing.rate, pacing.tokens_per_chunk, len(token_frames), n,
                         t_request)
        sock.sendall(b"HTTP/1.1 200 OK\r\nserver: sse-emitter\r\n"
                     b"content-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\n\r\n" + frames[0])
        sends = log.sends if em.keep_sends else None
        try:
            if pacing.rate <= 0:
                log.t_first = time.perf_counter()
                sock.sendall(b"".join(token_frames))
                log.t_last = time.perf_counter()
            else:
                interval = 1.0 / pacing.rate
                t_first = time.perf_counter() + pacing.ttft_ms / 1000.0
                perf = time.perf_counter
                max_lag = 0.0
                send = sock.sendall
                for j, fr in enumerate(token_frames):
                    deadline = t_first + j * interval
                    now = perf()
                    if deadline - now > 0.0015:
                        time.sleep(deadline - now - 0.001)
                        now = perf()
                    while now < deadline:
                        now = perf()
                    send(fr)
                    lag = now - deadline
                    if lag > max_lag:
                        max_lag = lag
                    if sends is not None:
                        sends.append(now)
                log.t_first = sends[0] if sends else t_first
                log.t_last = sends[-1] if sends else perf()
                log.max_lag_s = max_lag
            sock.sendall(frames[-2] + frames[-1])
        except (BrokenPipeError, ConnectionResetError):
            return False
        with em.lock:
            em.log.append(log)
            em.generation_tokens += n
        return True


class EmitterServer(socketserver.ThreadingTCPServer):
    """Threaded TCP server (one thread per connection) around one Emitter."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], emitter: Emitter) -> None:
        self.emitter = emitter
        super().__init__(addr, Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18400)
    ap.add_argument("--model", default="sse-emitter")
    ap.add_argument("--rate", type=float, default=1000.0,
                    help="token chunks per second per stream; 0 = as fast as possible")
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--ttft-ms", type=float, default=5.0)
    ap.add_argument("--no-keep-sends", action="store_true",
                    help="do not keep every send timestamp (summary only)")
    args = ap.parse_args(argv)
    if args.tokens_per_chunk < 1:
        print("error: --tokens-per-chunk must be ≥ 1", file=sys.stderr)
        return 2
    if args.rate < 0:
        print("error: --rate must be ≥ 0 (0 = as fast as possible)", file=sys.stderr)
        return 2
    em = Emitter(args.model, Pacing(args.rate, args.tokens_per_chunk, args.ttft_ms),
                 keep_sends=not args.no_keep_sends)
    try:
        srv = EmitterServer((args.host, args.port), em)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}; "
              "pick a free --port", file=sys.stderr)
        return 1
    print(f"sse-emitter listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    sys.exit(main())
