"""The engine: one thread steps every running request together (continuous batching).

Pacing is deadline based: step ``i`` ends at ``target_i = target_{i-1} + T_i`` (T from
:mod:`pacing`, times jitter), not ``now + T_i``, so a loaded machine does not drift; after an
idle period the clock restarts from now. Each decode step advances every running request by
``1 + accepted`` tokens (MTP) and emits one chunk event carrying those tokens; a step that takes in
a new request starts no earlier than its arrival (:func:`planned_start`). The step that
finishes a request's prefill emits its first token (one token, as vLLM). Timestamps are read
with ``time.time()`` when the step really ended. With ``VLLM_SIM_UNIT_DIR`` each step is stretched
by the unit's shared memory bus (:mod:`unit_traffic`).
"""
from __future__ import annotations

import collections
import math
import queue
import random
import threading
import time
from dataclasses import dataclass, field

from .answers import Plan


def planned_start(target: float | None, now: float, joined: float | None) -> float:
    """When a step is planned to start: the previous step's deadline ``target`` while the engine
    keeps pace (``now`` after an idle period or when over 1 s behind), and never before the arrival
    of a request that joins with this step (``joined``, the latest such arrival): a request that
    arrived after the previous deadline, while a late wake-up kept the engine from stepping, starts
    its prefill when it arrived, so its first token is never earlier than its arrival plus the
    planned prefill."""
    start = now if target is None or target < now - 1.0 else target
    return start if joined is None else max(start, joined)


@dataclass
class Request:
    """One generation request and its server-side timeline (seconds, ``time.time()``); its arrival
    and last token also on the machine's monotonic clock (``time.monotonic()``, the clock measure's
    client times requests with), so a client on the same machine compares spans on one clock."""

    rid: str
    prompt_tokens: int
    max_tokens: int
    plan: Plan
    min_tokens: int = 0
    ignore_eos: bool = False
    arrival: float = field(default_factory=time.time)
    arrival_mono: float = field(default_factory=time.monotonic)
    out: queue.Queue = field(default_factory=queue.Queue)
    prefill_done: int = 0
    produced: int = 0
    reasoning_tokens: int = 0
    steps: int = 0
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    last_token_mono: float | None = None
    finish_reason: str | None = None
    aborted: bool = False
    #: per-request step-time factor exp(N(0, VLLM_SIM_REQUEST_NOISE)), set by :meth:`Engine.submit`
    noise_factor: float = 1.0
    #: seconds the engine planned for the decode steps this request ran in (jitter and noise
    #: included, late wake-ups not): the timeline the pacing model asked for
    paced_decode_s: float = 0.0
    #: seconds the engine planned for the steps that prefilled this request's prompt (the prefix
    #: cache's hits are not prefilled): the prefill the pacing model asked for
    paced_prefill_s: float = 0.0
    #: when the step that emitted the first token was planned to end (its deadline; a late wake-up
    #: makes ``first_token`` later): the decode steps' deadlines follow from it, so ``last_token``
    #: is never before ``first_token_planned + paced_decode_s``
    first_token_planned: float | None = None
    #: chained keys of the prompt's full blocks (prefix_cache.PrefixCache.hashes; empty: caching off)
    block_hashes: list = field(default_factory=list)
    #: prompt tokens found in the prefix cache when the request was scheduled (not prefilled)
    cached_tokens: int = 0
    #: the prompt as simulator tokens (prefix_cache.render_stream); the generated tokens extend it
    prompt_stream: list = field(default_factory=list)

    def __post_init__(self) -> None:
        natural = max(self.plan.natural_len, self.min_tokens)
        if self.ignore_eos or natural > self.max_tokens:
            self.target, self.reason = self.max_tokens, "length"
        else:
            self.target, self.reason = max(natural, 1), "stop"

    def record(self) -> dict:
        """The /sim/requests row."""
        return {"id": self.rid, "arrival": self.arrival, "scheduled": self.scheduled,
                "first_token": self.first_token, "last_token": self.last_token,
                "arrival_mono": self.arrival_mono, "last_token_mono": self.last_token_mono,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.produced,
                "reasoning_tokens": self.reasoning_tokens, "steps": self.steps,
                "finish_reason": self.finish_reason, "noise_factor": self.noise_factor,
                "paced_decode_s": self.paced_decode_s, "paced_prefill_s": self.paced_prefill_s,
                "first_token_planned": self.first_token_planned,
                "cached_tokens": self.cached_tokens}


def draw_accepted(rates: list[float], k: int, rng: random.Random) -> int:
    """Accepted draft tokens for one verify step.

    ``rates`` are unconditional per-position rates (position i accepted implies all before it),
    so position i is accepted with conditional probability ``rates[i] / rates[i-1]``.
    """
    prev = 1.0
    for i in range(k):
        p = rates[i] if i < len(rates) else 0.0
        cond = p / prev if prev > 0 else 0.0
        if rng.random() >= cond:
            return i
        prev = p
    return k


class Engine(threading.Thread):
    """Runs engine steps; the HTTP layer submits :class:`Request` objects and reads their queues."""

    def __init__(self, pacing, metrics, faults, *, spec_k: int, acceptance: list[float],
                 max_num_seqs: int, max_num_batched_tokens: int, jitter: float, seed: int,
                 kv_capacity_tokens: float, request_noise: float = 0.0, gpu_state=None,
                 prefix_cache=None, unit=None) -> None:
        super().__init__(name="EngineCore", daemon=True)
        self.pacing, self.metrics, self.faults = pacing, metrics, faults
        self.k, self.acceptance = spec_k, acceptance
        self.max_num_seqs, self.max_batched = max_num_seqs, max_num_batched_tokens
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.jrng = random.Random(seed + 1)
        self.request_noise = request_noise
        self.nrng = random.Random(f"request-noise:{seed}")  # drawn in arrival order, one draw per request
        self.cond = threading.Condition()
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.records: collections.deque[dict] = collections.deque(maxlen=100_000)
        self.done_records: collections.deque[Request] = collections.deque(maxlen=100_000)
        self.all_requests: dict[str, Request] = {}
        self.kv_capacity = max(kv_capacity_tokens, 1.0)
        self.total_prompt = 0
        self.total_generated = 0
        self.steps = 0
        self.gpu_state = gpu_state  # gpustate.GpuState: tells the nvidia-smi/dmesg stand-ins what runs
        #: cluster mode only (cluster.RayWorkers): every step calls every worker; None on one unit
        self.workers = None
        #: prefix_cache.PrefixCache (None: no cache at all); hits cut the prefill a request needs
        self.prefix_cache = prefix_cache
        #: unit_traffic.UnitTraffic: the bus shared with the unit's other engines (None: alone)
        self.unit = unit

    # --- API for the HTTP layer ---------------------------------------------------------
    def submit(self, req: Request) -> None:
        with self.cond:
            if self.request_noise > 0:
                req.noise_factor = math.exp(self.nrng.gauss(0.0, self.request_noise))
            self.all_requests[req.rid] = req
            if len(self.all_requests) > 100_000:
                self.all_requests.pop(next(iter(self.all_requests)))
            self.waiting.append(req)
            self.metrics.set_gauge("vllm:num_requests_waiting", len(self.waiting))
            self.cond.notify()

    def abort(self, req: Request) -> None:
        with self.cond:
            req.aborted = True
            self.cond.notify()

    def snapshot(self) -> list[dict]:
        with self.cond:
            return [r.record() for r in self.all_requests.values()]

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        target = None
        while True:
            with self.cond:
                while not self.running and not self.waiting:
                    target = None
                    if self.unit is not None:
                        self.unit.idle()
                    if self.workers is None:
                        self.cond.wait()
                    elif not self.cond.wait(timeout=self.workers.heartbeat_s):
                        self.workers.heartbeat()  # idle: a lost worker still kills the engine
                started, joined = 0, None
                while self.waiting and len(self.running) < self.max_num_seqs:
                    r = self.waiting.popleft()
                    if r.aborted:
                        continue
                    r.scheduled = time.time()
                    self._prefix_lookup(r)
                    self.running.append(r)
                    started += 1
                    joined = r.arrival if joined is None else max(joined, r.arrival)
                for r in [r for r in self.running if r.aborted]:
                    self.running.remove(r)
                    self._finish(r, "abort", time.time())
                decode = [r for r in self.running if r.prefill_done >= r.prompt_tokens]
                prefill = [r for r in self.running if r.prefill_done < r.prompt_tokens]
                if self.gpu_state is not None:
                    self.gpu_state.update(len(self.running), started)
                self.metrics.set_gauge("vllm:num_requests_running", len(self.running))
                self.metrics.set_gauge("vllm:num_requests_waiting", len(self.waiting))
            if not decode and not prefill:
                continue
            while self.faults.stalled:
                time.sleep(3600)
            k = self.k if decode else 0
            budget = self.max_batched - len(decode) * (k + 1)
            chunks: list[tuple[Request, int]] = []
            for r in prefill:
                take = min(max(budget, 0), r.prompt_tokens - r.prefill_done)
                if take <= 0:
                    break
                chunks.append((r, take))
                budget -= take
            if not decode and not chunks:   # a prompt bigger than the budget still makes progress
                chunks = [(prefill[0], min(self.max_batched, prefill[0].prompt_tokens - prefill[0].prefill_done))]
            ctx = sum(r.prompt_tokens + r.produced for r in decode) + sum(r.prefill_done + t for r, t in chunks)
            shape = (len(decode), k, ctx, sum(t for _, t in chunks), len(chunks))
            dur = alone = self.pacing.step(*shape)
            traffic = self.pacing.step_traffic(*shape)
            self.metrics.add_traffic(*traffic)
            if self.jitter > 0:
                dur *= max(0.5, self.jrng.gauss(1.0, self.jitter))
            if self.request_noise > 0 and decode:
                # a decode step runs as slow as the mean factor of the requests it decodes
                # (single stream: that request's own factor)
                dur *= sum(r.noise_factor for r in decode) / len(decode)
            if self.unit is not None:  # the unit's bus is shared with its other engines
                dur = self.unit.pace(traffic[0] + traffic[1], alone, dur, planned_start(target, time.time(), joined))
            for r in decode:
                r.paced_decode_s += dur
            for r, _ in chunks:
                r.paced_prefill_s += dur
            calls = self.workers.dispatch(self.steps, len(self.running)) if self.workers is not None else None
            now = time.time()
            target = planned_start(target, now, joined) + dur
            if target > now:
                time.sleep(target - now)
            if calls is not None:
                self.workers.collect(calls)
            t, mono = time.time(), time.monotonic()
            self._emit(decode, chunks, k, t, mono, target)

    def _emit(self, decode: list[Request], chunks: list[tuple[Request, int]], k: int, t: float, mono: float,
              planned: float) -> None:
        m = self.metrics
        step_tokens = 0
        for r in decode:
            if r.aborted:
                continue
            a = draw_accepted(self.acceptance, k, self.rng) if k else 0
            if k:
                m.spec_draft(k, a)
            n = min(1 + a, r.target - r.produced)
            m.observe("vllm:inter_token_latency_seconds", t - (r.last_token or t))
            self._tokens(r, n, t, mono)
            step_tokens += n
        for r, take in chunks:
            r.prefill_done += take
            step_tokens += take
            self._prefix_insert(r)
            if r.prefill_done >= r.prompt_tokens and not r.aborted:
                m.prompt_computed(r.prompt_tokens, r.cached_tokens)
                self.total_prompt += r.prompt_tokens
                m.observe("vllm:time_to_first_token_seconds", t - r.arrival)
                r.first_token, r.first_token_planned = t, planned
                self._tokens(r, 1, t, mono)
                step_tokens += 1
        m.observe("vllm:iteration_tokens_total", step_tokens)
        self.steps += 1
        with self.cond:
            for r in [r for r in self.running if r.produced >= r.target]:
                self.running.remove(r)
                self._finish(r, r.reason, t)
            ctx = sum(r.prompt_tokens + r.produced for r in self.running)
            m.set_gauge("vllm:kv_cache_usage_perc", min(1.0, ctx / self.kv_capacity))
            m.set_gauge("vllm:num_requests_running", len(self.running))
            if self.gpu_state is not None:
                self.gpu_state.update(len(self.running))
        self.faults.after_tokens(self.total_generated)

    def _prefix_lookup(self, r: Request) -> None:
        """At scheduling: the cached leading blocks are a hit and need no prefill (counted as
        vLLM's prefix_cache_queries / _hits); nothing is queried with caching off."""
        pc = self.prefix_cache
        if pc is None or not pc.enabled or r.prefill_done:
            return
        hits = pc.lookup(r.block_hashes, r.prompt_tokens)
        r.cached_tokens = hits
        r.prefill_done = hits
        self.metrics.prefix_query(r.prompt_tokens, hits)

    def _prefix_insert(self, r: Request) -> None:
        """After a prefill chunk: the request's fully computed blocks enter the cache; the LRU
        keeps room for the blocks running requests hold outside it."""
        pc = self.prefix_cache
        if pc is None or not pc.enabled or r.aborted:
            return
        pc.insert(r.block_hashes, r.prefill_done, self._reserved_blocks())

    def _cache_generated(self, r: Request) -> None:
        """A finished request's full blocks over prompt + generated tokens enter the cache (vLLM
        caches decode blocks as they fill; the last sampled token has no KV yet), so a next turn
        that re-sends this answer hits up to where its history differs from what was generated."""
        pc = self.prefix_cache
        if pc is None or not pc.enabled or r.aborted or not r.prompt_stream or r.produced < 2:
            return
        tokens = list(r.prompt_stream) + [r.plan.token(i)[1] for i in range(r.produced)]
        pc.insert(pc.hashes(tokens), r.prompt_tokens + r.produced - 1, self._reserved_blocks(but=r))

    def _reserved_blocks(self, but: Request | None = None) -> int:
        """KV blocks the running requests (all but ``but``) hold outside the cache: their blocks
        over prompt + generated tokens, less the full prompt blocks the cache already has."""
        bs = self.prefix_cache.block_size
        return sum(-(-(q.prefill_done + q.produced) // bs) - min(q.prefill_done // bs, len(q.block_hashes))
                   for q in self.running if q is not but)

    def _tokens(self, r: Request, n: int, t: float, mono: float) -> None:
        toks = [r.plan.token(r.produced + i) for i in range(n)]
        r.produced += n
        r.reasoning_tokens += sum(1 for ch, _ in toks if ch == "reasoning")
        r.steps += 1
        r.last_token = t
        r.last_token_mono = mono
        self.total_generated += n
        self.metrics.inc("vllm:generation_tokens", n)
        r.out.put(("tokens", t, toks))

    def _finish(self, r: Request, reason: str, t: float) -> None:
        m = self.metrics
        self._cache_generated(r)
        r.finish_reason = reason
        m.finished(reason)
        if r.first_token is not None:
            last = r.last_token or t
            m.observe("vllm:e2e_request_latency_seconds", t - r.arrival)
            m.observe("vllm:request_queue_time_seconds", (r.scheduled or r.arrival) - r.arrival)
            m.observe("vllm:request_prefill_time_seconds", r.first_token - (r.scheduled or r.arrival))
            m.observe("vllm:request_decode_time_seconds", last - r.first_token)
            m.observe("vllm:request_inference_time_seconds", last - (r.scheduled or r.arrival))
            m.observe("vllm:request_time_per_output_token_seconds",
                      (last - r.first_token) / (r.produced - 1) if r.produced > 1 else 0.0)
            m.observe("vllm:request_prompt_tokens", r.prompt_tokens)
            m.observe("vllm:request_generation_tokens", r.produced)
            m.observe("vllm:request_max_num_generation_tokens", r.max_tokens)
            m.observe("vllm:request_params_max_tokens", r.max_tokens)
            m.observe("vllm:request_params_n", 1)
            m.observe("vllm:request_num_preemptions", 0)
            m.observe("vllm:request_prefill_kv_computed_tokens", r.prompt_tokens - r.cached_tokens)
        r.out.put(("finish", t, reason))
