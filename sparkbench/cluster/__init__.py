"""A Ray cluster of Sparks: its spec, its ``ray status``, its check and its block in a result.

Pure Python (no Ansible import; the known issues are read with ``sparkbench.preflight``). Used by
the plan (``cluster_spec``, ``is_cluster_variant``), the ``ray_cluster`` role (through the
filters ``ray_cluster_spec``, ``ray_status_parse``, ``ray_cluster_check``,
``ray_cluster_with_addresses``) and the result (``cluster_block``). Facts with sources:
``shared/reference/multispark.md``. One module per concern, every name importable from here:

* ``cluster_spec``: ``world_size(args) -> (tp, pp)``; world = TP × PP GPUs (vLLM places one worker per GPU).
  ``is_cluster_variant(args, gpus_per_node)``: TP × PP > GPUs of one node (``gpus_per_node`` of
  the hardware profile, default ``GPUS_PER_NODE`` = 1: a Spark has one GB10).
  ``cluster_spec(name, members)``: the inventory group's hosts (head first) and their variables
  (``VARIABLES``) → every node's container, environment (NVIDIA's recipe, reference §4) and
  ``ray start`` command line; bad input raises ``InputError`` naming the variable and the fix.
  ``with_addresses(spec, addresses)``: a host-network spec whose addresses were left to a probe
  of the interface (``ray_cluster_node_ip`` empty) completed with the probed IPv4s.
  ``with_homes(spec, homes)``: every node's cache folders (``sparkbench.launch.UNIT_CACHES``)
  below its own unit's home once read (``<unit home>`` before; start refuses those).
  ``restart_plan(nodes, running)``: whether ``start`` restarts the cluster as a whole.
* ``ray_status``: ``parse_ray_status(text)``: ``ray status`` [``-v``] in both formats (reference §8).
* ``node_facts``: the role's probes (``parse_node_probe``, ``parse_iperf3``, ``parse_ib_write_bw``)
  and ``link_summary``.
* ``soundness``: ``check(spec, status, probe, node_facts)``: ``{ok, failures: [{id, host, reason,
  remedy}], nodes, link}``, reasons and remedies from ``sparkbench/data/known_issues.yml``
  (entries with ``cluster_check: true``); ``failure_message``.
* ``result_block``: ``cluster_block(...)``: the result document's ``cluster`` object.
* ``shapes``: the ``TypedDict`` classes of the spec, ``ray status``, the role's probes and facts,
  the check's result and the ``cluster`` block.
"""

from .cluster_spec import (
    CONTAINER_SERVE_PORT,
    EXPECTED_SPEED_MBPS,
    GPU_LESS_SHM_SIZE,
    GPUS_PER_NODE,
    LINK_THRESHOLD_GBPS,
    RAY_PORT,
    RECIPE_SHM_SIZE,
    VARIABLES,
    cluster_spec,
    gpus_per_node,
    is_cluster_variant,
    restart_plan,
    with_addresses,
    with_homes,
    world_size,
)
from .node_facts import link_summary, parse_ib_write_bw, parse_iperf3, parse_node_probe
from .ray_status import last_line, parse_ray_status
from .result_block import VLLM_WORKER_CLASS, cluster_block
from .soundness import check, failure_message

__all__ = [
    "CONTAINER_SERVE_PORT", "EXPECTED_SPEED_MBPS", "GPUS_PER_NODE", "GPU_LESS_SHM_SIZE", "LINK_THRESHOLD_GBPS",
    "RAY_PORT", "RECIPE_SHM_SIZE", "VARIABLES", "VLLM_WORKER_CLASS",
    "check", "cluster_block", "cluster_spec", "failure_message", "gpus_per_node", "is_cluster_variant",
    "link_summary", "parse_ib_write_bw", "parse_iperf3", "parse_node_probe", "parse_ray_status", "last_line", "restart_plan",
    "with_addresses", "with_homes", "world_size",
]
