"""The probe before any request: /health, /v1/models, /version (else llama.cpp's /props and
/slots), /metrics, and the profiles of the served model. Decides the model; raises Unreachable."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .common import Unreachable, log
from .profiles import load_model_profile
from .shapes import JSONObject, ServerBlock
from .sse import error_message

if TYPE_CHECKING:
    from .session import Session


def _models(s: Session) -> list[JSONObject]:
    """/health, then /v1/models' list (Unreachable with the reason)."""
    try:
        status, _ = s.ep.get("/health", timeout=15)
    except OSError as exc:
        raise Unreachable(f"cannot reach the server at {s.ep.display}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    if status not in (200, 404):
        raise Unreachable(f"server at {s.ep.display} is not ready: GET /health answered HTTP {status}")
    try:
        status, body = s.ep.get("/v1/models", timeout=30)
    except OSError as exc:
        raise Unreachable(f"GET /v1/models failed at {s.ep.display}: {exc}") from None
    if status == 401:
        raise Unreachable("the server wants an API key (HTTP 401 on /v1/models): "
                          "give --api-key or set SPARKBENCH_API_KEY")
    if status != 200:
        raise Unreachable(f"GET /v1/models answered HTTP {status}: {error_message(body)}")
    try:
        models = [m for m in json.loads(body).get("data", []) if isinstance(m, dict) and m.get("id")]
    except (ValueError, AttributeError):
        raise Unreachable("GET /v1/models did not return a JSON model list") from None
    if not models:
        raise Unreachable("GET /v1/models lists no model")
    return models


def probe(s: Session) -> None:
    """What the server is: its model (``--model`` or the first listed), context length, version,
    whether it is simulated or llama.cpp, whether /metrics answers; the profiles when --hardware."""
    a = s.args
    models = _models(s)
    chosen = models[0]
    if a.model:
        match = [m for m in models if m["id"] == a.model]
        if not match:
            raise Unreachable(f"--model {a.model!r} is not served; /v1/models lists: "
                              + ", ".join(m["id"] for m in models))
        chosen = match[0]
    s.model = chosen["id"]
    srv = s.doc["server"]
    srv["model"] = s.model
    mml = chosen.get("max_model_len")
    meta = chosen.get("meta") if isinstance(chosen.get("meta"), dict) else {}
    s.llamacpp = chosen.get("owned_by") == "llamacpp" or bool(meta)
    if isinstance(mml, int) and not isinstance(mml, bool) and mml > 0:
        srv["max_model_len"], srv["max_model_len_source"] = mml, "/v1/models max_model_len"
    elif isinstance(meta.get("n_ctx"), int) and meta["n_ctx"] > 0:  # llama.cpp
        srv["max_model_len"], srv["max_model_len_source"] = meta["n_ctx"], "/v1/models meta.n_ctx"
    v = s.get_json("/version")
    if isinstance(v, dict):
        if v.get("version") is not None:
            srv["version"], srv["version_source"] = str(v["version"]), "/version"
        sim = v.get("simulated") is True
        srv["simulated"] = sim
        s.doc["simulated"] = sim
    if srv["version"] is None or s.llamacpp:
        probe_llamacpp(s, srv)
    s.doc["settings"]["model"] = s.model
    log(f"server {s.ep.display}: model {s.model}, version {srv['version']}"
        + (" (SIMULATED)" if srv["simulated"] else "")
        + (f", {s.server_slots} slots" if s.server_slots else ""))
    _probe_metrics(s)
    if s.hardware:
        _attach_profiles(s)


def _probe_metrics(s: Session) -> None:
    try:
        status, _ = s.ep.get("/metrics", timeout=30)
        if status == 200:
            s.metrics_ok = True
        else:
            s.metrics_reason = f"GET /metrics answered HTTP {status}"
    except OSError as exc:
        s.metrics_reason = f"GET /metrics failed: {exc}"


def _attach_profiles(s: Session) -> None:
    """``profile``: the --hardware profile and the served model's profile (a warning without one)."""
    assert s.hardware is not None
    hw, path = s.hardware
    model, mpath = load_model_profile(s.model, s.args.profiles_dir)
    s.doc["profile"] = {"hardware": hw, "model": model, "hardware_file": path, "model_file": mpath}
    if model is None:
        s.warn("no_model_profile", f"no model profile for {s.model} in {s.args.profiles_dir}"
               f"/models: the result carries profile.hardware only, so no roofline yet")


def probe_llamacpp(s: Session, srv: ServerBlock) -> None:
    """llama.cpp's llama-server: /props (total_slots, build_info, n_ctx), else /slots."""
    props = s.get_json("/props")
    if isinstance(props, dict):
        slots = props.get("total_slots")
        if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
            s.server_slots = slots
            srv["slots"], srv["slots_source"] = slots, "/props total_slots"
            s.llamacpp = True
        build = props.get("build_info")
        if srv["version"] is None and isinstance(build, str) and build:
            srv["version"], srv["version_source"] = build, "/props build_info"
        gen = props.get("default_generation_settings")
        n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
        if srv["max_model_len"] is None and isinstance(n_ctx, int) and n_ctx > 0:
            srv["max_model_len"], srv["max_model_len_source"] = n_ctx, "/props n_ctx"
    if s.server_slots is None and s.llamacpp:
        slots = s.get_json("/slots")
        if isinstance(slots, list) and slots:
            s.server_slots = len(slots)
            srv["slots"], srv["slots_source"] = len(slots), "/slots"
