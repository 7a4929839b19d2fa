"""Prometheus text exposition with vLLM's V1 metric names, labels and buckets.

Output mimics prometheus_client's single-process format: ``# HELP``/``# TYPE`` lines, counters
with ``_total`` plus a ``_created`` gauge, histograms with ``_bucket{le=...}``, ``_count``,
``_sum`` and ``_created``, label names in alphabetical order, float values.
"""
from __future__ import annotations

import threading
import time

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
REQ_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0]
ITER_BUCKETS = [float(2 ** i) for i in range(0, 15)]
PREEMPTION_BUCKETS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]
N_BUCKETS = [1.0, 2.0, 5.0, 10.0, 20.0]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _labels(d: dict) -> str:
    if not d:
        return ""
    inner = ",".join(f'{k}="{str(v)}"' for k, v in sorted(d.items()))
    return "{" + inner + "}"


def token_buckets(max_len: int) -> list[float]:
    """vLLM's 1-2-5 buckets up to max_model_len."""
    out, m = [], 1
    while True:
        for x in (1, 2, 5):
            if x * m > max_len:
                return out
            out.append(float(x * m))
        m *= 10


class _Hist:
    def __init__(self, buckets: list[float]) -> None:
        self.buckets = list(buckets)
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0
        self.created = time.time()

    def observe(self, v: float) -> None:
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1


class Metrics:
    """vLLM metrics for one engine (``engine="0"``) and one served model name."""

    #: every histogram in exposition order: its help and its buckets (None: a token count's,
    #: ``token_buckets`` up to the served model's max_model_len)
    HISTS: dict[str, tuple[str, list[float] | None]] = {
        "vllm:time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
        "vllm:inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
        "vllm:request_time_per_output_token_seconds": ("Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS),
        "vllm:e2e_request_latency_seconds": ("Histogram of e2e request latency in seconds.", REQ_BUCKETS),
        "vllm:request_queue_time_seconds": ("Histogram of time spent in WAITING phase for request.", REQ_BUCKETS),
        "vllm:request_inference_time_seconds": ("Histogram of time spent in RUNNING phase for request.", REQ_BUCKETS),
        "vllm:request_prefill_time_seconds": ("Histogram of time spent in PREFILL phase for request.", REQ_BUCKETS),
        "vllm:request_decode_time_seconds": ("Histogram of time spent in DECODE phase for request.", REQ_BUCKETS),
        "vllm:iteration_tokens_total": ("Histogram of number of tokens per engine_step.", ITER_BUCKETS),
        "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", None),
        "vllm:request_generation_tokens": ("Number of generation tokens processed.", None),
        "vllm:request_max_num_generation_tokens": ("Histogram of maximum number of requested generation tokens.", None),
        "vllm:request_params_max_tokens": ("Histogram of the max_tokens request parameter.", None),
        "vllm:request_prefill_kv_computed_tokens": ("Histogram of new KV tokens computed during prefill (excluding cached tokens).", None),
        "vllm:request_num_preemptions": ("Histogram of the number of times a request was preempted.", PREEMPTION_BUCKETS),
        "vllm:request_params_n": ("Histogram of the n request parameter.", N_BUCKETS),
    }
    COUNTERS = {
        "vllm:prompt_tokens": "Number of prefill tokens processed.",
        "vllm:generation_tokens": "Number of generation tokens processed.",
        "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
        "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
        "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
        "vllm:external_prefix_cache_queries": "External prefix cache queries from KV connector cross-instance cache "
                                              "sharing, in terms of number of queried tokens.",
        "vllm:external_prefix_cache_hits": "External prefix cache hits from KV connector cross-instance cache sharing, "
                                           "in terms of number of cached tokens.",
        "vllm:mm_cache_queries": "Multi-modal cache queries, in terms of number of queried items.",
        "vllm:mm_cache_hits": "Multi-modal cache hits, in terms of number of cached items.",
        "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
        # The roofline's own traffic and work (pacing.PacingModel.step_traffic), summed over steps.
        "vllm:estimated_flops_per_gpu": "Estimated number of floating point operations per GPU (for Model Flops "
                                        "Utilization calculations).",
        "vllm:estimated_read_bytes_per_gpu": "Estimated number of bytes read from memory per GPU (for Model Flops "
                                             "Utilization calculations).",
        "vllm:estimated_write_bytes_per_gpu": "Estimated number of bytes written to memory per GPU (for Model Flops "
                                              "Utilization calculations).",
    }

    def __init__(self, model_name: str, max_model_len: int, spec_k: int = 0, cache_info: dict | None = None) -> None:
        self.lock = threading.Lock()
        self.base = {"model_name": model_name, "engine": "0"}
        self.created = time.time()
        self.counters = {n: 0.0 for n in self.COUNTERS}
        self.success = {r: 0.0 for r in FINISH_REASONS}
        tb = token_buckets(max_model_len)
        self.hists = {n: _Hist(tb if b is None else b) for n, (_h, b) in self.HISTS.items()}
        self.prompt_by_source = {s: 0.0 for s in PROMPT_SOURCES}
        self.cached_by_source = {s: 0.0 for s in CACHED_SOURCES}
        self.cache_info = {k: str(v) for k, v in (cache_info or {}).items()}
        self.gauges = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0,
                       "vllm:kv_cache_usage_perc": 0.0}
        self.spec_k = spec_k
        self.spec = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
        self.per_pos = [0.0] * spec_k

    def inc(self, name: str, v: float = 1.0) -> None:
        with self.lock:
            self.counters[name] += v

    def observe(self, name: str, v: float) -> None:
        with self.lock:
            self.hists[name].observe(v)

    def prompt_computed(self, tokens: int, cached: int = 0) -> None:
        """A finished prefill of ``tokens`` prompt tokens, ``cached`` of them prefix-cache hits
        (vLLM counts every prompt token in vllm:prompt_tokens and splits them by source)."""
        with self.lock:
            self.counters["vllm:prompt_tokens"] += tokens
            self.prompt_by_source["local_compute"] += tokens - cached
            self.prompt_by_source["local_cache_hit"] += cached
            self.counters["vllm:prompt_tokens_cached"] += cached
            self.cached_by_source["device"] += cached

    def prefix_query(self, queries: int, hits: int) -> None:
        """A request scheduled with prefix caching on: ``queries`` prompt tokens looked up,
        ``hits`` found (vLLM's prefix_cache_queries / prefix_cache_hits, both in tokens)."""
        with self.lock:
            self.counters["vllm:prefix_cache_queries"] += queries
            self.counters["vllm:prefix_cache_hits"] += hits

    def add_traffic(self, read: float, write: float, flops: float) -> None:
        """One engine step's estimated traffic and work (the roofline's own figures)."""
        with self.lock:
            self.counters["vllm:estimated_read_bytes_per_gpu"] += read
            self.counters["vllm:estimated_write_bytes_per_gpu"] += write
            self.counters["vllm:estimated_flops_per_gpu"] += flops

    def finished(self, reason: str) -> None:
        with self.lock:
            self.success[reason] = self.success.get(reason, 0.0) + 1

    def set_gauge(self, name: str, v: float) -> None:
        with self.lock:
            self.gauges[name] = float(v)

    def spec_draft(self, k: int, accepted: int) -> None:
        """One verify step of one request: ``k`` drafted, first ``accepted`` positions accepted."""
        with self.lock:
            self.spec["drafts"] += 1
            self.spec["draft_tokens"] += k
            self.spec["accepted"] += accepted
            for i in range(accepted):
                self.per_pos[i] += 1

    def render(self) -> str:
        """The /metrics body (Prometheus text format; served as version=1.0.0, as prometheus_client 0.26)."""
        out: list[str] = []
        b = self.base
        with self.lock:
            for name, help_ in (("vllm:num_requests_running", "Number of requests in model execution batches."),
                                ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
                                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")):
                out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{_labels(b)} {_fmt(self.gauges[name])}"]
            name = "vllm:num_requests_waiting_by_reason"
            out += [f"# HELP {name} Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
                    "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
                    "blocked status). Sum of all reasons equals vllm:num_requests_waiting.", f"# TYPE {name} gauge",
                    f"{name}{_labels({**b, 'reason': 'capacity'})} {_fmt(self.gauges['vllm:num_requests_waiting'])}",
                    f"{name}{_labels({**b, 'reason': 'deferred'})} 0.0"]
            name = "vllm:engine_sleep_state"
            out += [f"# HELP {name} Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
                    "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
                    f"# TYPE {name} gauge"]
            out += [f"{name}{_labels({**b, 'sleep_state': st})} {_fmt(v)}"
                    for st, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))]
            if self.cache_info:
                name = "vllm:cache_config_info"
                out += [f"# HELP {name} Information of the LLMEngine CacheConfig", f"# TYPE {name} gauge",
                        f"{name}{_labels({**self.cache_info, 'engine': '0'})} 1.0"]
            self._counter(out, "vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, "
                          "by reason.", [({"model_name": b["model_name"], "reason": r}, 0.0)
                                         for r in ("max_num_queued_reqs", "max_num_queued_tokens")])
            self._counter(out, "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                          [({**b, "source": k}, v) for k, v in self.prompt_by_source.items()])
            self._counter(out, "vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that "
                          "supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from "
                          "another vLLM instance) or external_unspecified. Counted at admission; sums to "
                          "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
                          [({**b, "source": k}, v) for k, v in self.cached_by_source.items()])
            for name, help_ in self.COUNTERS.items():
                self._counter(out, name, help_, [(b, self.counters[name])])
            self._counter(out, "vllm:request_success", "Count of successfully processed requests.",
                          [({**b, "finished_reason": r}, v) for r, v in self.success.items()])
            for name, h in self.hists.items():
                help_ = self.HISTS[name][0]
                out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
                for le, c in zip(h.buckets, h.counts):
                    out.append(f"{name}_bucket{_labels({**b, 'le': _fmt(le)})} {_fmt(c)}")
                out.append(f"{name}_bucket{_labels({**b, 'le': '+Inf'})} {_fmt(h.count)}")
                out.append(f"{name}_count{_labels(b)} {_fmt(h.count)}")
                out.append(f"{name}_sum{_labels(b)} {_fmt(h.sum)}")
                out += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge",
                        f"{name}_created{_labels(b)} {_fmt(h.created)}"]
            if self.spec_k:
                self._counter(out, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(b, self.spec["drafts"])])
                self._counter(out, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(b, self.spec["draft_tokens"])])
                self._counter(out, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(b, self.spec["accepted"])])
                self._counter(out, "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                              [({**b, "position": str(i)}, v) for i, v in enumerate(self.per_pos)])
        return "\n".join(out) + "\n"

    def _counter(self, out: list[str], name: str, help_: str, series: list[tuple[dict, float]]) -> None:
        out += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
        out += [f"{name}_total{_labels(lab)} {_fmt(v)}" for lab, v in series]
        out += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge"]
        out += [f"{name}_created{_labels(lab)} {_fmt(self.created)}" for lab, _v in series]
