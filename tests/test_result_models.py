"""The result document's models (sparkbench.documents) and the schema generated from them:
schema/result.schema.json and the package's copy the writer validates against are their output
(``python -m sparkbench.documents.schema --write``),
``scripts/sparkbench schema`` prints it, the fixture documents get the same verdict from the
schema and from the models (the current ones load), and a wrong document is refused naming the
field."""
from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import jsonschema
import pytest

from sparkbench import package_data
from sparkbench.documents import DocumentError, ResultDocument, load_result, result_schema, schema_text
from sparkbench.documents.schema import PACKAGE_SCHEMA_FILE, SCHEMA_FILE, SCHEMA_FILES
from sparkbench.runner import cli

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
VALIDATOR = jsonschema.Draft202012Validator(result_schema())
#: a complete measurement with every serving phase (a real simulator run, copied as written)
SERVING = FIXTURES / "runs" / "serving-sim" / "spark-sim01" / "nvidia-bare.json"


def fixture_documents() -> list[Path]:
    """Every JSON file under tests/fixtures that is a result document (schema_version and status)."""
    out = []
    for path in sorted(FIXTURES.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if isinstance(doc, dict) and "schema_version" in doc and "status" in doc:
            out.append(path)
    return out


DOCUMENTS = fixture_documents()


def refusal(doc: dict) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        load_result(doc)
    return caught.value


def test_checked_in_schema_is_generated_from_the_models() -> None:
    assert PACKAGE_SCHEMA_FILE == package_data.RESULT_SCHEMA and SCHEMA_FILE.parent.name == "schema"
    for file in SCHEMA_FILES:
        assert file.read_text(encoding="utf-8") == schema_text(), (
            f"{file} is stale: run .venv/bin/python -m sparkbench.documents.schema --write")
    schema = json.loads(schema_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == "https://sparkbench.invalid/schema/result.schema.json"
    assert schema["title"] == "sparkbench result (scripts/measure.py output, schema_version 1)"
    assert schema["properties"]["schema_version"]["const"] == "1"
    # the $defs other code reads by name (tests/test_bandwidth.py: bandwidth_reading) keep their names
    assert {"timestamp", "rate", "seconds", "fraction", "run", "parallel", "rate_entry", "bandwidth_reading",
            "prefix_cache", "multi_turn", "telemetry_phase", "stat4", "minmean"} <= set(schema["$defs"])


def test_cli_schema_prints_the_checked_in_file(capsys) -> None:
    assert cli.main(["schema"]) == 0
    assert capsys.readouterr().out == SCHEMA_FILE.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_document_gets_the_same_verdict_from_schema_and_model(path: Path) -> None:
    """A current document (schema_version "1") validates and loads, and gives itself back; the seed's
    published figures (schema_version 1 as a number, every unpublished figure and setting absent)
    are refused by both."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    valid = VALIDATOR.is_valid(doc)
    if doc["schema_version"] != "1":
        assert not valid
        with pytest.raises(DocumentError):
            load_result(path)
        return
    assert valid, [e.message for e in VALIDATOR.iter_errors(doc)][:5]
    model = load_result(path)
    assert isinstance(model, ResultDocument) and model.status == doc["status"]
    assert model.model_dump(exclude_unset=True) == doc


def test_the_fixtures_hold_current_documents_of_every_kind() -> None:
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in DOCUMENTS]
    current = [d for d in docs if d["schema_version"] == "1"]
    assert len(current) >= 52
    assert {d["status"] for d in current} >= {"complete", "failed"}
    assert any(d.get("cluster") for d in current) and any(d.get("tools") for d in current)
    assert any(d.get("_fixture") == "synthetic" and d["host"] == "spark-sim03" for d in current)
    # only the seed's published figures keep the older shape
    assert {d.get("_fixture") for d in docs if d["schema_version"] != "1"} == {"seed"}


def test_a_wrong_figure_is_refused_naming_its_field() -> None:
    doc = json.loads(SERVING.read_text(encoding="utf-8"))
    doc["single"]["decode_tok_s_median"] = "fast"
    doc["single"]["runs"][0]["completion_tokens"] = -1
    err = refusal(doc)
    assert "single.decode_tok_s_median: Input should be a valid number (got 'fast')" in str(err)
    assert ("single.runs[0].completion_tokens", "Input should be greater than or equal to 0 (got -1)") in err.problems
    assert not VALIDATOR.is_valid(doc)


def test_an_unknown_key_is_refused_where_the_schema_closes_the_block() -> None:
    doc = json.loads(SERVING.read_text(encoding="utf-8"))
    doc["tools"]["prompts"][0]["verdict_note"] = "x"
    doc["rates"][0]["slo"]["p99_ttft"] = 1
    err = refusal(doc)
    assert ("tools.prompts[0].verdict_note", "unknown key (this block takes no other keys)") in err.problems
    assert ("rates[0].slo.p99_ttft", "unknown key (this block takes no other keys)") in err.problems
    assert not VALIDATOR.is_valid(doc)


def test_an_unknown_top_level_key_is_let_through_as_the_schema_does() -> None:
    """The document's top level and most blocks take other keys (additionalProperties: true; the
    fixtures carry _fixture and _source): the models keep them."""
    doc = json.loads(SERVING.read_text(encoding="utf-8"))
    doc["_note"] = "copied by hand"
    doc["single"]["extra_figure"] = 1.5
    model = load_result(doc)
    assert model.model_extra["_note"] == "copied by hand" and model.single.model_extra == {"extra_figure": 1.5}
    assert VALIDATOR.is_valid(doc)


def test_each_kind_of_document_needs_its_keys() -> None:
    doc = json.loads(SERVING.read_text(encoding="utf-8"))
    no_errors = {k: v for k, v in doc.items() if k != "errors"}
    err = refusal(no_errors)
    assert err.problems == [("(top level)", "neither a measurement (lacks errors) nor a failure record "
                                            "(has status 'complete', not 'failed')")]
    failed = {"schema_version": "1", "status": "failed"}
    assert "nor a failure record (has no failure)" in str(refusal(failed))
    failed["failure"] = {"stage": "launch", "reason": "the container exited"}
    assert load_result(failed).failure.stage == "launch"
    failed["failure"]["stage"] = "deploy"
    assert refusal(failed).problems[0][0] == "failure.stage"
    for bad in (no_errors, {"schema_version": "1", "status": "failed"}, failed):
        assert not VALIDATOR.is_valid(bad)


def test_settings_never_hold_the_api_key_and_integers_are_json_schemas() -> None:
    doc = json.loads(SERVING.read_text(encoding="utf-8"))
    secret = copy.deepcopy(doc)
    secret["settings"]["api_key"] = "sk-1"
    assert refusal(secret).problems[0][0] == "settings" and not VALIDATOR.is_valid(secret)
    doc["single"]["runs"][0]["requested_tokens"] = 128.0  # an integer to JSON Schema, and to the model
    assert VALIDATOR.is_valid(doc) and load_result(doc).single.runs[0].requested_tokens == 128
    doc["single"]["runs"][0]["requested_tokens"] = True  # a bool is no integer to either
    assert not VALIDATOR.is_valid(doc) and refusal(doc).problems[0][0] == "single.runs[0].requested_tokens"


def test_load_result_names_a_file_that_is_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "v.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"v\.json: not JSON"):
        load_result(bad)
    bad.write_text("[]", encoding="utf-8")
    with pytest.raises(DocumentError, match="a result document is a JSON object, not list"):
        load_result(str(bad))


def imported_modules(path: Path) -> set[str]:
    """The absolute names a module imports (a relative import as ``.name``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
    return out


def test_the_models_import_only_the_standard_library_pydantic_measure_and_errors() -> None:
    import sys

    allowed = set(sys.stdlib_module_names) | {"pydantic", "typing_extensions", "sparkbench.measure"}
    for path in sorted((REPO / "sparkbench" / "documents").glob("*.py")):
        for name in imported_modules(path):
            if name.startswith("."):
                assert not name.startswith("..") or name == "..errors", f"{path.name} imports {name}"
                continue
            root = name.split(".")[0]
            assert root in allowed or name.startswith("sparkbench.measure"), f"{path.name} imports {name}"
    for path in sorted((REPO / "sparkbench" / "measure").rglob("*.py")):
        assert not any(n.split(".")[0] == "pydantic" for n in imported_modules(path)), path
