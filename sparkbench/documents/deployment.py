"""The deployment record (``sparkbench.serve.deployment_records``): what runs as a resident, from which result,
since when, what it replaced; on the controller ``<bench_results_dir>/.deployments/<host>/`` and on
the unit.

Every block is the project's own and refuses unknown keys (``Closed``). ``schema_version`` is "1";
a record written before it was recorded (no ``schema_version``) is version 1, and so are records
without the health canary's fields (``health_argv``, ``health_settings``, ``health_remote_dir``:
absent in the first records). Most values come from the deployment as planned and may be null
where a deploy stopped before the unit answered.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field, model_validator

from .base import Closed, Count, Int, NonNegative, Positive
from .figures import SingleMedian

SCHEMA_VERSION = "1"
#: = sparkbench.serve.deployment_records.KIND
KIND = "sparkbench.deployment"
#: a record's state (= sparkbench.serve.deployment_records.STATES)
State = Literal["deployed", "failed", "undeployed", "replaced"]
#: the stage a deploy failed at (playbooks/tasks/serve_deploy.yml ``serve_stage``; = the keys of record.REMEDY)
FailedStage = Literal["start", "canary", "promote", "unreachable"]


class RecordSource(Closed, SingleMedian):
    ("the result the resident was deployed from (sparkbench.serve.source)")
    run: Optional[str]
    path: Optional[str]
    config_hash: Optional[str]
    finished_at: Optional[str]
    image: Optional[str]
    image_id: Optional[str]
    image_digest: Optional[str]
    model: Optional[str]
    model_revision: Optional[str]


class Placement(Closed):
    ("where the candidate started (sparkbench.serve.deploy_plan.placement): fresh, beside the previous resident or in "
     "its place, and the numbers that decided")
    mode: Literal["fresh", "beside", "replace"]
    reason: str
    need: str = Field(description="how the candidate's memory need was reckoned")
    need_gib: Optional[NonNegative]
    available_gib: Optional[NonNegative]
    headroom_gib: Optional[NonNegative]
    memory_plan_gb: NonNegative = Field(None, description="the unit's memory plan with both (a simulated unit)")


class PreviousResident(Closed):
    ("the resident this deployment replaced or started beside (the unit's containers' labels)")
    name: Optional[str]
    variant: Optional[str]
    port: Optional[Union[Int, str]] = Field(description="as its container's label gives it (text), or a number")
    run: Optional[str]
    config_hash: Optional[str]


class CanaryVerdict(Closed):
    kind: Literal["differs", "no_difference", "not_enough"]
    pct: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    mdd_pct: Optional[NonNegative]


class RecordCanary(Closed, SingleMedian):
    ("the canary's judgement against the source result (sparkbench.serve.canary.judge); samples: its requests' "
     "decode rates, the deployment's baseline for health.yml")
    passed: bool
    text: Optional[str]
    reason: Optional[str]
    requests: Optional[Count]
    verdict: Optional[CanaryVerdict]
    samples: list[float]


class RecordFailure(Closed):
    stage: FailedStage
    reason: str
    remedy: str
    log_excerpt: str = Field(description="the end of the candidate's log (at most 4000 characters)")


class DeploymentRecord(Closed):
    ("One deployment record (sparkbench.serve.deployment_records, its one owner): deployed, failed (rolled back), undeployed "
     "or replaced")
    kind: Literal["sparkbench.deployment"]
    schema_version: Literal["1"] = Field(
        SCHEMA_VERSION, description="absent in records written before it was recorded: version 1")
    state: State
    host: str
    variant: str
    when: str = Field(description="UTC time of the record's event, YYYY-mm-ddTHH:MM:SSZ")
    container: Optional[str] = Field(description="the resident's container name")
    port: Optional[Positive]
    listen: Optional[str]
    base_url: Optional[str]
    api_key: bool = Field(description="whether the API requires a key (never the key)")
    restart_policy: Optional[str]
    command: Optional[str] = Field(description="the docker run line, secrets <redacted>")
    source: RecordSource
    placement: Optional[Placement]
    previous: Optional[PreviousResident]
    health_argv: Optional[list[str]] = Field(None, description="health.yml's measure command line of the resident")
    health_settings: Optional[dict[str, Any]] = Field(
        None, description="the deployment canary's measurement settings (sparkbench.settings)")
    health_remote_dir: Optional[str] = Field(None, description="where measure is copied on the unit")
    canary: RecordCanary = None
    failure: RecordFailure = None
    left: Optional[str] = Field(None, description="a failed deploy: what runs on the unit afterwards")
    deployed_at: Optional[str] = Field(None, description="an undeployed record: when it had been deployed")
    replaced_by: str = Field(None, description="a record replaced (then perhaps undeployed): the variant that took "
                                               "its port")

    @model_validator(mode="after")
    def _state_agrees(self) -> DeploymentRecord:
        if (self.state == "failed") != ("failure" in self.model_fields_set):
            raise ValueError(f"state {self.state} with{'' if 'failure' in self.model_fields_set else 'out'} a "
                             "failure: a record has one when, and only when, the deploy failed")
        return self

    def document(self) -> dict[str, Any]:
        """The record as written: its keys as read or built, ``schema_version`` always."""
        return {**self.model_dump(exclude_unset=True), "schema_version": self.schema_version}
