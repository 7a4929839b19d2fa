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

The controller's own documents have their models here too: the health document
(:mod:`.health`, ``HealthDocument``, read by :func:`load_health`) and the deployment record
(:mod:`.deployment`, ``DeploymentRecord``, read by :func:`load_deployment`).

The models import the standard library and pydantic only; ``sparkbench.measure`` (which runs on
bare units) never imports them. Every name here is imported on first use: building the models
costs about 0.1 s, and Ansible's workers import the modules that read and write these documents
(``import sparkbench.documents.health`` builds the health models alone).
"""

from importlib import import_module
from typing import Any

from ..errors import DocumentError

__all__ = ["SCHEMA_VERSION", "DeploymentRecord", "DocumentError", "HealthDocument", "ResultDocument",
           "load_deployment", "load_health", "load_result", "result_schema", "schema_text"]

#: each name's module, imported on first use
_LAZY = {"SCHEMA_VERSION": ".result", "ResultDocument": ".result", "HealthDocument": ".health",
         "DeploymentRecord": ".deployment", "load_result": ".load", "load_health": ".load",
         "load_deployment": ".load", "result_schema": ".schema", "schema_text": ".schema"}


def __getattr__(name: str) -> Any:
    # result_schema and schema_text on first use, too: `python -m sparkbench.documents.schema` runs
    # that module as __main__, which must not be imported before (runpy warns).
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
