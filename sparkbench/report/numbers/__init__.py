"""The report's numbers per result: accessors, the roofline, the per-host rows (pure, no I/O).

One result document = ``results/<run-id>/<host>/<variant>.json`` (``schema/result.schema.json``).
Every function takes already-loaded documents and returns plain lists/dicts of numbers; the text
is made in :mod:`sparkbench.report.sections` and :mod:`sparkbench.report.terminal`. A missing
figure is ``None`` (shown as "–"), never an invented number. Every other part of the report (the
comparisons, the charts, the manifest, the terminal table) reads results through these accessors.


Modules: :mod:`.accessors` (who, which variant, what it recorded; the matrix order),
:mod:`.roofline` (the one formula below), :mod:`.rows` (the per-host rows), :mod:`.serving` (the
arrival-rate, prefix-cache, multi-turn and tool-call phases). Every public name is importable
from this package (``from sparkbench.report import numbers as n``; ``n.roofline(result)``).

Formulas (units in the names):

- single-stream decode tok/s: ``SINGLE_DECODE`` (``sparkbench.measure.figures``: where measure
  writes it, its range, unit, header and direction; the median of the runs, decode excludes TTFT).
- speedup vs bare (×) = single median of the variant / single median of the same host's variant
  with the same ``build`` and ``model`` whose ``config`` is ``bare``.
- combined tok/s at N = ``COMBINED`` at concurrency N (``sparkbench.measure.figures``).
- mean acceptance length (tokens per verify step) = ``spec_decode.mean_acceptance_length``, else
  1 + Σ acceptance per position.
- roofline (the one formula): bytes per token = active params × bits per weight / 8 + KV-cache
  bytes read at the measured context (KV bytes per context token × (prompt tokens + output
  tokens / 2); 0 and "weights only" when the model profile has no KV geometry); roofline tok/s =
  bandwidth (GB/s × 1e9) / bytes per token. Bare runs report measured / roofline × 100 (%); MTP
  runs report tokens per step instead, since several tokens per weight pass can exceed the
  one-token roofline. No roofline (``skipped`` says why) when the hardware profile is a CPU host
  (``"roofline": false`` or ``"device": "cpu"``, e.g. ``x86-cpu``) or when the figures were
  measured on a CPU (``manifest.backend`` ``vllm-cpu``, or a ``manifest.gpu`` of ``none …``) but
  the profile describes a GPU: a Spark's bandwidth bound says nothing about them.
- a cluster variant (a result with a top-level ``cluster`` block, written under the head host):
  one unit, ``unit_of`` = ``"<cluster name> (<head> + <worker>)"``, its layout ``TP=2`` / ``PP=2``
  from ``cluster.tensor_parallel_size`` / ``pipeline_parallel_size`` (else the launch flags); its
  rows carry ``unit``, ``cluster``, ``members``, ``parallel`` (one-unit rows have none of these keys). Its
  roofline with TP > 1 is TP × one node's (each node reads 1/TP of the bytes per token).
- matrix order (report order, and the reference build = the first build listed): by
  ``variant.index`` (the matrix position the variant expansion records), else by ``started_at``
  (a host measures its variants in matrix order), then by name.
"""

from __future__ import annotations

from .accessors import (
    CONCURRENCIES,
    QUALITY_IDS,
    acceptance,
    build_of,
    build_order,
    cluster_members,
    cluster_of,
    combined_at,
    config_of,
    dig,
    host_of,
    is_bare,
    is_cluster,
    is_measured,
    is_simulated,
    is_speculative,
    launch_arg,
    launch_flags,
    matrix_position,
    mean_acceptance_length,
    model_key,
    model_of,
    num,
    parallel_label,
    parallel_sizes,
    single_stats,
    sort_results,
    unit_fields,
    unit_of,
    variant_name,
    variant_of,
)
from .roofline import (
    KV_DTYPE_BITS,
    QUANT_BITS,
    backend_of,
    kv_bytes_per_context_token,
    measured_bandwidth,
    measured_on_cpu,
    measured_roofline,
    roofline,
    roofline_skip_reason,
    weight_bits,
)
from .rows import (
    failure_rows,
    image_rows,
    protocol_flags,
    protocol_rows,
    quality_rows,
    report_tables,
    telemetry_phases,
    telemetry_rows,
    variant_row,
)
from .serving import (
    SLO_TARGET_SHARE,
    good_flags,
    highest_rate_meeting_slo,
    multi_turn_change,
    multi_turn_of,
    multi_turn_rows,
    prefix_cache_of,
    prefix_caching_on,
    prefix_row,
    rates_of,
    serving_fields,
    tools_of,
    tools_summary,
    warm_ttfts,
)

__all__ = [
    # accessors
    "CONCURRENCIES", "QUALITY_IDS", "acceptance", "build_of", "build_order", "cluster_members", "cluster_of",
    "combined_at", "config_of", "dig", "host_of", "is_bare", "is_cluster", "is_measured", "is_simulated",
    "is_speculative", "launch_arg", "launch_flags", "matrix_position", "mean_acceptance_length", "model_key",
    "model_of", "num", "parallel_label", "parallel_sizes", "single_stats", "sort_results", "unit_fields", "unit_of",
    "variant_name", "variant_of",
    # roofline
    "KV_DTYPE_BITS", "QUANT_BITS", "backend_of", "kv_bytes_per_context_token", "measured_bandwidth", "measured_on_cpu",
    "measured_roofline", "roofline", "roofline_skip_reason", "weight_bits",
    # per-host rows
    "failure_rows", "image_rows", "protocol_flags", "protocol_rows", "quality_rows", "report_tables",
    "telemetry_phases", "telemetry_rows", "variant_row",
    # serving phases
    "SLO_TARGET_SHARE", "good_flags", "highest_rate_meeting_slo", "multi_turn_change", "multi_turn_of",
    "multi_turn_rows", "prefix_cache_of", "prefix_caching_on", "prefix_row", "rates_of", "serving_fields",
    "tools_of", "tools_summary", "warm_ttfts",
]
