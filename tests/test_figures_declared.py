"""Figures declared once (sparkbench.measure.figures): every module reads a figure through its
declaration, and the declaration agrees with what measure writes and the report shows."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from sparkbench.measure import figures
from sparkbench.measure.figures import COMBINED, FIGURES, SINGLE_DECODE, TTFT
from sparkbench.report.sections.hosts import MAIN_HEADERS
from sparkbench.report.writers import CSV_COLUMNS

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parent.parent / "sparkbench"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "runs"
#: where a figure's names may be spelled: its declaration, and the document models that name its field
ALLOWED = {PACKAGE / "measure" / "figures.py"}
ALLOWED_DIRS = (PACKAGE / "documents",)


def _names() -> set[str]:
    names: set[str] = set()
    for fig in FIGURES:
        names.update(x for x in (fig.field, fig.low, fig.high, fig.low_column, fig.high_column) if x)
        if fig.per_concurrency:
            names.update(fig.column_at(c) for c in (2, 4, 8))
        elif fig.column not in ("time_to_ready_s", "model_memory_gib", "mean_acceptance_length"):
            names.add(fig.column)
    return names


def _spelled(path: Path, names: set[str]) -> list[str]:
    """String literals of ``path`` equal to one of ``names``, but docstrings and ``__all__`` (a
    function may share a figure's name: ``mean_acceptance_length``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets):
            skip.update(id(c) for c in ast.walk(n.value))
    return [f"{path.relative_to(PACKAGE.parent)}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names and id(n) not in skip]


def test_no_module_outside_the_declaration_spells_a_figures_key():
    names = _names() | {"time_to_ready_s", "model_memory_gib"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in ALLOWED or any(d in path.parents for d in ALLOWED_DIRS):
            continue
        found += _spelled(path, names)
    assert not found, "read these through sparkbench.measure.figures:\n" + "\n".join(found)


def test_the_single_stream_median_is_named_in_three_files_at_most():
    """Its key, as a string or as a TypedDict field: the declaration, measure's ``SingleMedian`` and
    the models' ``SingleMedian``; every other shape that carries it inherits one of those."""
    spelling = re.compile(rf"\b{SINGLE_DECODE.field}\b")
    files = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                   if spelling.search(p.read_text(encoding="utf-8")))
    assert files == ["sparkbench/documents/figures.py", "sparkbench/measure/figures.py",
                     "sparkbench/measure/shapes.py"], files


def test_each_declared_figure_reads_what_measure_wrote():
    doc = next(json.loads(p.read_text()) for p in sorted(FIXTURE.rglob("*.json"))
               if '"parallel"' in p.read_text() and json.loads(p.read_text()).get("status") == "complete"
               and json.loads(p.read_text()).get("parallel"))
    single = doc["single"]
    assert SINGLE_DECODE.read(doc) == single[SINGLE_DECODE.field] and SINGLE_DECODE.read(doc) > 0
    med, lo, hi = SINGLE_DECODE.spread(doc)
    assert lo <= med <= hi
    assert TTFT.read(doc) == single[TTFT.field]
    c = doc["parallel"][0]["concurrency"]
    assert COMBINED.read(doc, c) == doc["parallel"][0][COMBINED.field]
    assert COMBINED.read(doc, 999) is None and SINGLE_DECODE.read({"single": None}) is None
    assert SINGLE_DECODE.read({"single": {SINGLE_DECODE.field: True}}) is None  # a bool is not a figure


def test_comparison_names_and_samples_come_from_the_declaration():
    assert figures.compared("single") == (SINGLE_DECODE, None)
    assert figures.compared("combined_8") == (COMBINED, 8)
    with pytest.raises(ValueError, match="combined_N"):
        figures.compared("decode")
    doc = {"single": {"runs": [{"decode_tok_s": 10.0}, {"decode_tok_s": 11.0, "valid": False},
                               {"decode_tok_s": None}, {"decode_tok_s": float("inf")}]},
           "parallel": [{"concurrency": 2, "per_stream": [{"decode_tok_s": 5.0}, {"decode_tok_s": 6.0}]},
                        {"concurrency": 4, "per_stream_decode_tok_s": [3.0, 0.0]}]}
    assert figures.samples(doc, "single") == [10.0]
    assert figures.samples(doc, "combined_2") == [5.0, 6.0]
    assert figures.samples(doc, "combined_4") == [3.0]
    assert figures.samples(doc, "combined_8") == []


def test_the_tables_headers_and_columns_are_the_declarations():
    assert MAIN_HEADERS[1] == SINGLE_DECODE.header and "8 par" in MAIN_HEADERS and TTFT.header in MAIN_HEADERS
    for fig in FIGURES:
        if fig.per_concurrency and fig is COMBINED:
            assert all(fig.column_at(c) in CSV_COLUMNS for c in (2, 4, 8))
        elif not fig.per_concurrency:
            assert fig.column in CSV_COLUMNS, fig
    # every declaration says which way is better and how it is computed
    assert all(isinstance(f.larger_is_better, bool) and f.unit and f.computed for f in FIGURES)
    assert [f.larger_is_better for f in (SINGLE_DECODE, COMBINED, TTFT)] == [True, True, False]


def test_every_declared_field_is_a_key_of_the_result_schema():
    """The declarations and the document models name the same keys (schema/result.schema.json is
    generated from the models)."""
    from sparkbench.documents import result_schema

    schema = result_schema()
    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            keys.update((node.get("properties") or {}).keys())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    declared = {x for f in FIGURES for x in (f.block, f.field, f.low, f.high) if x}
    assert declared <= keys, sorted(declared - keys)
