"""The report's comparisons (pure, no I/O): builds head to head, hosts across the fleet, and a run
against a baseline run with the version bridge verdict. Results are read through
:mod:`sparkbench.report.numbers` only.

Modules: :mod:`.pairs` (one comparison: % difference, verdict, drift mark), :mod:`.answer` (the
winners), :mod:`.head_to_head`, :mod:`.configs` (configurations of a one-build model),
:mod:`.cluster` (cluster vs one unit), :mod:`.fleet`, :mod:`.runs` (run to run and the version
bridge), :mod:`.serving` (variants compared on the serving phases). Every public name is
importable from this package (``from sparkbench.report import compare``).

Answer
    Per host and model (the model key; a cluster variant counts under its head host): the
    variant with the highest single-stream median and the one with the highest combined
    throughput at 8 parallel, each against the runner-up (the next highest of that model on
    that host): lead = (winner − runner-up) / runner-up × 100, verdict of the winner's requests
    against the runner-up's (:func:`verdict_of`). Ties go to the first in matrix order.

Head-to-head
    Pairs results on the same host whose model is the same apart from its publisher
    (:func:`~sparkbench.report.numbers.model_key`) and whose ``config`` is the same, and compares
    every build with the reference build: % difference = (build − reference) / reference × 100,
    for the single-stream median and the combined throughput at 2/4/8 parallel. The reference
    build is the first build listed in the matrix (:func:`~sparkbench.report.numbers.build_order`),
    unless ``reference_build`` names another. A cluster result is paired on its unit
    (:func:`~sparkbench.report.numbers.unit_of`), not on its head host. Every row carries a ``verdict``
    (:func:`sparkbench.verdict.compare_samples`): single stream compares the two variants'
    per-request decode rates (``single.runs[]``); combined at N — measured once per concurrency —
    compares the N per-stream decode rates that make it up (``parallel[].per_stream``), so at 2
    and 4 parallel there are too few streams for a verdict.

Configurations
    Where a model has a single build on a host (one-unit results), the head-to-head pairs
    nothing; each configuration is then compared with the first configuration in matrix order
    (the source article's MTP against bare; fp32 against bf16 on the CPU matrix): % difference =
    (configuration − first) / first × 100, single stream and combined at 2/4/8 parallel, each with
    its verdict as in the head-to-head.

Cluster vs one unit
    A cluster variant (a result with a ``cluster`` block: one model over several hosts, written
    under the head host) is one unit, ``"<name> (<head> + <worker>)"``. Each is compared with the
    same build's one-unit variant on its head host (same ``variant.build`` and model, tensor and
    pipeline parallel size 1; the one whose other flags match, else the first in matrix order):
    % difference = (cluster − one unit) / one unit × 100, single stream and combined at 2/4/8
    parallel, each with its verdict as in the head-to-head. Clusters are never in the fleet.

Fleet
    one-unit results only (a cluster is not a peer of one Spark). matrix cell = single-stream
    median of that host × variant; fleet median of a variant = median of its cells; deviation
    (%) = (cell − fleet median) / fleet median × 100; a host's deviation = the median of its
    cells' deviations. Flagged: host deviation < −threshold (default 5 %), only
    with at least 3 measuring hosts (with two the median is their mean). Each cell carries a
    verdict: the host's single-stream requests against the pooled requests of its peers (the other
    hosts within ±threshold of the fleet median, all other hosts when none is). Differing fields: per
    variant, the majority value of each manifest field over the hosts; the SM clock (telemetry
    median) when it is more than the threshold below the fleet's.

Run to run
    Pairs by host and variant name (by variant name alone when each run has one host and the names
    differ); Δ% = (current − baseline) / baseline × 100 for single and combined at 8. Version
    bridge: the pairs whose vLLM version differs (or ``bridge_variants``); the runs are
    *comparable* when every bridge pair's single-stream verdict (``tolerance_pct`` =
    ``threshold_pct``, default 2.5 %, the source article's tolerance) either finds no detectable
    difference or puts the whole 95 % interval within ±tolerance. Pairs without per-request data
    (results that hold only medians, e.g. the source article's published figures: 27B 12.13 → 12.43
    bare = +2.5 %, 29.38 → 28.91 MTP = −1.6 %) read "not enough requests for a verdict"; when no pair has a
    verdict the bridge falls back to the medians: comparable when every |Δ%| ≤ ``threshold_pct``.

Drift
    ``drift`` (``{host: {"unreliable": bool, "text": str, …}}``, from
    :mod:`sparkbench.report.drift`) marks every comparison of a host whose reference variant
    drifted beyond the noise: the row's ``unreliable`` holds the drift text (None otherwise).
"""

from __future__ import annotations

from .answer import ANSWER_METRICS, answer, winner
from .cluster import PARALLEL_FLAGS, cluster_vs_unit, one_unit_reference
from .configs import config_compare
from .fleet import MANIFEST_FIELDS, MIN_HOSTS_TO_FLAG, fleet_compare, host_clock
from .head_to_head import head_to_head, summarize
from .pairs import AT_8, METRICS, compare_pair, metric_value, parse_threshold, pct_diff, remedy, unreliable, verdict_of
from .runs import pair_ok, pair_results, run_compare, vllm_version
from .serving import goodput_verdicts, prefix_pairs, reference_variants, tool_verdicts

__all__ = ["AT_8", "ANSWER_METRICS", "answer", "winner", "config_compare",
           "PARALLEL_FLAGS", "cluster_vs_unit", "one_unit_reference",
           "MANIFEST_FIELDS", "MIN_HOSTS_TO_FLAG", "fleet_compare", "host_clock",
           "head_to_head", "summarize",
           "METRICS", "compare_pair", "metric_value", "parse_threshold", "pct_diff", "remedy", "unreliable",
           "verdict_of",
           "pair_ok", "pair_results", "run_compare", "vllm_version",
           "goodput_verdicts", "prefix_pairs", "reference_variants", "tool_verdicts"]
