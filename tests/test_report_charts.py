"""Chart functions return the data they plotted; the tests check that data (and that a PNG of
the right kind was written, or none when there was nothing to plot)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkbench.report import charts
from sparkbench.report.compare import fleet_compare

from helpers import REPO

pytestmark = pytest.mark.unit

RUNS = REPO / "tests" / "fixtures" / "runs"


def load(run: str) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((RUNS / run).glob("*/*.json"))]


def is_png(path: str) -> bool:
    return Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mtp_uplift_seed(tmp_path: Path):
    out = charts.mtp_uplift(load("seed-v0.25"), tmp_path)
    d = out["data"]
    by = dict(zip(d["labels"], zip(d["bare"], d["uplift"], d["best_config"])))
    bare, uplift, cfg = by["Qwen3.6-35B-A3B-NVFP4\n[nvidia]"]
    assert (bare, round(uplift, 6), cfg) == (76.7, round(108.3 - 76.7, 6), "mtp3")
    bare, uplift, cfg = by["Qwen3.6-27B-NVFP4\n[nvidia]"]
    assert (bare, round(uplift, 6)) == (12.43, round(28.91 - 12.43, 6))
    # Unsloth has no published bare figure: it is not drawn as if it had one
    assert not any("unsloth" in label for label in d["labels"])
    assert is_png(out["path"]) and "SIMULATED" not in out["title"]


def test_build_vs_build_seed(tmp_path: Path):
    out = charts.build_vs_build(load("seed-v0.25"), tmp_path, ["nvidia", "unsloth"])
    d = out["data"]["Qwen3.6-35B-A3B-NVFP4"]
    assert d["configs"] == ["bare", "mtp2", "mtp3"]
    assert d["builds"] == {"nvidia": [76.7, 98.0, 108.3], "unsloth": [None, 81.6, None]}
    assert "Qwen3.6-27B-NVFP4" not in out["data"]  # one build only
    assert is_png(out["path"])


def test_parallel_and_fleet_need_data(tmp_path: Path):
    seed = load("seed-v0.25")
    par = charts.parallel_scaling(seed, tmp_path)
    assert par["path"] is None and par["data"]["series"] == {}  # the seed publishes no 2/4/8 figures
    fl = charts.fleet_bars(seed, tmp_path)
    assert fl["path"] is None and fl["data"]["hosts"] == ["seed-spark"]
    assert not list(tmp_path.glob("*.png"))


def test_fleet_charts_synthetic(tmp_path: Path):
    fleet = load("fleet-sim")
    par = charts.parallel_scaling(fleet, tmp_path)
    assert par["data"]["x"] == [1, 2, 4, 8]
    # fleet median over spark-sim01 (×1.00), sim02 (×1.01), sim03 (×0.92) → sim01's figures
    assert par["data"]["series"]["nvidia-bare"] == pytest.approx([76.0, 140.0, 250.0, 420.0])
    assert "nvidia-mtp3-mnbt2048" not in par["data"]["series"]  # failed: nothing to plot
    assert "SIMULATED" in par["title"] and is_png(par["path"])
    fl = charts.fleet_bars(fleet, tmp_path, fleet_compare(fleet))
    d = fl["data"]
    assert d["hosts"] == ["spark-sim01", "spark-sim02", "spark-sim03"]
    assert d["flagged"] == ["spark-sim03"]
    i = d["variants"].index("nvidia-bare")
    assert [d["values"][h][i] for h in d["hosts"]] == [76.0, 76.76, 69.92]
    assert is_png(fl["path"])


def test_all_charts_order(tmp_path: Path):
    drawn = charts.all_charts(load("fleet-sim"), tmp_path)
    names = [c["name"] for c in drawn]
    assert names == ["mtp_uplift", "build_vs_build", "parallel_scaling", "fleet_bars", "history", "goodput",
                     "slo_rate", "multi_turn"]
    # no stored history given, no arrival-rate or multi-turn phase: none of the last four charts is drawn
    assert all(c["path"] is None for c in drawn[-4:])
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(n + ".png" for n in names[:-4])


def test_history_chart_draws_each_host_with_two_runs_and_leaves_gaps(tmp_path: Path):
    def row(run, variant, tok_s, status="complete"):
        return {"run_id": run, "variant": variant, "single_median": tok_s, "status": status, "simulated": True}
    trends = {"spark-sim03": [row("R0", "nvidia-bare", 60.0), row("R1", "nvidia-bare", 48.0),
                              row("R0", "nvidia-mtp2", 80.0), row("R1", "nvidia-mtp2", None, "failed")],
              "spark-sim01": [row("R1", "nvidia-bare", 76.0)]}  # one run only: no panel
    out = charts.history_lines(trends, tmp_path)
    assert out["data"]["hosts"] == {"spark-sim03": {"runs": ["R0", "R1"],
                                                    "series": {"nvidia-bare": [60.0, 48.0], "nvidia-mtp2": [80.0, None]}}}
    assert out["title"].endswith("SIMULATED") and is_png(out["path"])
    assert charts.history_lines({"spark-sim01": trends["spark-sim01"]}, tmp_path / "none")["path"] is None
