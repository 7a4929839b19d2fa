"""The shapes of a resident's deployment (``sparkbench.serve``) as ``TypedDict`` classes: the serve
variables and their checked settings (``deploy_plan.settings``), what a deployment takes of its source
result (``source.source``), the deployment itself before and after the unit has answered
(``deploy_plan.deployment`` / ``deploy_plan.on_unit``), the canary's judgement (``canary.judge``),
the deployment record as data (``deployment_records.record``; its keys are those of the pydantic
model :class:`sparkbench.documents.deployment.DeploymentRecord`, which validates the values) and a
resident's health canary (``health_canary.canary``). The unit's containers as Docker lists them
are ``sparkbench.residents``'.

Standard library only at run time: Ansible's workers import the serve modules, and the models
(``sparkbench.documents``) are imported for annotations only. A class of ``total=False`` holds keys
a shape has only sometimes; a shape with both kinds is a required base and a ``total=False``
subclass. The figure keys (``SINGLE_DECODE.field`` through ``SingleMedian``, ``model_memory_gib``) are the names
``sparkbench.measure.figures`` declares; the code writes and reads them through the declarations.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from ..measure.shapes import SingleMedian
from ..memory.unit import MemoryVariables
from ..plan_types import UnitVariables
from ..residents import Resident

if TYPE_CHECKING:
    from ..launch import ContainerArgs
    from ..matrix import Variant
    from ..plan_types import HardwareProfile, ModelProfile
    from ..preflight import Preflight
    from ..settings import Settings
    from ..unit_home import SimUnitBlock
    from ..verdict import SampleVerdict

#: ``serve_beside`` checked: decide by the unit's memory, or force either placement
Beside = Literal["auto", "true", "false"]
#: a deployment record's state (= ``deployment_records.STATES``)
RecordState = Literal["deployed", "failed", "undeployed", "replaced"]
#: where the candidate starts (``deploy_plan.placement``)
PlacementMode = Literal["fresh", "beside", "replace"]


# ------------------------------------------------------------------------------- the serve settings
class _PassedVariables(UnitVariables, MemoryVariables):
    """The serve variables ``deploy_plan.settings`` passes on unchanged (bench.yml's among them)."""

    serve_api_key: str
    serve_container_prefix: str
    serve_candidate_prefix: str
    serve_unit_dir: str
    bench_results_dir: str
    vllm_server_port: int | str
    bench_hardware_profile_name: str
    bench_profiles_dir: str


class ServeVariables(_PassedVariables):
    """Every variable serve.yml reads (``deploy_plan.VARIABLES``: their defaults), each as the inventory writes it."""

    serve_variant: str
    serve_run: str
    serve_port: int | str
    serve_state: str
    serve_listen: str
    serve_candidate_port: int | str
    serve_beside: bool | str
    serve_canary_runs: int | str
    serve_slower_pct: float | str


class ServeSettings(_PassedVariables):
    """The serve settings, checked (``deploy_plan.settings``); ``api_key``: whether a key is required (never the key)."""

    serve_variant: str
    serve_run: str
    serve_port: int
    serve_state: str
    serve_listen: str
    serve_candidate_port: int
    serve_beside: Beside
    serve_canary_runs: int
    serve_slower_pct: float
    api_key: bool
    secret_env: list[str]


# ------------------------------------------------------------------------------- the source result
class SourceFacts(SingleMedian):
    """What a deployment keeps of its source result (``source.source`` less ``samples``)."""

    run: str
    path: str
    host: str
    variant: str
    config_hash: str
    finished_at: str | None
    model: str
    model_revision: str | None
    image: str
    image_id: str | None
    image_digest: str | None
    argv: list[str]
    env: dict[str, str]
    secret_env: list[str]
    settings: Settings
    simulated: bool
    backend: str | None
    hardware: HardwareProfile
    model_memory_gib: float | None


class Source(SourceFacts):
    """``source.source``: the checked source result's facts and its single-stream requests' decode rates."""

    samples: list[float]


# ---------------------------------------------------------------------------------- the deployment
class ContainerNames(TypedDict):
    """``deploy_plan.names``: the resident's, the candidate's and the waiting previous resident's container names."""

    resident: str
    candidate: str
    stash: str


class ServeContainer(TypedDict):
    """``deploy_plan.container``: a resident's or candidate's container, its address and ``docker run`` line."""

    container: ContainerArgs
    port: int
    base_url: str
    health_url: str
    command: str
    unresolved: str


class PlacementNumbers(TypedDict):
    """The numbers a placement is decided by (``deploy_plan.placement``; None where they do not apply)."""

    need_gib: float | None
    need: str
    available_gib: float | None
    headroom_gib: float | None


class PlanNumbers(PlacementNumbers):
    """The numbers of a placement decided by the unit's memory plan (``deploy_plan.plan_placement``)."""

    memory_plan_gb: float


class _PlacementRequired(PlacementNumbers):
    mode: PlacementMode
    reason: str


class Placement(_PlacementRequired, total=False):
    """``deploy_plan.placement``: fresh, beside the previous resident or in its place, and why."""

    memory_plan_gb: float


class PreviousResident(Resident, total=False):
    """The resident a deployment replaces (``deploy_plan.previous_resident``) with where it waits and its health URL."""

    stash: str
    health_url: str


class _PlannedDeployment(TypedDict):
    host: str
    variant: str
    source: SourceFacts
    baseline: list[float]
    names: ContainerNames
    port: int
    listen: str
    candidate_port: int
    api_key: bool
    caches: dict[str, str]
    sim_unit: str
    resident: ServeContainer
    canary_settings: Settings
    slower_pct: float
    summary: list[str]


class Deployment(_PlannedDeployment, total=False):
    """A deployment (``deploy_plan.deployment``); the total=False keys once the unit has answered (``deploy_plan.on_unit``)."""

    candidate: ServeContainer
    previous: PreviousResident | None
    sim_unit_block: SimUnitBlock | None
    placement: Placement
    promote: Literal["restart", "rename"]
    canary_argv: list[str]
    health_argv: list[str]
    remote_dir: str
    unit_dir: str
    unit_record: str


# -------------------------------------------------------------------------------------- the canary
class JudgementFigures(SingleMedian):
    """What every canary judgement holds (``canary.judge``): the verdict (None until there is one) and the figures."""

    passed: bool
    verdict: SampleVerdict | None
    text: str | None
    requests: int
    slower_pct: float


class _Judgement(JudgementFigures):
    reason: str


class CanaryJudgement(_Judgement, total=False):
    """``canary.judge``: passed or not, the verdict against the source result and why; the action adds ``samples``."""

    samples: list[float]


# ---------------------------------------------------------------------------- the deployment record
class RecordSourceBlock(SingleMedian):
    """A record's ``source``: the result the resident was deployed from."""

    run: str | None
    path: str | None
    config_hash: str | None
    finished_at: str | None
    image: str | None
    image_id: str | None
    image_digest: str | None
    model: str | None
    model_revision: str | None


class PreviousBlock(TypedDict):
    """A record's ``previous``: the resident the deployment replaced or started beside."""

    name: str | None
    variant: str | None
    port: int | str | None
    run: str | None
    config_hash: str | None


class VerdictBlock(TypedDict):
    """A record canary's ``verdict``: its kind and figures."""

    kind: Literal["differs", "no_difference", "not_enough"]
    pct: float | None
    lo: float | None
    hi: float | None
    mdd_pct: float | None


class CanaryBlock(SingleMedian):
    """A record's ``canary``: the judgement against the source result and its requests' decode rates."""

    passed: bool
    text: str | None
    reason: str | None
    requests: int | None
    verdict: VerdictBlock | None
    samples: list[float]


class FailureNote(TypedDict, total=False):
    """A failed deploy as the playbook reports it (``deployment_records.record``'s ``failure``): each key may be missing."""

    stage: str
    reason: str
    remedy: str
    log_excerpt: str


class RecordFailureBlock(TypedDict):
    """A record's ``failure``: the stage a deploy failed at, why, the fix and the candidate's log's end."""

    stage: str
    reason: str
    remedy: str
    log_excerpt: str


class _RecordRequired(TypedDict):
    kind: Literal["sparkbench.deployment"]
    schema_version: Literal["1"]
    state: RecordState
    host: str | None
    variant: str | None
    when: str
    container: str | None
    port: int | None
    listen: str | None
    base_url: str | None
    api_key: bool
    restart_policy: str | None
    command: str | None
    source: RecordSourceBlock
    placement: Placement | None
    previous: PreviousBlock | None


class RecordDocument(_RecordRequired, total=False):
    """A deployment record as data (``deployment_records.record``, ``document()``), before its model reads and checks it."""

    health_argv: list[str] | None
    health_settings: Settings | None
    health_remote_dir: str | None
    canary: CanaryBlock
    failure: RecordFailureBlock
    left: str | None
    deployed_at: str | None
    replaced_by: str


# ------------------------------------------------------------------------------ the health canary
class ResidentLaunch(TypedDict):
    """A resident canary's ``launch`` (``health_canary.entry``): the recorded argv at the resident's address and port."""

    argv: list[str]
    command: str
    env: dict[str, str]
    secret_env: list[str]
    image: str
    base_url: str | None


class ResidentEntry(TypedDict):
    """``health_canary.entry``: the resident canary's plan entry for ``sparkbench.result.record``."""

    name: str
    variant: Variant
    launch: ResidentLaunch
    config_hash: str
    result_path: str
    action: Literal["measure"]
    preflight: Preflight
    settings: Settings
    hardware_profile: HardwareProfile | None
    model_profile: ModelProfile | None
    measure_argv: list[str]


class ResidentDeployment(TypedDict):
    """A resident canary's ``deployment``: the resident and its deployment canary's requests (``sparkbench.health``)."""

    name: str
    variant: str
    deployed_at: str
    run: str | None
    port: int | None
    samples: list[float]
    canary_text: str | None


class ResidentCanary(TypedDict):
    """``health_canary.canary``: the resident health.yml measures instead of the canary variant, and how."""

    deployment: ResidentDeployment
    argv: list[str]
    remote_dir: str
    entry: ResidentEntry
    summary: list[str]
    others: list[str]
