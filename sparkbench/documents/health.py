"""The health document (``results/<run>/health.json``): the fleet's judgement by canary, one entry
per unit (``sparkbench.health.judge``, written by ``sparkbench.health.write``).

Every block is the project's own and refuses unknown keys (``Closed``); the canary's protocol flags
are the result document's (:class:`~.conditions.Flag`). ``schema_version`` is "1"; a document
written before it was recorded (no ``schema_version``) is version 1.

A unit's ``figures`` are empty (no canary result), the canary's figures alone (a canary that did
not measure), or those with the verdicts against its peers and its history (a measured unit; a
resident unit's also against its deployment): the model holds each unit to one of the three.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from .base import Above0, Closed, Count, NonNegative, Positive
from .conditions import Flag
from .failure import Stage

SCHEMA_VERSION = "1"
#: a unit's verdict (``sparkbench.health``)
HealthVerdict = Literal["healthy", "slow", "failed"]
#: the kind of a comparison (``sparkbench.verdict.compare_samples``)
VerdictKind = Literal["differs", "no_difference", "not_enough"]
#: the figures of a unit's canary (``sparkbench.unit_figures.unit_figures``): all of them or none
CANARY_FIGURES = ("decode_tok_s", "n", "clock_under_load_mhz", "clock_max_mhz", "clock_share_of_max", "power_w",
                  "temperature_c", "flags", "manifest", "simulated")


class ManifestFields(Closed):
    ("the canary's manifest fields compared with the peers' majority (sparkbench.unit_figures.MANIFEST_FIELDS); null "
     "where the result does not record one")
    driver: Optional[str]
    kernel: Optional[str]
    firmware: Optional[str]
    cuda: Optional[str]
    image_digest: Optional[str]
    image_id: Optional[str]
    vllm_version: Optional[str]
    model_revision: Optional[str]


class PeerGroup(Closed):
    hardware: str = Field(description="profile.hardware.name")
    model: str
    variant: str = Field(description="the canary variant")


class Comparison(Closed):
    ("a verdict of this canary's requests against other requests (sparkbench.verdict.compare_samples): kind, "
     "pct [lo, hi], the minimum detectable difference, the threshold a fall is held to, the words")
    verdict: VerdictKind
    pct: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    mdd_pct: Optional[NonNegative]
    threshold_pct: NonNegative
    text: str


class PeerFigures(Closed):
    ("the unit against its peers (same hardware, model and canary): without enough peers only why (reason), else "
     "the peers' median, spread and the verdict against their pooled requests")
    group: PeerGroup
    units: Positive = Field(description="measured units of the group, this one included")
    reason: str = Field(None, description="why there is no peer judgement (fewer than MIN_PEERS units)")
    median_tok_s: NonNegative = None
    spread_pct: NonNegative = None
    deviation_pct: float = None
    threshold_pct: NonNegative = None
    verdict: VerdictKind = None
    pct: Optional[float] = None
    lo: Optional[float] = None
    hi: Optional[float] = None
    mdd_pct: Optional[NonNegative] = None
    text: str = None
    reference_units: Count = None

    @model_validator(mode="after")
    def _reason_or_verdict(self) -> PeerFigures:
        judged = ("median_tok_s", "spread_pct", "deviation_pct", "threshold_pct", "verdict", "pct", "lo", "hi",
                  "mdd_pct", "text", "reference_units")
        present = [k for k in judged if k in self.model_fields_set]
        if "reason" in self.model_fields_set:
            if present:
                raise ValueError(f"a peer group without a judgement (reason) has no {', '.join(present)}")
        elif len(present) != len(judged):
            missing = [k for k in judged if k not in present]
            raise ValueError(f"neither a reason nor a judgement against the peers (lacks {', '.join(missing)})")
        return self


class HistoryFigures(Comparison):
    ("the unit against its most recent earlier healthy canary of the same configuration")
    run_id: Optional[str]
    decode_tok_s: Optional[NonNegative] = Field(description="that canary's single-stream median [tok/s]")


class DeploymentFigures(Comparison):
    ("a resident unit against its deployment canary's requests")
    deployed_at: Optional[str]


class UnitFigures(Closed):
    ("a unit's canary figures (sparkbench.unit_figures.unit_figures): none without a canary result; with the verdicts "
     "(peers, history, a resident's deployment) once the canary measured")
    decode_tok_s: Optional[NonNegative] = Field(None, description="single-stream median [tok/s]")
    n: Count = Field(None, description="valid single-stream requests")
    clock_under_load_mhz: Optional[NonNegative] = None
    clock_max_mhz: Optional[NonNegative] = None
    clock_share_of_max: Optional[NonNegative] = None
    power_w: Optional[float] = Field(None, description="mean power, single stream [W]")
    temperature_c: Optional[float] = Field(None, description="max GPU temperature, single stream [°C]")
    flags: list[Flag] = Field(None, description="the canary result's protocol.flags")
    manifest: ManifestFields = None
    simulated: bool = None
    peers: PeerFigures = None
    history: Optional[HistoryFigures] = Field(
        None, description="null without an earlier healthy canary, and for a resident unit")
    deployment: DeploymentFigures = None

    @model_validator(mode="after")
    def _one_stage(self) -> UnitFigures:
        present = [k for k in CANARY_FIGURES if k in self.model_fields_set]
        judged = [k for k in ("peers", "history") if k in self.model_fields_set]
        if present and len(present) != len(CANARY_FIGURES):
            missing = [k for k in CANARY_FIGURES if k not in present]
            raise ValueError(f"the canary's figures are all there or none (lacks {', '.join(missing)})")
        if judged and (not present or len(judged) != 2):
            raise ValueError("peers and history come together, with the canary's figures")
        if "deployment" in self.model_fields_set and not judged:
            raise ValueError("deployment comes with the verdicts against the peers")
        return self

    def judged(self) -> bool:
        """Whether the canary measured and was compared (peers and history present)."""
        return "peers" in self.model_fields_set


class UnitFailure(Closed):
    ("why the unit has no usable canary")
    stage: Stage
    reason: str
    remedy: str


class ResidentRef(Closed):
    ("the resident a unit's canary measured (playbooks/serve.yml; sparkbench.serve.health_canary)")
    name: Optional[str]
    variant: Optional[str]
    deployed_at: Optional[str]
    run: Optional[str]
    port: Optional[Positive]


class HealthUnit(Closed):
    ("one unit's verdict: healthy, slow (causes, remedy, basis) or failed (its failure)")
    host: str
    figures: UnitFigures
    failure: Optional[UnitFailure] = Field(description="null unless the verdict is failed")
    verdict: HealthVerdict
    causes: list[str] = Field(description="a slow unit's probable causes; a failed unit's failure")
    cause_codes: list[str] = Field(None, description="the causes' codes (absent for a failed unit)")
    remedy: Optional[str] = Field(description="null for a healthy unit")
    notes: list[str] = Field(description="differences reported, not flagged")
    basis: list[str] = Field(None, description="what made a slow unit slow (absent for a failed unit)")
    line: str = Field(description="the unit's one verdict line")
    resident: ResidentRef = None

    @model_validator(mode="after")
    def _verdict_agrees(self) -> HealthUnit:
        if (self.verdict == "failed") != (self.failure is not None):
            raise ValueError(f"verdict {self.verdict} with failure {'null' if self.failure is None else 'set'}: "
                             "a unit has a failure when, and only when, it failed")
        if self.verdict != "failed" and not self.figures.judged():
            raise ValueError(f"a {self.verdict} unit has the verdicts against its peers and its history in figures")
        return self


class HealthDocument(Closed):
    ("results/<run>/health.json: the fleet health judgement of one run (sparkbench.health, its one owner)")
    schema_version: Literal["1"] = Field(
        SCHEMA_VERSION, description="absent in documents written before it was recorded: version 1")
    run_id: str
    sparkbench_version: str = Field(None, description="sparkbench's version that wrote the document")
    sparkbench_commit: Optional[str] = Field(None, description="its commit; null outside a git checkout")
    units: list[HealthUnit]
    lines: list[str] = Field(description="one verdict line per unit, by host")
    unhealthy: Count = Field(description="units slow or failed")
    k: Above0 = Field(description="threshold = max(k x robust spread of the peers, MDD as a fall, floor_pct)")
    floor_pct: NonNegative
    simulated: bool = Field(description="a unit's canary ran on the simulator")
