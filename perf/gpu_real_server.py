#!/usr/bin/env python3
"""A minimal OpenAI-compatible streaming chat server around Hugging Face transformers.

Item 5 of the self-benchmarks: a *real* inference server on a real GPU for measure.py to
measure, without vLLM, without downloads. The model is built from a config with random weights
(Llama architecture; presets below), so nothing is fetched; the "tokenizer" is bytes-as-tokens
for prompts (token id = UTF-8 byte + 3) and ``" w<id>"`` text for generated tokens — the token
counts in ``usage`` are exact, the text is meaningless.

Decoding: greedy (argmax), KV cache, one forward pass per token for every running request.
Requests that arrive within ``--batch-window-ms`` of the previous one (at most 10 windows after
the first) are decoded as one batch
(left-padded prompts, attention mask, per-row positions); a batch runs until its longest request
is done, later arrivals wait for the next batch (static batching, not vLLM's continuous batching).
``ignore_eos`` and ``min_tokens`` are honoured (EOS = id 2 ends a request only when
``ignore_eos`` is false and at least ``min_tokens`` tokens were produced).

Streaming follows vLLM's SSE shapes (role chunk, one chunk per token, finish_reason "length" or
"stop", usage-only chunk, ``data: [DONE]``); ``stream_options.include_usage`` and
``continuous_usage_stats`` are honoured. ``GET /server_info`` reports the parameter count, the
bytes of weights read per decode step and the KV-cache bytes per token of context, which
`perf/gpu_bench.py` uses for the roofline:

    roofline tok/s (one stream) = bandwidth / (weight bytes + KV bytes per context token × context)

torch and transformers are imported only when the server starts (``main``), so the pure helpers
here import without them.

    python3 perf/gpu_real_server.py --preset llama-1b --port 18490 [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Llama-style configs (random weights). Parameter counts are computed, not assumed.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512),
    "llama-0.5b": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                       num_attention_heads=16, num_key_value_heads=8, vocab_size=32000),
    "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, vocab_size=32000),
}
EOS_ID = 2
BYTE_OFFSET = 3


def encode_prompt(messages: list[dict[str, Any]], vocab_size: int) -> list[int]:
    """Prompt token ids: the UTF-8 bytes of every text part (+3), with a 1-token separator.

    Non-text parts (images) count as one token each. Never empty (a BOS token = 1 first).
    """
    ids = [1]
    for m in messages or []:
        content = m.get("content", "")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for p in parts:
            if isinstance(p, dict) and p.get("type") == "text":
                ids.extend((b + BYTE_OFFSET) % vocab_size for b in str(p.get("text", "")).encode())
            else:
                ids.append(BYTE_OFFSET)
        ids.append(BYTE_OFFSET + 10)  # newline-ish separator
    return ids


def token_text(tok: int) -> str:
    """The text of a generated token id."""
    return f" w{tok}"


def weight_bytes(cfg: dict[str, Any], bytes_per_param: int = 2) -> tuple[int, int]:
    """(parameter count, bytes of weights read per decode step) of a Llama config, untied head.

    params = 2·V·H (embedding + lm_head) + L·(H·(H + 2·kv·d) + H·H + 3·H·I + 2·H) + H
    with d = H / heads. A decode step reads every weight except the embedding table (one row).
    """
    h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    v, heads, kv = cfg["vocab_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = h // heads
    per_layer = h * (h + 2 * kv * d) + h * h + 3 * h * i + 2 * h
    params = 2 * v * h + n * per_layer + h
    read = (params - v * h) * bytes_per_param + h * bytes_per_param
    return params, read


def kv_bytes_per_token(cfg: dict[str, Any], bytes_per_elem: int = 2) -> int:
    """KV-cache bytes per token of context read each step: 2 (K,V) · L · kv_heads · d · bytes."""
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * d * bytes_per_elem


def sse(obj: Any) -> bytes:
    """One SSE event."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class Job:
    """One chat request inside the engine; the handler reads ``events``: one
    ``(token ids, finish_reason or None)`` per decode step, then ``None`` (or an exception)."""

    prompt: list[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    events: "queue.Queue[Any]" = field(default_factory=queue.Queue)
    produced: int = 0
    finish_reason: str | None = None


class Engine:
    """Greedy batched decoding on one device; runs in its own thread."""

    def __init__(self, preset: str, device: str, dtype: str, window_ms: float, seed: int) -> None:
        import torch  # noqa: PLC0415 — only where the server runs
        from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

        self.torch = torch
        if device.startswith("cuda"):
            # PyTorch's cuDNN SDPA backend builds an execution plan for every new sequence length;
            # a decode step changes the KV length every token, which cost 50–250 ms a step on an
            # H200 (measured). Flash / memory-efficient SDPA have no per-shape planning.
            torch.backends.cuda.enable_cudnn_sdp(False)
        self.cfg_dict = dict(PRESETS[preset])
        torch.manual_seed(seed)
        self.dtype = getattr(torch, dtype)
        cfg = LlamaConfig(**self.cfg_dict, max_position_embeddings=8192, tie_word_embeddings=False,
                          bos_token_id=1, eos_token_id=EOS_ID, pad_token_id=0)
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
        self.model = model.to(dtype=self.dtype).eval()
        self.device = device
        self.window = window_ms / 1000.0
        self.preset = preset
        self.params = sum(p.numel() for p in self.model.parameters())
        self.inbox: "queue.Queue[Job]" = queue.Queue()
        self.generation_tokens = 0
        self.lock = threading.Lock()
        self.warm_up()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def warm_up(self) -> None:
        """Run a few short batches (1 and 8 streams) so lazy CUDA/cuBLAS initialisation is paid
        before the server listens, not by the first measured request."""
        for n in (1, 8, 1):
            jobs = [Job(list(range(1, 65)), 8, 0, True) for _ in range(n)]
            self.run_batch(jobs)
        self.generation_tokens = 0

    def info(self) -> dict[str, Any]:
        """Facts for the roofline (see module docstring)."""
        esize = self.torch.finfo(self.dtype).bits // 8
        params, read = weight_bytes(self.cfg_dict, esize)
        return {"preset": self.preset, "config": self.cfg_dict, "dtype": str(self.dtype),
                "device": self.device, "params": self.params, "params_formula": params,
                "weight_bytes_per_step": read,
                "kv_bytes_per_context_token": kv_bytes_per_token(self.cfg_dict, esize),
                "device_name": self.device_name()}

    def device_name(self) -> str:
        """The accelerator's name (torch.cuda), or 'cpu'."""
        if self.device.startswith("cuda") and self.torch.cuda.is_available():
            return self.torch.cuda.get_device_name(0)
        return "cpu"

    def loop(self) -> None:
        """Collect a batch (first job + arrivals within the window), decode it, repeat."""
        while True:
            jobs = [self.inbox.get()]
            cap = time.monotonic() + 10 * self.window
            deadline = min(cap, time.monotonic() + self.window)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    jobs.append(self.inbox.get(timeout=left))
                    # Each arrival keeps the batch open one more window (at most 10 windows).
                    deadline = min(cap, time.monotonic() + self.window)
                except queue.Empty:
                    break
            try:
                self.run_batch(jobs)
            except Exception as exc:  # report to every waiting client, keep serving
                for j in jobs:
                    j.events.put(RuntimeError(f"{type(exc).__name__}: {exc}"))

    def run_batch(self, jobs: list[Job]) -> None:
        """Prefill the left-padded prompts, then one greedy step per token until all are done."""
        torch = self.torch
        n = len(jobs)
        width = max(len(j.prompt) for j in jobs)
        ids = torch.zeros((n, width), dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for r, j in enumerate(jobs):
            ids[r, width - len(j.prompt):] = torch.tensor(j.prompt)
            mask[r, width - len(j.prompt):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        active = [True] * n
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            past = out.past_key_values
            last_pos = pos[:, -1:]
            logits = out.logits[:, -1, :]
            while any(active):
                nxt = logits.argmax(-1)
                toks = nxt.tolist()  # the host sync: the step is done when its tokens are known
                emitted = 0
                for r, j in enumerate(jobs):
                    if not active[r]:
                        continue
                    t = toks[r]
                    j.produced += 1
                    emitted += 1
                    stop = (not j.ignore_eos and t == EOS_ID and j.produced >= j.min_tokens)
                    if stop or j.produced >= j.max_tokens:
                        j.finish_reason = "stop" if stop else "length"
                        j.events.put(([t], j.finish_reason))
                        j.events.put(None)
                        active[r] = False
                    else:
                        j.events.put(([t], None))
                with self.lock:
                    self.generation_tokens += emitted
                if not any(active):
                    break
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=self.device)], 1)
                last_pos = last_pos + 1
                out = self.model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos,
                                 past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[:, -1, :]


class Handler(BaseHTTPRequestHandler):
    """HTTP front end: /health, /version, /v1/models, /server_info, /metrics, chat completions."""

    protocol_version = "HTTP/1.1"
    server: "Server"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per request is noise
        pass

    def reply(self, code: int, obj: Any, ctype: str = "application/json") -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        eng = self.server.engine
        if self.path == "/health":
            self.reply(200, b"")
        elif self.path == "/version":
            self.reply(200, {"version": "gpu-real-server-1", "engine": "transformers"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": self.server.model_name,
                                                          "object": "model", "owned_by": "bench",
                                                          "root": self.server.model_name,
                                                          "max_model_len": 8192}]})
        elif self.path == "/server_info":
            self.reply(200, eng.info())
        elif self.path == "/metrics":
            text = ("# TYPE vllm:generation_tokens_total counter\n"
                    f'vllm:generation_tokens_total{{engine="0",model_name="{self.server.model_name}"}}'
                    f" {float(eng.generation_tokens)}\n")
            self.reply(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self.reply(404, {"error": {"message": f"Not Found: {self.path}", "type": "NotFoundError",
                                       "param": None, "code": 404}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            self.reply(404, {"error": {"message": f"Not Found: {self.path}", "type": "NotFoundError",
                                       "param": None, "code": 404}})
            return
        try:
            req = json.loads(raw or b"{}")
            max_tokens = int(req.get("max_completion_tokens") or req.get("max_tokens") or 256)
            min_tokens = int(req.get("min_tokens") or 0)
            if max_tokens < 1:
                raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
            if min_tokens > max_tokens:
                raise ValueError(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                                 f"got {min_tokens}.")
        except (ValueError, TypeError) as exc:
            self.reply(400, {"error": {"message": str(exc), "type": "BadRequestError",
                                       "param": None, "code": 400}})
            return
        eng = self.server.engine
        job = Job(encode_prompt(req.get("messages", []), eng.cfg_dict["vocab_size"]), max_tokens,
                  min_tokens, bool(req.get("ignore_eos", False)))
        eng.inbox.put(job)
        if req.get("stream"):
            self.stream(job, req)
        else:
            toks: list[int] = []
            while (ev := job.events.get()) is not None:
                if isinstance(ev, Exception):
                    self.reply(500, {"error": {"message": str(ev), "type": "InternalServerError",
                                               "param": None, "code": 500}})
                    return
                toks.extend(ev[0])
            p = len(job.prompt)
            self.reply(200, {"id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion",
                             "created": int(time.time()), "model": self.server.model_name,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content":
                                                                  "".join(map(token_text, toks))},
                                          "finish_reason": job.finish_reason}],
                             "usage": {"prompt_tokens": p, "total_tokens": p + len(toks),
                                       "completion_tokens": len(toks)}})

    def stream(self, job: Job, req: dict[str, Any]) -> None:
        """Write the SSE stream with chunked transfer encoding, one chunk per decode step."""
        opts = req.get("stream_options") or {}
        include = bool(opts.get("include_usage"))
        continuous = include and bool(opts.get("continuous_usage_stats"))
        head = {"id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion.chunk",
                "created": int(time.time()), "model": self.server.model_name}
        p = len(job.prompt)

        def usage(c: int) -> dict[str, int]:
            return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}

        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        done = 0
        first = True
        while True:
            ev = job.events.get()
            if isinstance(ev, Exception):
                write(sse({"error": {"message": str(ev), "type": "InternalServerError", "code": 500}}))
                break
            if ev is None:
                break
            if first:
                role = dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}])
                if continuous:
                    role["usage"] = usage(0)
                write(sse(role))
                first = False
            toks, fin = ev
            done += len(toks)
            choice: dict[str, Any] = {"index": 0, "delta": {"content": "".join(map(token_text, toks))},
                                      "logprobs": None, "finish_reason": fin}
            chunk = dict(head, choices=[choice])
            if continuous:
                chunk["usage"] = usage(done)
            write(sse(chunk))
        if include:
            write(sse(dict(head, choices=[], usage=usage(done))))
        write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    """The HTTP server with its engine."""

    daemon_threads = True
    # socketserver's default listen backlog is 5: the 6th simultaneous connect was dropped and
    # retried by TCP after 1 s (TTFT ≈ 1 s at 8 parallel streams, measured).
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], engine: Engine, model_name: str) -> None:
        self.engine = engine
        self.model_name = model_name
        super().__init__(addr, Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="llama-1b", choices=sorted(PRESETS))
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18490)
    ap.add_argument("--batch-window-ms", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--served-model-name", default=None)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: PLC0415
        import transformers  # noqa: F401, PLC0415
    except ImportError as exc:
        print(f"error: {exc.name} is not installed; this server needs torch and transformers "
              "(pip install torch transformers)", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.monotonic()
    engine = Engine(args.preset, device, args.dtype, args.batch_window_ms, args.seed)
    name = args.served_model_name or f"random-{args.preset}"
    try:
        srv = Server((args.host, args.port), engine, name)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror}; pick a free --port",
              file=sys.stderr)
        return 1
    info = engine.info()
    print(f"gpu-real-server: {name} ({info['params'] / 1e9:.3f} B params, {args.dtype}) on "
          f"{info['device_name']}, built in {time.monotonic() - t0:.1f} s; listening on "
          f"http://{args.host}:{args.port}", file=sys.stderr, flush=True)
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
