"""What measure.py says of the run itself: the server it measured (``server``), the client
(``client``), its settings (``settings``), the errors of single requests (``errors[]``) and the
warnings about the whole result (``warnings[]``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from .base import Above0, Block, Count, Int, Positive

#: keys the settings block never holds: the key's value is a secret, only api_key_set is stored
SECRET_SETTINGS = ("api_key", "api-key")


class Server(Block):
    version: Optional[str]
    model: Optional[str]
    max_model_len: Optional[Positive]
    base_url: str
    simulated: bool
    version_source: Literal["/version", "/props build_info", "system_fingerprint"] = Field(
        None, description="where server.version came from")
    system_fingerprint: str = Field(
        None, description="the chunks' system_fingerprint (llama.cpp names its build there)")
    max_model_len_source: Literal["/v1/models max_model_len", "/v1/models meta.n_ctx", "/props n_ctx"] = None
    slots: Optional[Positive] = Field(
        None, description="requests the server runs at once, where it says (llama.cpp /props total_slots or /slots)")
    slots_source: Literal["/props total_slots", "/slots"] = None


class Client(Block):
    host: str
    python: str
    script_version: str


class Settings(Block):
    model_config = ConfigDict(json_schema_extra={"not": {"anyOf": [{"required": [key]} for key in SECRET_SETTINGS]}})

    base_url: str
    model: Optional[str]
    api_key_set: bool
    output_tokens: Positive
    runs: Positive
    warmup: Count
    concurrency: list[Positive]
    context: list[Count]
    quality: bool
    quality_max_tokens: Positive
    quality_file: Optional[str]
    sandbox_image: Optional[str]
    image: bool
    telemetry: Literal["auto", "off"]
    search_by: Literal["rate", "concurrency"] = Field(None, description="--search-by: what --rate-search varies")
    request_timeout: Above0
    stall_timeout: Above0
    out: str
    hardware: Optional[str] = Field(None, description="--hardware NAME|FILE")
    profiles_dir: Optional[str] = Field(None, description="--profiles-dir (effective)")
    tools: bool = Field(None, description="--tools (the tool-call check ran)")
    tools_file: Optional[str] = Field(None, description="--tools-file (effective)")
    tool_choice: Literal["auto", "required", "named"] = Field(None, description="--tool-choice")
    tools_max_tokens: Positive = Field(None, description="--tools-max-tokens")
    target_precision_pct: Optional[Above0] = Field(None, description="--target-precision (null: off)")
    max_runs: Optional[Positive] = Field(
        None, description="--max-runs (effective; null without --target-precision)")
    tools_skip: Optional[str] = Field(
        None, description="--tools-skip: the plan's reason for refusing the tool-call check (nothing was sent)")

    @model_validator(mode="after")
    def _no_secret(self) -> Settings:
        held = [key for key in SECRET_SETTINGS if key in (self.model_extra or {})]
        if held:
            raise ValueError(f"holds {held[0]}: the settings block stores api_key_set, never the key")
        return self


class ErrorEntry(Block):
    phase: str
    request: Optional[Int]
    message: str


class ResultWarning(Block):
    code: str = Field(
        description="length_not_forced | single_runs_short | prompt_lengths_differ | parallel_waves | "
                    "no_model_profile | clock_capped | host_swapped | gpu_xid | oom_kill (the run protocol: "
                    "protocol.flags)")
    message: str
    requests: Count = Field(None, description="length_not_forced: speed requests that were not the requested length")
    valid: Count = None
    attempted: Count = None
    requested: Count = None
    concurrency: Positive = None
    waves: Count = None
    server_slots: Optional[Positive] = None

