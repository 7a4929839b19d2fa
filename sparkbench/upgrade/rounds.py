"""One round of an upgrade on one unit: what the run folder holds of each resident's two variants,
what to measure now, and each resident's gate once both are measured.

Each run of ``playbooks/upgrade.yml`` is a round over ``results/<run>/<host>/``:

1. the first measures ``<variant>.current`` then ``<variant>`` (the candidate), bracketed by the
   current again (``<variant>.current.bracket``: the drift across the sequence);
2. a gate that cannot tell within the tolerance measures both again with twice the requests
   (``<name>.r<k>``, at most ``gate.MAX_AGAIN`` rounds), pooled with what came before;
3. once every resident's gate is decided the round is *decided*: passed residents are deployed on
   their candidate through serve.yml's steps, refused ones keep serving as before.

``scripts/sparkbench upgrade`` runs the rounds until decided.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from ..paths import result_path
from . import gate
from .targets import CURRENT

if TYPE_CHECKING:
    from ..matrix import ExtraVariantEntry
    from ..result_shapes import StoredResult
    from .targets import Target

RoundKind = Literal["measure", "decided"]


class Stop(TypedDict):
    """A resident stopped while its round measures, started again after it."""

    variant: str
    container: str
    health_url: str | None


class Round(TypedDict):
    """What this host does in this round: bench.yml's selection and entries, whether to bracket,
    the requests per variant (None: the settings'), the residents stopped meanwhile, each
    resident's judgement once decided, and what the round says."""

    kind: RoundKind
    select: list[str]
    extra_variants: list[ExtraVariantEntry]
    bracket: bool
    runs: int | None
    stop: list[Stop]
    judgements: dict[str, gate.Judgement]
    lines: list[str]


def _read(path: Path) -> StoredResult | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None  # type: ignore[return-value]


def measured(run_dir: Path, host: str, name: str, bracket: bool = False) -> list[StoredResult]:
    """``name``'s results on ``host`` in the run: its own, its bracket (with ``bracket``), then its
    measured-again rounds in order."""
    base = run_dir.parent
    paths = [result_path(base, run_dir.name, host, name)]
    if bracket:
        paths.append(result_path(base, run_dir.name, host, f"{name}.bracket"))
    k = 1
    while result_path(base, run_dir.name, host, f"{name}.r{k}").is_file():
        paths.append(result_path(base, run_dir.name, host, f"{name}.r{k}"))
        k += 1
    return [d for d in (_read(p) for p in paths if p.is_file()) if d is not None]


def _renamed(entry: ExtraVariantEntry, name: str) -> ExtraVariantEntry:
    new = dict(entry)
    new["name"] = name
    return new  # type: ignore[return-value]


def plan_round(targets: list[Target], run_dir: Path, host: str, *, runs: int, tolerance_pct: float,
               accept_unresolved: bool, left_stopped: list[dict[str, str]] | None = None) -> Round:
    """This host's round (module docstring); ``runs``: the canary settings' requests per variant;
    ``left_stopped``: residents an interrupted round left stopped, started again with this round's."""
    select: list[str] = []
    extra: list[ExtraVariantEntry] = []
    judgements: dict[str, gate.Judgement] = {}
    lines: list[str] = []
    more: int | None = None
    first = False
    for t in targets:
        v = t["variant"]
        current, candidate = measured(run_dir, host, v + CURRENT, bracket=True), measured(run_dir, host, v)
        extra += [t["current"], t["candidate"]]
        if not candidate:
            select += [v + CURRENT, v]
            first = True
            lines.append(f"upgrade {v}: measuring {t['change']['image'][0]} ({v}{CURRENT}) and the candidate "
                         f"{t['change']['image'][1]} ({v}), bracketed by the current again")
            continue
        again = len(candidate) - 1
        j = gate.judge(current, candidate, tolerance_pct=tolerance_pct, accept_unresolved=accept_unresolved,
                       again_left=again < gate.MAX_AGAIN)
        if j["state"] == "again":
            k = again + 1
            names = [f"{v}{CURRENT}.r{k}", f"{v}.r{k}"]
            extra += [_renamed(t["current"], names[0]), _renamed(t["candidate"], names[1])]
            select += names
            more = max(more or 0, runs * 2 ** k)
            lines.append(f"upgrade {v}: {j['reason']} (round {k} of {gate.MAX_AGAIN}: {runs * 2 ** k} requests each)")
            continue
        judgements[v] = j
        lines.append(f"upgrade {v}: {j['state'].upper()}: {j['reason']}")
    kind: RoundKind = "measure" if select else "decided"
    stop: list[Stop] = [{"variant": t["variant"], "container": t["container"], "health_url": t["health_url"]}
                        for t in targets if t["variant"] not in judgements] if select else []
    if select:
        stop += [{"variant": r["variant"], "container": r["container"], "health_url": None} for r in left_stopped or []
                 if r["container"] not in {s["container"] for s in stop}]
    return {"kind": kind, "select": select, "extra_variants": extra, "bracket": first and more is None,
            "runs": more, "stop": stop, "judgements": judgements, "lines": lines}
