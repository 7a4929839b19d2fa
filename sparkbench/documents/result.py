"""The result document as a whole (``results/<run>/<host>/<variant>.json``): a measurement
(complete or incomplete) or a failure record. Every block is a model of its own module; this one
says which keys the document has and which of them each kind of document needs."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from .base import Block, Timestamp
from .checks import ImageCheck, Quality, Tools
from .cluster import Cluster, Coresidence
from .conditions import Protocol, Telemetry
from .controller import Bracket, Kernels, Launch, Manifest, Profile, ServerStartup, Variant
from .failure import Failure, Preflight
from .figures import Context, Parallel, Single, SpecDecode
from .measured import Client, ErrorEntry, ResultWarning, Server, Settings
from .serving import MultiTurn, PrefixCache, RateEntry, RateSearch

SCHEMA_VERSION = "1"
TITLE = f"sparkbench result (scripts/measure.py output, schema_version {SCHEMA_VERSION})"
#: the keys of a measurement, complete or incomplete (measure.py's block)
MEASUREMENT_KEYS = ("schema_version", "status", "simulated", "server", "client", "settings", "started_at",
                    "finished_at", "single", "parallel", "context", "spec_decode", "quality", "image", "telemetry",
                    "errors")
#: the keys of a failure record (status failed)
FAILURE_KEYS = ("schema_version", "status", "failure")
#: a document is one of these (the schema's top-level anyOf)
KINDS = [
    {"title": "measurement", "required": list(MEASUREMENT_KEYS), "properties": {"simulated": {"type": "boolean"}}},
    {"title": "failure record", "required": list(FAILURE_KEYS), "properties": {"status": {"const": "failed"}}},
]


class ResultDocument(Block):
    ("One result file, built by sparkbench.result (the one owner of this document): the block scripts/measure.py "
     "measures (server, client, settings, single, parallel, context, spec_decode, quality, image, telemetry, errors), "
     "completed with host, variant, launch, launch_command, config_hash, manifest, server_startup, profile and "
     "preflight; a variant that failed at any stage (host, preflight, launch, measure) has status failed (or "
     "incomplete) and a failure object. Every document is checked against this schema before it is written. "
     "docs/MEASUREMENT.md explains every key.")
    model_config = ConfigDict(title=TITLE, json_schema_extra={"anyOf": KINDS})

    schema_version: Literal["1"]
    sparkbench_version: str = Field(None, description="sparkbench's version (pyproject.toml) that wrote the document")
    sparkbench_commit: Optional[str] = Field(
        None, description="the commit of the checkout that wrote the document; null outside a git checkout")
    status: Literal["complete", "incomplete", "failed"]
    simulated: Optional[bool] = Field(
        None, description="true when /version says simulated: true (the sparkbench simulator); null only in a "
                          "failure record whose server never answered")
    server: Server = None
    client: Client = None
    settings: Settings = None
    started_at: Timestamp = None
    finished_at: Optional[Timestamp] = None
    bracket: Bracket = None
    single: Optional[Single] = Field(
        None, description="Single-stream phase; null when the run stopped before it began.")
    parallel: list[Parallel] = None
    context: list[Context] = None
    spec_decode: Optional[SpecDecode] = None
    spec_decode_reason: Optional[str] = Field(None, description="why spec_decode is null")
    quality: list[Quality] = None
    image: Optional[ImageCheck] = None
    telemetry: Optional[Telemetry] = None
    telemetry_reason: Optional[str] = Field(None, description="why telemetry is null")
    protocol: Protocol = None
    errors: list[ErrorEntry] = None
    failure: Failure = None
    host: str = Field(None, description="inventory host name")
    variant: Variant = None
    launch: Launch = None
    launch_command: str = Field(None, description="= launch.command")
    config_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = None
    manifest: Manifest = None
    kernels: Kernels = None
    server_startup: ServerStartup = None
    profile: Profile = None
    preflight: Preflight = None
    cluster: Cluster = None
    warnings: list[ResultWarning] = Field(
        None, description="measure.py: problems with the whole result, each said once here and once on stderr (e.g. "
                          "the server ignored the length-forcing fields, fewer valid single runs than requested, a "
                          "parallel level above the server's slots)")
    rates: Optional[list[RateEntry]] = Field(
        None, description="arrival-rate phase, one entry per rate in the order run; null when the phase is off")
    rate_search: Optional[RateSearch] = None
    prefix_cache: Optional[PrefixCache] = Field(None, description="prefix-cache phase; null when off")
    multi_turn: Optional[MultiTurn] = Field(None, description="multi-turn phase; null when off")
    tools: Optional[Tools] = None
    coresidence: Coresidence = None

    @model_validator(mode="after")
    def _one_kind(self) -> ResultDocument:
        """A measurement (every key of measure.py's block, ``simulated`` true or false) or a failure
        record (``status`` failed and a ``failure``); else a ValueError naming what each lacks."""
        present = self.model_fields_set
        measurement = [k for k in MEASUREMENT_KEYS if k not in present]
        if not measurement and self.simulated is not None:
            return self
        if self.status == "failed" and "failure" in present:
            return self
        why = [f"lacks {', '.join(measurement)}" if measurement else "has simulated null"]
        why.append("has no failure" if self.status == "failed" else f"has status {self.status!r}, not 'failed'")
        raise ValueError(f"neither a measurement ({why[0]}) nor a failure record ({why[1]})")

