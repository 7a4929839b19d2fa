"""``schema/result.schema.json``, generated from the models (JSON Schema draft 2020-12).

The checked-in files are this module's output, never edited by hand: ``schema/result.schema.json``
at the checkout's root and the package's own copy, ``sparkbench/data/result.schema.json``, which
the writer validates every document against (``sparkbench.result``). After a change to a model,
regenerate both with

    .venv/bin/python -m sparkbench.documents.schema --write

(``--check`` exits 1 when either is stale; ``scripts/sparkbench schema`` prints the schema).
``tests/test_result_models.py`` holds both equal to :func:`schema_text`.

The generator (:class:`ResultSchema`) is pydantic's, with the schema's own conventions: no
``title`` but the document's own and those of its two kinds, no ``default`` (a default only stands
for "absent"), the ``$defs`` named in snake_case (``Run`` → ``run``, ``RateEntry`` →
``rate_entry``; the named scalars ``timestamp``, ``rate``, ``seconds``, ``fraction`` as they are
called), and the keywords of each schema in one fixed order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from .result import ResultDocument

SCHEMA_ID = "https://sparkbench.invalid/schema/result.schema.json"
#: the checkout's copy, at its root
SCHEMA_FILE = Path(__file__).resolve().parent.parent.parent / "schema" / "result.schema.json"
#: the package's copy = sparkbench.package_data.RESULT_SCHEMA (this package imports nothing of sparkbench
#: but measure; a test holds them equal)
PACKAGE_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "data" / "result.schema.json"
SCHEMA_FILES = (SCHEMA_FILE, PACKAGE_SCHEMA_FILE)
#: the order of the keywords in every schema of the file (others after them, by name)
KEY_ORDER = ("$schema", "$id", "$ref", "title", "description", "type", "const", "enum", "pattern", "minimum",
             "exclusiveMinimum", "maximum", "maxLength", "minItems", "anyOf", "allOf", "not", "items",
             "propertyNames", "required", "additionalProperties", "properties", "$defs")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _ordered(value: Any, names: dict[str, str], parent: str | None = None) -> Any:
    """``value`` with its ``$defs`` renamed (``names``), its ``$ref`` pointing at the new names and
    the keywords of each schema in :data:`KEY_ORDER` (properties in the models' order)."""
    if isinstance(value, list):
        return [_ordered(item, names, parent) for item in value]
    if not isinstance(value, dict):
        return value
    if parent == "properties":
        return {key: _ordered(sub, names) for key, sub in value.items()}
    if parent == "$defs":
        renamed = {names[key]: sub for key, sub in value.items()}
        return {key: _ordered(renamed[key], names) for key in sorted(renamed)}
    rank = {key: i for i, key in enumerate(KEY_ORDER)}
    out = {}
    for key in sorted(value, key=lambda k: (rank.get(k, len(rank)), k)):
        sub = value[key]
        if key == "$ref":
            prefix, _, name = sub.rpartition("/")
            sub = f"{prefix}/{names.get(name, name)}"
        out[key] = _ordered(sub, names, key)
    return out


class ResultSchema(GenerateJsonSchema):
    """pydantic's generator with the schema file's conventions (the module's docstring)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: Any) -> dict[str, Any]:
        return self.generate_inner(schema["schema"])

    def model_schema(self, schema: Any) -> dict[str, Any]:
        json_schema = super().model_schema(schema)
        if schema["cls"].model_config.get("title") is None:
            json_schema.pop("title", None)
        return json_schema

    def sort(self, value: Any, parent_key: str | None = None) -> Any:
        return value  # ordered in generate, after the $defs are renamed

    def generate(self, schema: Any, mode: Any = "validation") -> dict[str, Any]:
        json_schema = super().generate(schema, mode)
        names = {name: _snake(name) for name in json_schema.get("$defs", {})}
        if len(set(names.values())) != len(names):
            raise ValueError(f"two models share a $defs name: {sorted(names)}")
        return _ordered({"$schema": self.schema_dialect, "$id": SCHEMA_ID, **json_schema}, names)


def result_schema() -> dict[str, Any]:
    """The result document's JSON Schema (draft 2020-12), from :class:`ResultDocument`."""
    return ResultDocument.model_json_schema(schema_generator=ResultSchema)


def schema_text() -> str:
    """The text of ``schema/result.schema.json``: :func:`result_schema` as JSON, 2-space indents."""
    return json.dumps(result_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m sparkbench.documents.schema [--write | --check] [--file PATH]``."""
    p = argparse.ArgumentParser(prog="python -m sparkbench.documents.schema",
                                description="print the result schema generated from sparkbench.documents")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the schema files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a schema file differs from the models")
    p.add_argument("--file", type=Path, help="one schema file (default: both, "
                                             + " and ".join(map(str, SCHEMA_FILES)) + ")")
    args = p.parse_args(argv)
    text = schema_text()
    files = (args.file,) if args.file else SCHEMA_FILES
    if args.write:
        for file in files:
            file.write_text(text, encoding="utf-8")
            print(f"wrote {file}")
        return 0
    if args.check:
        stale = [file for file in files if not (file.is_file() and file.read_text(encoding="utf-8") == text)]
        for file in stale:
            print(f"{file} is stale: run python -m sparkbench.documents.schema --write", file=sys.stderr)
        return 1 if stale else 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
