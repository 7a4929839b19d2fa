"""Interference (sparkbench.interference) and the simulated unit's wiring (sparkbench.launch, plan,
serve.deploy_plan): pure functions over dicts and files, no Ansible, no container. The playbook run is in
tests/test_serve_sim.py (a resident, then bench.yml with bench_interference on)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_result_documents import inventory_vars

from sparkbench import plan, residents, result, unit_home
from sparkbench.errors import InputError
from sparkbench.interference import coresidence, variable
from sparkbench.launch import config_hash, launch_spec, with_unit_home
from sparkbench.report.sections import coresidence as coresidence_section
from sparkbench.serve import deploy_plan

pytestmark = pytest.mark.unit

HOST = "spark-sim01"
MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
TRUST = re.compile(r"^(differs by [−+]\d+\.\d % \[[−+]?\d+\.\d, [−+]?\d+\.\d\]|no difference detectable above "
                   r"\d+\.\d %|not enough requests for a verdict)$")
VARIANT = {"name": "nvidia-bare", "model": MODEL, "image": "sparkbench/vllm-sim:v0.25.0", "args": {"max-num-seqs": 8}}
SERVER = {"host": "127.0.0.1", "port": 8101, "container_name": "c", "gpus": False, "env": {"VLLM_SIM_LOAD_SECONDS": "1"},
          "hf_cache": "/c/hf", "vllm_cache": "/c/vllm", "flashinfer_cache": "/c/fi"}
FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "pair-sim" / "spark-sim11" / "gptoss-pp2.json"


def test_the_unit_account_is_mounted_outside_the_configuration_hash():
    alone = launch_spec(VARIANT, SERVER)
    spec_ = launch_spec(VARIANT, {**SERVER, "sim_unit_dir": "~/.cache/units/spark-sim01"})
    assert config_hash(spec_) == config_hash(alone) and spec_["env"] == alone["env"]
    assert spec_["container"]["env"]["VLLM_SIM_UNIT_DIR"] == "/run/sparkbench-unit"
    assert spec_["container"]["volumes"][-1] == "<unit home>/.cache/units/spark-sim01:/run/sparkbench-unit"
    assert "sparkbench_sim_unit_dir=<unit home>/.cache/units/spark-sim01" in spec_["unresolved"]
    done = with_unit_home(spec_, "/home/spark")
    assert done["container"]["volumes"][-1] == "/home/spark/.cache/units/spark-sim01:/run/sparkbench-unit"
    assert done["unresolved"] == "" and config_hash(done) == config_hash(alone)
    # The recorded docker run line is what runs: the mount and the knob are in it.
    assert "-v /home/spark/.cache/units/spark-sim01:/run/sparkbench-unit" in done["command"]
    assert "-e VLLM_SIM_UNIT_DIR=/run/sparkbench-unit" in done["command"]
    assert "sparkbench-unit" not in launch_spec(VARIANT, SERVER)["command"]
    with pytest.raises(InputError, match="sparkbench_sim_unit_dir is 'units': not an absolute path"):
        launch_spec(VARIANT, {**SERVER, "sim_unit_dir": "units"})


def test_the_plan_names_the_account_and_the_tenants_it_declares(tmp_path):
    v = inventory_vars(tmp_path, sparkbench_sim_unit_dir="~/u/spark-sim01", bench_tenants=[{"name": "rag", "gb": 20}])
    p = unit_home.with_unit(plan.plan_host(v, HOST), "/root")
    assert p["sim_unit"]["dir"] == "/root/u/spark-sim01"
    assert json.loads(p["sim_unit"]["tenants_json"]) == [{"name": "rag", "gb": 20.0}]
    assert all(e["launch"]["container"]["volumes"][-1] == "/root/u/spark-sim01:/run/sparkbench-unit"
               for e in p["variants"])
    assert plan.plan_host(inventory_vars(tmp_path), HOST)["sim_unit"] is None


def test_a_simulated_units_placement_follows_its_memory_plan():
    fits = {"fits": True, "used_gb": 110.4, "total_gb": 128.0}
    place = deploy_plan.placement({"source": {"simulated": True}}, {"name": "r"}, "", "auto", fits)
    assert place["mode"] == "beside" and "holds the candidate beside the previous resident (110.4 of 128 GB)" in place["reason"]
    over = deploy_plan.placement({"source": {"simulated": True}}, {"name": "r"}, "", "auto", {**fits, "fits": False, "used_gb": 225.6})
    assert over["mode"] == "replace" and "cannot hold" in over["reason"]
    # Without a previous resident, or forced, the plan does not decide.
    assert deploy_plan.placement({"source": {"simulated": True}}, None, "", "auto", fits)["mode"] == "fresh"
    assert deploy_plan.placement({"source": {"simulated": True}}, {"name": "r"}, "", "false", fits)["mode"] == "replace"


@pytest.mark.parametrize("value, words", [
    ({"load_rps": 0}, "load_rps is 0; set a rate above 0"),
    ({"load_rps": "fast"}, "bench_interference.load_rps is 'fast', not a number"),
    ({}, None), (None, None), (False, None),
    ({"runs": 5}, "bench_interference.load_rps is not set"),
    ({"load_rps": 1, "runs": 3}, "a verdict needs 5 requests per side: set runs: 5"),
    ({"load_rps": 1, "rps": 2}, "unknown field(s) rps"),
    ([1], "write a mapping: bench_interference: {load_rps: 1.0}"),
])
def test_interference_settings_name_the_field_and_the_fix(value, words):
    if words is None:
        assert variable.settings(value, {"runs": 5}) is None
        return
    with pytest.raises(InputError) as err:
        variable.settings(value, {"runs": 5})
    assert words in str(err.value)


def test_interference_settings_defaults():
    assert variable.settings({"load_rps": 1}, {"runs": 8, "output_tokens": 64}) == {
        "load_rps": 1.0, "runs": 8, "load_output_tokens": 64}
    assert variable.settings({"load_rps": 0.5}, {"runs": 3})["runs"] == 5


def resident_world(tmp: Path) -> tuple[dict, list[dict]]:
    """A host's variables with bench_interference on and one running resident (its result stored)."""
    doc = {"variant": {"name": "nvidia-mtp3", "model": MODEL, "args": {"gpu-memory-utilization": 0.4}}}
    path = tmp / "R0" / HOST / "nvidia-mtp3.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    containers = [{"Names": ["/sparkbench-resident-nvidia-mtp3"], "State": "running", "Status": "Up",
                   "Labels": {"sparkbench.resident": "nvidia-mtp3", "sparkbench.role": "resident", "sparkbench.port": "8080",
                              "sparkbench.run": "R0", "sparkbench.listen": "127.0.0.1"}}]
    v = inventory_vars(tmp, bench_interference={"load_rps": 1}, bench_select=["nvidia-bare"], llm_bench_remote_dir="/tmp/w")
    v["bench_common_args"] = {**v["bench_common_args"], "gpu-memory-utilization": 0.4}
    return v, containers


def test_each_variant_plans_the_three_conditions_against_the_residents(tmp_path):
    v, containers = resident_world(tmp_path)
    p = plan.plan_host(v, HOST)
    assert p["interference"] == {"load_rps": 1.0, "runs": 5, "load_output_tokens": 256}
    assert p["variants"][0].get("interference") is None  # no residents read yet
    e = plan.with_residents(p, containers)["variants"][0]
    block = e["interference"]
    assert [r["name"] for r in block["residents"]] == ["sparkbench-resident-nvidia-mtp3"]
    assert block["residents"][0]["health_url"] == "http://127.0.0.1:8080/health"
    argv = block["measure_argv"]
    assert argv[:3] == e["measure_argv"][:3] and argv[argv.index("--runs") + 1] == "5"
    assert argv[argv.index("--base-url") + 1] == e["launch"]["base_url"] and "--concurrency" in argv
    assert argv[argv.index("--concurrency") + 1] == "none" and "--quality" not in argv
    load = block["loads"][0]
    assert load["start_argv"][:2] == ["sh", "-c"] and load["out"] == "/tmp/w/load-nvidia-bare-sparkbench-resident-nvidia-mtp3.json"
    largv = load["start_argv"][4:]
    assert largv[largv.index("--base-url") + 1] == "http://127.0.0.1:8080" and largv[largv.index("--model") + 1] == MODEL
    assert largv[largv.index("--rate") + 1] == "1" and largv[largv.index("--runs") + 1] == "1"
    assert "stopped for its measurement and started again afterwards" in " ".join(e["summary"])
    assert e["preflight"]["verdict"] == "pass", e["preflight"]  # the variant and the resident fit together
    assert plan.with_residents(plan.plan_host({**v, "bench_interference": None}, HOST), containers)["variants"][0][
        "interference"] is None


def measured(rates: list[float]) -> dict:
    return {"rc": 0, "stdout": json.dumps({"single": {"runs": [{"decode_tok_s": x, "valid": True} for x in rates]}})}


def test_the_coresidence_block_has_verdicts_in_the_trust_words_and_the_loads_record(tmp_path):
    v, containers = resident_world(tmp_path)
    e = plan.with_residents(plan.plan_host(v, HOST), containers)["variants"][0]
    doc = {"host": HOST, "variant": {"name": "nvidia-bare"}, "simulated": True,
           "single": {"runs": [{"decode_tok_s": x, "valid": True} for x in (76.0, 76.2, 75.9, 76.1, 76.3)]}}
    load_doc = {"status": "incomplete", "rates": [{"requests": 12, "completed": 11, "achieved_rate": 0.98,
                                                   "output_tok_s": 240.0, "stopped": "interrupted by SIGTERM"}]}
    block = coresidence.coresidence(doc, e["interference"], measured([76.1, 76.0, 76.2, 75.9, 76.1]),
                                     measured([47.0, 47.5, 46.8, 47.2, 47.1]), [json.dumps(load_doc)])
    alone, idle, load = block["conditions"]
    assert [c["condition"] for c in block["conditions"]] == ["alone", "idle", "load"]
    assert alone["verdict"] is None and alone["decode_tok_s_median"] == 76.1
    assert TRUST.match(idle["text"]) and idle["text"].startswith("no difference detectable above")
    assert TRUST.match(load["text"]) and load["text"].startswith("differs by −38.")
    assert idle["label"] == "with sparkbench-resident-nvidia-mtp3 resident and idle"
    assert load["label"] == "under sparkbench-resident-nvidia-mtp3's 1 req/s load"
    assert block["load"][0]["requests"] == 12 and block["load"][0]["stopped"] == "interrupted by SIGTERM"
    # A step that failed: no figures, the reason; the load wrote nothing.
    failed = coresidence.coresidence(doc, e["interference"], measured([76.0] * 5), {}, [""], "measure exited 2")
    assert failed["conditions"][2]["error"] == "not measured: measure exited 2" and failed["conditions"][2]["text"] is None
    assert failed["load"][0]["error"] == "the load wrote no document"


def test_the_document_is_written_once_with_its_block_and_the_report_gets_its_rows(tmp_path, monkeypatch):
    v, containers = resident_world(tmp_path)
    e = plan.with_residents(plan.plan_host(v, HOST), containers)["variants"][0]
    alone = json.loads(FIXTURE.read_text())  # measure's document of the variant alone
    alone["single"]["runs"] = [{**alone["single"]["runs"][0], "decode_tok_s": x} for x in (76.0, 76.2, 75.9, 76.1, 76.3)]
    facts = result.host_facts({"sparkbench_gpu_less": True}, HOST)
    beside = {"idle": measured([76.1, 76.0, 76.2, 75.9, 76.1]), "load": measured([47.0, 47.5, 46.8, 47.2, 47.1]),
              "loads": {"results": [{"stdout": None}]}, "failure": ""}
    writes = []
    real_write = result.write
    monkeypatch.setattr(result, "write", lambda doc, path: writes.append(path) or real_write(doc, path))
    rec = result.record(e, facts, "measure", True, measure={"rc": 0, "stdout": json.dumps(alone)},
                        coresidence=beside)
    assert len(writes) == 1, writes  # one write, the block in it: never a rewrite
    stored = result.stored(rec["path"])
    assert result.validation_errors(stored) == [] and len(stored["coresidence"]["conditions"]) == 3
    assert rec["coresidence_lines"][1].startswith(
        f"{HOST} nvidia-bare under sparkbench-resident-nvidia-mtp3's 1 req/s load: 47.10 tok/s (alone 76.10 tok/s) "
        "— differs by −38."), rec["coresidence_lines"]
    # Without the measurements beside the residents, no block and no lines.
    plain = result.record({**e, "result_path": str(tmp_path / "plain.json")}, facts, "measure", True,
                          measure={"rc": 0, "stdout": json.dumps(alone)})
    assert plain["coresidence_lines"] == [] and "coresidence" not in result.stored(plain["path"])
    s = coresidence_section([stored])
    table = s.tables[0]
    assert table.headers == ["host", "variant", "beside the residents", "tok/s", "alone tok/s", "verdict vs alone"]
    assert [row[2] for row in table.rows] == ["with sparkbench-resident-nvidia-mtp3 resident and idle",
                                              "under sparkbench-resident-nvidia-mtp3's 1 req/s load"]
    assert all(TRUST.match(row[-1]) for row in table.rows) and len(s.lines) == 2
    assert coresidence_section([{"host": HOST}]).tables == []


def test_a_simulated_units_residents_are_those_that_mount_its_account():
    """Simulated units of one machine share its Docker engine: the unit's residents are the
    containers that mount its account."""
    def c(name, source):
        return {"Names": [f"/{name}"], "State": "running", "Labels": {"sparkbench.resident": "v", "sparkbench.port": "1"},
                "Mounts": [{"Source": source, "Destination": "/run/sparkbench-unit"}]}
    found = residents.residents([c("mine", "/u/a"), c("theirs", "/u/b")])
    assert [r["unit_dir"] for r in found] == ["/u/a", "/u/b"]
    assert [r["name"] for r in residents.on_unit(found, "/u/a")] == ["mine"]
    assert len(residents.on_unit(found, "")) == 2 and len(residents.on_unit(found, "<unit home>/u/a")) == 2
