"""One measurement run against one server: the endpoint and the options, the request compatibility
level the server accepts, errors and warnings, telemetry and counters around each phase, and the
result document the phases fill. The phases themselves live in ``phases/``, in the order of
``phases.PHASES``."""
from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import bandwidth, document, probe
from .bandwidth import BandwidthReading
from .client import Endpoint, stream_requests
from .common import Abort, Unreachable, log
from .conditions import RunConditions
from .decode_rate import with_engine_timing
from .metrics import DecodeCounters, SpecCounters, decode_counters, engine_timing, parse_prometheus, spec_counters
from .phases import PHASES
from .prompts import COMPAT_FULL, COMPAT_PLAIN, chat_body, speed_prompt
from .quality import QualityFile
from .record import RequestRecord
from .shapes import JSON, ChatMessage, JSONObject, MeasuredDocument, RunEntry, WarningEntry
from .sse import StreamResult, parse_sse
from .telemetry import Telemetry, start_telemetry
from .tool_judge import ToolsFile
from .workload import ReplayRow

#: chars per token of real prose before the server has counted a prompt (refined from usage).
DEFAULT_CHARS_PER_TOKEN = 4.0


@dataclass
class PhaseSpan:
    """One phase between its start and end: the completion tokens it generated (for energy per token)."""

    name: str
    tokens: int = 0


class Session:
    """A run: probe, then every enabled phase (``phases.PHASES``), then the document."""

    def __init__(self, args: argparse.Namespace, api_key: str | None) -> None:
        self.args = args
        self.ep = Endpoint.from_url(args.base_url, api_key)
        self.rng = random.Random()
        self.compat = COMPAT_FULL  # what requests may ask of the server (prompts.COMPAT_*)
        self.compat_known = False
        self.metrics_ok = False
        self.metrics_reason: str | None = None
        self.decode_metrics = True  # False once /metrics answered without vLLM's decode-time counters
        self.spec_phases: dict[str, tuple[SpecCounters | None, SpecCounters | None]] = {}
        self.phase_tokens: dict[str, int] = {}
        self.telemetry: Telemetry | None = None
        self.telemetry_reason: str | None = None
        self.conditions = RunConditions(args.kernel_log)
        self.quality_data: QualityFile | None = None
        self.tools_data: ToolsFile | None = None
        self.replay_data: list[ReplayRow] | None = None
        self.hardware: tuple[JSONObject, str] | None = None  # the --hardware profile and its file
        self.bandwidth_before: BandwidthReading | None = None  # the hand run's probe before its first request
        self.llamacpp = False  # the server looks like llama.cpp's llama-server
        self.server_slots: int | None = None
        self.warmup_prompt_tokens: int | None = None
        self.forcing_warning: WarningEntry | None = None
        self.model = ""
        self.chars_per_token: float | None = None  # measured by the context phase
        self.incomplete: list[str] = []  # why the run is incomplete although every phase ran
        self.doc: MeasuredDocument = document.new_document(args, self.ep)

    # ---- errors, warnings and reachability ----------------------------------------------------

    def error(self, phase: str, request: int | None, message: str) -> None:
        self.doc["errors"].append({"phase": phase, "request": request, "message": message})
        log(f"{phase}: request {request}: {message}")

    def warn(self, code: str, message: str, **extra: int | None) -> WarningEntry:
        """A warning about the whole result: once in ``warnings`` and once on stderr."""
        w: WarningEntry = {"code": code, "message": message, **extra}
        self.doc["warnings"].append(w)
        log(f"WARNING: {message}")
        return w

    def check_alive(self, phase: str) -> None:
        """After a transport error: if the server no longer answers, stop the run (incomplete)."""
        try:
            self.ep.get("/v1/models", timeout=10)
        except OSError as exc:
            raise Abort(f"server stopped answering during {phase}: {exc}") from None

    def get_json(self, path: str, timeout: float = 15) -> JSON:
        """GET a JSON document; None when the route is absent or the answer is not JSON."""
        try:
            status, body = self.ep.get(path, timeout=timeout)
            if status != 200:
                return None
            return json.loads(body)
        except (OSError, ValueError):
            return None

    def scrape(self) -> list[tuple[str, dict[str, str], float]] | None:
        """The server's /metrics samples now, or None."""
        if not self.metrics_ok:
            return None
        try:
            status, body = self.ep.get("/metrics", timeout=30)
        except OSError:
            return None
        return parse_prometheus(body.decode("utf-8", "replace")) if status == 200 else None

    def scrape_spec(self) -> SpecCounters | None:
        samples = self.scrape()
        return spec_counters(samples) if samples is not None else None

    def scrape_decode(self) -> DecodeCounters | None:
        """vLLM's per-request decode-time counters now, or None (no /metrics, not vLLM). A server
        whose /metrics has none is not asked again."""
        samples = self.scrape() if self.decode_metrics else None
        counters = decode_counters(samples) if samples is not None else None
        if samples is not None and counters is None:
            self.decode_metrics = False
        return counters

    # ---- phases ---------------------------------------------------------------------------------

    @contextmanager
    def phase(self, name: str) -> Iterator[PhaseSpan]:
        """Telemetry, swap counters and the spec-decode counters around one phase. A phase that
        raises (the server died) is not closed: its counters would come from a dead server."""
        if self.telemetry:
            self.telemetry.begin(name)
        self.conditions.phase_started()
        before = self.scrape_spec()
        span = PhaseSpan(name)
        yield span
        if self.telemetry:
            self.telemetry.end(name)
        self.conditions.phase_ended()
        self.spec_phases[name] = (before, self.scrape_spec())
        self.phase_tokens[name] = span.tokens

    def in_flight(self, on: bool) -> None:
        if self.telemetry:
            self.telemetry.in_flight(on)

    def bodies(self, messages_list: list[list[ChatMessage]], max_tokens: int | list[int],
               forced: bool) -> list[bytes]:
        """Request bodies at the session's compatibility level."""
        maxes = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(messages_list)
        return [chat_body(self.model, m, n, forced, self.compat, self.llamacpp) for m, n in zip(messages_list, maxes)]

    def generate(self, phase: str, messages_list: list[list[ChatMessage]], max_tokens: int,
                 forced: bool) -> list[RequestRecord]:
        """Stream a set of requests at once: one record each (``forced``: the length was forced).

        On the first requests the server decides the compatibility level: HTTP 400/422 to every
        request with vLLM's extensions -> retry without them (lengths not forced), then without
        stream_options."""
        while True:
            bodies = self.bodies(messages_list, max_tokens, forced)
            self.in_flight(True)
            try:
                raws = stream_requests(self.ep, bodies, self.args.request_timeout, self.args.stall_timeout)
            finally:
                self.in_flight(False)
            results = [parse_sse(r) for r in raws]
            rejected = [r for r in results if r.status in (400, 422)]
            if not self.compat_known and rejected and len(rejected) == len(results) and self.compat < COMPAT_PLAIN:
                log(f"{phase}: server rejected the request ({rejected[0].error}); retrying without "
                    f"{'vLLM extensions' if self.compat == COMPAT_FULL else 'stream_options'}")
                self.compat += 1
                continue
            if any(r.status == 200 for r in results):
                self.compat_known = True
            records = self.received(phase, results, forced and self.compat == COMPAT_FULL)
            return records

    def generate_one(self, phase: str, messages: list[ChatMessage], max_tokens: int,
                     forced: bool) -> RequestRecord:
        """One request alone on the server, its decode timed on the engine's clock too where the
        server exposes vLLM's per-request decode time (``decode_rate.with_engine_timing``)."""
        before = self.scrape_decode()
        r = self.generate(phase, [messages], max_tokens, forced)[0]
        if before is not None and r.stream is not None and not r.error:
            r.decode = with_engine_timing(r.decode, r.stream,
                                          engine_timing(before, self.scrape_decode(), r.completion_tokens))
        return r

    def received(self, phase: str, results: list[StreamResult], forced: bool) -> list[RequestRecord]:
        """Records of parsed streams; the server's fingerprint noted; a lost connection checked."""
        self.note_fingerprint(results)
        if any(r.status is None or r.cut for r in results):
            self.check_alive(phase)
        return [RequestRecord.from_stream(r, forced) for r in results]

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

    def speed_messages(self) -> list[ChatMessage]:
        return [{"role": "user", "content": speed_prompt(self.rng)}]

    def prompt_chars_per_token(self) -> float:
        """Characters of prose per token: measured by the context phase, else from the first
        single-stream run's prompt, else DEFAULT_CHARS_PER_TOKEN."""
        if self.chars_per_token is not None:
            return self.chars_per_token
        first = next((r for r in (self.doc["single"] or {}).get("runs", []) if r.get("prompt_tokens")), None)
        if first:
            return len(speed_prompt(random.Random(0))) / first["prompt_tokens"]
        return DEFAULT_CHARS_PER_TOKEN

    def fits(self, tokens: int, what: str) -> str | None:
        """Why ``tokens`` (with 64 for the chat template) do not fit the server's max_model_len, or None."""
        mml = self.doc["server"]["max_model_len"]
        if mml and tokens + 64 > mml:
            return f"{what} ({tokens} tokens with the output) does not fit max_model_len {mml}"
        return None

    def check_length(self, phase: str, i: int, rec: RunEntry) -> None:
        """A completed speed request that is not the requested length: listed in errors, and
        the forcing problem said once at the top of the result (warnings) and on stderr."""
        if rec["error"] or rec["length_ok"] is not False:
            return
        n = self.args.output_tokens
        self.error(phase, i, f"asked for {n} tokens, server generated {rec['completion_tokens']} (length not forced)")
        if self.forcing_warning is None:
            if rec["forced_length"]:
                msg = (f"the server accepted but ignored the length-forcing fields (min_tokens, ignore_eos): "
                       f"asked for {n} tokens, got {rec['completion_tokens']} "
                       f"(finish_reason {rec['finish_reason']}); figures come from shorter streams")
            else:
                msg = (f"the server does not take the length-forcing fields (min_tokens, ignore_eos), so "
                       f"lengths are not forced: asked for {n} tokens, got "
                       f"{rec['completion_tokens']}; figures come from shorter streams")
            self.forcing_warning = self.warn("length_not_forced", msg, requests=0)
        self.forcing_warning["requests"] += 1

    # ---- the run ----------------------------------------------------------------------------------

    def run(self) -> str:
        """Every enabled phase in order; returns the final status. Raises Unreachable/Abort/Interrupted."""
        self.conditions.start()
        self.bandwidth_before = self._bandwidth_probe("before")
        probe.probe(self)
        self.telemetry, self.telemetry_reason = start_telemetry(self.args)
        mml = self.doc["server"]["max_model_len"]
        n = self.args.output_tokens
        if mml and n + 64 > mml:
            raise Unreachable(f"--output-tokens {n} does not fit the server's max_model_len {mml} (with the "
                              "prompt): give a smaller --output-tokens")
        for ph in PHASES:
            if ph.enabled(self.args):
                status = ph.run(self)
                if status is not None:
                    return status
        for why in self.incomplete:
            log(f"incomplete: {why}")
        return "incomplete" if self.incomplete else "complete"

    def _bandwidth_probe(self, when: str) -> BandwidthReading | None:
        """The bandwidth probe's reading (``--bandwidth-probe``, or the checkout's program with
        ``--hardware``), None when there is no probe to run."""
        command = self.args.bandwidth_probe or bandwidth.default_command(self.hardware[0] if self.hardware else None)
        if not command or command.strip().lower() in ("off", "none"):
            return None
        log(f"bandwidth probe ({when} the run): {command}")
        reading = bandwidth.run_probe(command)
        log(f"bandwidth probe: {reading['gbps']} GB/s" if reading["gbps"] else f"bandwidth probe: {reading['reason']}")
        return reading

    def finish(self, status: str) -> MeasuredDocument:
        """The result document with its status, spec-decode, telemetry, run-condition and bandwidth blocks."""
        tel, self.telemetry = self.telemetry, None
        after = self._bandwidth_probe("after") if self.bandwidth_before else None
        return document.finish(self, status, tel, after)

