"""Unit tests of the self-benchmarks' statistics, ground-truth and report code (perf/).

No timing assertions and no benchmark runs: these check the arithmetic that turns raw timelines
and result files into the figures of BENCHMARKS.md, and the document assembly.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from perf import client_capacity, common, fidelity, gpu_bench, gpu_real_server, orchestration, run_all


@pytest.mark.unit
def test_rel_err_pct_and_median() -> None:
    assert common.rel_err(101.0, 100.0) == pytest.approx(0.01)
    assert common.rel_err(99.5, 100.0) == pytest.approx(-0.005)
    assert math.isnan(common.rel_err(1.0, 0.0))
    assert common.pct(0.0123) == "+1.23 %"
    assert common.pct(-0.005, 1) == "-0.5 %"
    assert common.pct(0.02, 1, signed=False) == "2.0 %"
    assert common.pct(None) == "—" and common.pct(float("nan")) == "—"
    assert common.median([3.0, None, 1.0, 2.0]) == 2.0
    assert math.isnan(common.median([]))
    assert common.fmt(12345.678, 1) == "12,345.7"


@pytest.mark.unit
def test_md_table_escapes_pipes() -> None:
    t = common.md_table(["a", "b"], [[1, "x|y"]])
    assert t.splitlines() == ["| a | b |", "|---|---|", "| 1 | x\\|y |"]


@pytest.mark.unit
def test_truth_decode_excludes_first_token() -> None:
    # 256 tokens, first at t=1.0, last at t=1.255: 255 tokens in 0.255 s = 1000 tok/s.
    row = {"first_token": 1.0, "last_token": 1.255, "completion_tokens": 256, "arrival": 0.9}
    assert fidelity.truth_decode(row) == pytest.approx(1000.0)
    assert fidelity.truth_decode({**row, "last_token": None}) is None
    assert fidelity.truth_decode({**row, "completion_tokens": 1}) is None


@pytest.mark.unit
def test_truth_combined_spans_first_arrival_to_last_token() -> None:
    rows = [{"arrival": 0.0, "last_token": 2.0, "completion_tokens": 100},
            {"arrival": 0.5, "last_token": 4.0, "completion_tokens": 300}]
    assert fidelity.truth_combined(rows) == pytest.approx(400 / 4.0)
    assert fidelity.truth_combined([]) is None
    assert fidelity.truth_combined([{"arrival": 0, "last_token": None, "completion_tokens": 1}]) is None


@pytest.mark.unit
def test_new_rows_filters_seen_and_short_and_sorts() -> None:
    rows = [{"id": "a", "arrival": 3, "completion_tokens": 8},
            {"id": "b", "arrival": 1, "completion_tokens": 8},
            {"id": "c", "arrival": 2, "completion_tokens": 5},
            {"id": "d", "arrival": 0, "completion_tokens": 8}]
    assert [r["id"] for r in fidelity.new_rows({"d"}, rows, 8)] == ["b", "a"]


@pytest.mark.unit
def test_highest_followed_stops_at_first_miss() -> None:
    rows = [{"rate": 1000, "err": 0.001}, {"rate": 5000, "err": -0.004},
            {"rate": 10000, "err": 0.02}, {"rate": 20000, "err": 0.0}]
    assert client_capacity.highest_followed(rows) == 5000
    assert client_capacity.highest_followed([{"rate": 10, "err": None}]) == 0.0
    assert client_capacity.highest_followed(list(reversed(rows))) == 5000


@pytest.mark.unit
def test_measurement_seconds_from_result_file() -> None:
    doc = {"single": {"runs": [{"ttft_s": 0.1, "decode_tok_s": 100.0, "completion_tokens": 101,
                                "first_chunk_tokens": 1}]},
           "parallel": [{"wall_s": 2.5}]}
    assert orchestration.measurement_seconds(doc) == pytest.approx(0.1 + 1.0 + 2.5)
    assert orchestration.measurement_seconds({"single": {"runs": [{"decode_tok_s": None}]}}) is None


@pytest.mark.unit
def test_slope_and_profile_top() -> None:
    assert orchestration.slope([1, 2, 4, 8], [10, 12, 16, 24]) == pytest.approx(2.0)
    log = ("Bench variant | launch v1 ------------------------------ 3.50s\n"
           "Bench variant | launch v1 ------------------------------ 1.50s\n"
           "Spark host | pull image -------------------------------- 2.00s\n"
           "ok: [host]\n")
    assert orchestration.profile_top(log) == [("Bench variant | launch v1", 5.0),
                                              ("Spark host | pull image", 2.0)]


@pytest.mark.unit
def test_inventory_and_vars_files(tmp_path: Path) -> None:
    inv, ev = tmp_path / "inv.yml", tmp_path / "vars.json"
    orchestration.write_inventory(inv, [("bench-fleet01", 18501), ("bench-fleet02", 18502)])
    hosts = json.loads(inv.read_text())["all"]["children"]["sparks"]["children"]["sim_sparks"]["hosts"]
    assert hosts["bench-fleet02"]["vllm_server_port"] == 18502
    orchestration.write_vars(ev, 3, tmp_path / "res")
    v = json.loads(ev.read_text())
    assert [c["name"] for c in v["bench_configs"]] == ["v1", "v2", "v3"]
    assert v["llm_bench_quality"] is False and v["llm_bench_concurrency"] == []


@pytest.mark.unit
def test_gpu_server_helpers() -> None:
    cfg = gpu_real_server.PRESETS["tiny"]
    params, read = gpu_real_server.weight_bytes(cfg, 2)
    h, i, n, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"]
    manual = v * h * 2 + n * (h * h + 2 * h * kv * d + h * h + 3 * h * i + 2 * h) + h
    assert params == manual
    assert read == (params - v * h + h) * 2
    assert gpu_real_server.kv_bytes_per_token(cfg, 2) == 2 * n * kv * d * 2
    ids = gpu_real_server.encode_prompt([{"role": "user", "content": "ab"}], v)
    assert ids == [1, ord("a") + 3, ord("b") + 3, 13]
    img = gpu_real_server.encode_prompt(
        [{"role": "user", "content": [{"type": "text", "text": "x"},
                                       {"type": "image_url", "image_url": {"url": "data:"}}]}], v)
    assert len(img) == 4


@pytest.mark.unit
def test_llama_1b_preset_is_about_one_billion_parameters() -> None:
    params, read = gpu_real_server.weight_bytes(gpu_real_server.PRESETS["llama-1b"], 2)
    assert 0.9e9 < params < 1.2e9
    assert read < params * 2  # the embedding table is not read whole


@pytest.mark.unit
def test_roofline_and_bandwidth_table() -> None:
    info = {"weight_bytes_per_step": 2e9, "kv_bytes_per_context_token": 1e4}
    # 4.8 TB/s over 2 GB + 1,000 tokens × 10 kB = 2.01 GB → ≈ 2388 tok/s.
    assert gpu_bench.roofline(info, 4800, 1000) == pytest.approx(4.8e12 / 2.01e9)
    assert gpu_bench.roofline(info, 4800, 1000, batch=8) == pytest.approx(8 * 4.8e12 / 2.08e9)
    assert gpu_bench.bandwidth_for("NVIDIA H200") == 4800.0
    assert gpu_bench.bandwidth_for("NVIDIA GB10") == 273.0
    assert gpu_bench.bandwidth_for("Some Future GPU") is None
    assert gpu_bench.median_prompt({"runs": [{"prompt_tokens": 5}, {"prompt_tokens": 9},
                                             {"prompt_tokens": 7}]}) == 7.0


@pytest.mark.unit
def test_assemble_keeps_sections_in_table_order(tmp_path: Path) -> None:
    res = tmp_path / "results"
    res.mkdir()
    (res / "capacity.md").write_text("## 2. Client capacity\n\nBODY-CAP\n")
    (res / "fidelity.md").write_text("## 1. Fidelity\n\nBODY-FID\n")
    (res / "gpu_real.md").write_text("## 5. Real GPU\n\nBODY-GPU\n")
    out = tmp_path / "BENCHMARKS.md"
    text = run_all.assemble(out, res)
    assert out.read_text() == text
    assert text.index("BODY-FID") < text.index("BODY-CAP") < text.index("## 3. Orchestration") \
        < text.index("## 4. Fleet") < text.index("BODY-GPU")
    assert "perf.run_all --only orchestration" in text  # a missing table says how to make it


@pytest.mark.unit
def test_run_all_rejects_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all.main(["--only", "fidelity,nope", "--render-only"]) == 2
    assert "unknown benchmark nope" in capsys.readouterr().err


@pytest.mark.sim
def test_section_rendering_has_stamp() -> None:
    sec = common.Section("capacity", "Client capacity", "BODY", True)
    text = run_all.render_section(sec, 2)
    assert text.startswith("## 2. Client capacity\n")
    assert "_Measured " in text and "at commit `" in text and "CPU cores" in text
    assert text.rstrip().endswith("BODY")
    assert statistics.median([1, 2, 3]) == 2
