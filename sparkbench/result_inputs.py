"""What the controller hands :mod:`sparkbench.result` and what it gives back, as ``TypedDict``
classes: the host's variables and the provisioning facts taken from them, the roles' registered
results a variant's document is built from (the server's wait, its diagnosis, the Ray cluster's
check, the co-resident measurements) and the records ``record`` and ``write_after_probe`` return.

The stored document's own shapes are in :mod:`sparkbench.result_shapes`. What Ansible hands over
is not validated here: a class of ``total=False`` names the keys the code reads, each of which may
be missing (the code says what it does without one).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from .cluster.shapes import CheckResult
from .plan_types import HardwareProfile

if TYPE_CHECKING:
    from .cluster.shapes import ClusterSpec, RayProbe, RayStatus
    from .host_failure import TaskResult
    from .measure.bandwidth import BandwidthReading
    from .result_shapes import FailureBlock


# ------------------------------------------------------------------------------ the host's facts
class GpuFacts(TypedDict, total=False):
    """``spark_host_gpu`` (roles/spark_host/tasks/gpu.yml): the unit's GPU, driver, CUDA, OS, Docker."""

    name: str
    driver: str
    cuda: str
    docker_version: str
    os: str
    kernel: str
    hostname: str


class ImageFacts(TypedDict, total=False):
    """One image of ``spark_host_image_facts`` (roles/spark_host/tasks/images.yml): its id and digest
    (both set there, either may be null)."""

    id: str | None
    digest: str | None


class ResultVariables(TypedDict, total=False):
    """The host variables the ``sparkbench_result`` action reads (its ``VARIABLE_NAMES``), as the
    inventory and the earlier tasks set them (``-e`` gives text)."""

    spark_host_gpu: GpuFacts
    spark_host_image_facts: dict[str, ImageFacts]
    sparkbench_gpu_less: bool | str
    sparkbench_simulated: bool | str | None
    sparkbench_backend: str
    bench_measured_variants: list[str]
    bench_bandwidth: BandwidthReading | None
    bench_bandwidth_pending: list[str]


class HostFacts(TypedDict):
    """The provisioning facts a document needs (``host_facts``; ``manifest`` reads them)."""

    name: str
    gpu: GpuFacts
    images: dict[str, ImageFacts]
    sparkbench_version: str
    sparkbench_commit: str | None
    simulated: bool
    backend: str


class StoredHardwareProfile(HardwareProfile, total=False):
    """The hardware profile as ``profile.hardware`` stores it (``context_fields``): the profile with
    ``bandwidth_gbs``, the old name of ``memory_bandwidth_gbps``, beside it."""

    bandwidth_gbs: float | None


# ------------------------------------------------------------------------ the roles' results
class ServerReady(TypedDict, total=False):
    """The vllm_server role's wait result (``vllm_server_ready``, the ``vllm_server_wait`` module):
    seconds to ready, the model's memory and the start of the container log."""

    time_to_ready_s: float | None
    model_memory_gib: float | None
    startup_log: str


class ServerDiagnosis(TypedDict, total=False):
    """The vllm_server role's diagnosis of a container log (``collect``: ``vllm_server_failure``,
    ``sparkbench.preflight.explain_launch``'s ``LaunchFailure`` as Ansible hands it)."""

    issue: str | None
    reason: str
    remedy: str
    line: str | None
    log_excerpt: str


class ServingSnapshot(TypedDict, total=False):
    """The ray_cluster role's ``ray_cluster_serving_state``: ``ray status`` and the probe while the model served."""

    status: RayStatus
    probe: RayProbe


class ClusterState(CheckResult, ServingSnapshot, total=False):
    """The ray_cluster role's ``ray_cluster_state``: the check's verdict with the ``ray status`` and
    the probe it judged, as ``ServingSnapshot`` holds them while serving
    (roles/ray_cluster/tasks/check_nodes.yml; ``record`` reads ``failures`` and ``probe``)."""


class ClusterRecord(TypedDict, total=False):
    """A cluster variant's ``cluster`` argument of ``record``: the plan's spec, the check before the
    launch and the snapshot while serving (playbooks/tasks/cluster_variant.yml)."""

    spec: ClusterSpec
    state: ClusterState
    serving: ServingSnapshot


class CoresidenceRuns(TypedDict, total=False):
    """The ``coresidence`` argument of ``record``: measure's runs beside the residents idle and under
    load, the loads' registered outputs (``results``) and why the steps stopped ("" when they did not)."""

    idle: TaskResult
    load: TaskResult
    loads: TaskResult
    failure: str


# -------------------------------------------------------------------------- what comes back
class RecordOutcome(TypedDict):
    """What ``record`` returns for one variant: where its document went, its status and failure,
    whether it waits for the probe after it, the co-residence rows as lines."""

    path: str
    status: Literal["complete", "incomplete", "failed"]
    variant: str
    failure: FailureBlock | None
    bandwidth: bool
    coresidence_lines: list[str]


class ProbeAfterOutcome(TypedDict):
    """What ``write_after_probe`` returns: the result's path and the drop's text (None: no drop)."""

    path: str
    drop: str | None
