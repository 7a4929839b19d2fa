"""The serving workload in the plan (pure functions, no Ansible run): ``bench_workloads: serving``
adds the prefix-caching pair, turns on every serving phase with measure.py options measure.py's
own parser accepts, takes the tool-call parser from the model profile, and preflight refuses a
tool check that the server could not answer, naming the fix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sparkbench import measure, plan, settings

from helpers import REPO

pytestmark = pytest.mark.unit

HOST = "spark-sim01"


def sim_vars(tmp: Path, **extra) -> dict:
    """spark-sim01's variables (group_vars all + its host vars), results under ``tmp``."""
    out: dict = {}
    for f in ("inventory/group_vars/all/bench.yml", "inventory/group_vars/all/matrix.yml"):
        out.update(yaml.safe_load((REPO / f).read_text()))
    inv = yaml.safe_load((REPO / "inventory/hosts.yml").read_text())
    out.update(inv["all"]["children"]["sparks"]["children"]["sim_sparks"]["hosts"][HOST])
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp)})
    out.update(extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


def by_name(p: dict) -> dict:
    return {e["name"]: e for e in p["variants"]}


def test_serving_adds_one_prefix_caching_pair_per_build(tmp_path):
    standard = plan.plan_host(sim_vars(tmp_path), HOST)
    serving = plan.plan_host(sim_vars(tmp_path, bench_workloads="serving"), HOST)
    added = [n for n in serving["names"] if n not in standard["names"]]
    assert added == ["nvidia-bare-noprefix", "unsloth-bare-noprefix"]
    entries = by_name(serving)
    off, on = entries["nvidia-bare-noprefix"], entries["nvidia-bare"]
    assert "--no-enable-prefix-caching" in off["launch"]["argv"]
    assert "--enable-prefix-caching" in on["launch"]["argv"]
    # Otherwise the same launch: the pair differs only in the caching flag.
    strip = lambda argv: [a for a in argv if "prefix-caching" not in a]
    assert strip(off["launch"]["argv"]) == strip(on["launch"]["argv"])
    assert off["variant"]["build"] == "nvidia" and off["variant"]["config"] == "bare"


def test_serving_measure_argv_parses_with_every_phase_on(tmp_path):
    entry = by_name(plan.plan_host(sim_vars(tmp_path, bench_workloads="serving"), HOST))["nvidia-bare"]
    argv = entry["measure_argv"]
    args = measure.build_parser().parse_args(argv[3:])
    assert args.rate == settings.SERVING_RATES
    assert args.prefix_tokens == settings.SERVING["prefix_tokens"] and args.turns == settings.SERVING["turns"]
    assert args.tools and args.tool_choice == "auto"
    assert args.tools_file.endswith("/tools.json") and args.quality_file.endswith("/quality.json")


def test_the_tool_parser_comes_from_the_model_profile(tmp_path):
    profile = json.loads((REPO / "sparkbench/data/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json").read_text())
    entries = by_name(plan.plan_host(sim_vars(tmp_path, llm_bench_tools=True), HOST))
    argv = entries["nvidia-mtp2"]["launch"]["argv"]
    assert "--enable-auto-tool-choice" in argv
    assert argv[argv.index("--tool-call-parser") + 1] == profile["tool_call_parser"] == "qwen3_xml"
    assert entries["nvidia-mtp2"]["preflight"]["verdict"] == "pass"
    # Without the tool check the launch has neither flag (the configuration hash stays as before).
    plain = by_name(plan.plan_host(sim_vars(tmp_path), HOST))["nvidia-mtp2"]
    assert "--tool-call-parser" not in plain["launch"]["argv"]
    assert plain["config_hash"] != entries["nvidia-mtp2"]["config_hash"]


def test_a_variants_own_parser_wins(tmp_path):
    extra = [{"name": "nvidia-hermes", "build": "nvidia", "config": "bare", "args": {"tool-call-parser": "hermes"}}]
    e = by_name(plan.plan_host(sim_vars(tmp_path, llm_bench_tools=True, bench_extra_variants=extra), HOST))
    argv = e["nvidia-hermes"]["launch"]["argv"]
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv


def test_preflight_refuses_a_tool_check_the_server_cannot_answer(tmp_path):
    # gemma's profile names no parser: vLLM 0.32 refuses every tool choice without one. The check
    # is refused (measure.py records it as skipped with the reason and the fix); the variant runs.
    extra = [{"name": "gemma-bare", "model": "google/gemma-3-4b-it", "build": "nvidia", "config": "bare"}]
    for choice in ("auto", "required", "named"):
        e = by_name(plan.plan_host(sim_vars(tmp_path, llm_bench_tools=True, llm_bench_tool_choice=choice,
                                            bench_extra_variants=extra), HOST))["gemma-bare"]
        pf = e["preflight"]
        assert "tool_parser_missing" not in [f["id"] for f in pf["failures"]]
        refused = next(r for r in pf["refused"] if r["id"] == "tool_parser_missing")
        assert refused["phase"] == "tools"
        assert "google/gemma-3-4b-it" in refused["reason"] and f"tool_choice {choice}" in refused["reason"]
        assert "tool_call_parser" in refused["remedy"] and "tool-call-parser: <parser>" in refused["remedy"]
        args = measure.build_parser().parse_args(e["measure_argv"][3:])
        assert args.tools and "tool_parser_missing" in args.tools_skip and "fix: " in args.tools_skip
        assert any(line.startswith("tools check refused: ") for line in e["summary"])
    # Naming a parser in the variant's args is the fix.
    extra[0]["args"] = {"tool-call-parser": "hermes"}
    e = by_name(plan.plan_host(sim_vars(tmp_path, llm_bench_tools=True, llm_bench_tool_choice="required",
                                        bench_extra_variants=extra), HOST))["gemma-bare"]
    assert e["preflight"]["refused"] == [] and "--enable-auto-tool-choice" in e["launch"]["argv"]
    assert measure.build_parser().parse_args(e["measure_argv"][3:]).tools_skip is None


def test_auto_tool_choice_without_a_parser_is_refused_before_launch(tmp_path):
    extra = [{"name": "nvidia-noparser", "build": "nvidia", "config": "bare", "args": {"enable-auto-tool-choice": True}}]
    pf = by_name(plan.plan_host(sim_vars(tmp_path, bench_extra_variants=extra), HOST))["nvidia-noparser"]["preflight"]
    assert [f["id"] for f in pf["failures"]] == ["auto_tool_choice_without_parser"]


def test_the_bracket_run_measures_single_stream_only(tmp_path):
    p = plan.plan_host(sim_vars(tmp_path, bench_workloads="serving", bench_bracket=True), HOST)
    args = measure.build_parser().parse_args(p["bracket"]["measure_argv"][3:])
    assert args.rate is None and not args.tools and args.prefix_tokens == 0 and args.turns == 0
