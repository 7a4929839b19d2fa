"""``results/<run>/<host>/<variant>.upgrade.json``: one resident's upgrade, decided.

What it holds: the decision (``state`` passed / refused, ``reason``), what changed (``change``:
image and model revision, from → to; the candidate's vLLM version as its image reports it), the
gated figures with their verdicts, the drift of the current across the run (its bracket against
its first measurement), what changed inside (the startup logs' kernels, ``sparkbench.upgrade.
kernels``), the flags the candidate's parser refused, the rounds it took, and whether an
unresolved verdict was accepted. Written by the upgrade's judging step, beside the variant results
like ``.bracket.json``; read by the upgrade report (``sparkbench.report.upgrade``).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Literal, TypedDict

from .. import verdict as verdict_mod
from ..paths import UPGRADE_SUFFIX, write_atomic
from .flags import NO_VLLM
from .kernels import KernelChange, changes_text, kernel_changes
from .rounds import measured
from .targets import CURRENT, Change

if TYPE_CHECKING:
    from ..preflight import PreflightFailure
    from .gate import FigureJudgement, Judgement
    from .targets import Target

KIND = "sparkbench.upgrade"
SCHEMA_VERSION = "1"
SUFFIX = UPGRADE_SUFFIX


class Drift(TypedDict):
    """The current image's first measurement against its bracket at the end of the sequence."""

    first_median: float | None
    bracket_median: float | None
    pct: float | None


class UpgradeDocument(TypedDict):
    """``<variant>.upgrade.json``."""

    kind: Literal["sparkbench.upgrade"]
    schema_version: str
    host: str
    variant: str
    run: str
    decided_at: str
    state: Literal["passed", "refused"]
    reason: str
    change: Change
    candidate_vllm_version: str | None
    tolerance_pct: float
    figures: list[FigureJudgement]
    drift: Drift | None
    kernels: list[KernelChange]
    kernels_text: str
    flags: list[PreflightFailure]
    rounds: int
    accepted_unresolved: bool
    simulated: bool | None


def _drift(run_dir: Path, host: str, variant: str) -> Drift | None:
    first = measured(run_dir, host, variant + CURRENT)
    bracket = measured(run_dir, host, f"{variant}{CURRENT}.bracket")
    if not first or not bracket or first[0].get("status") != "complete" or bracket[0].get("status") != "complete":
        return None
    a, b = verdict_mod.samples(first[0], "single"), verdict_mod.samples(bracket[0], "single")
    if not a or not b:
        return None
    ma, mb = median(a), median(b)
    return {"first_median": round(ma, 2), "bracket_median": round(mb, 2), "pct": round((mb / ma - 1) * 100, 2)}


def document(target: Target, run_dir: Path, host: str, *, state: Literal["passed", "refused"], reason: str,
             figures: list[FigureJudgement], tolerance_pct: float, flags: list[PreflightFailure],
             accepted_unresolved: bool = False) -> UpgradeDocument:
    """The decided upgrade of ``target`` on ``host``, from what the run folder holds."""
    v = target["variant"]
    current, candidate = measured(run_dir, host, v + CURRENT), measured(run_dir, host, v)
    started = bool(current and candidate and all(d[0].get("status") == "complete" for d in (current, candidate)))
    kernels = kernel_changes(current[0].get("kernels"), candidate[0].get("kernels")) if started else []
    return {"kind": KIND, "schema_version": SCHEMA_VERSION, "host": host, "variant": v, "run": run_dir.name,
            "decided_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "state": state,
            "reason": reason, "change": target["change"],
            "candidate_vllm_version": target["candidate"].get("vllm_version"), "tolerance_pct": tolerance_pct,
            "figures": figures, "drift": _drift(run_dir, host, v), "kernels": kernels,
            "kernels_text": changes_text(kernels) if started else "not compared: the two did not both start and measure",
            "flags": flags, "rounds": len(candidate), "accepted_unresolved": accepted_unresolved,
            "simulated": (bool(candidate[0].get("simulated")) if candidate else None)}


def write(doc: UpgradeDocument, run_dir: Path) -> Path:
    """The document to ``<run>/<host>/<variant>.upgrade.json``."""
    path = run_dir / doc["host"] / f"{doc['variant']}{SUFFIX}"
    write_atomic(path, (json.dumps(doc, indent=1) + "\n").encode())
    return path


def read_all(run_dir: Path) -> list[UpgradeDocument]:
    """Every upgrade document of the run, by host and variant."""
    out = []
    for path in sorted(run_dir.glob(f"*/*{SUFFIX}")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == KIND:
            out.append(doc)
    return out


def decided(targets: list[Target], judgements: dict[str, Judgement], run_dir: Path, host: str,
            tolerance_pct: float) -> list[UpgradeDocument]:
    """The documents of the residents a round decided (``judgements``: each one's gate)."""
    return [document(t, run_dir, host, state=j["state"], reason=j["reason"], figures=j["figures"],
                     tolerance_pct=tolerance_pct, flags=[], accepted_unresolved=j["accepted_unresolved"])
            for t in targets for j in [judgements[t["variant"]]]]


def refused_before_start(targets: list[Target], refusals: dict[str, list[PreflightFailure]], run_dir: Path,
                         host: str, tolerance_pct: float) -> list[UpgradeDocument]:
    """The documents of residents refused before anything started: the candidate image runs no vllm
    (``flags.NO_VLLM``), or its parser refuses a resident's flag."""
    docs = []
    for t in targets:
        said = refusals.get(t["variant"]) or []
        why = "; ".join(f"{r['reason']} ({r['remedy']})" for r in said)
        if not said:
            reason = "not measured: another resident's flags refused the upgrade of this unit"
        elif said[0]["id"] == NO_VLLM:
            reason, said = f"the candidate cannot start a server: {why}", []
        else:
            reason = f"the candidate's parser refuses {why}"
        docs.append(document(t, run_dir, host, state="refused", reason=reason, figures=[],
                             tolerance_pct=tolerance_pct, flags=said))
    return docs
