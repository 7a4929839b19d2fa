"""The report's numbers (sparkbench.report.numbers and .compare) on fixtures with known figures:
the seed's published figures (tests/fixtures/runs/seed-*) and synthetic fleets
(tests/fixtures/runs/fleet-sim*)."""

from __future__ import annotations

import copy
import json

import pytest

from sparkbench.report import compare
from sparkbench.report import numbers as rt

from helpers import REPO

pytestmark = pytest.mark.unit

RUNS = REPO / "tests" / "fixtures" / "runs"


def load(run: str) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((RUNS / run).glob("*/*.json"))]


def by_variant(rows: list[dict]) -> dict[str, dict]:
    return {r["variant"]: r for r in rows}


@pytest.fixture(scope="module")
def seed():
    return load("seed-v0.25")


@pytest.fixture(scope="module")
def fleet():
    return load("fleet-sim")


def test_fixtures_are_labelled_seed_or_synthetic():
    # simulated-run: a real run of the simulator copied as written (tests/fixtures/runs/README.md)
    for p in RUNS.glob("*/*/*.json"):
        doc = json.loads(p.read_text(encoding="utf-8"))
        assert doc.get("_fixture") in ("seed", "synthetic", "simulated-run"), p


def test_seed_table_speedups_and_tokens_per_step(seed):
    rows = by_variant(rt.report_tables(seed)["hosts"]["seed-spark"])
    assert rows["nvidia-bare"]["single_tok_s"] == 76.7
    assert rows["nvidia-mtp2"]["speedup_vs_bare"] == pytest.approx(98.0 / 76.7)
    assert rows["nvidia-mtp3"]["speedup_vs_bare"] == pytest.approx(108.3 / 76.7)
    # tokens per step = 1 + Σ acceptance (DESIGN): 2.56 and 3.08
    assert rows["nvidia-mtp2"]["tokens_per_step"] == pytest.approx(2.56)
    assert rows["nvidia-mtp3"]["tokens_per_step"] == pytest.approx(3.08)
    assert rows["nvidia-mtp3"]["acceptance_per_position"] == [0.86, 0.67, 0.55]
    # MTP rows report tokens per step, not % of roofline; bare rows the reverse
    assert rows["nvidia-mtp2"]["pct_of_roofline"] is None
    assert rows["nvidia-bare"]["tokens_per_step"] is None
    # no bare Unsloth figure is published: no speedup is invented
    assert rows["unsloth-mtp2"]["speedup_vs_bare"] is None
    # nothing the seed does not publish appears as a number
    assert rows["nvidia-bare"]["combined_8"] is None and rows["nvidia-bare"]["single_min"] is None


def test_roofline_formula(seed):
    rows = by_variant(rt.report_tables(seed)["hosts"]["seed-spark"])
    # 35B-A3B: 3e9 active × 4.5 bits / 8 = 1.6875 GB per token → 273 / 1.6875 = 161.78 tok/s
    assert rows["nvidia-bare"]["roofline_tok_s"] == pytest.approx(273e9 / (3e9 * 4.5 / 8))
    assert rows["nvidia-bare"]["pct_of_roofline"] == pytest.approx(76.7 / 161.777 * 100, rel=1e-4)
    # 27B dense: ≈ 18 tok/s roofline, 12.43 ≈ 69 % of it (DESIGN: ~70 % efficiency)
    assert rows["qwen27b-bare"]["pct_of_roofline"] == pytest.approx(69.15, abs=0.05)
    assert rows["qwen27b-bare"]["roofline_basis"] == "weights only"


def test_roofline_with_kv_geometry(fleet):
    doc = next(r for r in fleet if r["host"] == "spark-sim01" and r["variant"]["name"] == "nvidia-bare")
    roof = rt.roofline(doc)
    # KV: 2 × 10 layers × 2 heads × 256 dim × 8 bits (fp8) / 8 = 10240 B per context token,
    # context = 40 prompt + 256 / 2 = 168 tokens → 1,720,320 B
    assert roof["kv_bytes"] == pytest.approx(10240 * 168)
    assert roof["tok_s"] == pytest.approx(273e9 / (1.6875e9 + 10240 * 168))
    assert roof["basis"] == "weights + KV"


def test_roofline_missing_profile_gives_none():
    assert rt.roofline({"status": "complete"})["tok_s"] is None


def test_head_to_head_seed_unsloth_minus_16_7(seed):
    out = compare.head_to_head(seed)
    assert out["reference_build"] == "nvidia"
    single = [r for r in out["rows"] if r["metric"] == "single"]
    assert len(single) == 1  # only spec=2 has both builds published
    assert single[0]["config"] == "mtp2" and single[0]["build"] == "unsloth"
    assert round(single[0]["pct_diff"], 1) == -16.7
    # the seed publishes medians only: no per-request data, no verdict
    assert single[0]["verdict"]["kind"] == "not_enough"
    assert single[0]["verdict"]["text"] == "not enough requests for a verdict"
    assert single[0]["verdict"]["reason"] == "0 and 0 requests; 5 per side needed: --runs 5"


def test_head_to_head_fleet_gap_closes_at_8(fleet):
    out = compare.head_to_head(fleet)
    s = next(x for x in out["summary"] if x["host"] == "spark-sim01")
    assert round(s["single_pct_min"], 1) == round((81.0 - 97.0) / 97.0 * 100, 1)  # −16.5 % at mtp2
    assert round(s["single_pct_max"], 1) == round((66.5 - 76.0) / 76.0 * 100, 1)  # −12.5 % at bare
    assert s["single_kinds"] == ["differs"] * 3
    assert s["c8_kinds"] == ["no_difference"] * 3  # |Δ8| ≤ 0.9 % against 1 % per-stream noise
    c8_mtp2 = next(r for r in out["rows"] if r["host"] == "spark-sim01" and r["config"] == "mtp2"
                   and r["metric"] == "combined_8")
    assert c8_mtp2["pct_diff"] == pytest.approx((474.0 - 470.0) / 470.0 * 100)  # unsloth edges ahead
    assert c8_mtp2["verdict"]["text"].startswith("no difference detectable above ")


@pytest.mark.parametrize("config", ["bare", "mtp2", "mtp3"])
def test_head_to_head_fleet_unsloth_differs_with_interval(fleet, config):
    out = compare.head_to_head(fleet)
    for host in ("spark-sim01", "spark-sim02", "spark-sim03"):
        row = next(r for r in out["rows"] if r["host"] == host and r["config"] == config
                   and r["metric"] == "single")
        v = row["verdict"]
        assert v["kind"] == "differs" and v["n_reference"] == v["n_other"] == 5
        assert v["lo"] < v["pct"] < v["hi"] < 0
        assert v["pct"] == pytest.approx(row["pct_diff"])  # the runs' medians are the recorded medians
        assert v["text"] == f"differs by {v['pct']:+.1f} % [{v['lo']:+.1f}, {v['hi']:+.1f}]".replace("-", "−")
        # 2 and 4 streams are too few for a verdict; 8 are enough
        c2 = next(r for r in out["rows"] if r["host"] == host and r["config"] == config
                  and r["metric"] == "combined_2")
        assert c2["verdict"]["text"] == "not enough requests for a verdict"
        assert c2["verdict"]["reason"] == "2 and 2 requests; 5 per side needed: measure at 5 or more parallel"


def test_head_to_head_marks_drifted_host_unreliable(fleet):
    drift = {"spark-sim02": {"unreliable": True, "text": "nvidia-bare drifted −3.1 %"},
             "spark-sim01": {"unreliable": False, "text": "no drift detectable above 1.2 %"}}
    out = compare.head_to_head(fleet, drift=drift)
    marks = {r["host"]: r["unreliable"] for r in out["rows"]}
    assert marks == {"spark-sim01": None, "spark-sim02": "nvidia-bare drifted −3.1 %", "spark-sim03": None}


def test_head_to_head_reference_override_and_bad_name(fleet):
    out = compare.head_to_head(fleet, reference_build="unsloth")
    assert {r["build"] for r in out["rows"]} == {"nvidia"}
    with pytest.raises(ValueError, match="reference build 'amd'"):
        compare.head_to_head(fleet, reference_build="amd")


def test_fleet_verdicts_host_against_its_peers(fleet):
    out = compare.fleet_compare(fleet, threshold_pct=5)
    slow = out["verdicts"]["nvidia-bare"]["spark-sim03"]
    assert slow["kind"] == "differs" and slow["hi"] < 0 and slow["n_other"] == 5 and slow["n_reference"] == 10
    assert set(out["flagged"][0]["verdicts"]) == {f"{b}-{c}" for b in ("nvidia", "unsloth") for c in ("bare", "mtp2", "mtp3")}
    assert all(v["kind"] == "differs" and v["pct"] < -5 for v in out["flagged"][0]["verdicts"].values())
    # a healthy host is held against its healthy sibling only (spark-sim03 is ~8 % below the
    # fleet median, beyond the 5 % threshold): its interval stays narrow instead of bimodal
    healthy = out["verdicts"]["nvidia-bare"]["spark-sim01"]
    assert healthy["n_reference"] == 5 and healthy["kind"] == "no_difference" and healthy["mdd_pct"] < 5, healthy
    # a single host has no peers, hence no verdict
    alone = compare.fleet_compare([r for r in fleet if r["host"] == "spark-sim01"])
    assert alone["verdicts"] == {}


def test_fleet_flags_slow_host_with_differing_fields(fleet):
    out = compare.fleet_compare(fleet, threshold_pct=5)
    assert out["host_deviation_pct"]["spark-sim03"] == pytest.approx(-8.0, abs=0.05)
    assert [f["host"] for f in out["flagged"]] == ["spark-sim03"]
    fields = {d["field"]: d for d in out["flagged"][0]["differs"]}
    assert fields["driver"]["value"] == "580.82.07" and fields["driver"]["majority"] == "580.95.05"
    assert "sm_clock_mhz" in fields
    assert "vllm_version" not in fields  # same on every host
    assert out["fleet_median"]["nvidia-bare"] == pytest.approx(76.0)
    # a looser threshold flags nobody
    assert compare.fleet_compare(fleet, threshold_pct=9)["flagged"] == []


def test_fleet_two_hosts_do_not_flag(fleet):
    two = [r for r in fleet if r["host"] != "spark-sim02"]
    out = compare.fleet_compare(two)
    assert out["can_flag"] is False and out["flagged"] == []


def test_fleet_bad_threshold(fleet):
    with pytest.raises(ValueError, match="fleet threshold"):
        compare.fleet_compare(fleet, threshold_pct="five")


def test_version_bridge_seed_within_2_5(seed):
    out = compare.run_compare(seed, load("seed-v0.24"))
    b = out["bridge"]
    assert b["comparable"] is True
    assert {r["variant"] for r in b["pairs"]} == {"qwen27b-bare", "qwen27b-mtp"}
    pcts = {r["variant"]: r["single_pct"] for r in b["pairs"]}
    assert pcts["qwen27b-bare"] == pytest.approx((12.43 - 12.13) / 12.13 * 100)  # +2.47 %
    assert pcts["qwen27b-mtp"] == pytest.approx((28.91 - 29.38) / 29.38 * 100)  # −1.60 %
    assert b["from_versions"] == ["0.24.0"] and b["to_versions"] == ["0.25.0"]
    assert "2.5 %" in b["verdict"] and "comparable" in b["verdict"]


def test_version_bridge_fails_beyond_threshold(seed):
    base = copy.deepcopy(load("seed-v0.24"))
    for d in base:
        d["single"]["decode_tok_s_median"] *= 0.9  # now +13.9 % bare, +9.3 % MTP
    out = compare.run_compare(seed, base, threshold_pct=2.5)
    assert out["bridge"]["comparable"] is False
    assert "NOT comparable" in out["bridge"]["verdict"]
    # a looser threshold accepts it
    assert compare.run_compare(seed, base, threshold_pct=15)["bridge"]["comparable"] is True


def test_run_compare_fleet_deltas(fleet):
    out = compare.run_compare(fleet, load("fleet-sim-base"))
    assert len(out["rows"]) == 18
    row = next(r for r in out["rows"] if r["host"] == "spark-sim01" and r["variant"] == "nvidia-bare")
    assert row["single_pct"] == pytest.approx((76.0 - round(76.0 * 0.985, 2)) / round(76.0 * 0.985, 2) * 100)
    assert row["verdict"]["kind"] in ("differs", "no_difference")
    assert row["verdict"]["pct"] == pytest.approx(row["single_pct"], abs=0.05)  # the runs are the medians' runs
    b = out["bridge"]
    assert b["comparable"] is True and "figures comparable across the runs" in b["verdict"]
    assert all(compare.pair_ok(p) for p in b["pairs"])  # +1.5 %: never beyond 2.5 %
    assert all("bridge tolerance" in p["bridge_verdict"]["tolerance_text"] for p in b["pairs"])


def test_bridge_verdict_differs_beyond_tolerance(fleet):
    base = copy.deepcopy(load("fleet-sim-base"))
    for d in base:  # a 10 % slower baseline, runs and medians alike
        d["single"]["decode_tok_s_median"] *= 0.9
        for r in d["single"]["runs"]:
            r["decode_tok_s"] *= 0.9
    out = compare.run_compare(fleet, base, threshold_pct=2.5)
    b = out["bridge"]
    assert b["comparable"] is False and "NOT comparable across the runs" in b["verdict"]
    p = b["pairs"][0]
    assert p["bridge_verdict"]["kind"] == "differs" and p["bridge_verdict"]["within_tolerance"] is False
    assert p["bridge_verdict"]["tolerance_text"] == ", beyond the 2.5 % bridge tolerance"
    assert out["only_current"] == [f"spark-sim0{i}/nvidia-mtp3-mnbt2048" for i in (1, 2, 3)]


def test_run_compare_same_version_has_no_bridge(fleet):
    out = compare.run_compare(fleet, fleet)
    assert out["bridge"]["comparable"] is None and out["bridge"]["verdict"].startswith("no bridge")


def test_failures_and_quality(fleet):
    t = rt.report_tables(fleet)
    fails = [x for x in t["failures"] if x["host"] == "spark-sim01"]
    assert fails == [{"host": "spark-sim01", "variant": "nvidia-mtp3-mnbt2048", "status": "failed",
                      "stage": "preflight",
                      "reason": "block_size (2096) must be <= max_num_batched_tokens (2048) in Mamba cache align mode",
                      "remedy": "add --max-num-batched-tokens 4096 to the variant's args"}]
    q = {(x["host"], x["variant"]): x for x in t["quality"]}
    assert q[("spark-sim01", "unsloth-mtp2")]["q_capital_50"] == "truncated"
    assert q[("spark-sim01", "unsloth-mtp2")]["rt_capital_50"] == 2048
    assert q[("spark-sim01", "nvidia-bare")]["passed"] == 4
    assert t["simulated"] is True
    row = by_variant(t["hosts"]["spark-sim01"])["nvidia-mtp3-mnbt2048"]
    assert row["single_tok_s"] is None and row["status"] == "failed"


def test_roofline_reads_the_repository_model_profile_layout():
    """sparkbench/data/profiles/models/*.json nest the KV geometry under ``attention`` (synthetic document)."""
    doc = {"_fixture": "synthetic", "status": "complete", "settings": {"output_tokens": 256},
           "variant": {"name": "x", "args": ["--kv-cache-dtype", "fp8"]},
           "profile": {"hardware": {"memory_bandwidth_gbps": 273},
                       "model": {"active_params_b": 2.0, "weight_bits": 4.5,
                                 "attention": {"full_attention_layers": 10, "num_kv_heads": 2, "head_dim": 256}}}}
    roof = rt.roofline(doc)
    assert roof["kv_bytes"] == pytest.approx(2 * 10 * 2 * 256 * 1 * 128)  # fp8 = 1 byte, context 256 / 2
    assert roof["tok_s"] == pytest.approx(273e9 / (2e9 * 4.5 / 8 + 2 * 10 * 2 * 256 * 128))
    doc["variant"]["args"] = []  # no --kv-cache-dtype: 16-bit KV
    assert rt.roofline(doc)["kv_bytes"] == pytest.approx(2 * 10 * 2 * 256 * 2 * 128)


def test_one_roofline_weights_plus_kv_for_every_output(fleet):
    """The roofline every output prints (report.md, results.json, the terminal table) is
    weights + KV: 273 GB/s / (1.6875 GB + 10240 B × 168) = 161.61 tok/s, not the weights-only
    161.78 for the same fixture."""
    rows = by_variant(rt.report_tables(fleet)["hosts"]["spark-sim01"])
    assert rows["nvidia-bare"]["roofline_tok_s"] == pytest.approx(161.61, abs=0.01)
    assert rows["nvidia-bare"]["roofline_basis"] == "weights + KV"
    assert rows["nvidia-bare"]["pct_of_roofline"] == pytest.approx(76.0 / 161.61 * 100, rel=1e-4)


def synthetic(name: str, build: str, config: str, **extra) -> dict:
    doc = {"_fixture": "synthetic", "status": "complete", "host": "h1",
           "variant": {"name": name, "build": build, "config": config, "model": f"{build}/M"},
           "single": {"decode_tok_s_median": 10.0, "decode_tok_s_min": 9.9, "decode_tok_s_max": 10.1}}
    doc["variant"].update(extra.pop("variant", {}))
    doc.update(extra)
    return doc


def test_reference_build_is_the_first_listed():
    """The matrix index decides (the first build listed); started_at only when no index is recorded."""
    docs = [synthetic("b-bare", "b", "bare", variant={"index": 0}, started_at="2026-01-01T10:05:00Z"),
            synthetic("a-bare", "a", "bare", variant={"index": 1}, started_at="2026-01-01T10:00:00Z")]
    assert rt.build_order(docs) == ["b", "a"]
    assert compare.head_to_head(docs)["reference_build"] == "b"
    for d in docs:
        del d["variant"]["index"]
    assert rt.build_order(docs) == ["a", "b"]
    assert [rt.variant_name(r) for r in rt.sort_results(docs)] == ["a-bare", "b-bare"]


def test_launch_flags_from_the_args_mapping_and_the_launch_spec():
    """variant.args as a mapping (flag name → value) and launch.argv both give the launch flags."""
    doc = synthetic("x", "a", "mtp2", variant={"args": {"kv-cache-dtype": "fp8",
                                                        "speculative-config": {"method": "mtp"}}})
    assert rt.launch_arg(doc, "--kv-cache-dtype") == "fp8"
    assert rt.is_speculative(doc)
    doc = synthetic("y", "a", "custom", launch={"argv": ["m", "--kv-cache-dtype=fp8"], "command": "vllm serve m"})
    assert rt.launch_arg(doc, "--kv-cache-dtype") == "fp8" and not rt.is_speculative(doc)
