"""sparkbench's measurement: the source article's method against any OpenAI-compatible server.

A package of small modules, standard library only, relative imports only, Python >= 3.10. On a
unit it runs with the unit's own python3, isolated from the unit's environment: llm_bench builds
``measure.pyz`` on the controller (``sparkbench.measure_bundle``) and runs ``python3 -I measure.pyz``;
a copy of this directory alone runs as ``python3 -E -s -m measure`` from its parent. In the
checkout: ``python3 -m sparkbench.measure`` or ``scripts/measure.py``. It works by hand against
vLLM, the sparkbench simulator, SGLang, llama.cpp or any other OpenAI-compatible endpoint.

    python3 -m sparkbench.measure --base-url http://127.0.0.1:8000 --out result.json

The modules: ``options`` (the one option table), ``cli`` (parser and exit status), ``client``
(the request loops: bytes and their arrival times), ``sse`` (SSE parsed after the stream),
``decode_rate`` (one stream's decode rate and gaps), ``record`` (one record per request),
``stats`` and ``aggregate`` (pure figures over lists of records), ``session`` (probe, compatibility
level, errors, telemetry around phases), ``phases/`` (one module per phase, ``phases.PHASES`` the
registry), ``document`` (the measured block of the result), and the checks' helpers (``quality``,
``sandbox``, ``tool_judge``, ``telemetry``, ``conditions``, ``metrics``, ``prompts``, ``profiles``,
``workload``, ``bandwidth`` (a hand run's bandwidth probe and the drop arithmetic every probe
reading shares)); ``shapes`` declares ``JSON``, the chat requests and the document's blocks as
``TypedDict`` classes (a block built by one helper module is declared beside its code).

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

from .aggregate import (
    multi_turn_per_turn,
    parallel_entry,
    prefix_figures,
    prefix_hits,
    rate_figures,
    rate_row,
    summarise_single,
)
from .cli import build_parser, main
from .client import Endpoint, RawStream, post_json, stream_requests, stream_scheduled
from .common import (
    EXIT_COMPLETE,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_USAGE,
    SCHEMA_VERSION,
    SCRIPT_VERSION,
    Abort,
    Interrupted,
    Unreachable,
    clean_json,
    inf_str,
)
from .conditions import (
    OOM_RE,
    XID_RE,
    judge_clock,
    new_kernel_lines,
    protocol_flags,
    read_kernel_log,
    read_meminfo_fields,
    read_vmstat,
    swap_delta,
)
from .decode_rate import DecodeRate, decode_rate, itl_reason, itl_samples
from .document import write_out
from .metrics import (
    SpecCounters,
    parse_prometheus,
    prefix_cache_counters,
    spec_counters,
    spec_delta,
    sum_spec_deltas,
)
from .options import OPTIONS, SETTINGS, Option
from .phases import PHASES
from .phases.rate_search import (
    CONCURRENCY_SEARCH_MAX,
    CONCURRENCY_SEARCH_STEPS,
    RATE_SEARCH_STEPS,
    next_concurrency,
    next_rate,
)
from .prompts import SPEED_TAG_DIGITS, chat_body, speed_prompt
from .quality import check_quality, final_answer, load_quality, make_png, names_colour
from .record import RequestRecord, cached_tokens
from .sandbox import Sandbox
from .session import Session
from .sse import StreamResult, parse_sse
from .stats import (
    bootstrap_medians,
    count_waves,
    median,
    median_precision_pct,
    meets_slo,
    pcts,
    percentile,
    rate_schedule,
    request_tpot,
    stat4,
)
from .telemetry import (
    SMI_FIELDS,
    Telemetry,
    aggregate_clocks,
    aggregate_gpus,
    parse_nvidia_smi_csv,
    read_meminfo,
)
from .tool_judge import (
    TOOL_BUCKETS,
    TOOL_CATEGORIES,
    default_tools_file,
    judge_tool_calls,
    load_tools,
    prompt_tools,
    schema_errors,
    summarise_tools,
)

__all__ = [name for name in dir() if not name.startswith("_")]
