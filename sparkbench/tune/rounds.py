"""One round of a tune: what the run folder holds, and what to measure next.

A tune is a sequence of rounds over one run (``results/<run>/``); each round is one
``playbooks/tune.yml`` run: :func:`plan_round` reads what is stored, decides, and bench.yml's plays
measure what it selected. Every decision is made from the run folder alone, so an interrupted
tune continues where it stopped and the same tune again measures nothing twice:

1. the base variant and every point of the space are planned by the plan bench.yml uses
   (:func:`sparkbench.plan.plan_host`): a point whose preflight fails (a known pitfall, a flag
   vLLM refuses, the unit's memory) is *pruned*, with its reason, and never launched;
2. a point with a stored result is *measured* (or *failed*) and told to the study;
3. while the budget has trials left: the first round measures the points the prediction ranks
   highest (:func:`sparkbench.tune.search.first_batch`), later rounds Optuna's proposals;
4. then the answer: the two leaders' verdict; when it cannot separate them, a *race* round
   measures both again (``<point>.r<k>``, twice the requests) while the budget's minutes last
   (one race without ``minutes``); else the tune is *done*: ``tune.json`` and ``winner.yml``.

With several units (``-l`` naming peers), a round's points are dealt to them in turn; a race runs
on the first unit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from ..errors import InputError
from ..plan import plan_host
from ..result import stored
from . import answer, search
from .points import Point, grid, point_variant, value_problems
from .predicted import fit_rows_for, predicted_rate
from .space import TuneSpace, objective_name

if TYPE_CHECKING:
    from ..cluster.shapes import HostVars
    from ..matrix import ExtraVariantEntry
    from ..plan_types import PlanEntry
    from ..result_shapes import StoredResult

#: the longest a tune races its two leaders, in rounds
MAX_RACES = 3
RoundKind = Literal["measure", "race", "done"]


class Round(TypedDict):
    """What a round measures on this host: the variants bench.yml selects (the round's points or
    race variants), every point's matrix entry (beside the user's extra variants), the requests per
    variant for a race (None: the host's own), and what the round says."""

    kind: RoundKind
    select: list[str]
    extra_variants: list[ExtraVariantEntry]
    runs: int | None
    lines: list[str]


@dataclass
class State:
    """The tune as the run folder holds it."""

    space: TuneSpace
    base: PlanEntry
    points: list[Point]
    entries: dict[str, PlanEntry]
    pruned: dict[str, str]
    docs: dict[str, list[StoredResult]] = field(default_factory=dict)  # point → its result, then its races
    predicted: dict[str, float | None] = field(default_factory=dict)

    def status(self, name: str) -> answer.Status | None:
        if name in self.pruned:
            return "pruned"
        docs = self.docs.get(name)
        if not docs:
            return None
        return "failed" if docs[0].get("status") == "failed" else "measured"


def _with(variables: HostVars, **changes: object) -> HostVars:
    new = copy.copy(variables)
    new.update(changes)  # type: ignore[typeddict-item]
    return new


def base_variant(space: TuneSpace, variables: HostVars, host: str) -> PlanEntry:
    """The base variant, planned as bench.yml plans it; InputError when the matrix lacks it."""
    try:
        plan = plan_host(_with(variables, bench_select=[space.base], bench_bracket=False), host, check_mode=True)
    except InputError as exc:
        raise InputError(f"base: {space.base!r}: {exc}") from None
    if not plan["variants"]:
        raise InputError(f"base: {space.base!r} is not a variant of the host's matrix; name one of bench_builds × "
                         "bench_configs (e.g. nvidia-mtp2) or of bench_extra_variants")
    return plan["variants"][0]


def _entries(variables: HostVars, host: str, extra: list[ExtraVariantEntry]) -> dict[str, PlanEntry]:
    """Every point planned: its entry by name (preflight verdict, result path, memory plan)."""
    names = [e["name"] for e in extra]
    # the user's own extra variants: after a round (bench.yml's report play) the list holds the
    # points and races the round added; those are planned from ``extra`` again
    ours = tuple(names)
    user = [e for e in variables.get("bench_extra_variants") or []
            if not str(e.get("name", "")).startswith(ours)]
    plan = plan_host(_with(variables, bench_extra_variants=user + extra, bench_select=names, bench_bracket=False),
                     host, check_mode=True)
    return {e["name"]: e for e in plan["variants"]}


def read_state(space: TuneSpace, variables: HostVars, host: str, run_dir: Path) -> State:
    """Plan the base and every point, and read what the run folder holds of them (every host's)."""
    base = base_variant(space, variables, host)
    problems = value_problems(space, base["variant"], base["preflight"].get("vllm_version"))
    if problems:
        raise InputError("; ".join(problems))
    pts = grid(space)
    entries = _entries(variables, host, [point_variant(p, base["variant"]) for p in pts])
    pruned = {n: "; ".join(f["reason"] for f in e["preflight"]["failures"]) for n, e in entries.items()
              if e["preflight"]["verdict"] == "fail"}
    state = State(space=space, base=base, points=pts, entries=entries, pruned=pruned)
    for p in pts:
        docs = [_doc(f) for f in _result_files(run_dir, p["name"])]
        state.docs[p["name"]] = [d for d in docs if d is not None]
    rows = fit_rows_for(str(variables.get("bench_profiles_dir") or "profiles"))
    for name, entry in entries.items():
        state.predicted[name] = predicted_rate(entry, space.objectives[0], rows, entry["preflight"].get("vllm_version"))
    return state


def _result_files(run_dir: Path, name: str) -> list[Path]:
    """A point's result (any host's), then its races in order."""
    own = sorted(run_dir.glob(f"*/{name}.json"))
    races = sorted(run_dir.glob(f"*/{name}.r*.json"), key=lambda p: int(p.stem.rpartition(".r")[2] or 0))
    return own[:1] + [r for r in races if r.stem.rpartition(".r")[2].isdigit()]


def _doc(path: Path) -> StoredResult | None:
    try:
        return stored(path)
    except (OSError, ValueError):
        return None


def trial_records(state: State) -> list[answer.TrialRecord]:
    """Every point as tune.json lists it."""
    out: list[answer.TrialRecord] = []
    for p in state.points:
        status = state.status(p["name"]) or "unmeasured"
        docs = state.docs.get(p["name"]) or []
        figures = {objective_name(o): (answer.objective_value(docs[0], o) if docs else None)
                   for o in state.space.objectives}
        reason = state.pruned.get(p["name"])
        if status == "failed" and docs:
            reason = (docs[0].get("failure") or {}).get("reason")
        out.append({"name": p["name"], "point": p["values"], "status": status,  # type: ignore[typeddict-item]
                    "figures": figures, "reason": reason, "predicted_tok_s": state.predicted.get(p["name"])})
    return out


def deal(names: list[str], host: str, hosts: list[str]) -> list[str]:
    """This host's share of a round's points: every len(hosts)-th, from its place among the hosts."""
    if host not in hosts:
        return names
    i = hosts.index(host)
    return names[i::len(hosts)]


def _told(state: State, study) -> None:
    for p in state.points:
        status = state.status(p["name"])
        if status == "measured":
            doc = state.docs[p["name"]][0]
            values = [answer.objective_value(doc, o) for o in state.space.objectives]
            search.tell(study, state.space, p, None if any(v is None for v in values) else [float(v) for v in values])
        elif status in ("failed", "pruned"):
            search.tell(study, state.space, p, None)


def next_points(state: State, run_dir: Path) -> list[str]:
    """The points this round measures (all hosts together): none when the budget is spent."""
    used = [p for p in state.points if state.status(p["name"]) in ("measured", "failed")]
    left = state.space.budget.trials - len(used)
    candidates = [p for p in state.points if state.status(p["name"]) is None]
    if left <= 0 or not candidates:
        return []
    ranked = search.predicted_order(candidates, lambda p: state.predicted.get(p["name"]))
    if not used:
        return [p["name"] for p in search.first_batch(candidates, ranked, left)]
    study = search.open_study(run_dir, len(state.space.objectives))
    _told(state, study)
    chosen: list[str] = []
    for _ in range(min(left, len(candidates))):
        pick = search.propose(study, state.space, candidates, ranked, set(chosen))
        if pick is None:
            break
        chosen.append(pick["name"])
    return chosen


def race_names(state: State, leaders: list[str]) -> list[str]:
    """The next race's variant names for the two leaders (``<point>.r<k>``)."""
    k = max(len(state.docs.get(n) or []) for n in leaders)
    return [f"{n}.r{k}" for n in leaders]
