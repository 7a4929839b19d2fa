"""Fleet health judgement (sparkbench.health) and the history index (sparkbench.history) on
fixture documents: no server, no Ansible. The canary figures are synthetic per-request decode
rates (seeded lognormal noise, 1 % per request unless a test says otherwise) with a
protocol.clock block and telemetry."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbench import health, history
from sparkbench.errors import InputError

from helpers import REPO

DRIVER, OLD_DRIVER = "580.95.05", "580.82.07"


def canary(host: str, rate: float = 60.0, *, seed: int = 0, n: int = 5, noise: float = 0.01, driver: str = DRIVER,
           clock: float = 2450.0, power: float = 87.0, temp: float = 70.0, hw: str = "dgx-spark",
           run_id: str = "R1", status: str = "complete") -> dict:
    rng = random.Random(f"{host}-{seed}")
    rates = [round(rate * pow(2.718281828, rng.gauss(0, noise)), 3) for _ in range(n)]
    med = sorted(rates)[n // 2]
    return {
        "schema_version": "1", "status": status, "simulated": True, "host": host, "started_at": f"2026-12-01T{run_id}",
        "config_hash": "c" * 64, "variant": {"name": "nvidia-bare", "model": "nvidia/Qwen3.6-35B-A3B-NVFP4"},
        "profile": {"hardware": {"name": hw}},
        "single": {"decode_tok_s_median": med, "decode_tok_s_min": min(rates), "decode_tok_s_max": max(rates),
                   "runs": [{"decode_tok_s": r, "completion_tokens": 256} for r in rates]},
        "telemetry": {"source": "nvidia-smi", "phases": {"single": {"power_w": {"mean": power, "max": power},
                                                                    "temperature_c": {"mean": temp, "max": temp}}}},
        "protocol": {"clock": {"max_mhz": 3003.0, "under_load_mhz": clock, "share_of_max": clock / 3003.0,
                               "samples_under_load": 6, "idle_mhz": 208.0}, "flags": []},
        "manifest": {"driver": driver, "kernel": "6.11.0-1016-nvidia", "image_id": "sha256:abc", "image_digest": None,
                     "vllm_version": "0.25.0", "model_revision": "a2281", "cuda": "13.0"},
    }


def fleet(**sim03) -> list[dict]:
    return [{"host": "spark-sim01", "doc": canary("spark-sim01")},
            {"host": "spark-sim02", "doc": canary("spark-sim02")},
            {"host": "spark-sim03", "doc": canary("spark-sim03", **sim03)}]


def by_host(judgement: dict) -> dict:
    return {u["host"]: u for u in judgement["units"]}


@pytest.mark.unit
def test_healthy_fleet_is_not_flagged():
    for seed in range(20):
        noise = (0.005, 0.01, 0.03)[seed % 3]
        units = [{"host": f"spark-sim0{i}", "doc": canary(f"spark-sim0{i}", seed=seed, noise=noise)} for i in (1, 2, 3)]
        j = health.judge(units)
        assert j["unhealthy"] == 0, j["lines"]
        for u in j["units"]:
            assert u["verdict"] == "healthy" and u["line"].startswith(f"{u['host']}: healthy — ")
            peers = u["figures"]["peers"]
            # The threshold is at least the floor and the minimum detectable difference as a fall.
            fall = health.detectable_fall_pct(peers["mdd_pct"])
            assert peers["threshold_pct"] >= max(health.DEFAULT_FLOOR_PCT, fall) and fall < peers["mdd_pct"]


@pytest.mark.unit
def test_clock_capped_unit_is_slow_with_the_clock_as_cause_and_the_unplug_remedy():
    j = health.judge(fleet(rate=60.0 * 0.4, clock=850.0, power=30.0))
    u = by_host(j)["spark-sim03"]
    assert u["verdict"] == "slow" and j["unhealthy"] == 1
    assert u["line"].startswith("spark-sim03: slow — clock 850 of 3003 MHz under load")
    assert u["causes"][0] == "clock 850 of 3003 MHz under load"
    assert len(u["causes"]) == 1  # the low power follows the capped clock: not a cause of its own
    assert u["figures"]["power_w"] == 30.0
    assert "unplug the unit's power brick from the wall and the Spark for about a minute" in u["remedy"]
    fig = u["figures"]
    assert fig["clock_under_load_mhz"] == 850.0 and fig["clock_max_mhz"] == 3003.0
    assert fig["peers"]["verdict"] == "differs" and fig["peers"]["deviation_pct"] < -50
    assert fig["peers"]["lo"] < fig["peers"]["pct"] < fig["peers"]["hi"] < 0
    assert {by_host(j)[h]["verdict"] for h in ("spark-sim01", "spark-sim02")} == {"healthy"}


@pytest.mark.unit
def test_a_capped_unit_is_slow_even_when_its_peers_spread_widely():
    # Peers 60 and 40 tok/s (a loaded controller): spread 1.4826 x 20/40 = 74 %, k x spread 222 %
    # hides a -61 % unit from the spread rule; its capped clock names the cause, so the verdict
    # and its interval decide.
    units = [{"host": "spark-sim01", "doc": canary("spark-sim01", rate=60.0)},
             {"host": "spark-sim02", "doc": canary("spark-sim02", rate=40.0)},
             {"host": "spark-sim03", "doc": canary("spark-sim03", rate=40.0 * 0.385, clock=850.0, power=30.0)}]
    u = by_host(health.judge(units))["spark-sim03"]
    assert u["figures"]["peers"]["threshold_pct"] > 100 and u["figures"]["peers"]["verdict"] == "differs"
    assert u["verdict"] == "slow" and u["line"].startswith("spark-sim03: slow — clock 850 of 3003 MHz under load")
    # the same spread without a cause: not flagged (noise between peers is not a fault)
    units[2] = {"host": "spark-sim03", "doc": canary("spark-sim03", rate=40.0 * 0.8)}
    assert by_host(health.judge(units))["spark-sim03"]["verdict"] == "healthy"


@pytest.mark.unit
def test_slow_unit_whose_only_difference_is_its_driver_names_the_driver():
    # The default inventory's spark-sim03: ~8 % slower (efficiency 0.89) with an older driver.
    j = health.judge(fleet(rate=60.0 * 0.92, driver=OLD_DRIVER))
    u = by_host(j)["spark-sim03"]
    assert u["verdict"] == "slow"
    assert u["causes"] == [f"driver {OLD_DRIVER} (peers {DRIVER})"]
    assert u["line"].startswith(f"spark-sim03: slow — driver {OLD_DRIVER} (peers {DRIVER})")
    assert f"install the peers' driver ({DRIVER})" in u["remedy"]


@pytest.mark.unit
def test_different_driver_on_a_unit_that_is_not_slow_is_reported_not_flagged():
    j = health.judge(fleet(driver=OLD_DRIVER))
    u = by_host(j)["spark-sim03"]
    assert u["verdict"] == "healthy" and j["unhealthy"] == 0 and u["causes"] == []
    assert f"reported, not flagged: driver {OLD_DRIVER} (peers {DRIVER})" in u["line"]


@pytest.mark.unit
def test_one_bad_unit_of_three_moves_neither_centre_nor_spread():
    j = health.judge(fleet(rate=30.0))
    units = by_host(j)
    good = sorted(units[h]["figures"]["decode_tok_s"] for h in ("spark-sim01", "spark-sim02"))
    peers = units["spark-sim01"]["figures"]["peers"]
    # The centre is a good unit's median (not the mean dragged halfway to 30 tok/s).
    assert peers["median_tok_s"] in good
    assert peers["spread_pct"] < 5
    # A good unit is compared with the other good unit only (the bad one is outside the band), so
    # its minimum detectable difference stays at the noise's, not the bad unit's distance.
    assert peers["reference_units"] == 1 and peers["mdd_pct"] < 10
    assert [u["verdict"] for u in j["units"]] == ["healthy", "healthy", "slow"]
    assert units["spark-sim03"]["causes"] == ["no telemetry or manifest difference explains it"]


@pytest.mark.unit
def test_failed_units_carry_the_stage_and_reason():
    failed_doc = canary("spark-sim02", status="failed")
    failed_doc["failure"] = {"stage": "launch", "reason": "container exited (EngineDeadError)", "remedy": "read the log"}
    units = [{"host": "spark-sim01", "doc": canary("spark-sim01")},
             {"host": "spark-sim02", "doc": failed_doc},
             {"host": "spark01", "doc": None, "reason": "unreachable: ssh: connect to host spark01.local port 22"}]
    j = health.judge(units)
    u = by_host(j)
    assert j["unhealthy"] == 2
    assert u["spark-sim02"]["line"] == "spark-sim02: failed — launch: container exited (EngineDeadError)"
    assert u["spark-sim02"]["remedy"] == "read the log"
    assert u["spark01"]["verdict"] == "failed" and u["spark01"]["causes"][0].startswith("host: unreachable: ssh")
    # Too few measured peers: spark-sim01 is judged healthy and says why there is no peer verdict.
    assert "3 needed" in u["spark-sim01"]["line"] and u["spark-sim01"]["verdict"] == "healthy"


@pytest.mark.unit
def test_own_history_flags_a_lone_unit_that_slowed_down():
    past = {**canary("spark01", 60.0, seed=1), "_run_id": "health-old"}
    j = health.judge([{"host": "spark01", "doc": canary("spark01", 50.0, seed=2)}], {"spark01": past})
    u = j["units"][0]
    assert u["verdict"] == "slow" and "vs its run health-old: differs by" in u["line"]
    same = health.judge([{"host": "spark01", "doc": canary("spark01", 60.0, seed=2)}], {"spark01": past})
    assert same["units"][0]["verdict"] == "healthy"


@pytest.mark.unit
def test_a_resident_unit_is_held_to_its_deployment_not_to_its_history():
    deployed = canary("spark01", 60.0, seed=1)
    dep = {"name": "sparkbench-resident-nvidia-bare", "variant": "nvidia-bare", "deployed_at": "2026-11-01T00:00:00Z",
           "run": "R1", "port": 8080, "samples": [r["decode_tok_s"] for r in deployed["single"]["runs"]]}
    # An earlier healthy canary at 40 tok/s: the history rule would call 60 tok/s fine and 50 slow
    # only against 60; the deployment (60 tok/s) is what a resident is held to.
    past = {**canary("spark01", 40.0, seed=3), "_run_id": "health-old"}
    drifted = health.judge([{"host": "spark01", "doc": canary("spark01", 50.0, seed=2), "deployment": dep}],
                           {"spark01": past})
    u = drifted["units"][0]
    assert u["verdict"] == "slow" and drifted["unhealthy"] == 1
    assert u["resident"] == {k: dep[k] for k in ("name", "variant", "deployed_at", "run", "port")}
    assert u["figures"]["history"] is None and u["figures"]["deployment"]["text"].startswith("differs by −")
    assert ("resident sparkbench-resident-nvidia-bare (nvidia-bare, deployed 2026-11-01T00:00:00Z) vs its "
            "deployment: differs by −") in u["line"]
    same = health.judge([{"host": "spark01", "doc": canary("spark01", 60.0, seed=2), "deployment": dep}])
    s = same["units"][0]
    assert s["verdict"] == "healthy" and s["figures"]["deployment"]["verdict"] == "no_difference"
    assert "vs its deployment" in s["line"] and "no difference detectable above" in s["line"]
    md = health.markdown(same, "H1")
    assert "Residents (the unit's canary was its deployed service" in md and "deployment 2026-11-01T00:00:00Z: no " in md
    # A resident whose canary failed is failed, and its line names the resident.
    failed = health.judge([{"host": "spark01", "doc": None, "reason": "measure: unreachable", "deployment": dep}])
    assert failed["units"][0]["verdict"] == "failed" and "(resident sparkbench-resident-nvidia-bare" in failed["lines"][0]


@pytest.mark.unit
def test_a_unit_at_half_its_noisy_peers_speed_is_slow_by_the_fall_they_can_detect():
    """Peers read on a busy machine (two of five requests a third slower, the same on both): the
    comparison detects a rise of 59 % at least, which on its log scale is a fall of 37 %. A unit at
    53 % of their speed (−47 %, the verdict "differs") is slow; held to a fall of 59 % it was not."""
    def unit(host: str, rates: list[float]) -> dict:
        doc = canary(host)
        for run, rate in zip(doc["single"]["runs"], rates):
            run["decode_tok_s"] = rate
        doc["single"]["decode_tok_s_median"] = sorted(rates)[2]
        return {"host": host, "doc": doc}

    units = [unit("spark-sim01", [61.0, 58.4, 41.4, 41.2, 56.7]), unit("spark-sim02", [60.9, 58.3, 41.5, 41.1, 56.8]),
             unit("spark-sim03", [30.0, 30.1, 30.2, 30.3, 30.4])]
    u = by_host(health.judge(units))["spark-sim03"]
    fig = u["figures"]["peers"]
    assert fig["verdict"] == "differs" and fig["mdd_pct"] > 55 and fig["spread_pct"] < 1, fig
    assert fig["threshold_pct"] == pytest.approx(health.detectable_fall_pct(fig["mdd_pct"]))
    assert -fig["mdd_pct"] < fig["deviation_pct"] < -fig["threshold_pct"] and u["verdict"] == "slow", fig
    assert u["line"].startswith("spark-sim03: slow")


@pytest.mark.unit
def test_a_fall_beyond_what_a_noisy_deployment_can_detect_is_slow():
    """A deployment canary measured on a busy machine (two of five requests a third slower): the
    comparison detects a rise of 79 % at least, which on its log scale is a fall of 44 %; a
    resident that now serves at 41 % of that speed, its interval wholly below −30 %, is slow.
    (The requests are the ones a loaded suite run recorded.)"""
    dep = {"name": "sparkbench-resident-nvidia-bare", "variant": "nvidia-bare", "deployed_at": "2026-11-01T00:00:00Z",
           "run": "R1", "port": 8080, "samples": [152.2, 145.8, 103.5, 103.0, 141.7]}
    doc = canary("spark01", 62.0, seed=2)
    for run, rate in zip(doc["single"]["runs"], (61.9, 62.8, 62.0, 62.6, 62.1)):
        run["decode_tok_s"] = rate
    u = health.judge([{"host": "spark01", "doc": doc, "deployment": dep}])["units"][0]
    fig = u["figures"]["deployment"]
    assert fig["verdict"] == "differs" and fig["mdd_pct"] > 70 and fig["hi"] < -30, fig
    assert fig["threshold_pct"] == pytest.approx(health.detectable_fall_pct(fig["mdd_pct"]))
    assert fig["pct"] < -fig["threshold_pct"] and u["verdict"] == "slow", fig
    # the fall that matches a rise: the same distance on a log scale, never 100 % or more
    assert health.detectable_fall_pct(5.0) == pytest.approx(100 * (1 - 1 / 1.05))
    assert health.detectable_fall_pct(79.0) == pytest.approx(44.1, abs=0.05)
    assert health.detectable_fall_pct(400.0) == pytest.approx(80.0) and health.detectable_fall_pct(0.0) == 0.0


@pytest.mark.unit
def test_canary_variables_and_their_errors():
    v = health.canary_variables({"bench_health_canary": "nvidia-bare", "llm_bench_concurrency": [2, 4, 8],
                                 "bench_health_output_tokens": 64})
    assert v["bench_select"] == ["nvidia-bare"] and v["llm_bench_runs"] == 5
    assert (v["llm_bench_concurrency"], v["llm_bench_quality"], v["llm_bench_image"]) == ([], False, False)
    assert v["llm_bench_output_tokens"] == 64
    with pytest.raises(InputError, match="bench_health_canary is not set"):
        health.canary_variables({})
    with pytest.raises(InputError, match="bench_health_runs is 3; it must be >= 5"):
        health.canary_variables({"bench_health_canary": "x", "bench_health_runs": 3})


@pytest.mark.unit
def test_health_files(tmp_path: Path):
    j = health.judge(fleet(rate=24.0, clock=850.0))
    paths = health.write(tmp_path / "R1", j, "R1")
    md = Path(paths["health.md"]).read_text()
    assert "SIMULATED" in md and "- spark-sim03: slow — clock 850 of 3003 MHz under load" in md
    assert "850 / 3003 MHz" in md and "remedy: unplug" in md
    doc = json.loads(Path(paths["health.json"]).read_text())
    assert doc["run_id"] == "R1" and [u["verdict"] for u in doc["units"]] == ["healthy", "healthy", "slow"]


# --------------------------------------------------------------------------- history

def store(results: Path, run_id: str, doc: dict, verdicts: dict | None = None) -> Path:
    """The canary ``doc`` as a stored result; with ``verdicts`` ({host: verdict}) the run's health.json
    too, as health.write writes it (the doc's host judged on its canary, any other host failed)."""
    path = results / run_id / doc["host"] / "nvidia-bare.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    if verdicts:
        judged = health.judge([{"host": h, "doc": doc if h == doc["host"] else None, "reason": "unreachable"}
                               for h in verdicts])
        assert {u["host"]: u["verdict"] for u in judged["units"]} == verdicts
        health.write(results / run_id, judged, run_id)
    return path


@pytest.mark.unit
def test_history_index_is_rebuilt_when_missing_or_stale(tmp_path: Path):
    res = tmp_path / "results"
    store(res, "R1", canary("spark-sim01", 60.0, run_id="R1"), {"spark-sim01": "healthy"})
    (res / "R1" / "spark-sim01" / "nvidia-bare.bracket.json").write_text("{}")  # not a run of its own
    path, why = history.ensure(res)
    assert path == res / "index.sqlite" and why.startswith("no index at")
    assert history.ensure(res)[1] is None  # up to date: not rebuilt
    store(res, "R2", canary("spark-sim01", 54.0, run_id="R2"))
    assert history.staleness(res) == "run R2 is not indexed"
    rows = history.rows(res, "spark-sim01")
    assert [(r["run_id"], r["health"]) for r in rows] == [("R1", "healthy"), ("R2", None)]
    assert rows[0]["n"] == 5 and rows[0]["clock_under_load_mhz"] == 2450.0 and rows[0]["driver"] == DRIVER
    # A result file newer than the index: stale, rebuilt from the JSON (the source of truth).
    f = res / "R2" / "spark-sim01" / "nvidia-bare.json"
    doc = json.loads(f.read_text())
    doc["manifest"]["driver"] = OLD_DRIVER
    f.write_text(json.dumps(doc))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert "changed since it was indexed" in history.staleness(res)
    assert history.rows(res, "spark-sim01")[1]["driver"] == OLD_DRIVER
    prev = history.previous_healthy(res, "spark-sim01", "nvidia-bare", "c" * 64, before_run="R2")
    assert prev["run_id"] == "R1"
    trend = history.trend(history.rows(res, "spark-sim01"))
    assert trend[0]["delta_prev_pct"] is None and abs(trend[1]["delta_first_pct"] - trend[1]["delta_prev_pct"]) < 1e-9
    assert trend[1]["delta_prev_pct"] < -5
    import shutil
    shutil.rmtree(res / "R1")
    assert history.staleness(res) == "run R1 is indexed but no longer stored"


@pytest.mark.ansible
def test_history_command_prints_the_trend(tmp_path: Path):
    res = tmp_path / "results"
    for i, rate in enumerate((60.0, 59.0, 48.0)):
        store(res, f"R{i}", canary("spark-sim03", rate, run_id=f"R{i}"))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "sparkbench"), "history", "spark-sim03", "nvidia-bare",
                           "--results-dir", str(res)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "spark-sim03: 3 result(s) (SIMULATED figures)"
    assert [line.split()[0] for line in lines[2:]] == ["R0", "R1", "R2"]
    assert "-18.6 %" in lines[4] and "-20.0 %" in lines[4]  # 48 vs 59 (previous) and vs 60 (first)
    missing = subprocess.run([sys.executable, str(REPO / "scripts" / "sparkbench"), "history", "nohost",
                              "--results-dir", str(res)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 0 and "nohost: no stored results" in missing.stdout
    nodir = subprocess.run([sys.executable, str(REPO / "scripts" / "sparkbench"), "history", "spark-sim03",
                            "--results-dir", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert nodir.returncode == 4 and "--results-dir" in nodir.stderr and not (tmp_path / "nope").exists()


@pytest.mark.unit
def test_report_draws_the_hosts_trend_without_writing_an_index(tmp_path: Path):
    from sparkbench.report import sections
    res = tmp_path / "results"
    for i, rate in enumerate((60.0, 57.0)):
        store(res, f"R{i}", canary("spark-sim03", rate, run_id=f"R{i}"), {"spark-sim03": "healthy"})
    current = json.loads((res / "R1" / "spark-sim03" / "nvidia-bare.json").read_text())
    tables = sections.history_trend(res / "R1", [current])
    assert [t.title for t in tables] == ["History: spark-sim03 (simulated)"]
    assert [row[1] for row in tables[0].rows] == ["R0", "R1"] and tables[0].rows[1][3].endswith("%")
    assert not (res / "index.sqlite").exists()
    assert sections.history_trend(res / "R1", []) == []


@pytest.mark.sim
def test_every_unit_of_the_inventory_names_a_canary_of_its_own_matrix():
    from test_inventory import inventory

    from sparkbench import matrix as vm
    from sparkbench.plan import load_profiles
    hv = inventory()["_meta"]["hostvars"]
    assert {hv[h]["bench_health_canary"] for h in ("spark01", "spark-sim01", "spark-sim03")} == {"nvidia-bare"}
    assert hv["cpu-real01"]["bench_health_canary"] == "tiny-bf16" and hv["spark01"]["bench_health_runs"] == 5
    for host, v in hv.items():
        models = [b["model"] for b in v["bench_builds"]]
        _, profiles = load_profiles(models, v.get("bench_hardware_profile_name", "dgx-spark"), REPO / "profiles")
        names = [x["name"] for x in vm.variant_matrix(v["bench_builds"], v["bench_configs"], image=v["bench_image"],
                                                      common_args=v.get("bench_common_args"), profiles=profiles)]
        assert v["bench_health_canary"] in names, (host, names)
