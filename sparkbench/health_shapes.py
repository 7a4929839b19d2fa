"""The shapes of the fleet health judgement (``sparkbench.health``) as ``TypedDict`` classes: what
``judge`` reads (the units, their earlier canaries, a resident's deployment) and what it returns
(the rows, their figures and comparisons, the judgement) — ``health.json`` before it is written.

Their keys are those of the pydantic models of ``health.json``
(:mod:`sparkbench.documents.health`), which validate the values; these classes name the keys for
the type checker. A class of ``total=False`` holds keys a shape has only sometimes; a shape with
both kinds is a required base and a ``total=False`` subclass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from .result_shapes import StoredResult
from .unit_figures import CanaryFigures

if TYPE_CHECKING:
    from .verdict import VerdictKind

#: a unit's verdict
HealthVerdict = Literal["healthy", "slow", "failed"]


# ------------------------------------------------------------------------------------ the input
class ResidentDeployment(TypedDict, total=False):
    """A resident unit's ``deployment`` (``sparkbench.serve.health_canary``): the resident, when it was
    deployed, and its deployment canary's requests (``samples``, tok/s)."""

    name: str
    variant: str
    deployed_at: str | None
    run: str | None
    port: int | str | None
    samples: list[float]
    canary_text: str | None


class _UnitBase(TypedDict):
    host: str


class HealthInput(_UnitBase, total=False):
    """One unit to judge: its canary result (None without one), why the host failed (or None), and
    a resident unit's deployment."""

    doc: StoredResult | None
    reason: str | None
    deployment: ResidentDeployment


class EarlierCanary(StoredResult, total=False):
    """A unit's earlier healthy canary result (the history index's), with the run it came from."""

    _run_id: str


# ---------------------------------------------------------------------------------- the figures
class PeerGroup(TypedDict):
    """The peer group's key: hardware profile, model and canary variant."""

    hardware: str
    model: str
    variant: str


class _PeersBase(TypedDict):
    group: PeerGroup
    units: int


class PeerFigures(_PeersBase, total=False):
    """The unit against its peers: without enough of them only why (``reason``), else the peers'
    median, spread and the verdict against their pooled requests."""

    reason: str
    median_tok_s: float
    spread_pct: float
    deviation_pct: float
    threshold_pct: float
    verdict: VerdictKind
    pct: float | None
    lo: float | None
    hi: float | None
    mdd_pct: float | None
    text: str
    reference_units: int


class Comparison(TypedDict):
    """A verdict of this canary's requests against earlier ones (``verdict.compare_samples``), with
    the threshold a fall is held to."""

    verdict: VerdictKind
    pct: float | None
    lo: float | None
    hi: float | None
    mdd_pct: float | None
    threshold_pct: float
    text: str


class HistoryFigures(Comparison):
    """The unit against its most recent earlier healthy canary of the same configuration."""

    run_id: str | None
    decode_tok_s: float | None


class DeploymentFigures(Comparison):
    """A resident unit against its deployment canary's requests."""

    deployed_at: str | None


class UnitFigures(CanaryFigures, total=False):
    """A unit's ``figures`` with a canary result: the canary's figures, and with them the verdicts
    (peers, history, a resident's deployment) once the canary measured."""

    peers: PeerFigures
    history: HistoryFigures | None
    deployment: DeploymentFigures


# ---------------------------------------------------------------------------------- the judgement
class Cause(TypedDict):
    """A probable cause of a slow unit: its code (a flag's, a manifest field's, ``clock``, ...),
    its words and its remedy (``health.REMEDY``); the unit entry keeps the words and the codes."""

    code: str
    text: str
    remedy: str


class UnitFailure(TypedDict):
    """Why the unit has no usable canary."""

    stage: str
    reason: str
    remedy: str


class ResidentRef(TypedDict):
    """The resident a unit's canary measured."""

    name: str | None
    variant: str | None
    deployed_at: str | None
    run: str | None
    port: int | str | None


class NoFigures(TypedDict):
    """A unit's ``figures`` without a canary result: none."""


class _RowBase(TypedDict):
    host: str
    figures: UnitFigures | NoFigures
    failure: UnitFailure | None


class UnitRow(_RowBase, total=False):
    """One unit's entry of the judgement: host, figures and failure first, then its verdict
    (healthy, slow with causes, remedy and basis, or failed) and line."""

    verdict: HealthVerdict
    causes: list[str]
    cause_codes: list[str]
    remedy: str | None
    notes: list[str]
    basis: list[str]
    line: str
    resident: ResidentRef


class Judgement(TypedDict):
    """``health.judge``'s judgement of the fleet: ``health.json`` without its header."""

    units: list[UnitRow]
    lines: list[str]
    unhealthy: int
    k: float
    floor_pct: float
    simulated: bool
