"""HTTP layer: vLLM's OpenAI-compatible routes, SSE streaming, /metrics and /sim/* ground truth."""
from __future__ import annotations

import json
import queue
import secrets
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import answers, toolcalls
from .engine import Request
from .prefix_cache import render_stream

METRICS_CTYPE = "text/plain; version=1.0.0; charset=utf-8"   # as prometheus_client 0.26 (vLLM 0.32) labels it



def _finish_event(req, streamed: int):
    """The engine's next event once the stream has all its tokens (the finish, which the last
    token chunk carries, as in vLLM); None before that or when none comes within 5 s."""
    if streamed < req.target:
        return None
    try:
        return req.out.get(timeout=5.0)
    except queue.Empty:
        return None

class ApiError(Exception):
    """An error answered with vLLM's error body."""

    TYPES = {400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError",
             500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailableError"}

    _NO_VALUE = object()

    def __init__(self, code: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param

    @classmethod
    def validation(cls, message: str, param: str, value=_NO_VALUE) -> "ApiError":
        """A 400 from request validation: vLLM appends ``(parameter=P, value=V)`` to the message."""
        tail = f"parameter={param}" + ("" if value is cls._NO_VALUE else f", value={value}")
        return cls(400, f"{message} ({tail})", param)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.code, "BadRequestError"),
                          "param": self.param, "code": self.code}}


class SimHTTPServer(ThreadingHTTPServer):
    """Bound early, listening only once the simulated load is done (connections refused before)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, app) -> None:
        self.app = app
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.address_family = family
        super().__init__(addr, Handler, bind_and_activate=False)
        self.server_bind()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args) -> None:  # access log in uvicorn's style, on stdout
        pass

    # --- helpers ----------------------------------------------------------------------------
    @property
    def app(self):
        return self.server.app

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.app.access(self, code)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def _auth_ok(self) -> bool:
        key = self.app.api_key
        if not key or not self.path.startswith(("/v1", "/v2", "/inference", "/cohere")):
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    # --- routes -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._auth_ok():
            return
        app = self.app
        if path == "/health":
            if app.knobs.slow_health_seconds:
                time.sleep(app.knobs.slow_health_seconds)
            return self._send(200, b"")
        if path == "/ping":
            return self._json(200, {})
        if path == "/version":
            return self._json(200, {"version": app.knobs.version, "simulated": True})
        if path == "/load":
            return self._json(200, {"server_load": len(app.engine.running) + len(app.engine.waiting)})
        if path == "/v1/models":
            return self._json(200, app.models_body())
        if path == "/metrics" or path.startswith("/metrics/"):
            return self._send(200, app.metrics.render().encode(), METRICS_CTYPE)
        if path == "/sim/requests":
            return self._json(200, {"now": time.time(), "requests": app.engine.snapshot()})
        if path == "/sim/info":
            return self._json(200, app.info())
        self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._auth_ok():
            return
        if path == "/ping":
            return self._json(200, {})
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"detail": "Not Found"})
        try:
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as e:
                raise ApiError(400, f"JSON decode error: {e}") from None
            if not isinstance(body, dict):
                raise ApiError(400, "Request body must be a JSON object.")
            if path == "/v1/completions":
                self.completion(body)
            else:
                self.chat(body)
        except ApiError as e:
            self._json(e.code, e.body())
        except (BrokenPipeError, ConnectionResetError):
            pass

    # --- chat -------------------------------------------------------------------------------
    # --- request checks shared by /v1/chat/completions and /v1/completions ------------------
    def _served_model(self, body: dict) -> str:
        """The requested model name; vLLM's 404 NotFoundError when it is not served."""
        model = body.get("model")
        if model not in self.app.served_names:
            raise ApiError(404, f"The model `{model}` does not exist. Valid aliases: "
                                f"{', '.join(self.app.served_names)}.", "model")
        return model

    @staticmethod
    def _stream_flags(body: dict) -> tuple[bool, bool, bool]:
        """(stream, include_usage, continuous_usage_stats) with vLLM's stream_options rules."""
        stream = bool(body.get("stream", False))
        sopts = body.get("stream_options")
        if sopts is not None and not stream:
            raise ApiError.validation("Stream options can only be defined when `stream=True`.", "stream_options")
        sopts = sopts or {}
        include_usage = bool(sopts.get("include_usage"))
        return stream, include_usage, include_usage and bool(sopts.get("continuous_usage_stats"))

    def _check_prompt_length(self, prompt_tokens: int) -> int:
        """vLLM's context-length error for a prompt longer than max_model_len; returns max_model_len."""
        mml = self.app.max_model_len
        if prompt_tokens > mml:
            raise ApiError.validation(
                f"This model's maximum context length is {mml} tokens. However, your prompt contains at least "
                f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. "
                "Please reduce the length of the input prompt.", "input_tokens", prompt_tokens)
        return mml

    @staticmethod
    def _min_tokens(body: dict, max_tokens: int) -> int:
        """``min_tokens`` (default 0), at most the effective max_tokens (SamplingParams' check)."""
        min_tokens = int(body.get("min_tokens") or 0)
        if min_tokens > max_tokens:
            raise ApiError(400, f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                                f"got {min_tokens}.", "min_tokens")
        return min_tokens

    def _maybe_fault_500(self) -> None:
        if self.app.faults.http500():
            raise ApiError(500, "Internal server error (simulated fault: VLLM_SIM_FAULT_HTTP500_FRACTION).")

    def chat(self, body: dict) -> None:
        app = self.app
        model = self._served_model(body)
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise ApiError(400, "messages: Field required; send a non-empty list of chat messages.", "messages")
        stream, include_usage, continuous = self._stream_flags(body)
        text, images, prompt_tokens = app.read_messages(msgs)
        tools = body.get("tools") or None
        tool_choice = body.get("tool_choice", "auto" if tools else "none")
        if tools:   # the chat template renders the tool schemas into the prompt
            prompt_tokens += answers.count_tokens(json.dumps(tools, ensure_ascii=False))
            self._check_tool_choice(tool_choice)
        mml = self._check_prompt_length(prompt_tokens)
        field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        mt = body.get(field)
        if mt is not None:
            if not isinstance(mt, int) or isinstance(mt, bool):
                raise ApiError(400, f"max_tokens must be an integer, got {mt!r}.", "max_tokens")
            if mt < 1:   # vLLM's SamplingParams check names max_tokens whichever field was sent
                raise ApiError.validation(f"max_tokens must be at least 1, got {mt}.", "max_tokens", mt)
            if mt > mml:
                raise ApiError.validation(f"{field}={mt} cannot be greater than max_model_len={mml}. "
                                          "Please request fewer output tokens.", field, mt)
            mt = min(mt, mml - prompt_tokens)
        else:
            mt = mml - prompt_tokens
        min_tokens = self._min_tokens(body, mt)
        temp = body.get("temperature")
        if temp is not None and (not isinstance(temp, (int, float)) or not 0 <= temp <= 2):
            raise ApiError(400, f"temperature must be in [0, 2], got {temp}.", "temperature")
        self._maybe_fault_500()
        ctk = body.get("chat_template_kwargs") or {}
        thinking = app.model_thinks and ctk.get("enable_thinking", body.get("reasoning_effort") != "none") is not False
        rid = "chatcmpl-" + (self.headers.get("X-Request-Id") or secrets.token_hex(8))
        plan = app.answers.plan(text, images, thinking, seed=app.next_seed())
        tool_ctx = None
        if tools and tool_choice != "none":   # calls decided from the request (toolcalls.py)
            calls = toolcalls.decide(text, tools, tool_choice)
            forced = tool_choice != "auto"   # required / named: structured outputs in the parser's format
            fmt = toolcalls.parser_format(app.tool_parser) if forced else app.tool_format
            if calls:
                plan.content = answers.tokenize(toolcalls.render(calls, fmt))
            tool_ctx = {"tools": tools, "choice": tool_choice, "calls": calls, "format": fmt, "forced": forced}
        req = Request(rid=rid, prompt_tokens=prompt_tokens, max_tokens=mt, plan=plan,
                      min_tokens=min_tokens, ignore_eos=bool(body.get("ignore_eos")))
        if app.prefix_cache.enabled:   # the prompt's block keys (prefix_cache.py)
            req.prompt_stream = render_stream(msgs, bool(app.model.get("vision")))
            req.block_hashes = app.prefix_cache.hashes(req.prompt_stream)
        app.engine.submit(req)
        if stream:
            self._stream(req, model, include_usage, continuous)
        else:
            self._complete(req, model, tool_ctx)

    def _check_tool_choice(self, tool_choice) -> None:
        """vLLM 0.32's checks (renderers/online_renderer.py): without a tool parser (which needs
        --enable-auto-tool-choice --tool-call-parser) "auto", "required" and named are refused."""
        if self.app.tool_parser is not None or tool_choice in (None, "none"):
            return
        if tool_choice == "auto":
            raise ApiError(400, toolcalls.AUTO_NEEDS_FLAGS)
        if isinstance(tool_choice, dict):
            desc = f'function "{(tool_choice.get("function") or {}).get("name")}"'
        else:
            desc = f'"{tool_choice}"'
        raise ApiError(400, f"tool_choice={desc} requires --tool-call-parser to be set")

    def completion(self, body: dict) -> None:
        """``/v1/completions``: plain text in ``choices[].text``; non-stream max_tokens defaults to 16."""
        app = self.app
        model = self._served_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "prompt: send one prompt string (batched prompts are not simulated).", "prompt")
        stream, include_usage, continuous = self._stream_flags(body)
        prompt_tokens = max(1, answers.count_tokens(prompt))
        mml = self._check_prompt_length(prompt_tokens)
        mt = body.get("max_tokens", 16)
        mt = 16 if mt is None else mt
        if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
            raise ApiError.validation(f"max_tokens must be at least 1, got {mt}.", "max_tokens", mt)
        if mt > mml:
            raise ApiError.validation(f"max_tokens={mt} cannot be greater than max_model_len={mml}. "
                                      "Please request fewer output tokens.", "max_tokens", mt)
        mt = min(mt, mml - prompt_tokens)
        min_tokens = self._min_tokens(body, mt)
        self._maybe_fault_500()
        rid = "cmpl-" + (self.headers.get("X-Request-Id") or secrets.token_hex(8))
        plan = app.answers.plan(prompt, [], False, seed=app.next_seed())
        req = Request(rid=rid, prompt_tokens=prompt_tokens, max_tokens=mt, plan=plan, min_tokens=min_tokens,
                      ignore_eos=bool(body.get("ignore_eos")))
        if app.prefix_cache.enabled:
            req.prompt_stream = answers.tokenize(prompt)
            req.block_hashes = app.prefix_cache.hashes(req.prompt_stream)
        app.engine.submit(req)
        base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model}
        usage = lambda n: {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n}
        if not stream:
            text, reason = [], "stop"
            while True:
                ev = req.out.get()
                if ev[0] == "tokens":
                    text += [t for _, t in ev[2]]
                else:
                    reason = ev[2]
                    break
            return self._json(200, {**base, "choices": [{"index": 0, "text": "".join(text), "logprobs": None,
                                                          "finish_reason": reason, "stop_reason": None,
                                                          "prompt_logprobs": None}],
                                    "usage": usage(req.produced), "kv_transfer_params": None})
        frame = self._open_sse()

        streamed = 0
        try:
            while True:
                ev = req.out.get()
                if ev[0] == "finish":
                    if streamed < req.target:
                        frame({**base, "choices": [{"index": 0, "text": "", "logprobs": None,
                                                    "finish_reason": ev[2], "stop_reason": None}]})
                    break
                streamed += len(ev[2])
                choice = {"index": 0, "text": "".join(t for _, t in ev[2]), "logprobs": None, "finish_reason": None,
                          "stop_reason": None}
                done = _finish_event(req, streamed)
                if done is not None and done[0] == "finish":
                    choice["finish_reason"] = done[2]
                chunk = {**base, "choices": [choice]}
                if continuous:
                    chunk["usage"] = usage(streamed)
                frame(chunk)
                if done is not None and done[0] == "finish":
                    break
            if include_usage:
                frame({**base, "choices": [], "usage": usage(req.produced)})
            frame(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            app.engine.abort(req)
            self.close_connection = True

    def _delta(self, toks: list[tuple[str, str]], state: dict) -> dict:
        parser = self.app.reasoning_parser
        reasoning = "".join(t for ch, t in toks if ch == "reasoning")
        content = "".join(t for ch, t in toks if ch == "content")
        d: dict = {}
        if parser:
            if reasoning:
                d["reasoning"] = reasoning
            if content:
                d["content"] = content
        else:
            if content and state.get("had_reasoning") and not state.get("closed"):
                content = "</think>\n\n" + content
                state["closed"] = True
            if reasoning:
                state["had_reasoning"] = True
            d["content"] = reasoning + content
        return d

    def _usage(self, req: Request, details: bool = False) -> dict:
        """Usage as vLLM 0.32 sends it: the final stream chunk has three counts; continuous-usage
        chunks add ``completion_tokens_details`` and the non-streaming body ``prompt_tokens_details``
        too (null, or the reasoning count with a reasoning parser)."""
        u = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.produced,
             "completion_tokens": req.produced}
        if self.app.reasoning_parser:
            u["completion_tokens_details"] = {"reasoning_tokens": req.reasoning_tokens}
        elif details:
            u["completion_tokens_details"] = None
        if self.app.prompt_tokens_details and req.cached_tokens:
            # --enable-prompt-tokens-details: vLLM adds it when some prompt tokens were cached
            u["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens}
        return u

    def _running_usage(self, req: Request, produced: int, reasoning: int) -> dict:
        """The ``usage`` of a continuous-usage-stats chunk (counts so far)."""
        return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + produced,
                "completion_tokens": produced,
                "completion_tokens_details": {"reasoning_tokens": reasoning} if self.app.reasoning_parser else None}

    def _open_sse(self):
        """Send the 200 and SSE headers (chunked, as vLLM's server does); returns ``frame(obj)``,
        which writes one ``data: …`` event (a dict as JSON, bytes as they are)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.app.access(self, 200)

        def frame(obj) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        return frame

    def _stream(self, req: Request, model: str, include_usage: bool, continuous: bool) -> None:
        created = int(time.time())
        base = {"id": req.rid, "object": "chat.completion.chunk", "created": created, "model": model}
        frame = self._open_sse()
        state: dict = {}
        fingerprint = self.app.system_fingerprint

        streamed = reasoning = 0
        try:
            first = True
            while True:
                try:
                    ev = req.out.get(timeout=1.0)
                except queue.Empty:
                    continue
                if ev[0] == "tokens":
                    if first:
                        role = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": None, "finish_reason": None}]}
                        if continuous:
                            role["usage"] = self._running_usage(req, 0, 0)
                        role["prompt_token_ids"] = None
                        frame(role)
                        first = False
                    streamed += len(ev[2])
                    reasoning += sum(1 for ch, _ in ev[2] if ch == "reasoning")
                    choice = {"index": 0, "delta": self._delta(ev[2], state), "logprobs": None,
                              "finish_reason": None, "token_ids": None}
                    # The last token chunk carries the finish reason, as in vLLM.
                    nxt = _finish_event(req, streamed)
                    if nxt is not None and nxt[0] == "finish":
                        choice["finish_reason"] = nxt[2]
                        choice["stop_reason"] = None
                    chunk = {**base, "choices": [choice]}
                    if continuous:
                        chunk["usage"] = self._running_usage(req, streamed, reasoning)
                    if choice["finish_reason"] is not None and not include_usage:
                        chunk["system_fingerprint"] = fingerprint   # on the last chunk, as vLLM 0.32
                    frame(chunk)
                    if nxt is not None and nxt[0] == "finish":
                        break
                elif ev[0] == "finish":
                    if first:  # aborted before any token
                        break
                    chunk = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                                  "finish_reason": ev[2], "stop_reason": None}]}
                    if not include_usage:
                        chunk["system_fingerprint"] = fingerprint
                    frame(chunk)
                    break
            if include_usage:
                frame({**base, "choices": [], "usage": self._usage(req), "system_fingerprint": fingerprint})
            frame(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.app.engine.abort(req)
            self.close_connection = True

    def _complete(self, req: Request, model: str, tool_ctx: dict | None = None) -> None:
        reasoning, content, reason = [], [], "stop"
        while True:
            ev = req.out.get()
            if ev[0] == "tokens":
                for ch, t in ev[2]:
                    (reasoning if ch == "reasoning" and self.app.reasoning_parser else content).append(t)
            else:
                reason = ev[2]
                break
        msg = {"role": "assistant", "content": "".join(content) or None, "refusal": None, "annotations": None,
               "audio": None, "function_call": None,
               "reasoning": "".join(reasoning) or None if self.app.reasoning_parser else None}
        if tool_ctx is None:
            msg["tool_calls"] = []
        else:   # vLLM drops tool_calls from the message when there are none
            parser = None if tool_ctx["forced"] else self.app.tool_parser   # forced: vLLM reads its own tag
            parsed = toolcalls.parse(msg["content"] or "", tool_ctx["format"], parser, tool_ctx["tools"])
            if parsed is not None and parsed[1]:
                msg["content"], calls = parsed
                if tool_ctx["forced"]:
                    msg["content"] = ""
                msg["tool_calls"] = toolcalls.message_calls(calls)
                reason = toolcalls.finish_reason(reason, True, tool_ctx["choice"])
        usage = self._usage(req, details=True)
        usage.setdefault("prompt_tokens_details", None)
        body = {"id": req.rid, "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": reason,
                             "stop_reason": None, "token_ids": None}],
                "service_tier": None, "system_fingerprint": self.app.system_fingerprint,
                "usage": usage, "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None}
        self._json(200, body)


def read_messages(msgs: list, vision: bool) -> tuple[str, list[bytes], int]:
    """Text of the last user message, its decoded images, and the prompt token count.

    Prompt tokens = sum over messages of (tokens of text + template overhead) + vision tokens.
    Raises ApiError with vLLM's texts for bad image parts.
    """
    from . import pngdecode
    total = answers.TEMPLATE_TOKENS_FIXED
    last_text, last_images = "", []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m:
            raise ApiError(400, f"messages[{i}]: each message needs a 'role' and 'content'.", "messages")
        content = m.get("content")
        texts, images = [], []
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                ptype = part.get("type") if isinstance(part, dict) else None
                if ptype == "text":
                    texts.append(str(part.get("text", "")))
                elif ptype == "image_url":
                    if not vision:
                        raise ApiError(400, "This model does not support image input (it is not a multimodal model).")
                    url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else part.get("image_url")
                    if not isinstance(url, str):
                        raise ApiError(400, "image_url: Field required (expected {\"url\": \"data:image/png;base64,...\"}).")
                    try:
                        data = answers.decode_image_url(url)
                    except answers.ImageURLError as e:
                        raise ApiError(400, str(e)) from None
                    images.append(data)
                    try:
                        w, h, _ = pngdecode.decode_png(data)
                    except pngdecode.PNGError:
                        w = h = 224
                    total += answers.image_tokens(w, h)
                else:
                    raise ApiError(400, f"Unknown part type: {ptype}")
        elif content is not None:
            raise ApiError(400, f"messages[{i}].content must be a string or a list of parts.", "messages")
        text = "".join(texts)
        total += answers.count_tokens(text) + answers.TEMPLATE_TOKENS_PER_MESSAGE
        if m.get("role") == "user":
            last_text, last_images = text, images
    return last_text, last_images, total
