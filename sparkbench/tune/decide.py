"""A round decided and written down: what this host measures now, ``tune.json`` (every point with
its status and figures, the winner) and, when the tune is done, ``winner.yml``.

``winner.yml`` is a vars file bench.yml and serve.yml take as it is::

    ansible-playbook bench.yml -l spark01 -e @results/<run>/winner.yml        # measure it again
    ansible-playbook playbooks/serve.yml -l spark01 -e @results/<run>/winner.yml  # deploy it
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import yaml

from ..paths import write_atomic
from . import TUNE_FILE, WINNER_FILE, answer
from .points import point_variant
from .rounds import MAX_RACES, Round, State, deal, next_points, race_names, read_state, trial_records
from .space import TuneSpace, objective_name

if TYPE_CHECKING:
    from ..cluster.shapes import HostVars
    from ..matrix import ExtraVariantEntry

SCHEMA_VERSION = "1"


class TuneDocument(TypedDict):
    """``results/<run>/tune.json``."""

    schema_version: str
    base: str
    objectives: list[str]
    budget: dict[str, float | None]
    space: dict[str, list[object]]
    started_at: str
    state: str
    races: int
    trials: list[answer.TrialRecord]
    front: list[str] | None
    winner: answer.Winner | None
    simulated: bool | None
    backends: list[str]


def _stored(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / TUNE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _started(run_dir: Path) -> str:
    before = _stored(run_dir) or {}
    return str(before.get("started_at") or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _entries_for(state: State, names: list[str]) -> list[ExtraVariantEntry]:
    """The matrix entries of every planned point (so that each round plans the same variants) and of
    the round's race variants."""
    by_name = {p["name"]: point_variant(p, state.base["variant"]) for p in state.points}
    out = [by_name[n] for n in by_name if n not in state.pruned]
    for name in names:
        point, _, k = name.rpartition(".r")
        if point in by_name and k.isdigit():
            out.append({**by_name[point], "name": name})
    return out


def _race_allowed(state: State, started_at: str, leaders: list[str]) -> bool:
    races = max(len(state.docs.get(n) or []) for n in leaders) - 1
    minutes = state.space.budget.minutes
    if races >= (MAX_RACES if minutes else 1):
        return False
    if minutes is None:
        return True
    started = datetime.strptime(started_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - started).total_seconds() < minutes * 60


def _answer(state: State) -> tuple[answer.Winner | None, list[str], bool]:
    """(the winner, the two leaders, whether their verdict separates them)."""
    records = trial_records(state)
    ranked = answer.leaders(records, state.space.objectives)
    if not ranked:
        return None, [], True
    best, second = ranked[0], (ranked[1] if len(ranked) > 1 else None)
    objective = state.space.objectives[0]
    samples = {r["name"]: answer.objective_samples(state.docs.get(r["name"]) or [], objective)
               for r in (best, second) if r is not None}
    v, separated = answer.judge(best, second, samples[best["name"]], samples.get(second["name"], []) if second else [])
    leaders = [best["name"]] + ([second["name"]] if second else [])
    return answer.winner(best, second, v, separated), leaders, separated


def document(state: State, started_at: str, phase: str, won: answer.Winner | None) -> TuneDocument:
    """tune.json's content now."""
    names = [objective_name(o) for o in state.space.objectives]
    records = trial_records(state)
    return {"schema_version": SCHEMA_VERSION, "base": state.space.base, "objectives": names,
            "budget": {"trials": state.space.budget.trials, "minutes": state.space.budget.minutes},
            "space": {k: list(v) for k, v in state.space.space.items()}, "started_at": started_at,
            "state": phase, "races": max([len(d) - 1 for d in state.docs.values() if d] or [0]),
            "trials": records, "front": answer.pareto_front(records, names) if len(names) > 1 else None,
            "winner": won, **_source(state)}


def _source(state: State) -> dict[str, object]:
    """Where the measured points' figures come from, as results.json says it: ``simulated`` (None
    before any point is measured) and the serving ``backends``."""
    docs = [d[0] for d in state.docs.values() if d and d[0].get("status") == "complete"]
    backends = sorted({str((d.get("manifest") or {}).get("backend")) for d in docs
                       if (d.get("manifest") or {}).get("backend")})
    return {"simulated": any(bool(d.get("simulated")) for d in docs) if docs else None, "backends": backends}


def winner_vars(state: State, won: answer.Winner, run_id: str) -> dict[str, object]:
    """winner.yml: the winner's matrix entry, selected, and where serve.yml finds its result."""
    point = next(p for p in state.points if p["name"] == won["name"])
    return {"bench_extra_variants": [point_variant(point, state.base["variant"])], "bench_select": [won["name"]],
            "serve_variant": won["name"], "serve_run": run_id}


def plan_round(space: TuneSpace, variables: HostVars, host: str, hosts: list[str], run_dir: Path,
               write: bool = True) -> Round:
    """This host's round; with ``write`` (the first host of the play) tune.json and, once the tune
    is done, winner.yml are written to ``run_dir``."""
    state = read_state(space, variables, host, run_dir)
    started_at = _started(run_dir)
    names = next_points(state, run_dir)
    if names:
        rnd: Round = {"kind": "measure", "select": deal(names, host, hosts), "extra_variants": _entries_for(state, []),
                      "runs": None, "lines": [f"tune: measuring {', '.join(names)} ({len(names)} of "
                                              f"{space.budget.trials} trials)"]}
        phase, won = "measuring", None
    else:
        won, leaders, separated = _answer(state)
        if won is not None and not separated and len(leaders) == 2 and _race_allowed(state, started_at, leaders):
            race = race_names(state, leaders)
            runs = 2 * int(state.base["settings"]["runs"])
            rnd = {"kind": "race", "select": race if host == hosts[0] else [],
                   "extra_variants": _entries_for(state, race), "runs": runs,
                   "lines": [f"tune: {won['words']}; racing them again with {runs} requests each ({', '.join(race)})"]}
            phase = "racing"
        else:
            rnd = {"kind": "done", "select": [won["name"]] if won else [], "extra_variants": _entries_for(state, []),
                   "runs": None, "lines": [f"tune: {won['words']}" if won else
                                           "tune: no point could be measured (every point pruned or failed)"]}
            phase = "done"
    if write:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(run_dir / TUNE_FILE, (json.dumps(document(state, started_at, phase, won), indent=1) + "\n").encode())
        if phase == "done" and won is not None:
            plain = json.loads(json.dumps(winner_vars(state, won, run_dir.name)))  # Ansible's tagged strings as str
            write_atomic(run_dir / WINNER_FILE, yaml.safe_dump(plain, sort_keys=False).encode())
    return rnd
