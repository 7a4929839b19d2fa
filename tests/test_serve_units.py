"""sparkbench.serve without a unit: the source's checks, the serve settings, placement, the canary's
judgement, the record of a failed deploy (pure functions; ``pytest -m unit``)."""
from __future__ import annotations

import json

import pytest

from sparkbench import residents
from sparkbench.errors import InputError
from sparkbench.launch import config_hash
from sparkbench.serve import canary, deploy_plan, deployment_records, health_canary, source

pytestmark = pytest.mark.unit

SETTINGS = {"runs": 5, "output_tokens": 64}


def doc(rates=(100.0, 101.0, 99.0, 100.5, 100.2), **extra) -> dict:
    launch = {"argv": ["m/x", "--host", "127.0.0.1", "--port", "8000", "--max-num-seqs", "8"], "command": "docker run …",
              "env": {"A": "1"}, "secret_env": []}
    d = {"status": "complete", "host": "h1", "variant": {"name": "v1", "model": "m/x", "image": "img:1"},
         "launch": launch, "manifest": {"image": "img:1", "image_id": "sha256:aa", "settings": SETTINGS},
         "single": {"decode_tok_s_median": 100.2, "runs": [{"decode_tok_s": r, "valid": True} for r in rates]},
         "finished_at": "2026-12-01T00:00:00Z", "simulated": True}
    d["config_hash"] = config_hash({**launch, "image": "img:1"}, SETTINGS)
    d.update(extra)
    return d


def test_the_newest_complete_run_is_found_and_a_missing_run_names_the_field_and_the_fix(tmp_path):
    for run, status, when in (("A", "complete", "2026-12-01T00:00:00Z"), ("B", "failed", "2026-12-02T00:00:00Z"),
                              ("C", "complete", "2026-12-03T00:00:00Z")):
        (tmp_path / run / "h1").mkdir(parents=True)
        (tmp_path / run / "h1" / "v1.json").write_text(json.dumps(doc(status=status, finished_at=when)))
    assert source.find(tmp_path, "h1", "v1")[0] == "C"
    # A newer health run (health.yml's canary of the variant, or of its resident) is no source.
    (tmp_path / "H" / "h1").mkdir(parents=True)
    (tmp_path / "H" / "h1" / "v1.json").write_text(json.dumps(doc(finished_at="2026-12-04T00:00:00Z")))
    (tmp_path / "H" / "health.json").write_text("{}")
    assert source.find(tmp_path, "h1", "v1")[0] == "C" and source.find(tmp_path, "h1", "v1", "H")[0] == "H"
    with pytest.raises(InputError, match=r"serve_run=Z: no result .*runs where v1 is complete on h1: C, A; set serve_run"):
        source.find(tmp_path, "h1", "v1", "Z")
    with pytest.raises(InputError, match=r"serve_variant=v2: no complete result of v2 on h1 .*measure it first"):
        source.find(tmp_path, "h1", "v2")
    with pytest.raises(InputError, match="serve_variant is not set"):
        source.find(tmp_path, "h1", "")


def test_a_changed_document_or_too_few_requests_is_refused():
    assert source.source(doc(), "p", "R")["config_hash"] == doc()["config_hash"]
    edited = doc()
    edited["launch"]["argv"][-1] = "16"
    with pytest.raises(InputError, match="does not match its launch and settings"):
        source.source(edited, "p", "R")
    with pytest.raises(InputError, match="3 valid single-stream requests .*llm_bench_runs >= 5"):
        source.source(doc(rates=(1.0, 2.0, 3.0)), "p", "R")
    with pytest.raises(InputError, match="not complete"):
        source.source(doc(status="failed"), "p", "R")


def test_serve_settings_refuse_an_open_address_without_a_key_and_colliding_ports():
    with pytest.raises(InputError, match="serve_listen is 0.0.0.0.*serve_api_key"):
        deploy_plan.settings({"serve_listen": "0.0.0.0"})
    assert deploy_plan.settings({"serve_listen": "0.0.0.0", "serve_api_key": "k"})["secret_env"] == ["VLLM_API_KEY"]
    with pytest.raises(InputError, match="serve_port 8000 is the port bench.yml serves"):
        deploy_plan.settings({"serve_port": 8000})
    with pytest.raises(InputError, match="serve_canary_runs is 3"):
        deploy_plan.settings({"serve_canary_runs": 3})


def test_the_resident_is_the_recorded_argv_at_the_serving_address():
    s = deploy_plan.settings({"serve_port": 9100})
    dep = deploy_plan.deployment(source.source(doc(), "p", "R"), s, "h1")
    c = dep["resident"]["container"]
    assert c["command"] == ["m/x", "--host", "127.0.0.1", "--port", "9100", "--max-num-seqs", "8"]
    assert c["restart_policy"] == "unless-stopped" and c["env"] == {"A": "1"} and c["name"] == "sparkbench-resident-v1"
    assert "--restart unless-stopped" in dep["resident"]["command"]


def test_placement_beside_when_memory_holds_both_else_in_place():
    s = deploy_plan.settings({})
    dep = deploy_plan.deployment(source.source(doc(simulated=False, profile={"hardware": {
        "device": "gpu", "unified_memory_gb": 128}}), "p", "R"), s, "h1")
    prev = {"name": "sparkbench-resident-v0"}
    assert deploy_plan.placement(dep, None, "", "auto")["mode"] == "fresh"
    big = deploy_plan.placement(dep, prev, "MemAvailable: 125829120 kB\n", "auto")  # 120 GiB
    assert big["mode"] == "beside" and big["need_gib"] == pytest.approx(115.2)
    small = deploy_plan.placement(dep, prev, "MemAvailable: 20971520 kB\n", "auto")  # 20 GiB
    assert small["mode"] == "replace" and "do not fit in 20.0 GiB" in small["reason"]


def test_the_canary_fails_only_when_it_differs_and_is_more_than_5_percent_slower():
    base = [100.0, 101.0, 99.0, 100.5, 100.2]
    measured = lambda rates: json.dumps({"single": {"runs": [{"decode_tok_s": r, "valid": True} for r in rates]}})  # noqa: E731
    same = canary.judge(base, measured([100.1, 99.8, 100.4, 100.0, 99.9]), 0, 5)
    assert same["passed"] and same["text"].startswith("no difference detectable above")
    slow = canary.judge(base, measured([60.0, 61.0, 59.5, 60.2, 60.1]), 0, 5)
    assert not slow["passed"] and slow["text"].startswith("differs by −") and "more than 5 %" in slow["reason"]
    slightly = canary.judge(base, measured([97.9, 98.0, 98.1, 97.95, 98.05]), 0, 5)
    assert slightly["verdict"]["kind"] == "differs" and slightly["passed"]
    broken = canary.judge(base, "", 2, 5, "measure: server unreachable")
    assert not broken["passed"] and "server unreachable" in broken["reason"]


def test_a_failed_deploy_record_says_what_is_left():
    s = deploy_plan.settings({})
    dep = deploy_plan.deployment(source.source(doc(), "p", "R"), s, "h1")
    dep["previous"] = {"name": "sparkbench-resident-v0", "variant": "v0", "port": 8080, "run": "R0"}
    left = deployment_records.left_behind(dep, "canary", True, False)
    assert "sparkbench-resident-v0 (v0, run R0) started again on port 8080" in left
    rec = deployment_records.record(dep, "failed", "2026-12-01T00:00:00Z", failure={"stage": "canary", "reason": "slow"}, left=left)
    assert rec.failure.remedy == deployment_records.REMEDY["canary"] and rec.previous.name == "sparkbench-resident-v0"
    lost = deployment_records.left_behind(dep, "unreachable", False, True)
    assert "stopped answering" in lost and "previous resident sparkbench-resident-v0 was not stopped" in lost, lost
    assert "sparkbench-resident-v0 stopped" in deployment_records.left_behind(dep, "unreachable", True, True)


def deployed_record(tmp_path, variant="v1", port=9100, when="2026-12-01T00:00:00Z", **extra):
    src_path = tmp_path / "R" / "h1" / f"{variant}.json"
    src_path.parent.mkdir(parents=True, exist_ok=True)
    src_path.write_text(json.dumps(doc()))
    dep = deploy_plan.deployment(source.source(doc(), str(src_path), "R"), deploy_plan.settings({"serve_port": port}), "h1")
    dep.update(variant=variant, names={**dep["names"], "resident": f"sparkbench-resident-{variant}"},
               health_argv=["python3", "-I", "/w/measure.pyz", "--base-url", f"http://127.0.0.1:{port}"],
               remote_dir="/w", **extra)
    return deployment_records.record(dep, "deployed", when, canary={"passed": True, "text": "no difference detectable above 2 %",
                                                         "samples": [100.0, 100.1, 99.9, 100.2, 99.8]})


def labelled(variant, role="resident", state="running", name="") -> dict:
    return {"Names": [f"/{name or f'sparkbench-{role}-{variant}'}"], "State": state, "Status": state,
            "Labels": {"sparkbench.resident": variant, "sparkbench.role": role, "sparkbench.port": "9100"}}


def test_a_resident_unit_s_health_canary_is_its_newest_deployed_resident(tmp_path):
    old, new = deployed_record(tmp_path, "v0", 9101, "2026-11-01T00:00:00Z"), deployed_record(tmp_path, "v1")
    assert health_canary.canary(residents.residents([labelled("v1", "candidate")]), [new], tmp_path, "H", "h1") is None
    assert health_canary.canary([], [new], tmp_path, "H", "h1") is None
    # A candidate renamed into place keeps its role label: the record's container name decides.
    renamed = residents.residents([labelled("v1", "candidate", name="sparkbench-resident-v1")])
    assert health_canary.canary(renamed, [new], tmp_path, "H", "h1")["deployment"]["name"] == "sparkbench-resident-v1"
    found = residents.residents([labelled("v0"), labelled("v1")])
    c = health_canary.canary(found, [old, new], tmp_path, "H", "h1")
    assert c["deployment"]["name"] == "sparkbench-resident-v1" and c["deployment"]["deployed_at"] == new.when
    assert c["deployment"]["samples"] == new.canary.samples and c["others"] == ["sparkbench-resident-v0"]
    assert c["argv"] == new.health_argv and c["remote_dir"] == "/w"
    e = c["entry"]
    assert e["result_path"] == str(tmp_path / "H" / "h1" / "v1.json") and e["measure_argv"] == new.health_argv
    assert e["launch"]["argv"] == ["m/x", "--host", "127.0.0.1", "--port", "9100", "--max-num-seqs", "8"]
    assert e["settings"] == new.health_settings and e["settings"]["runs"] == 5
    assert e["config_hash"] == config_hash(e["launch"], e["settings"]) != doc()["config_hash"]
    assert "canary: resident sparkbench-resident-v1 (v1 from run R" in c["summary"][0]
    stopped = health_canary.canary(residents.residents([labelled("v1", state="exited")]), [new], tmp_path, "H", "h1")
    assert "not running (exited)" in stopped["summary"][0]


def test_a_resident_that_cannot_be_measured_says_how_to_fix_it(tmp_path):
    rec = deployed_record(tmp_path)
    found = residents.residents([labelled("v1")])
    with pytest.raises(InputError, match="no health_settings, health_remote_dir .*deploy it again"):
        health_canary.canary(found, [deployment_records.as_record({**rec.document(), "health_settings": None, "health_remote_dir": None})],
                      tmp_path, "H", "h1")
    with pytest.raises(InputError, match="the result it was deployed from .* is not in bench_results_dir"):
        gone = rec.source.model_copy(update={"path": str(tmp_path / "gone.json")})
        health_canary.canary(found, [rec.model_copy(update={"source": gone})], tmp_path, "H", "h1")
