"""The bandwidth probe (sparkbench.bandwidth): the probe program's arithmetic, the simulator's
stand-in, the probe's container per kind of host, the reading of a probe run, and
``protocol.bandwidth`` with its drop mark in the result documents (schema-checked)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from sparkbench import plan, result
from sparkbench.bandwidth import probe as probe_mod
from sparkbench.bandwidth import probe_container, protocol_block, reading
from sparkbench.measure.bandwidth import drop_of
from sparkbench.report.load import load_run
from vllm_sim import bandwidth as sim_bandwidth
from vllm_sim import profiles as sim_profiles
from vllm_sim.knobs import Knobs

REPO = Path(__file__).resolve().parent.parent

SCHEMA = json.loads((REPO / "schema/result.schema.json").read_text())
READING_SCHEMA = {**SCHEMA["$defs"]["bandwidth_reading"], "$defs": SCHEMA["$defs"]}
MEASURED = REPO / "tests/fixtures/runs/serving-sim/spark-sim01/nvidia-bare.json"
HOST = {"name": "spark-sim01", "gpu": {"name": "NVIDIA GB10 (simulated)"}, "images": {},
        "sparkbench_version": "deadbeef", "simulated": True}

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------------- the probe program
def test_gbps_counts_decimal_gigabytes_per_second():
    assert probe_mod.gbps(2 * 10**9, 0.5) == 4.0
    with pytest.raises(ValueError):
        probe_mod.gbps(1, 0.0)


def test_spread_is_min_max_and_inclusive_quartiles():
    s = probe_mod.spread([100.0, 110.0, 120.0, 130.0, 140.0])
    assert s == {"min": 100.0, "max": 140.0, "p25": 110.0, "p75": 130.0, "iqr": 20.0, "repeats": 5}
    assert probe_mod.spread([5.0]) == {"min": 5.0, "max": 5.0, "p25": 5.0, "p75": 5.0, "iqr": 0.0, "repeats": 1}


def test_passes_fill_the_target_time_and_the_gemv_matrices_the_buffer():
    assert probe_mod.passes_for(0.01, 0.05) == 5 and probe_mod.passes_for(1.0, 0.05) == 1
    # 1 GiB of [25600 x 5120] bf16 matrices (262 MB each): 5 of them; a pass moves each, its vector, its output
    assert probe_mod.gemv_count(1 << 30) == 5
    assert probe_mod.gemv_bytes(5) == 5 * (25600 * 5120 + 5120 + 25600) * 2


def test_timed_divides_the_bytes_of_every_pass_by_the_repeat_time(monkeypatch):
    clock = iter([0.0, 0.01] + [t for i in range(3) for t in (10.0 * i, 10.0 * i + 0.1)])
    monkeypatch.setattr(probe_mod.time, "perf_counter", lambda: next(clock))
    calls = []
    samples = probe_mod.timed(lambda: calls.append(1), 10**9, 3, lambda: None)
    # the warm-up and the timing pass, then 3 repeats of 5 passes (0.05 s / 0.01 s) in 0.1 s each
    assert len(calls) == 2 + 3 * 5 and samples == pytest.approx([50.0, 50.0, 50.0])


def test_without_torch_the_probe_gives_a_reason_and_no_figure(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert probe_mod.main(["--device", "cuda"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gbps"] is None and out["method"] == "torch-cuda-stream-read" and "torch" in out["reason"]
    jsonschema.validate(out, READING_SCHEMA)


# --------------------------------------------------------------------------- the simulator's stand-in
def sim_reading(env: dict) -> dict:
    knobs = Knobs.from_env({"VLLM_SIM_JITTER": "0.01", **env})
    return sim_bandwidth.reading(knobs, sim_profiles.load_hardware(knobs.hardware))


def test_the_stand_in_reads_the_profile_bandwidth_scaled_by_the_unit_efficiency():
    slow_env = yaml.safe_load((REPO / "inventory/hosts.yml").read_text())[
        "all"]["children"]["sparks"]["children"]["sim_sparks"]["hosts"]["spark-sim03"]["sparkbench_sim_env"]
    normal, slow = sim_reading({}), sim_reading(slow_env)
    hw = json.loads((REPO / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    expected = hw["memory_bandwidth_gbps"] * hw["probe"]["stream_read_share"]
    assert normal["gbps"] == pytest.approx(expected, rel=0.02)
    # spark-sim03, the inventory's slow unit, reads lower by its efficiency knob (figures rounded to 0.01 GB/s)
    assert slow["gbps"] / normal["gbps"] == pytest.approx(float(slow_env["VLLM_SIM_EFFICIENCY"]), rel=1e-4)
    assert slow["gbps"] < 0.9 * normal["gbps"]
    for r in (normal, slow):
        assert r["method"] == "simulated" and r["simulated"] is True and "(simulated)" in r["device"]
        assert r["spread"]["min"] <= r["gbps"] <= r["spread"]["max"] and r["spread"]["repeats"] == 10
        jsonschema.validate(r, READING_SCHEMA)


def test_the_stand_in_follows_the_bandwidth_override_and_a_capped_clock():
    normal = sim_reading({})["gbps"]
    assert sim_reading({"VLLM_SIM_BANDWIDTH_GBPS": "546"})["gbps"] == pytest.approx(2 * normal, rel=1e-4)
    capped = sim_reading({"VLLM_SIM_CLOCK_CAP_MHZ": "850"})["gbps"]
    assert capped == pytest.approx(normal * (1 - 0.85 + 0.85 * 850 / 2450), rel=1e-4)


# --------------------------------------------------------------------------- the probe's container
def plan_vars(tmp: Path, **extra) -> dict:
    out: dict = {}
    for f in ("inventory/group_vars/all/bench.yml", "inventory/group_vars/all/matrix.yml"):
        out.update(yaml.safe_load((REPO / f).read_text()))
    out.update({"bench_run_id": "T", "bench_results_dir": str(tmp), "sparkbench_gpu_less": True,
                "vllm_server_env": {"VLLM_SIM_EFFICIENCY": "0.89"}, "spark_host_hf_cache": "/cache",
                "llm_bench_remote_dir": "/opt/unit-work"}, **extra)
    return {k: v for k, v in out.items() if not (isinstance(v, str) and "{{" in v)}


def test_a_simulated_host_probes_with_the_stand_in_and_the_unit_knobs(tmp_path):
    p = plan.plan_host(plan_vars(tmp_path), "spark-sim03")["probe"]
    first = plan.plan_host(plan_vars(tmp_path), "spark-sim03")["variants"][0]
    assert p["kind"] == "simulated" and p["program"] is None and p["image"] == first["variant"]["image"]
    c = p["container"]
    assert c["entrypoint"] == ["vllm"] and c["command"] == ["bandwidth-probe"] and c["volumes"] == []
    assert c["env"]["VLLM_SIM_EFFICIENCY"] == "0.89" and c["device_requests"] == []


def test_a_spark_probes_the_gpu_and_a_cpu_host_the_cpu_with_the_copied_program(tmp_path):
    gpu = plan.plan_host(plan_vars(tmp_path, sparkbench_gpu_less=False), "spark01")["probe"]
    assert gpu["kind"] == "cuda" and gpu["method"] == "torch-cuda-stream-read"
    assert gpu["program"] == {"src": str(probe_container.PROGRAM), "dest": "/opt/unit-work/bandwidth_probe.py"}
    c = gpu["container"]
    assert c["entrypoint"] == ["python3"]
    assert c["command"] == ["/sparkbench-probe/bandwidth_probe.py", "--device", "cuda", "--buffer-mib", "1024"]
    assert c["volumes"] == ["/opt/unit-work/bandwidth_probe.py:/sparkbench-probe/bandwidth_probe.py:ro"]
    assert c["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    cpu = plan.plan_host(plan_vars(tmp_path, spark_host_gpu_probe="none"), "cpu-real01")["probe"]
    assert cpu["kind"] == "cpu" and cpu["container"]["command"][1:] == ["--device", "cpu", "--buffer-mib", "512"]
    assert cpu["container"]["device_requests"] == []
    assert plan.plan_host(plan_vars(tmp_path, bench_bandwidth_probe=False), "spark-sim01")["probe"] is None


def test_no_probe_when_no_variant_launches(tmp_path):
    v = plan_vars(tmp_path, bench_select=["nvidia-bare"],
                  bench_extra_variants=[], vllm_server_preflight_enabled=True,
                  bench_common_args={"max-num-batched-tokens": 2048})
    assert plan.plan_host(v, "spark-sim01")["probe"] is None  # the hybrid model's preflight refuses it


# --------------------------------------------------------------------------- a probe run's reading
SPEC = {"kind": "simulated", "method": "simulated", "image": "sparkbench/vllm-sim:v0.25.0"}


def test_the_reading_is_the_last_json_line_of_the_output():
    line = json.dumps({"gbps": 231.1, "method": "simulated", "when": "2026-12-01T10:00:00Z", "simulated": True,
                       "spread": {"min": 229.3, "max": 237.2, "repeats": 10}, "noise": 1})
    r = reading.reading({"status": 0, "container": {"Output": f"a warning\n{line}\n"}}, SPEC, 1.234)
    assert r["gbps"] == 231.1 and r["spread"]["repeats"] == 10 and "noise" not in r
    assert r["image"] == SPEC["image"] and r["cost_s"] == 1.23 and r["reason"] is None
    jsonschema.validate(r, READING_SCHEMA)
    assert reading.between(r) and not reading.between({**r, "cost_s": 12.0})


@pytest.mark.parametrize("run, says", [
    ({"unreachable": True, "msg": "ssh: connect timed out"}, "did not answer"),
    ({"failed": True, "msg": "Error: No such image: sparkbench/vllm-sim:v0.25.0"}, "container did not run: Error: No such image"),
    ({"status": 2, "container": {"Output": "bandwidth-probe: no hardware profile 'x'"}},
     "printed no reading (exit status 2): bandwidth-probe: no hardware profile"),
    ({"status": 0, "container": {"Output": json.dumps({"gbps": 0, "method": "simulated"})}},
     "no positive figure"),
])
def test_a_probe_without_a_figure_says_why(run, says):
    r = reading.reading(run, SPEC, 0.5)
    assert r["gbps"] is None and says in r["reason"] and r["method"] == "simulated"
    jsonschema.validate(r, READING_SCHEMA)
    assert not reading.between(r)  # a probe that gave nothing is not repeated between variants


# --------------------------------------------------------------------------- protocol.bandwidth
def probe_at(gbps: float | None, when: str = "2026-12-01T10:00:00Z") -> dict:
    return {"gbps": gbps, "method": "simulated", "spread": None, "when": when, "device": "NVIDIA GB10 (simulated)",
            "simulated": True, "reason": None if gbps else "no figure", "image": "img", "cost_s": 1.0}


def test_only_a_document_whose_server_served_gets_the_block():
    done = {"status": "complete", "protocol": {"flags": []}}
    assert protocol_block.with_before(done, probe_at(231.0))["protocol"]["bandwidth"]["after"] is None
    launch = {"status": "failed", "failure": {"stage": "launch"}}
    assert protocol_block.with_before(launch, probe_at(231.0)) == launch
    measure = {"status": "failed", "failure": {"stage": "measure"}}
    assert protocol_block.with_before(measure, probe_at(231.0))["protocol"]["bandwidth"]["gbps"] == 231.0
    assert protocol_block.with_before(done, None) == done


def test_a_drop_between_the_probes_marks_the_variant_with_its_cause():
    capped = {"code": "clock_capped", "reason": "graphics clock 640 of 3003 MHz under load"}
    doc = protocol_block.with_before({"status": "complete", "protocol": {"flags": [capped]}}, probe_at(230.0))
    held = protocol_block.with_after(doc, probe_at(210.0))  # 91 %: within the probes' noise
    assert held["protocol"]["bandwidth"]["drop"] is None and held["protocol"]["flags"] == [capped]
    dropped = protocol_block.with_after(doc, probe_at(115.0))
    drop = dropped["protocol"]["bandwidth"]["drop"]
    assert drop["share"] == 0.5 and drop["before_gbps"] == 230.0 and drop["after_gbps"] == 115.0
    assert drop["cause"] == "clock_capped: graphics clock 640 of 3003 MHz under load"
    flag = dropped["protocol"]["flags"][-1]
    assert flag["code"] == "bandwidth_drop" and "fell from 230 to 115 GB/s (50 %" in flag["reason"]
    assert "cause: clock_capped" in flag["reason"]
    # a second probe after replaces the mark, never stacks it
    again = protocol_block.with_after(dropped, probe_at(120.0))
    assert [f["code"] for f in again["protocol"]["flags"]] == ["clock_capped", "bandwidth_drop"]


def test_a_drop_without_a_named_cause_says_so_and_a_missing_figure_is_no_drop():
    doc = protocol_block.with_before({"status": "complete", "protocol": {"flags": []}}, probe_at(230.0))
    text = protocol_block.with_after(doc, probe_at(150.0))["protocol"]["bandwidth"]["drop"]["text"]
    assert text.endswith("no telemetry of this run names a cause")
    hot = {**doc, "telemetry": {"phases": {"single": {"temperature_c": {"max": 91.0}}}}}
    assert protocol_block.with_after(hot, probe_at(150.0))["protocol"]["bandwidth"]["drop"]["cause"] == "temperature 91 °C"
    assert protocol_block.with_after(doc, probe_at(None))["protocol"]["bandwidth"]["drop"] is None
    assert drop_of({"gbps": None}, {"gbps": 100.0}) is None
    assert drop_of({"gbps": 100.0}, {"gbps": 89.9}) == pytest.approx(0.899)


def test_a_drop_within_the_probes_own_scatter_is_no_drop():
    """A CPU probe on a busy 2-core host scattered 3.8-12.8 GB/s in one run: a lower median whose
    quartiles overlap the one before's is noise, not a slow state; apart, it is a drop."""
    before = {"gbps": 12.5, "spread": {"min": 3.8, "max": 14.0, "p25": 9.0, "p75": 13.0, "repeats": 10}}
    noisy = {"gbps": 9.5, "spread": {"min": 3.0, "max": 12.8, "p25": 7.3, "p75": 12.3, "repeats": 10}}
    apart = {"gbps": 8.0, "spread": {"min": 7.5, "max": 8.6, "p25": 7.8, "p75": 8.2, "repeats": 10}}
    assert drop_of(before, noisy) is None
    assert drop_of(before, apart) == pytest.approx(0.64)


def measured_stdout() -> str:
    doc = json.loads(MEASURED.read_text())
    context = ("_fixture", "host", "variant", "launch", "launch_command", "config_hash", "manifest", "profile",
               "preflight", "kernels", "server_startup")
    return json.dumps({k: v for k, v in doc.items() if k not in context})


def test_the_result_builder_records_the_probes_around_a_variant(tmp_path):
    entry = plan.plan_host(plan_vars(tmp_path), "spark-sim01")["variants"][0]
    rec = result.record(entry, HOST, "measure", True, measure={"rc": 0, "stdout": measured_stdout(), "stderr": ""},
                        bandwidth=probe_at(231.0, "2026-12-01T10:00:00Z"))
    assert rec["status"] == "complete" and rec["bandwidth"] is True
    doc = json.loads(Path(rec["path"]).read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["protocol"]["bandwidth"]["gbps"] == 231.0 and doc["protocol"]["bandwidth"]["after"] is None
    written = Path(rec["path"]).read_bytes()
    out = result.write_after_probe(rec["path"], probe_at(180.0, "2026-12-01T10:05:00Z"))
    # The result is written once: the probe after it goes to a file of its own, joined where it is read.
    assert Path(rec["path"]).read_bytes() == written
    assert json.loads(result.probe_after_path(rec["path"]).read_text())["when"] == "2026-12-01T10:05:00Z"
    doc = result.stored(rec["path"])
    jsonschema.validate(doc, SCHEMA)
    assert out["drop"] and doc["protocol"]["bandwidth"]["after"]["when"] == "2026-12-01T10:05:00Z"
    assert doc["protocol"]["flags"][-1]["code"] == "bandwidth_drop"
    # The report's loader joins it too (a run folder's */*.json never lists the probe's own file).
    run = load_run(Path(rec["path"]).parent.parent)
    assert not run.errors and run.results[0]["protocol"]["bandwidth"]["drop"]["after_gbps"] == 180.0
    # a variant that never served (launch failed) waits for no probe
    failed = result.record(entry, HOST, "launch", False, launch_failure={"reason": "crashed"},
                           bandwidth=probe_at(231.0))
    assert failed["bandwidth"] is False
    assert "bandwidth" not in (json.loads(Path(failed["path"]).read_text()).get("protocol") or {})
