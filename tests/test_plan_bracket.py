"""Bracketing in the plan, the settings and the result document: pure-function tests (no Ansible
run; the end-to-end check is in tests/test_playbook_bench.py). Also the precision settings."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from sparkbench import plan, result, settings
from sparkbench.errors import InputError
from sparkbench.runner.progress import Progress

from helpers import REPO

pytestmark = pytest.mark.unit

SCHEMA = json.loads((REPO / "schema/result.schema.json").read_text())
HOST = {"name": "spark-sim01", "gpu": {"name": "NVIDIA GB10 (simulated)", "driver": "580.95.05", "cuda": "13.0"},
        "images": {}, "sparkbench_version": "deadbeef", "simulated": True}


def host_vars(tmp: Path, **extra) -> dict:
    """The simulated fleet's variables (group_vars all), results under ``tmp``."""
    out: dict = {}
    for f in ("inventory/group_vars/all/bench.yml", "inventory/group_vars/all/matrix.yml"):
        out.update(yaml.safe_load((REPO / f).read_text()))
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp), "sparkbench_gpu_less": True,
                "vllm_server_port": 8101})
    out.update(extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


def opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_first_measured_variant_is_bracketed_single_stream_only(tmp_path):
    p = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    ref, b = p["variants"][0], p["bracket"]
    assert ref["name"] == "nvidia-bare" and b["name"] == "nvidia-bare.bracket"
    assert b["bracket"] == {"of": "nvidia-bare", "position": "end"}
    assert b["result_path"] == str(tmp_path / "T" / "spark-sim01" / "nvidia-bare.bracket.json")
    assert b["launch"] == ref["launch"] and b["config_hash"] == ref["config_hash"] and b["variant"] == ref["variant"]
    assert b["action"] == "measure" and b["preflight"] == ref["preflight"]
    argv, main = b["measure_argv"], ref["measure_argv"]
    assert opt(argv, "--concurrency") == "none" and opt(argv, "--context") == "0"
    assert "--quality" not in argv and "--image" not in argv and "--quality" in main and "--image" in main
    for same in ("--runs", "--output-tokens", "--warmup", "--base-url", "--model", "--stall-timeout"):
        assert opt(argv, same) == opt(main, same), same
    assert opt(argv, "--runs") == "5"
    assert b["settings"] == {**ref["settings"], "concurrency": [], "context": [0], "quality": False, "image": False}
    assert b["summary"][0].startswith("bracket: nvidia-bare again at the end")
    # the main variants are untouched: no bracket among them, names unchanged
    assert "nvidia-bare.bracket" not in p["names"] and all("bracket" not in e for e in p["variants"])


def test_bracket_off_and_nothing_to_measure_give_none(tmp_path):
    assert plan.plan_host(host_vars(tmp_path, bench_bracket=False), "spark-sim01")["bracket"] is None
    assert plan.plan_host(host_vars(tmp_path, bench_bracket="false"), "spark-sim01")["bracket"] is None
    # every variant complete with the same hash: all skipped, no bracket
    p = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    for e in p["variants"]:
        Path(e["result_path"]).parent.mkdir(parents=True, exist_ok=True)
        Path(e["result_path"]).write_text(json.dumps({"status": "complete", "config_hash": e["config_hash"]}))
    again = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    assert {e["action"] for e in again["variants"]} == {"skip"} and again["bracket"] is None


def test_a_skipped_first_variant_moves_the_reference_on(tmp_path):
    p = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    first = p["variants"][0]
    Path(first["result_path"]).parent.mkdir(parents=True)
    Path(first["result_path"]).write_text(json.dumps({"status": "complete", "config_hash": first["config_hash"]}))
    again = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    assert again["variants"][0]["action"] == "skip"
    assert again["bracket"]["bracket"]["of"] == again["variants"][1]["name"] == "nvidia-mtp2"
    # bench_force: everything is measured again, the first variant is the reference again
    forced = plan.plan_host(host_vars(tmp_path, bench_force=True), "spark-sim01")
    assert forced["bracket"]["bracket"]["of"] == "nvidia-bare"


def test_a_variant_preflight_refuses_is_never_the_reference(tmp_path):
    extra = [{"name": "nvidia-mnbt2048", "build": "nvidia", "config": "bare", "args": {"max-num-batched-tokens": 2048}}]
    p = plan.plan_host(host_vars(tmp_path, bench_extra_variants=extra,
                                 bench_select=["nvidia-mnbt2048", "unsloth-bare"]), "spark-sim01")
    verdicts = {e["name"]: e["preflight"]["verdict"] for e in p["variants"]}
    assert verdicts["nvidia-mnbt2048"] == "fail"
    assert p["bracket"]["bracket"]["of"] == "unsloth-bare"
    only_refused = plan.plan_host(host_vars(tmp_path, bench_extra_variants=extra, bench_select=["nvidia-mnbt2048"]),
                                  "spark-sim01")
    assert only_refused["bracket"] is None


def test_a_failed_download_reaches_the_bracket_too(tmp_path):
    p = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    model = p["bracket"]["variant"]["model"]
    out = plan.provisioned(p, {model: "401 Client Error: Repository Not Found"})
    assert out["bracket"]["preflight"]["verdict"] == "fail" and out["variants"][0]["preflight"]["verdict"] == "fail"
    assert plan.provisioned(p, {})["bracket"] == p["bracket"]


def test_precision_settings_reach_both_command_lines(tmp_path):
    p = plan.plan_host(host_vars(tmp_path, llm_bench_target_precision_pct=1.5), "spark-sim01")
    for argv in (p["variants"][0]["measure_argv"], p["bracket"]["measure_argv"]):
        assert opt(argv, "--target-precision") == "1.5" and opt(argv, "--max-runs") == "20"  # 4 × 5 runs
    p = plan.plan_host(host_vars(tmp_path, llm_bench_target_precision_pct="2", llm_bench_max_runs="12"), "spark-sim01")
    assert opt(p["variants"][0]["measure_argv"], "--max-runs") == "12"
    off = plan.plan_host(host_vars(tmp_path, llm_bench_target_precision_pct="null"), "spark-sim01")
    assert "--target-precision" not in off["variants"][0]["measure_argv"]
    assert off["settings"]["target_precision_pct"] is None and off["settings"]["max_runs"] is None


@pytest.mark.parametrize("values, message", [
    ({"target_precision_pct": 0}, "llm_bench_target_precision_pct is 0; it must be null (off) or a percentage > 0 of the median"),
    ({"target_precision_pct": "fast"}, "llm_bench_target_precision_pct is 'fast'"),
    ({"target_precision_pct": "nan"}, "llm_bench_target_precision_pct is 'nan'"),
    ({"target_precision_pct": 1, "max_runs": 3, "runs": 5}, "llm_bench_max_runs is 3, fewer than llm_bench_runs 5"),
    ({"target_precision_pct": 1, "max_runs": 0}, "llm_bench_max_runs is 0; it must be null"),
    ({"max_runs": 20}, "llm_bench_max_runs is 20 but llm_bench_target_precision_pct is null"),
    ({"runs": 0}, "llm_bench_runs is 0; it must be a whole number >= 1 (e.g. 5)"),
])
def test_precision_settings_rules(values, message):
    errors = settings.settings_errors(values)
    assert len(errors) == 1 and message in errors[0], errors


def test_bad_precision_setting_stops_the_plan(tmp_path):
    with pytest.raises(InputError, match="llm_bench_max_runs is 2, fewer than llm_bench_runs 5"):
        plan.plan_host(host_vars(tmp_path, llm_bench_target_precision_pct=1, llm_bench_max_runs=2), "spark-sim01")


def test_bracket_document_carries_its_bracket_and_leaves_the_main_result_alone(tmp_path):
    p = plan.plan_host(host_vars(tmp_path), "spark-sim01")
    main_path = Path(p["variants"][0]["result_path"])
    rec = result.record(p["bracket"], HOST, "launch", False,
                        launch_failure={"reason": "container exited", "remedy": "read the log", "log_excerpt": "x"})
    assert rec["path"] == p["bracket"]["result_path"] and rec["variant"] == "nvidia-bare.bracket"
    doc = json.loads(Path(rec["path"]).read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["bracket"] == {"of": "nvidia-bare", "position": "end"} and doc["variant"]["name"] == "nvidia-bare"
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "launch"
    assert doc["config_hash"] == p["variants"][0]["config_hash"]
    assert doc["manifest"]["settings"]["concurrency"] == [] and not main_path.exists()
    # a main variant's document has no bracket key
    main = result.record(p["variants"][0], HOST, "preflight", False)
    assert "bracket" not in json.loads(Path(main["path"]).read_text())
    bad = {"bracket": {"of": "x", "position": "start"}, "schema_version": "1", "status": "failed",
           "failure": result.failure("host", "r")}
    assert any("bracket/position" in e for e in result.validation_errors(bad))


def test_progress_shows_the_bracket_as_its_own_entry_once_it_starts():
    def ok(host, facts):
        return {"event": "runner_on_ok", "event_data": {"host": host, "task": "t", "res": {"ansible_facts": facts}}}

    p = Progress()
    p.handle(ok("h1", {"bench_plan": {"names": ["a", "b"], "variants": [{"name": "a", "action": "measure"},
                                                                       {"name": "b", "action": "measure"}],
                                      "bracket": {"name": "a.bracket"}}}))
    p.handle(ok("h2", {"bench_plan": {"names": ["a"], "variants": [{"name": "a", "action": "measure"}],
                                      "bracket": {"name": "a.bracket"}}}))
    assert p.snapshot() == {"h1": {"a": "waiting", "b": "waiting"}, "h2": {"a": "waiting"}}
    for v in ("a", "b", "a.bracket"):
        p.handle(ok("h1", {"bench_stage": {"variant": v, "stage": "launch"}}))
        p.handle(ok("h1", {"bench_stage": {"variant": v, "stage": "measure"}}))
        p.handle(ok("h1", {"bench_stage": {"variant": v, "stage": "done"}}))
    p.handle(ok("h2", {"bench_stage": {"variant": "a", "stage": "failed", "reason": "launch: boom"}}))
    p.handle({"event": "playbook_on_stats", "event_data": {"failures": {}, "dark": {}}})
    # h1 bracketed its sequence; h2's reference failed, so its bracket never ran (and is no failure)
    assert p.snapshot() == {"h1": {"a": "done", "b": "done", "a.bracket": "done"}, "h2": {"a": "failed"}}
    assert p.variant_names() == ["a", "b", "a.bracket"]
