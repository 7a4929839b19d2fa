"""The units around the variant: a cluster variant's Ray cluster (``cluster``,
sparkbench.cluster.cluster_block) and what co-residence costs on a unit with residents
(``coresidence``, sparkbench.interference.coresidence.coresidence)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from .base import Above0, Block, Count, Int, NonNegative, Positive
from .figures import SingleMedian


# ------------------------------------------------------------------------------------------ cluster
class ClusterNode(Block):
    host: str
    role: Optional[str] = Field(None, description="head | worker")
    address: Optional[str] = Field(None, description="the address Ray registered (= VLLM_HOST_IP)")
    node_id: Optional[str] = Field(None, description="Ray node id (hex)")
    image: Optional[str] = None
    image_id: Optional[str] = None
    image_digest: Optional[str] = None
    driver: Optional[str] = None
    alive: Optional[bool] = None
    gpus: Optional[NonNegative] = None
    interface: Optional[str] = None
    mtu: Optional[NonNegative] = None
    link_speed_mbps: Optional[NonNegative] = None


class ClusterLink(Block):
    ("the link test between the nodes: ib_write_bw on a real pair, iperf3 over the container network on GPU-less "
     "hosts (note says which)")
    method: Optional[str] = None
    gbps: Optional[NonNegative] = None
    threshold_gbps: Optional[NonNegative] = None
    speed_mbps: Optional[NonNegative] = None
    note: Optional[str] = None


class Cluster(Block):
    ("a cluster variant (one model over several hosts, Ray; sparkbench.cluster.cluster_block): the result is "
     "written under the head host (host = head) and the reports treat the cluster as one unit, \"<name> (<head> + "
     "<worker>)\"")
    name: str = Field(description="the inventory group that declares the cluster (bench_cluster)")
    head: str = Field(description="the head host (the group's first host; = host)")
    members: list[str] = Field(min_length=1, description="member hosts in inventory order, head first")
    backend: Optional[str] = Field(None, description="distributed executor backend (ray)")
    ray_version: Optional[str] = None
    tensor_parallel_size: Optional[Positive] = None
    pipeline_parallel_size: Optional[Positive] = None
    nodes: list[ClusterNode] = None
    nodes_alive: Optional[Count] = None
    gpus_in_use: Optional[NonNegative] = None
    gpus_total: Optional[NonNegative] = None
    placement_group_id: Optional[str] = None
    worker_actor_node_ids: list[Optional[str]] = Field(
        None, description="the Ray node id of each vLLM worker actor (one per placement-group bundle)")
    link: Optional[ClusterLink] = None


# -------------------------------------------------------------------------------------- coresidence
class Resident(Block):
    name: Any
    variant: Any
    port: Any


class Verdict(Block):
    ("sparkbench.verdict.compare_samples against the variant alone (kind, pct, lo, hi, mdd_pct, text, ...)")
    kind: Any
    text: Any


class Condition(Block, SingleMedian):
    condition: Literal["alone", "idle", "load"]
    label: str
    requests: Count
    samples: list[float]
    verdict: Optional[Verdict]
    text: Optional[str] = Field(
        description="the verdict's words: differs by X % [lo, hi] | no difference detectable above Y % | not enough "
                    "requests for a verdict")
    error: Optional[str] = Field(description="why the condition has no figures")


class Load(Block):
    resident: str
    status: str
    requests: Int
    completed: Int
    achieved_rate: Optional[float] = None
    output_tok_s: Optional[float] = None
    stopped: Optional[str] = None
    error: Optional[str] = None


class Coresidence(Block):
    ("bench_interference (sparkbench.interference.coresidence.coresidence, its one owner): what co-residence costs this "
     "variant on a unit with residents. The document's own figures are the variant alone (the residents stopped "
     "for its measurement); here its single-stream requests beside the residents idle and under a steady "
     "background load against each resident's port, each with its verdict against alone in the Trust contract's "
     "words, and each load's own record")
    residents: list[Resident]
    load_rps: Above0 = Field(description="the background load's request rate against each resident (req/s)")
    runs: Positive
    conditions: list[Condition]
    load: list[Load]
