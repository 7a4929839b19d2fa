"""The measured block of a result document: its skeleton, the settings block from the option
table, and the blocks finished at the end of a run (spec decode over the speed phases, telemetry,
run conditions). ``sparkbench.result`` completes it on the controller."""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
from typing import TYPE_CHECKING

from . import bandwidth as bandwidth_mod
from .bandwidth import BandwidthReading
from .client import Endpoint
from .common import SCHEMA_VERSION, SCRIPT_VERSION, clean_json, inf_str, redact, utc_now
from .figures import MEAN_ACCEPTANCE_LENGTH
from .metrics import SpecDecodeBlock, SpecFigures, spec_delta, sum_spec_deltas
from .options import OPTIONS
from .shapes import MeasuredDocument, SettingsBlock
from .telemetry import Telemetry, TelemetryBlock

if TYPE_CHECKING:
    from .session import Session

_NO_SPEC: SpecFigures = {"acceptance_per_position": None, MEAN_ACCEPTANCE_LENGTH.field: None,
                         "draft_acceptance_rate": None, "num_drafts": None}


def settings_block(args: argparse.Namespace, ep: Endpoint) -> SettingsBlock:
    """The result's ``settings``: every option of the table as the run used it (the API key only
    as ``api_key_set``)."""
    out: SettingsBlock = {}  # every key of the option table, below
    for o in OPTIONS:
        value = getattr(args, o.dest)
        if o.key == "base_url":
            value = ep.display
        elif o.key == "rates":
            value = [inf_str(r) for r in value] if value else None
        elif o.key == "burstiness":
            value = inf_str(value)
        out[o.result_key or o.dest] = value
        if o.key == "model":
            out["api_key_set"] = bool(ep.api_key)
    return out


def new_document(args: argparse.Namespace, ep: Endpoint) -> MeasuredDocument:
    """The document before the first request: every phase's block empty, status incomplete."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "incomplete",
        "simulated": False,
        "server": {"version": None, "model": None, "max_model_len": None, "base_url": ep.display,
                   "simulated": False},
        "client": {"host": socket.gethostname(), "python": platform.python_version(),
                   "script_version": SCRIPT_VERSION},
        "settings": settings_block(args, ep),
        "started_at": utc_now(),
        "finished_at": None,
        "warnings": [],
        "single": None,
        "parallel": [],
        "context": [],
        "spec_decode": None,
        "spec_decode_reason": "not measured",
        "quality": [],
        "image": None,
        "telemetry": None,
        "telemetry_reason": "not measured",
        "rates": None,
        "rate_search": None,
        "prefix_cache": None,
        "multi_turn": None,
        "tools": None,
        "errors": [],
    }


def spec_decode_block(s: Session) -> tuple[SpecDecodeBlock | None, str | None]:
    """(spec_decode, its reason): acceptance over the speed phases (single, parallel_N) with
    deltas added before dividing, and per phase."""
    phases = s.spec_phases
    if not phases:
        return None, "not measured: the run stopped before any phase"
    if not s.metrics_ok:
        return None, s.metrics_reason or "no /metrics endpoint"
    if not any(b is not None or a is not None for b, a in phases.values()):
        return None, "the server exposes no vllm:spec_decode_* counters (speculative decoding off, or not vLLM)"
    speed = [ph for ph in phases if ph == "single" or ph.startswith("parallel_")]
    pairs = [(b, a) for ph in speed for b, a in [phases[ph]] if b is not None and a is not None]
    top = sum_spec_deltas(pairs) or {**_NO_SPEC, "reason": "no speed phase was measured"}
    top["phases_included"] = speed
    top["by_phase"] = {ph: spec_delta(b, a) or {**_NO_SPEC, "reason": "scrape failed"}
                       for ph, (b, a) in phases.items()}
    return top, None


def telemetry_block(s: Session, tel: Telemetry) -> TelemetryBlock:
    tel.close()
    phases = {ph: tel.summary(ph, s.phase_tokens.get(ph)) for ph in tel.samples}
    return {"source": "nvidia-smi", "command": " ".join(tel.argv), "interval_s": tel.interval,
            "query": ",".join(tel.query), "gpu_names": tel.gpu_names, "phases": phases}


def finish(s: Session, status: str, tel: Telemetry | None, bandwidth_after: BandwidthReading | None = None
           ) -> MeasuredDocument:
    """The document at the end of the run (JSON-clean: no NaN or infinity); ``protocol.bandwidth``
    from the hand run's probes (:mod:`.bandwidth`) when it ran them."""
    doc = s.doc
    doc["status"] = status
    doc["finished_at"] = utc_now()
    doc["spec_decode"], doc["spec_decode_reason"] = spec_decode_block(s)
    if tel:
        doc["telemetry"], doc["telemetry_reason"] = telemetry_block(s, tel), None
    elif doc["telemetry"] is None:
        doc["telemetry_reason"] = s.telemetry_reason or "not measured"
    block = s.conditions.finish(tel, s.telemetry_reason)
    if s.bandwidth_before:
        block["bandwidth"] = bandwidth_mod.block(s.bandwidth_before, bandwidth_after)
        if block["bandwidth"]["drop"]:
            block["flags"].append({"code": "bandwidth_drop", "reason": block["bandwidth"]["drop"]["text"]})
    doc["protocol"] = block
    for fl in block["flags"]:
        s.warn(fl["code"], fl["reason"])
    return clean_json(doc)


def write_out(path: str, doc: MeasuredDocument) -> None:
    """The document as JSON to ``path`` (atomically, mode as the umask says) or to stdout for "-"."""
    text = redact(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".measure-", suffix=".json", dir=d)  # created 0600
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it: the umask decides
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
