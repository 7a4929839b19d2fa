"""The result's ``coresidence`` block (schema/result.schema.json): what co-residence costs a variant.

``coresidence(doc, block, idle, load, load_outputs)`` builds it from the variant's own result (the
*alone* figures: the document as measured with the residents stopped), measure's output in the two
co-resident conditions (``idle``: the residents present and idle; ``load``: each under the
background load) and the loads' own documents::

    {residents: [{name, variant, port}], load_rps, runs,
     conditions: [{condition: alone|idle|load, label, <SINGLE_DECODE.field>, requests, samples,
                   verdict (sparkbench.verdict.compare_samples against alone, None for alone), text, error}],
     load: [{resident, status, requests, completed, achieved_rate, output_tok_s, stopped, error}]}

The verdict texts are the Trust contract's words ("differs by X % [lo, hi]", "no difference
detectable above Y %", "not enough requests for a verdict"). ``rows(doc)`` gives the report's
rows (one per condition beside the residents).
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from .. import verdict as verdict_mod
from ..measure.figures import SINGLE_DECODE
from ..measure.shapes import SingleMedian
from ..result_files import parse_measured

if TYPE_CHECKING:
    from ..host_failure import TaskResult
    from ..result_shapes import StoredResult
    from ..verdict import SampleVerdict
    from .steps import InterferenceBlock

CONDITIONS = ("alone", "idle", "load")
Condition = Literal["alone", "idle", "load"]


class CoresidenceResident(TypedDict):
    """A resident the variant was measured beside (``coresidence``'s ``residents``)."""

    name: str
    variant: str
    port: int


class CoresidenceCondition(SingleMedian):
    """One condition of the ``coresidence`` block (``_condition``): its per-request decode rates, their
    median (the key ``SINGLE_DECODE.field`` declares; the code writes and reads it through that), its
    verdict against the variant alone (``sparkbench.verdict.compare_samples``; None for alone), why it
    has no figures."""

    condition: Condition
    label: str
    requests: int
    samples: list[float]
    verdict: SampleVerdict | None
    text: str | None
    error: str | None


class LoadRecord(TypedDict):
    """A background load's own record (``_load_record``, from its measure document's arrival-rate block)."""

    resident: str
    status: str
    requests: int
    completed: int
    achieved_rate: float | None
    output_tok_s: float | None
    stopped: str | None
    error: str | None


class CoresidenceBlock(TypedDict):
    """The result's ``coresidence`` block (``coresidence``, the module docstring; its model:
    ``sparkbench.documents.cluster.Coresidence``)."""

    residents: list[CoresidenceResident]
    load_rps: float
    runs: int
    conditions: list[CoresidenceCondition]
    load: list[LoadRecord]


class CoresidenceRow(TypedDict):
    """The report's row of one co-resident condition (``rows``): median and alone decode rates, verdict text."""

    host: str | None
    variant: str | None
    condition: str
    label: str
    median: float | None
    alone: float | None
    text: str


def _label(condition: str, names: str, rps: float) -> str:
    """How the report names a condition (the issue's words)."""
    if condition == "alone":
        return f"alone ({names} stopped)"
    if condition == "idle":
        return f"with {names} resident and idle"
    return f"under {names}'s {rps:g} req/s load"


def _condition(condition: Condition, label: str, samples: list[float], alone: list[float],
               error: str | None) -> CoresidenceCondition:
    """One condition's figures and, beside the residents, its verdict against the variant alone."""
    verdict = None if condition == "alone" or error else verdict_mod.compare_samples(alone, samples)
    return {"condition": condition, "label": label,
            SINGLE_DECODE.field: round(statistics.median(samples), 3) if samples else None,
            "requests": len(samples), "samples": [round(x, 4) for x in samples], "verdict": verdict,
            "text": verdict["text"] if verdict else None, "error": error}


def _run_error(run: TaskResult | None, failure: str = "") -> str | None:
    """Why a condition's measurement gave no figures (None when it did); ``failure``: why the
    interference steps stopped, when one failed."""
    run = run or {}
    if not run:
        return f"not measured: {failure or 'an earlier step of the interference measurement failed'}"[:400]
    if run.get("rc") not in (0, 3):
        tail = str(run.get("stderr") or run.get("msg") or "").strip().splitlines()[-1:] or [""]
        return f"measure exited {run.get('rc')}: {tail[0][:300]}"
    return None


def _load_record(resident: str, text: object) -> LoadRecord:
    """A background load's own figures from its measure document (``--rate`` phase, stopped by SIGTERM)."""
    doc = parse_measured(text)
    if not isinstance(doc, Mapping):
        return {"resident": resident, "status": "missing", "requests": 0, "completed": 0, "achieved_rate": None,
                "output_tok_s": None, "stopped": None, "error": "the load wrote no document"}
    rate = next(iter(doc.get("rates") or []), None)
    if not rate:
        return {"resident": resident, "status": str(doc.get("status")), "requests": 0, "completed": 0,
                "achieved_rate": None, "output_tok_s": None, "stopped": None,
                "error": "the load recorded no arrival-rate block"}
    return {"resident": resident, "status": str(doc.get("status")), "requests": int(rate.get("requests") or 0),
            "completed": int(rate.get("completed") or 0), "achieved_rate": rate.get("achieved_rate"),
            "output_tok_s": rate.get("output_tok_s"), "stopped": rate.get("stopped"), "error": None}


def coresidence(doc: StoredResult, block: InterferenceBlock, idle: TaskResult | None,
                load: TaskResult | None, load_outputs: Sequence[object], failure: str = "") -> CoresidenceBlock:
    """The ``coresidence`` block (module docstring); ``failure``: why the steps stopped, if one failed."""
    names = ", ".join(r["name"] for r in block["residents"])
    alone = verdict_mod.samples(doc, "single")
    conditions = [_condition("alone", _label("alone", names, block["load_rps"]), alone, alone, None)]
    beside: tuple[tuple[Condition, TaskResult | None], ...] = (("idle", idle), ("load", load))
    for name, run in beside:
        error = _run_error(run, failure)
        got = [] if error else verdict_mod.samples(parse_measured((run or {}).get("stdout")) or {}, "single")
        conditions.append(_condition(name, _label(name, names, block["load_rps"]), got, alone, error))
    loads = [_load_record(spec["resident"], out) for spec, out in zip(block["loads"], list(load_outputs) + [None] * 9)]
    return {"residents": [{"name": r["name"], "variant": r["variant"], "port": r["port"]} for r in block["residents"]],
            "load_rps": block["load_rps"], "runs": block["runs"], "conditions": conditions, "load": loads}


def _median(condition: CoresidenceCondition | None) -> float | None:
    """A condition's median decode rate, under the key ``SINGLE_DECODE.field`` declares (None without one)."""
    return cast("float | None", condition.get(SINGLE_DECODE.field)) if condition else None


def rows(doc: StoredResult) -> list[CoresidenceRow]:
    """The report's rows of one result: ``{host, variant, condition, label, median, alone, text}`` per
    co-resident condition (none without a ``coresidence`` block)."""
    block = doc.get("coresidence") if isinstance(doc, Mapping) else None
    if not isinstance(block, Mapping):
        return []
    alone = next((c for c in block.get("conditions") or [] if c.get("condition") == "alone"), None)
    variant = doc.get("variant")
    return [{"host": doc.get("host"), "variant": variant.get("name") if variant else None,
             "condition": c["condition"], "label": c["label"], "median": _median(c), "alone": _median(alone),
             "text": c.get("text") or c.get("error") or ""}
            for c in block.get("conditions") or [] if c.get("condition") != "alone"]


def lines(found: Sequence[CoresidenceRow]) -> list[str]:
    """One line per row of ``rows``: what the run prints and the report's summary says."""
    def rate(x: float | None) -> str:
        return "—" if x is None else f"{float(x):.2f} tok/s"
    return [f"{r['host']} {r['variant']} {r['label']}: {rate(r['median'])} (alone {rate(r['alone'])}) — {r['text']}"
            for r in found]
