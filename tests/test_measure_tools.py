"""measure.py's tool-call check (--tools): the checker (judge_tool_calls) against recorded and
constructed outputs in real vLLM 0.32's message shape (tests/fixtures/tool_outputs/*.json, each
naming the bucket it must land in), and the phase end to end against the simulator, whose calls
are decided from the request and written in the model's native format (vllm_sim/toolcalls.py):
the right parser passes every prompt, a wrong one leaves the calls unparsed, a server without the
tool flags answers "auto" with vLLM's HTTP 400 (request_error, exit 3), required/named pass with
any parser (structured outputs) and skip the prompt that needs no call. Every document is
validated against schema/result.schema.json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sparkbench import measure as M

from conftest import port_in, run_measure
from helpers import REPO

MEASURE = REPO / "scripts" / "measure.py"
FIXTURES = REPO / "tests" / "fixtures" / "tool_outputs"
TOOLS = json.loads((REPO / "sparkbench/data/prompts/tools.json").read_text(encoding="utf-8"))
SCHEMA = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
QWEN = "nvidia/Qwen3.6-35B-A3B-NVFP4"        # tool_call_format qwen3_xml, parser qwen3_xml
BASE = ["--output-tokens", "8", "--runs", "1", "--warmup", "0", "--concurrency", "none",
        "--telemetry", "off", "--kernel-log", "off"]
FAST = {"VLLM_SIM_RATE": "2000"}
PROMPTS = {p["id"]: p for p in TOOLS["prompts"]}


def measure(args: list[str], out: Path, timeout: float = 60) -> tuple[int, dict | None, str]:
    return run_measure([*BASE, *args], out, timeout)


# ---- the tools file ---------------------------------------------------------------------------


@pytest.mark.unit
def test_tools_file_covers_zero_one_two_calls_and_every_category() -> None:
    data = M.load_tools(str(REPO / "sparkbench/data/prompts/tools.json"))
    counts = {len(p["expected"]) for p in data["prompts"]}
    assert {0, 1, 2} <= counts and len(data["prompts"]) >= 5
    assert {p["category"] for p in data["prompts"]} == set(M.TOOL_CATEGORIES)
    kinds = {s.get("type") for t in data["tools"] for s in t["function"]["parameters"]["properties"].values()}
    assert {"string", "integer", "number"} <= kinds
    assert any("enum" in s for t in data["tools"] for s in t["function"]["parameters"]["properties"].values())
    assert M.default_tools_file() == str(REPO / "sparkbench/data/prompts/tools.json")


@pytest.mark.unit
def test_load_tools_rejects_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"tools": TOOLS["tools"], "prompts": [
        {"id": "x", "category": "simple", "prompt": "hi", "expected": [{"name": "nope"}]}]}))
    with pytest.raises(ValueError, match="'expected' must list calls of the file's tools"):
        M.load_tools(str(bad))
    with pytest.raises(ValueError, match="does not exist"):
        M.load_tools(str(tmp_path / "missing.json"))


# ---- the checker against recorded outputs ------------------------------------------------------


FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))


@pytest.mark.unit
def test_fixtures_cover_every_bucket_but_request_error() -> None:
    buckets = {json.loads(f.read_text())["bucket"] for f in FIXTURE_FILES}
    assert set(M.TOOL_BUCKETS) - {"request_error"} <= buckets
    assert None in buckets   # and passes


@pytest.mark.unit
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[f.stem for f in FIXTURE_FILES])
def test_checker_puts_each_recorded_output_in_its_bucket(path: Path) -> None:
    fx = json.loads(path.read_text(encoding="utf-8"))
    prompt = PROMPTS[fx["prompt_id"]]
    expected = prompt["expected"][:1] if fx["tool_choice"] == "named" else prompt["expected"]
    choice = fx["response"]["choices"][0]
    v = M.judge_tool_calls({**prompt, "expected": expected}, M.prompt_tools(prompt, TOOLS["tools"]),
                           choice["message"], choice["finish_reason"])
    assert v["bucket"] == fx["bucket"], v
    assert v["verdict"] == ("pass" if fx["bucket"] is None else "fail")
    if fx["bucket"]:
        assert v["reason"]
    if fx["bucket"] == "unparsed" and not choice["message"].get("tool_calls"):
        assert v["content_excerpt"] == (choice["message"]["content"] or "")[:200]
    else:
        assert v["content_excerpt"] is None


@pytest.mark.unit
def test_checker_details() -> None:
    weather = PROMPTS["weather_simple"]
    tools = M.prompt_tools(weather, TOOLS["tools"])
    assert [t["function"]["name"] for t in tools] == ["get_weather"]

    def call(args, name="get_weather"):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "chatcmpl-tool-1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}

    ok = M.judge_tool_calls(weather, tools, call({"location": "paris, france", "unit": "celsius"}), "tool_calls")
    assert ok["verdict"] == "pass" and ok["calls"] == [{"name": "get_weather",
                                                        "arguments": {"location": "paris, france", "unit": "celsius"}}]
    extra = M.judge_tool_calls(weather, tools, call({"location": "Paris", "unit": "celsius", "days": 3}), "stop")
    assert extra["bucket"] == "param_type_error" and "'days' is not in the schema" in extra["reason"]
    unknown = M.judge_tool_calls(weather, tools, call({}, name="get_time"), "tool_calls")
    assert unknown["bucket"] == "wrong_tool" and "not an offered tool" in unknown["reason"]
    arr = M.judge_tool_calls(weather, tools, call([1, 2]), "tool_calls")
    assert arr["bucket"] == "unparsed" and arr["calls"][0]["arguments"] == "[1, 2]"
    none = M.judge_tool_calls(weather, tools, {"role": "assistant", "content": "It is sunny."}, "stop")
    assert none["bucket"] == "wrong_tool" and "0 call(s)" in none["reason"]
    flights = PROMPTS["flights_multiple"]
    allt = M.prompt_tools(flights, TOOLS["tools"])
    # integer: 2.0 is an integer in JSON schema, "2" is not, 0 is below the minimum
    assert M.judge_tool_calls(flights, allt, call({"origin": "Tokyo", "destination": "Sydney", "passengers": 2.0},
                                                   "search_flights"), "tool_calls")["verdict"] == "pass"
    for bad in ("2", 0, True):
        v = M.judge_tool_calls(flights, allt, call({"origin": "Tokyo", "destination": "Sydney", "passengers": bad},
                                                    "search_flights"), "tool_calls")
        assert v["bucket"] == "param_type_error", (bad, v)
    s = M.summarise_tools([
        {"category": "simple", "verdict": "pass", "bucket": None},
        {"category": "parallel", "verdict": "fail", "bucket": "wrong_tool"},
        {"category": "irrelevance", "verdict": "skipped", "bucket": None}])
    assert s == {"passed": 1, "failed": 1, "skipped": 1, "total": 2, "by_bucket": {"wrong_tool": 1},
                 "by_category": {"simple": {"passed": 1, "total": 1}, "parallel": {"passed": 0, "total": 1}}}


# ---- the simulator end to end ------------------------------------------------------------------


def run_tools(sim_factory, tmp_path: Path, sim_args: list[str], tool_args: list[str], model: str = QWEN,
              name: str = "t") -> tuple[int, dict, str]:
    s = sim_factory(model=model, args=["--max-num-batched-tokens", "4096", "--reasoning-parser", "qwen3", *sim_args],
                    env=FAST,
                    port=port_in(19200, 19300))
    code, doc, err = measure(["--base-url", s.base_url, "--tools", *tool_args], tmp_path / f"{name}.json")
    assert doc is not None, err
    return code, doc, err


@pytest.mark.sim
def test_sim_right_parser_passes_every_prompt(sim_factory, tmp_path: Path) -> None:
    code, doc, err = run_tools(sim_factory, tmp_path, ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml"],
                               [])
    assert code == 0, err
    t = doc["tools"]
    assert t["tool_choice"] == "auto" and t["file"].endswith("sparkbench/data/prompts/tools.json")
    assert (t["passed"], t["failed"], t["skipped"], t["total"]) == (len(PROMPTS), 0, 0, len(PROMPTS)), t
    assert t["by_bucket"] == {} and t["by_category"]["parallel"] == {"passed": 2, "total": 2}
    by_id = {p["id"]: p for p in t["prompts"]}
    assert by_id["no_call_chitchat"]["calls"] == [] and by_id["no_call_chitchat"]["finish_reason"] == "stop"
    par = by_id["weather_parallel"]
    assert par["finish_reason"] == "tool_calls"
    assert sorted(c["arguments"]["location"] for c in par["calls"]) == ["Berlin", "Madrid"]
    assert doc["settings"]["tools"] is True and doc["settings"]["tool_choice"] == "auto"
    assert doc["settings"]["tools_max_tokens"] == 512


@pytest.mark.sim
def test_sim_wrong_parser_leaves_calls_unparsed(sim_factory, tmp_path: Path) -> None:
    code, doc, err = run_tools(sim_factory, tmp_path, ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"], [])
    assert code == 0, err
    t = doc["tools"]
    by_id = {p["id"]: p for p in t["prompts"]}
    assert by_id["no_call_chitchat"]["verdict"] == "pass"
    assert t["by_bucket"] == {"unparsed": len(PROMPTS) - 1}
    p = by_id["weather_simple"]
    assert p["calls"] == [] and p["finish_reason"] == "stop"
    assert "<function=get_weather>" in p["content_excerpt"] and len(p["content_excerpt"]) <= 200


@pytest.mark.sim
def test_sim_without_tool_flags_auto_is_a_request_error(sim_factory, tmp_path: Path) -> None:
    code, doc, err = run_tools(sim_factory, tmp_path, [], [])
    assert code == 3, err
    assert doc["status"] == "incomplete"
    t = doc["tools"]
    assert t["by_bucket"] == {"request_error": len(PROMPTS)} and t["passed"] == 0
    msg = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    assert all(p["verdict"] == "fail" and msg in p["reason"] for p in t["prompts"])
    assert sum(1 for e in doc["errors"] if e["phase"] == "tools") == len(PROMPTS)


@pytest.mark.sim
@pytest.mark.parametrize("choice", ["required", "named"])
def test_sim_required_and_named_pass_with_any_parser(sim_factory, tmp_path: Path, choice: str) -> None:
    # hermes does not read this model's XML, but forced tool choice decodes in the parser's own tag
    code, doc, err = run_tools(sim_factory, tmp_path, ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                               ["--tool-choice", choice], name=choice)
    assert code == 0, err
    t = doc["tools"]
    assert t["tool_choice"] == choice and t["skipped"] == 1 and t["failed"] == 0, t
    skipped = next(p for p in t["prompts"] if p["verdict"] == "skipped")
    assert skipped["id"] == "no_call_chitchat" and "forces a call" in skipped["reason"]
    by_id = {p["id"]: p for p in t["prompts"]}
    if choice == "named":
        assert len(by_id["weather_parallel"]["expected"]) == 1   # one named function, one call
        assert by_id["weather_simple"]["finish_reason"] == "stop"   # resolve_finish_reason: named gives stop
    else:
        assert by_id["weather_parallel"]["finish_reason"] == "tool_calls"


@pytest.mark.sim
def test_sim_flag_checks(tmp_path: Path) -> None:
    """vLLM 0.32's start-up errors for the tool flags."""
    def serve(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "scripts" / "vllm_sim"), "serve", QWEN, "--port", "1",
                               *flags], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "VLLM_SIM_LOAD_SECONDS": "0"})
    p = serve("--enable-auto-tool-choice")
    assert p.returncode == 1 and "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser" in p.stderr + p.stdout
    p = serve("--enable-auto-tool-choice", "--tool-call-parser", "nope")
    assert p.returncode == 1 and "tool_parser:'nope' which has not been registered" in p.stderr + p.stdout


@pytest.mark.unit
def test_sim_reader_decides_from_the_request() -> None:
    """The simulator's calls come from the request text, not from a stored answer."""
    from vllm_sim import toolcalls as T

    tools = TOOLS["tools"]
    assert T.decide("Convert 75 GBP to USD please.", tools, "auto") == [
        ("convert_currency", {"amount": 75, "from_currency": "GBP", "to_currency": "USD"})]
    assert T.decide("Any flights from Oslo to Lima?", tools, "auto") == [
        ("search_flights", {"origin": "Oslo", "destination": "Lima"})]
    assert T.decide("Tell me a story.", tools, "auto") == []
    forced = T.decide("Tell me a story.", tools, "required")
    assert len(forced) == 1 and not M.schema_errors(forced[0][1], tools[0]["function"]["parameters"])
    for fmt, parser in (("hermes", "hermes"), ("qwen3_xml", "qwen3_coder"), ("harmony", "openai")):
        calls = T.decide("Weather in Kyoto in fahrenheit and in Lyon in celsius", tools, "auto")
        text = T.render(calls, fmt)
        assert T.parse(text, fmt, parser, tools) == (None, calls)
        assert T.parse(text, fmt, "mistral", tools) is None
    # a truncated Hermes call does not parse (json.loads throws): the raw text stays content
    assert T.parse(T.render(calls, "hermes")[:-20], "hermes", "hermes", tools) is None
    assert T.finish_reason("stop", True, "auto") == "tool_calls"
    assert T.finish_reason("stop", True, {"type": "function", "function": {"name": "x"}}) == "stop"
    assert T.finish_reason("length", True, "required") == "length"


@pytest.mark.sim
def test_a_missing_tools_file_is_an_argument_error(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(MEASURE), "--base-url", "http://127.0.0.1:9", "--tools", "--tools-file",
                        str(tmp_path / "nope.json"), "--out", str(tmp_path / "o.json")], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "--tools-file:" in p.stderr and "does not exist" in p.stderr
    assert not (tmp_path / "o.json").exists()


@pytest.mark.sim
def test_a_refused_check_sends_nothing_and_keeps_the_reason(sim_factory, tmp_path):
    """--tools-skip (the plan's refusal, e.g. no tool-call parser): every prompt skipped with the
    reason, no tool request reaches the server, and the run is complete."""
    reason = "refused by preflight (tool_parser_missing): no parser; fix: add tool_call_parser"
    code, doc, err = run_tools(sim_factory, tmp_path, [], ["--tools-skip", reason])
    assert code == 0, err
    t = doc["tools"]
    assert t["reason"] == reason and t["total"] == 0 and t["skipped"] == len(t["prompts"]) >= 3
    assert all(p["verdict"] == "skipped" and p["reason"] == reason for p in t["prompts"])
    assert doc["errors"] == []
