"""The result document's ``cluster`` object: the cluster as it served a variant."""

from __future__ import annotations

from collections.abc import Sequence

from .node_facts import link_summary
from .shapes import (
    CheckResult,
    ClusterBlock,
    ClusterNode,
    ClusterSpec,
    RayActor,
    RayProbe,
    RayProbeNode,
    RayStatus,
    SpecNode,
)

#: vLLM's Ray worker actor class (vllm/v1/executor/ray_utils.py); other alive actors are kept
#: only when no actor of this class is there (the simulator names its own).
VLLM_WORKER_CLASS = "RayWorkerWrapper"


def _serving_node(n: SpecNode, probe: RayProbe, worker_nodes: set[str | None]) -> RayProbeNode | None:
    """The node Ray knows at this host's address in the snapshot: the one holding a worker actor,
    else an alive one (None when there is none). A node restarted after a loss registers anew, and
    its old entry can still read alive for a while: the check may have matched that one."""
    same = [r for r in probe.get("nodes") or [] if n.get("address") and r.get("address") == n.get("address")]
    return (next((r for r in same if r.get("node_id") in worker_nodes), None)
            or next((r for r in same if r.get("alive")), None))


def _block_nodes(spec: ClusterSpec, check_result: CheckResult, probe: RayProbe,
                 workers: Sequence[RayActor]) -> list[ClusterNode]:
    """Per node of the spec: the check's facts, with the node id and liveness of the snapshot."""
    by_host = {n["host"]: n for n in check_result.get("nodes") or []}
    by_id = {n.get("node_id"): n for n in probe.get("nodes") or []}
    worker_nodes = {a.get("node_id") for a in workers}
    nodes: list[ClusterNode] = []
    for n in spec.get("nodes") or []:
        c = by_host.get(n["host"], {})
        current = _serving_node(n, probe, worker_nodes)
        if current is not None:
            c = {**c, "node_id": current.get("node_id")}
        r = by_id.get(c.get("node_id")) or {}
        nodes.append({"host": n["host"], "role": n["role"], "address": n.get("address"), "node_id": c.get("node_id"),
                      "image": n.get("image"), "image_id": c.get("image_id"), "driver": c.get("driver"),
                      "alive": bool(r.get("alive", c.get("alive", False))), "gpus": r.get("gpus", c.get("gpus")),
                      "interface": n.get("interface"), "mtu": c.get("mtu"),
                      "link_speed_mbps": c.get("link_speed_mbps")})
    return nodes


def cluster_block(spec: ClusterSpec, check_result: CheckResult | None, probe: RayProbe | None,
                  serving_status: RayStatus | None = None, *, tensor_parallel_size: int = 1,
                  pipeline_parallel_size: int = 1) -> ClusterBlock:
    """The result document's ``cluster`` object (tp/pp from the caller: ``world_size``).

    ``probe`` should be the serving snapshot (``tasks_from: check`` with ``ray_cluster_check_serving``):
    its placement group of TP × PP bundles (else the first CREATED one) and the alive worker actors
    (vLLM's ``RayWorkerWrapper``; else every alive actor). ``serving_status`` = parsed ``ray status``
    while serving: ``gpus_in_use`` (2.0 of 2.0 on a serving pair).
    """
    check_result = check_result or {}
    probe = probe or {}
    world = int(tensor_parallel_size) * int(pipeline_parallel_size)
    pgs = [p for p in probe.get("placement_groups") or [] if str(p.get("state")) == "CREATED"]
    pg = next((p for p in pgs if len(p.get("bundles") or []) == world), pgs[0] if pgs else None)
    actors = [a for a in probe.get("actors") or [] if str(a.get("state")) == "ALIVE"]
    workers = [a for a in actors if VLLM_WORKER_CLASS in str(a.get("class") or "")] or actors
    nodes = _block_nodes(spec, check_result, probe, workers)
    status = serving_status or {}
    link = dict(check_result.get("link") or link_summary(spec, {}))
    link.pop("expected_speed_mbps", None)
    return {
        "name": spec.get("name"), "head": spec.get("head"), "members": list(spec.get("members") or []),
        "backend": "ray", "ray_version": probe.get("ray_version"),
        "tensor_parallel_size": int(tensor_parallel_size), "pipeline_parallel_size": int(pipeline_parallel_size),
        "nodes": nodes, "nodes_alive": sum(1 for n in nodes if n["alive"]),
        "gpus_in_use": status.get("gpus_used"), "gpus_total": status.get("gpus_total",
                                                                         sum(float(n.get("gpus") or 0) for n in nodes) or None),
        "placement_group_id": (pg or {}).get("id"),
        "worker_actor_node_ids": [a.get("node_id") for a in workers],
        "link": link,
    }
