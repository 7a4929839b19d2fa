"""Real vLLM's failures that take a whole engine start, read at the unit layer: the result documents
``make fixtures`` recorded from bench.yml on real vLLM (tests/fixtures/recorded/real-vllm/, by
tests/test_real_vllm_e2e.py with SPARKBENCH_RECORD_FIXTURES=1).

Each document is what the run wrote (stage, known issue, reason, remedy, the container log's
excerpt); each excerpt is classified again by today's code and known_issues.yml
(``sparkbench.preflight.explain_launch``), so that a change to either that no longer recognises
real vLLM's own log lines fails here, in seconds.
"""
from __future__ import annotations

import json
import re

import pytest

from sparkbench import preflight

from helpers import FIXTURES

pytestmark = pytest.mark.unit

RECORDED = FIXTURES / "recorded" / "real-vllm"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, issue", [("no-model", "model_not_found"),
                                         ("too-long", "kv_cache_too_small_for_max_model_len"),
                                         ("engine-dies", "execute_model_timeout")])
def test_todays_known_issues_still_read_each_recorded_log(name, issue):
    d = recorded(name)
    assert d["simulated"] is False and d["manifest"]["backend"] == "vllm-cpu", d["manifest"]
    f = d["failure"]
    assert f["issues"] == [issue], f
    again = preflight.explain_launch(f["log_excerpt"])
    assert again["issue"] == issue, again
    assert again["line"] and again["line"] in f["log_excerpt"], again


def test_missing_model_is_diagnosed_from_the_offline_log():
    f = recorded("no-model")["failure"]
    assert f["stage"] == "launch" and f["issues"] == ["model_not_found"]
    assert "LocalEntryNotFoundError" in f["reason"]
    assert "Cannot find an appropriate cached snapshot folder" in f["log_excerpt"]
    assert "model id" in f["remedy"]


def test_max_model_len_beyond_the_kv_cache():
    f = recorded("too-long")["failure"]
    assert f["stage"] == "launch" and f["issues"] == ["kv_cache_too_small_for_max_model_len"]
    assert "--max-model-len 2000000" in f["reason"] and "GiB" in f["reason"]
    assert re.search(r"lower --max-model-len to \d+ or less", f["remedy"]) and "VLLM_CPU_KVCACHE_SPACE" in f["remedy"]


def test_engine_death_after_health_fails_the_measure_stage_only():
    d = recorded("engine-dies")
    # With a 0 s execute_model timeout the engine usually dies on the first request ("failed");
    # now and then a request is served before the timeout fires and it dies mid-run ("incomplete").
    assert d["status"] in ("failed", "incomplete"), d
    f = d["failure"]
    assert f["stage"] == "measure", f
    assert f["issues"] == ["execute_model_timeout"], f
    assert "EngineDeadError" in f["reason"] and "TimeoutError: RPC call to execute_model timed out" in f["reason"]
    assert "EngineDeadError" in f["log_excerpt"] and "HTTP 500" in f["reason"]
    assert "EngineCore encountered an issue" in f["reason"]  # measure.py's own first error, appended
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in f["remedy"]
    # The server had been ready (measure.py reached it and recorded the requests' HTTP 500).
    assert d["server"]["version"] == "0.32.0" and d["single"]["runs"]
    errors = [r["error"] or "" for r in d["single"]["runs"]]
    assert any("HTTP 500" in e or "EngineCore encountered an issue" in e for e in errors), errors
    assert all(errors) or d["status"] == "incomplete", errors
