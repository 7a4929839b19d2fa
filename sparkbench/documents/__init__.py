"""The result document's shape, as pydantic models: the one owner of what a result file holds.

``ResultDocument`` (:mod:`.result`) is the whole document; each block is a model of the module
named for what it holds: :mod:`.figures` (single stream, parallel, context, spec decode),
:mod:`.serving` (arrival rates, rate search, prefix cache, multi-turn), :mod:`.checks` (quality,
image, tool calls), :mod:`.conditions` (telemetry, the run protocol, the bandwidth probes),
:mod:`.measured` (server, client, settings, errors, warnings), :mod:`.controller` (variant,
launch, manifest, kernels, startup, profiles, bracket), :mod:`.failure` (preflight, failure),
:mod:`.cluster` (a Ray cluster, co-residence); :mod:`.base` holds the kinds of block and the
scalar types.

``schema/result.schema.json`` is generated from them (:mod:`.schema`: ``result_schema``,
``schema_text``; ``python -m sparkbench.documents.schema --write`` rewrites the file), and
:func:`load_result` (:mod:`.load`) reads a document into its model or says which field is wrong.

The models import the standard library and pydantic only; ``sparkbench.measure`` (which runs on
bare units) never imports them.
"""

from typing import Any

from .load import DocumentError, load_result
from .result import SCHEMA_VERSION, ResultDocument

__all__ = ["SCHEMA_VERSION", "DocumentError", "ResultDocument", "load_result", "result_schema", "schema_text"]


def __getattr__(name: str) -> Any:
    # result_schema and schema_text on first use: `python -m sparkbench.documents.schema` runs that
    # module as __main__, which must not be imported before (runpy warns).
    if name in ("result_schema", "schema_text"):
        from . import schema

        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
