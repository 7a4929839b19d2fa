"""The shapes of a cluster's documents, as ``TypedDict`` classes: the spec (``cluster_spec``), the
figures of ``ray status`` (``parse_ray_status``), what the role's probes give (``ray_probe.py``'s
JSON, the node facts), the check's result (``check``) and the result document's ``cluster`` block
(``cluster_block``, validated there by ``sparkbench.documents.cluster.Cluster``).

What comes from the inventory (host variables, hardware profiles, a variant's args) or from a
YAML file is ``JSON`` (``sparkbench.measure.shapes``): its keys are read one by one, checked as
they are read. A class of ``total=False`` holds keys a document has only sometimes (the role's
facts may lack any key: the check judges what is there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypedDict, Union

from ..measure.shapes import JSON

#: An inventory host's variables as Ansible hands them to the filters (names as ``VARIABLES``).
HostVars = Mapping[str, JSON]
#: A value filled into a known issue's ``{match.X}`` (an address, a count, a state, ...).
MatchValue = Union[str, int, float, bool, None]


# ------------------------------------------------------------------------------------------ the spec
class NetworkSpec(TypedDict):
    """The spec's ``network``: the host network (the recipe) or a Docker bridge network; ``cluster_spec``."""

    mode: Literal["host", "bridge"]
    docker_network: str | None
    subnet: str | None


class LinkConfig(TypedDict):
    """The spec's ``link``: what the link between the nodes should reach; ``cluster_spec``."""

    expected_speed_mbps: int
    threshold_gbps: float


class ServeSpec(TypedDict):
    """The spec's ``serve``: where the cluster's ``vllm serve`` listens (in the head's container)
    and answers (on the head host); ``cluster_spec``."""

    container: str
    host: str
    port: int
    base_url: str
    listen_host: str
    listen_port: int


class _SpecNodeBase(TypedDict):
    host: str
    role: Literal["head", "worker"]
    container: str
    image: str
    interface: str
    address: str | None
    join_address: str | None
    num_gpus: int
    num_cpus: int | None
    object_store_bytes: int | None
    gpus: bool
    shm_size: str
    caches: dict[str, str]
    volumes: list[str]
    hostname: str | None
    labels: dict[str, str]
    published_ports: list[str]
    ipv4_address: str | None


class SpecNode(_SpecNodeBase, total=False):
    """One node of the spec: its container, address and ``ray start`` command line; ``cluster_spec._node``,
    completed by ``cluster_spec`` / ``with_addresses`` (``env``, ``command``, ``entrypoint``: None
    until every address is known; ``_host_env``: its ``vllm_server_env`` until then)."""

    env: dict[str, str] | None
    command: list[str] | None
    entrypoint: list[str] | None
    _host_env: dict[str, str]


class ClusterSpec(TypedDict):
    """The cluster of one inventory group: every node's container, environment and ``ray start``
    (NVIDIA's recipe); ``cluster_spec``, completed by ``with_addresses`` and ``with_homes``."""

    name: str
    head: str
    members: list[str]
    ray_port: int
    head_address: str | None
    network: NetworkSpec
    join_timeout_s: int
    probe: Literal["container", "host"]
    link: LinkConfig
    nodes: list[SpecNode]
    serve: ServeSpec
    resolved: bool
    unresolved_caches: str


class RestartPlan(TypedDict):
    """Whether ``start`` restarts the cluster as a whole (hosts up and down); ``restart_plan``."""

    restart: bool
    running: list[str]
    down: list[str]
    reason: str | None


# ------------------------------------------------------------------------------------ ray status
class _UsageBase(TypedDict):
    used: float | str
    total: float | str


class ResourceUsage(_UsageBase, total=False):
    """One resource line of ``ray status`` (``0.0/2.0 GPU``; with units, ``1.5GiB``, as text);
    ``ray_status._usage``."""

    note: str


class _RayNodeBase(TypedDict):
    name: str | None
    usage: dict[str, ResourceUsage]
    gpus_used: float | str | None
    gpus_total: float | str | None
    cpus_used: float | str | None
    cpus_total: float | str | None


class RayNodeUsage(_RayNodeBase, total=False):
    """One node's block of ``ray status -v`` (``instance_id`` with the v2 autoscaler); ``ray_status._per_node``."""

    instance_id: str


class RayStatus(TypedDict):
    """``ray status`` [``-v``] as figures (``format`` None when the text is not ``ray status``
    output, ``answer`` then what it said); ``parse_ray_status``."""

    format: Literal["2.x-active", "legacy-healthy"] | None
    nodes_active: int
    node_ids: list[str]
    node_types: list[str]
    gpus_used: float | str | None
    gpus_total: float | str | None
    cpus_used: float | str | None
    cpus_total: float | str | None
    pending_nodes: list[str]
    failures: list[str]
    pending_demands: list[str]
    resources: dict[str, ResourceUsage]
    per_node: dict[str, RayNodeUsage]
    answer: str | None


# ------------------------------------------------------------------------- the role's probes
class RayProbeNode(TypedDict, total=False):
    """One node as Ray knows it (``roles/ray_cluster/files/ray_probe.py``: ``ray.nodes()``)."""

    node_id: str | None
    address: str | None
    hostname: str | None
    alive: bool
    gpus: float
    cpus: float


class PlacementGroup(TypedDict, total=False):
    """One placement group (``ray_probe.py``: ``placement_group_table``); ``bundles`` the resources of each."""

    id: str
    name: str
    state: str | None
    strategy: str | None
    bundles: list[dict[str, float]]
    bundles_to_node_id: dict[str, str]


#: One actor (``ray_probe.py``: ``list_actors``, else the GCS table); ``class`` is its class name.
RayActor = TypedDict("RayActor", {"id": Union[str, None], "class": Union[str, None], "name": str,
                                  "node_id": Union[str, None], "state": Union[str, None],
                                  "pid": Union[int, None]}, total=False)


class RayProbe(TypedDict, total=False):
    """The JSON ``roles/ray_cluster/files/ray_probe.py`` prints: Ray's nodes, placement groups and
    actors (a serving snapshot when the model runs), with what failed to answer."""

    ray_version: str | None
    nodes: list[RayProbeNode]
    placement_groups: list[PlacementGroup]
    actors: list[RayActor]
    actors_source: str | None
    errors: list[str]


class InterfaceFacts(TypedDict, total=False):
    """A node's cluster interface: ``parse_node_probe``."""

    name: str
    up: bool
    operstate: str | None
    ipv4: str | None
    prefixlen: int | None
    mtu: int | None


class ContainerFacts(TypedDict, total=False):
    """A node's Ray container (the filter ``ray_cluster_node_facts``: docker_container_info, docker logs)."""

    exists: bool
    running: bool
    status: str | None
    exit_code: int | None
    log_tail: str


class LinkMeasurement(TypedDict):
    """A bandwidth test between the nodes; ``parse_iperf3``, ``parse_ib_write_bw``."""

    method: str
    gbps: float | None
    note: str


class NodeFacts(TypedDict, total=False):
    """What the role found on one node, the check's ``node_facts[host]``: ``parse_node_probe``
    (hostname, driver, interface, other_ipv4, link_speed_mbps, tools), the container's state, the
    image, the model revisions, the link test (``bandwidth``); any key may be missing."""

    hostname: str | None
    driver: str | None
    interface: InterfaceFacts
    other_ipv4: list[str]
    link_speed_mbps: int | None
    tools: dict[str, bool]
    container: ContainerFacts
    image_id: str | None
    image_digest: str | None
    model_revisions: dict[str, str | None]
    bandwidth: LinkMeasurement


# --------------------------------------------------------------------- the check and the block
class Failure(TypedDict):
    """One failure of the cluster check: a known issue's id, reason and remedy; ``soundness._Failures``."""

    id: str
    host: str | None
    reason: str
    remedy: str


class ClusterLink(TypedDict):
    """The link between the nodes: the bandwidth measured (``method``, ``gbps``), the threshold,
    the lowest ethtool speed; the result's ``cluster.link`` (``cluster_block``)."""

    method: str | None
    gbps: float | None
    threshold_gbps: float
    speed_mbps: int | None
    note: str | None


class LinkSummary(ClusterLink):
    """The link figures with the speed the link should have; ``node_facts.link_summary``."""

    expected_speed_mbps: int


class ClusterNode(TypedDict):
    """The result's ``cluster.nodes[]``: one node as it served; ``block._block_nodes``."""

    host: str
    role: str
    address: str | None
    node_id: str | None
    image: str | None
    image_id: str | None
    driver: str | None
    alive: bool
    gpus: float | None
    interface: str | None
    mtu: int | None
    link_speed_mbps: int | None


class CheckedNode(ClusterNode):
    """One node as the check saw it: its Ray registration and its facts; ``soundness._node_rows``."""

    registered_address: str | None
    image_digest: str | None


class CheckResult(TypedDict):
    """Is the cluster sound before a model loads; ``check``."""

    ok: bool
    failures: list[Failure]
    nodes: list[CheckedNode]
    nodes_alive: int
    nodes_total: int
    link: LinkSummary


class ClusterBlock(TypedDict):
    """The result document's ``cluster``: the cluster as it served a variant; ``cluster_block``."""

    name: str | None
    head: str | None
    members: list[str]
    backend: str
    ray_version: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    nodes: list[ClusterNode]
    nodes_alive: int
    gpus_in_use: float | str | None
    gpus_total: float | str | None
    placement_group_id: str | None
    worker_actor_node_ids: list[str | None]
    link: ClusterLink
