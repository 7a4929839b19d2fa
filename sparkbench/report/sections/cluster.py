"""The cluster sections: each cluster variant against one unit
(:func:`sparkbench.report.compare.cluster_vs_unit`) and the clusters' manifest (nodes, placement
and link) as their result documents record it. Both are in ``results.json`` only for runs with a
cluster variant."""

from __future__ import annotations

from ...verdict import MIN_REQUESTS
from .. import compare
from .. import numbers as n
from ..compare import AT_8
from ..table import DASH, Section, Table, f, pct, sim, text, yesno
from .comparisons import describe_range
from .verdicts import drift_notes, missing_notes, unit_mark, verdict_cell


def cluster_sentence(s: dict) -> str:
    """One summary line for a cluster variant against one unit, e.g. "sim_pair (spark-sim11 +
    spark-sim12) · gpt-oss-120b: gptoss-tp2 (TP=2) vs gptoss-single on spark-sim11 — single-stream
    20.0 % faster: differs by +20.0 % [+17.9, +22.0]; at 8 parallel 46.0 % faster: differs by …"."""
    def part(row: dict, what: str) -> str:
        return f"{what} {describe_range(row['pct_diff'], row['pct_diff'], [])}: {row['verdict']['text']}"
    line = (f"{s['unit']} · {s['model_key']}: {s['variant']} ({s['parallel'] or 'one GPU per node'}) vs "
            f"{s['reference_variant']} on {s['reference_host']} — " + part(s["single"], "single-stream"))
    if s[AT_8]["pct_diff"] is not None:
        line += "; " + part(s[AT_8], "at 8 parallel")
    if s.get("unreliable"):
        line += f" (unreliable: drift — {s['unreliable']})"
    return sim(line, s["simulated"])


def cluster_vs_unit(results: list[dict], drift: dict | None = None) -> Section:
    """"Cluster vs one unit": the numbers, a summary sentence per cluster variant, and the table
    (none when no cluster variant has a one-unit reference). ``drift``: the head host's drift
    marks the rows (see :func:`sparkbench.report.compare.cluster_vs_unit`)."""
    data = compare.cluster_vs_unit(results, drift=drift)
    has_cluster = any(n.is_cluster(r) for r in results if isinstance(r, dict))
    if not data["rows"]:
        return Section("cluster_vs_unit", "Cluster vs one unit", data, in_doc=has_cluster)
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["unit"], row["variant"]), {})[row["metric"]] = row
    # Parallel levels neither side measured get no columns (single stream always has them).
    shown = [metric for metric in compare.METRICS if metric == "single" or any(
        metric in m and (m[metric].get("value") is not None or m[metric].get("reference_value") is not None)
        for m in by_key.values())]
    rows = []
    for (unit, variant), m in by_key.items():
        s = m["single"]
        cells = [unit_mark(unit, s["unreliable"]), text(s["model_key"]), f"{variant} ({s['parallel'] or '–'})",
                 f"{s['reference_variant']} on {s['reference_host']}" + ("" if s["flags_match"] else " (flags differ)"),
                 f(s["reference_value"]), f(s["value"])]
        for metric in shown:
            cells += [pct(m[metric]["pct_diff"]), verdict_cell(m[metric]["verdict"])]
        rows.append(cells)
    level_headers = []
    for metric in shown:
        label = "single" if metric == "single" else f"{metric.split('_')[1]} par"
        level_headers += [f"Δ {label}", f"{label} verdict"]
    notes = ["Δ = (cluster − one unit) / one unit; one unit = the same build's variant without tensor or pipeline "
             "parallelism measured on the cluster's head host (same flags apart from the parallel layout unless "
             "marked \"flags differ\")",
             "verdict: as in the head-to-head — single compares the single-stream runs, N par the N per-stream "
             f"decode rates, so below {MIN_REQUESTS} parallel there are too few requests for a verdict"]
    notes += missing_notes((title, [m[metric]["verdict"] for m in by_key.values()])
                           for metric, title in zip(shown, level_headers[1::2]))
    notes += drift_notes(m["single"]["unreliable"] for m in by_key.values())
    if data["unmatched"]:
        notes.append("no one-unit variant of the same build on the head to compare with: " + ", ".join(data["unmatched"]))
    table = Table("cluster-vs-unit", sim("Cluster vs one unit", data["simulated"]),
                  ["cluster", "model", "variant", "one unit", "one unit tok/s", "cluster tok/s"] + level_headers,
                  rows, notes)
    return Section("cluster_vs_unit", "Cluster vs one unit", data, [table],
                   [cluster_sentence(x) for x in data["summary"]], in_doc=has_cluster)


def _cluster_link(link: dict | None) -> tuple[str, str, str, str]:
    """(method, Gb/s, threshold, note) of a cluster's link test, "–" where not recorded."""
    link = link if isinstance(link, dict) else {}
    return (text(link.get("method")), f(n.num(link.get("gbps")), 2), f(n.num(link.get("threshold_gbps")), 0),
            text(link.get("note")))


def clusters(results: list[dict]) -> Section:
    """"Clusters": one entry per cluster variant, and the "Clusters: nodes" and "Clusters:
    placement and link" tables — the manifest of each cluster as its result documents record it
    (the ``cluster`` block): every node's host, role, registered address, Ray node id, image,
    image id, driver, alive, GPUs, interface, MTU and link speed (rows that read the same for
    several variants of a cluster are printed once, with those variants), then per variant the
    parallel layout, nodes alive, GPUs in use, the placement group, the worker actors' nodes,
    Ray's version and the link test (method, Gb/s, NVIDIA's warning threshold where judged, the
    note). Empty and out of ``results.json`` without clusters."""
    docs = [r for r in n.sort_results(results) if isinstance(r, dict) and n.is_cluster(r)]
    if not docs:
        return Section("clusters", "Clusters", [], in_doc=False)
    simulated = any(n.is_simulated(r) for r in docs)
    node_rows: dict[tuple, list[str]] = {}
    variant_rows, entries = [], []
    for r in docs:
        c = n.cluster_of(r) or {}
        unit, variant = n.unit_of(r), n.variant_name(r)
        for node in c.get("nodes") or []:
            if not isinstance(node, dict):
                continue
            speed = n.num(node.get("link_speed_mbps"))
            role = node.get("role") or ("head" if node.get("host") == (c.get("head") or n.host_of(r)) else "worker")
            cells = (unit, text(node.get("host")), text(role), text(node.get("address")),
                     text(node.get("node_id")), text(node.get("image")), text(node.get("image_id")),
                     text(node.get("driver")), yesno(node.get("alive")) if isinstance(node.get("alive"), bool) else DASH,
                     f(n.num(node.get("gpus")), 0), text(node.get("interface")), f(n.num(node.get("mtu")), 0),
                     f"{speed:.0f} Mb/s" if speed is not None else DASH)
            node_rows.setdefault(cells, []).append(variant)
        method, gbps, threshold, note = _cluster_link(c.get("link"))
        actors = c.get("worker_actor_node_ids")
        alive, total = n.num(c.get("nodes_alive")), len(c.get("nodes") or []) or len(n.cluster_members(r))
        variant_rows.append([unit, variant + (" (failed)" if r.get("status") == "failed" else ""),
                             text(n.parallel_label(r)), text(c.get("backend")), text(c.get("ray_version")),
                             f"{alive:.0f} of {total}" if alive is not None else DASH,
                             (f"{f(n.num(c.get('gpus_in_use')), 1)} / {f(n.num(c.get('gpus_total')), 1)}"
                              if c.get("gpus_in_use") is not None or c.get("gpus_total") is not None else DASH),
                             text(c.get("placement_group_id")),
                             ", ".join(str(a) for a in actors) if isinstance(actors, list) and actors else DASH,
                             method, gbps, threshold, note])
        entries.append({"unit": unit, "cluster": c.get("name"), "variant": variant, "head": n.host_of(r),
                        "members": n.cluster_members(r), "parallel": n.parallel_label(r),
                        "nodes_alive": c.get("nodes_alive"), "placement_group_id": c.get("placement_group_id"),
                        "worker_actor_node_ids": actors, "link": c.get("link"), "nodes": c.get("nodes")})
    nodes = Table("clusters", sim("Clusters: nodes", simulated),
                  ["cluster", "node", "role", "address", "Ray node id", "image", "image id", "driver", "alive", "GPUs",
                   "interface", "MTU", "link speed", "variants"],
                  [list(cells) + [", ".join(vs)] for cells, vs in node_rows.items()],
                  ["one cluster = one unit: the head (first host of its inventory group) serves the model, each node "
                   "is a Ray node with its GPU; address = the one Ray registered (VLLM_HOST_IP); image, image id and "
                   "driver must match on every node (preflight); link speed = ethtool on the chosen interface"])
    placement = Table("cluster-placement", sim("Clusters: placement and link", simulated),
                      ["cluster", "variant", "parallel", "backend", "Ray", "nodes alive", "GPUs in use / total",
                       "placement group", "worker actors on nodes", "link test", "link Gb/s", "threshold Gb/s",
                       "link note"], variant_rows,
                      ["read while the variant served (ray status and the Ray state API in the head's container): "
                       "one worker actor per placement-group bundle; link test = ib_write_bw between the nodes on a "
                       "real pair (NVIDIA's warning threshold 175 Gb/s), iperf3 over the container network on GPU-less "
                       "hosts, recorded and not judged (the note says which)"])
    return Section("clusters", "Clusters", entries, [nodes, placement])
