"""Each cluster variant against the same build's one-unit variant on its head host (pure, no I/O);
see :mod:`sparkbench.report.compare`."""

from __future__ import annotations

from .. import numbers as n
from .pairs import AT_8, METRICS, compare_pair, unreliable

#: launch flags that only lay the model out over devices: a cluster variant and its one-unit
#: reference may differ in these and still be "the same model and settings"
PARALLEL_FLAGS: tuple[str, ...] = ("tensor-parallel-size", "pipeline-parallel-size", "distributed-executor-backend",
                                   "data-parallel-size")


def _flags_but_parallel(result: dict) -> dict | None:
    """The variant's flag mapping without :data:`PARALLEL_FLAGS` (None when ``variant.args`` is
    not a mapping)."""
    args = n.variant_of(result).get("args")
    if not isinstance(args, dict):
        return None
    return {str(k).lstrip("-").replace("_", "-"): v for k, v in args.items()
            if str(k).lstrip("-").replace("_", "-") not in PARALLEL_FLAGS}


def one_unit_reference(cluster_result: dict, results: list[dict]) -> tuple[dict | None, bool]:
    """(the one-unit variant a cluster variant is compared with, whether its flags equal the
    cluster's apart from the parallel layout). Candidates: measured results on the cluster's head
    host (``cluster.head``, else ``host``) without a cluster block, with the same ``variant.build``
    and model, whose tensor and pipeline parallel sizes are both 1; the first in matrix order whose
    flags match (:data:`PARALLEL_FLAGS` left out), else the first in matrix order."""
    head = str((n.cluster_of(cluster_result) or {}).get("head") or n.host_of(cluster_result))
    candidates = [r for r in n.sort_results(results) if isinstance(r, dict) and not n.is_cluster(r)
                  and n.is_measured(r) and n.host_of(r) == head and n.build_of(r) == n.build_of(cluster_result)
                  and n.model_of(r) == n.model_of(cluster_result) and n.parallel_sizes(r) == (1, 1)]
    if not candidates:
        return None, False
    want = _flags_but_parallel(cluster_result)
    for r in candidates:
        if want is not None and _flags_but_parallel(r) == want:
            return r, True
    return candidates[0], False


def cluster_vs_unit(results: list[dict], drift: dict | None = None) -> dict:
    """Each measured cluster variant (TP=2, PP=2, …) against the same build's one-unit variant on
    its head host (:func:`one_unit_reference`): % difference = (cluster − one unit) / one unit ×
    100 for the single-stream median and the combined throughput at 2/4/8 parallel, each with
    its verdict (:func:`verdict_of`: single = the two variants' single-stream requests, N par =
    the N per-stream decode rates of each side).

    Returns ``{"rows": [...], "summary": [...], "unmatched": [...], "simulated"}``. Each row:
    unit (``"sim_pair (spark-sim11 + spark-sim12)"``), cluster, head, members, parallel
    (``TP=2``), tensor_parallel_size, pipeline_parallel_size, build, model_key, variant,
    reference_host, reference_variant, flags_match, metric, reference_value, value, pct_diff,
    verdict, unreliable (the head's drift text or None), simulated. ``summary``: per cluster
    variant, its single and 8-parallel rows. ``unmatched``: cluster variants without a one-unit
    variant of their build measured on the head (``unit/variant``)."""
    docs = [r for r in results if isinstance(r, dict)]
    rows: list[dict] = []
    summary: list[dict] = []
    unmatched: list[str] = []
    for c in n.sort_results(r for r in docs if n.is_cluster(r) and n.is_measured(r)):
        ref, match = one_unit_reference(c, docs)
        if ref is None:
            unmatched.append(f"{n.unit_of(c)}/{n.variant_name(c)}")
            continue
        tp, pp = n.parallel_sizes(c)
        block = n.cluster_of(c) or {}
        common = {"unit": n.unit_of(c), "cluster": block.get("name"), "head": n.host_of(c),
                  "members": n.cluster_members(c), "parallel": n.parallel_label(c),
                  "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "build": n.build_of(c),
                  "model_key": n.model_key(c), "variant": n.variant_name(c), "reference_host": n.host_of(ref),
                  "reference_variant": n.variant_name(ref), "flags_match": match,
                  "unreliable": unreliable(n.host_of(ref), drift),
                  "simulated": n.is_simulated(c) or n.is_simulated(ref)}
        by_metric = {}
        for metric in METRICS:
            row = compare_pair(ref, c, metric)
            row.update(common)
            rows.append(row)
            by_metric[metric] = row
        summary.append({**common, "single": by_metric["single"], AT_8: by_metric[AT_8]})
    return {"rows": rows, "summary": summary, "unmatched": unmatched, "simulated": any(r["simulated"] for r in rows)}
