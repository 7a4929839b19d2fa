"""sparkbench predict: the twin's inputs from flags, its error on the published figures (fitted and
held-out), a unit's calibration from its measured history, the memory check, and the command on
every model profile and on a model folder that has no profile."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkbench.engine_config import PredictInputError, TwinConfig, build_twin, decode_rate
from sparkbench.memory.fit import memory_fit
from sparkbench.modelfiles.profile import build_profile
from sparkbench.modelfiles.sources import read_folder
from sparkbench.package_data import hardware_profile_file, model_ids, model_profile_file
from sparkbench.predict import calibration as cal
from sparkbench.predict import twin_rate
from sparkbench.predict.command import predict_command
from sparkbench.predict.estimate import predict
from sparkbench.predict.published import fit_rows, published_figures, shipped_interval

from model_files import MOE_CONFIG, moe_tensors, write_model

pytestmark = pytest.mark.unit

HW = json.loads(hardware_profile_file("dgx-spark").read_text())
N35 = "nvidia/Qwen3.6-35B-A3B-NVFP4"
D27 = "nvidia/Qwen3.6-27B-NVFP4"
FIRST_LINE = re.compile(r"^(\d+\.\d) tok/s \[(\d+\.\d), (\d+\.\d)\] predicted single-stream decode of ")


def profile(model: str) -> dict:
    return json.loads(model_profile_file(model).read_text())


def test_flags_become_the_twins_inputs_and_bad_ones_name_the_fix():
    c = TwinConfig.from_args({"kv_cache_dtype": "fp8", "speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}',
                              "tensor-parallel-size": 2, "max-model-len": 65536})
    assert (c.kv_cache_dtype, c.spec_k, c.tensor_parallel_size, c.max_model_len) == ("fp8", 3, 2, 65536)
    argv = TwinConfig.from_args(["--kv-cache-dtype", "fp8", "--enforce-eager", "--max-num-seqs", "8"])
    assert (argv.kv_cache_dtype, argv.max_num_seqs, argv.spec_k) == ("fp8", 8, 0)
    with pytest.raises(PredictInputError, match="speculative-config is not JSON"):
        TwinConfig.from_args({"speculative-config": "{mtp"})
    with pytest.raises(PredictInputError, match="max-model-len"):
        TwinConfig.from_args({"max-model-len": "lots"})


def test_the_twin_holds_the_fitted_figures_and_states_its_held_out_error():
    rows = fit_rows()
    assert len(rows) == len(published_figures()) and {r["role"] for r in rows} == {"fitted", "held-out"}
    for r in rows:
        assert r["predicted"] > 0 and r["error"] == pytest.approx(r["predicted"] / r["tok_s"] - 1)
        if r["role"] == "fitted":
            assert abs(r["error"]) < 0.04, r      # what the fit was trained on, it reproduces
    held_single = [abs(r["error"]) for r in rows if r["role"] == "held-out" and r["parallel"] == 1]
    assert shipped_interval(rows, 1) == max(held_single) > 0.03
    assert shipped_interval(rows, 8) == max(abs(r["error"]) for r in rows if r["role"] == "held-out" and r["parallel"] > 1)
    # the held-out 27B bare lands within 3 % of the seed's 12.43
    (d27,) = [r for r in rows if r["model"] == D27 and r["role"] == "held-out" and r["tok_s"] == 12.43]
    assert abs(d27["error"]) < 0.03


def test_a_profile_from_the_files_is_paced_by_the_bytes_its_headers_give(tmp_path):
    tensors, _ = moe_tensors()
    files = read_folder(write_model(tmp_path / "moe", MOE_CONFIG, tensors))
    prof = build_profile(files, "acme/moe-nvfp4")
    twin = build_twin(prof, HW, TwinConfig())
    dec = prof["decode_bytes_per_token"]
    assert twin.dense_bytes == dec["dense"] + dec["embedding_row"] + dec["lm_head"]
    assert twin.expert_bytes_slot * prof["moe"]["experts_per_token"] == pytest.approx(dec["routed_experts"])
    # bandwidth-bound: the byte term scales with the bandwidth, the launch term does not
    full, half = decode_rate(twin), decode_rate(build_twin(prof, HW, TwinConfig(), bandwidth_scale=0.5))
    launch = prof["layers"] * HW["engine"]["layer_launch_us"] * 1e-6
    assert 1 / half - launch == pytest.approx(2 * (1 / full - launch), rel=1e-9)


def _result(root: Path, run: str, host: str, variant: str, model: str, measured: float, env: dict | None = None,
            args: dict | None = None, probe: float | None = None) -> None:
    doc = {"status": "complete", "simulated": True, "host": host, "started_at": f"2026-12-0{run[-1]}T10:00:00Z",
           "variant": {"name": variant, "model": model, "args": args or {"kv-cache-dtype": "fp8"}, "env": {}},
           "launch": {"env": env or {}}, "server": {"version": "0.25.0"},
           "profile": {"hardware": HW, "model": profile(model)},
           "single": {"decode_tok_s_median": measured, "runs": [{"decode_tok_s": measured}] * 5},
           "protocol": {"bandwidth": {"gbps": probe, "method": "simulated", "when": "2026-12-03T10:00:00Z"}} if probe else {}}
    path = root / run / host / f"{variant}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_a_slow_unit_is_calibrated_from_its_history_and_other_models_keep_the_shipped_error(tmp_path):
    twin35 = decode_rate(build_twin(profile(N35), HW, TwinConfig(kv_cache_dtype="fp8")))
    _result(tmp_path, "r1", "spark-sim03", "nvidia-bare", N35, 0.89 * twin35)
    _result(tmp_path, "r2", "spark-sim03", "nvidia-bare", N35, 0.87 * twin35)
    _result(tmp_path, "r3", "spark-sim03", "nvidia-bare", N35, 3 * twin35, env={"VLLM_SIM_RATE": "200"})  # not its pace
    rows = cal.calibration_rows(tmp_path, "spark-sim03")
    assert [r["run_id"] for r in rows] == ["r1", "r2"]
    c = cal.calibrate(rows)
    assert c["factor"] == pytest.approx(0.88) and c["spread"] == pytest.approx(0.01 / 0.88) and c["models"] == [N35]
    fits = fit_rows()
    same = predict(profile(N35), HW, TwinConfig(kv_cache_dtype="fp8"), fits, calibration=c)
    assert same["single"]["tok_s"] == pytest.approx(0.88 * twin35)
    assert same["single"]["hi"] / same["single"]["tok_s"] - 1 == pytest.approx(0.03)   # measured model: its spread (floor 3 %)
    other = predict(profile(D27), HW, TwinConfig(kv_cache_dtype="fp8"), fits, calibration=c)
    assert other["single"]["hi"] / other["single"]["tok_s"] - 1 == pytest.approx(shipped_interval(fits, 1))
    assert "other models" in other["interval_basis"]
    assert cal.calibrate([]) is None


def test_the_probe_scales_the_bandwidth_against_a_sound_units_reading():
    sound = HW["memory_bandwidth_gbps"] * HW["probe"]["stream_read_share"]      # 273 x 0.85 = 232.05
    assert twin_rate.bandwidth_scale(sound, HW, "simulated") == pytest.approx(1.0)
    assert twin_rate.bandwidth_scale(0.89 * sound, HW, "torch-cuda-stream-read") == pytest.approx(0.89)
    assert twin_rate.bandwidth_scale(None, HW) == 1.0 and twin_rate.bandwidth_scale(100.0, {"name": "x"}) == 1.0
    # a unit that streams 0.89 x a sound unit's is predicted 0.89 x on the bytes' share of the step
    full = decode_rate(build_twin(profile(N35), HW, TwinConfig(kv_cache_dtype="fp8")))
    slow = decode_rate(build_twin(profile(N35), HW, TwinConfig(kv_cache_dtype="fp8"), bandwidth_scale=0.89))
    assert 0.89 < slow / full < 0.95


def test_memory_refuses_a_context_beyond_the_model_and_weights_beyond_the_share():
    m = profile("openai/gpt-oss-120b")
    cfg = TwinConfig(max_model_len=1_000_000_000)
    far = memory_fit(m, HW, cfg)
    assert far["fits"] is False and "beyond the model's context (131,072 tokens)" in far["reason"]
    cfg = TwinConfig(gpu_memory_utilization=0.5)
    small = memory_fit(m, HW, cfg)
    assert small["fits"] is False and small["budget_gb"] == pytest.approx(64.0) and "weights alone" in small["reason"]
    cfg = TwinConfig(tensor_parallel_size=2, gpu_memory_utilization=0.5)
    pair = memory_fit(m, HW, cfg)
    assert pair["fits"] is True and pair["weights_gb"] == pytest.approx(small["weights_gb"] / 2)
    n35 = profile(N35)
    cfg = TwinConfig(kv_cache_dtype="fp8")
    ok = memory_fit(n35, HW, cfg)
    assert ok["fits"] is True and ok["context"] == 262144 and ok["max_context"] == 262144
    assert ok["kv_gb"] == pytest.approx((10 * 2 * 256 * 2 * 262144 + build_twin(n35, HW, cfg).state_bytes / 2) / 1e9)


@pytest.mark.parametrize("model", model_ids())
def test_predict_answers_for_every_model_profile(model, capsys):
    assert predict_command(model, None, None, '{"kv-cache-dtype": "fp8"}') == 0
    first = capsys.readouterr().out.splitlines()[0]
    m = FIRST_LINE.match(first)
    assert m and float(m[2]) < float(m[1]) < float(m[3]), first


def test_predict_answers_for_a_model_folder_with_no_profile_and_bad_input_exits_4(tmp_path, capsys):
    tensors, _ = moe_tensors()
    folder = write_model(tmp_path / "moe", MOE_CONFIG, tensors)
    assert predict_command(str(folder), None, None, None) == 0
    out = capsys.readouterr().out
    assert FIRST_LINE.match(out.splitlines()[0]) and "the folder's headers" in out and "shipped fit" in out
    assert predict_command(str(folder), None, None, "{bad") == 4
    assert "--args is not JSON" in capsys.readouterr().err
    assert predict_command(N35, "no-such-unit-kind", None, None) == 4
    assert "--hardware no-such-unit-kind: no profile" in capsys.readouterr().err
    assert predict_command(N35, "x86-cpu", None, None) == 4
    assert "--hardware x86-cpu: its per-layer cost is fitted on a unit; pass --host" in capsys.readouterr().err


def test_the_history_index_keeps_each_results_prediction_error(tmp_path):
    from sparkbench import history

    twin35 = decode_rate(build_twin(profile(N35), HW, TwinConfig(kv_cache_dtype="fp8")))
    _result(tmp_path, "r1", "spark-sim03", "nvidia-bare", N35, 0.8 * twin35)
    _result(tmp_path, "r2", "spark-sim03", "nvidia-bare", N35, twin35, env={"VLLM_SIM_SPEEDUP": "4"})
    first, forced = history.rows(tmp_path, "spark-sim03")
    assert first["predicted_single"] == pytest.approx(twin35) and first["prediction_error"] == pytest.approx(0.25)
    assert forced["predicted_single"] is None and forced["prediction_error"] is None


def test_a_cpu_units_per_layer_cost_is_fitted_on_one_configuration_and_predicts_another(tmp_path, capsys):
    cpu = json.loads(hardware_profile_file("x86-cpu").read_text())
    tiny = profile("sparkbench/tiny-llama")
    bf16, fp32 = TwinConfig(dtype="bfloat16"), TwinConfig(dtype="float32")
    launch = cal.fit_launch_us(tiny, cpu, bf16, 60.0, 10.0)
    fitted = build_twin(tiny, cpu, bf16, bandwidth_gbps=10.0, layer_launch_us=launch)
    assert decode_rate(fitted) == pytest.approx(60.0)
    # float32 reads twice the weight bytes: the twin's time grows by exactly the bytes' time
    wider = build_twin(tiny, cpu, fp32, bandwidth_gbps=10.0, layer_launch_us=launch)
    bytes_s = 1 / decode_rate(fitted) - tiny["layers"] * launch * 1e-6
    assert 1 / decode_rate(wider) == pytest.approx(1 / 60.0 + bytes_s, rel=1e-6)
    with pytest.raises(PredictInputError, match="faster than the probed"):
        cal.fit_launch_us(tiny, cpu, bf16, 1e6, 10.0)
    # through the command: the host's newest tiny result with a probe fits it; the first line is the prediction
    for run, variant, args in (("r1", "tiny-bf16", {"dtype": "bfloat16"}), ("r1", "tiny-fp32", {"dtype": "float32"})):
        path = tmp_path / run / "rv-cpu01" / f"{variant}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "status": "complete", "simulated": False, "host": "rv-cpu01", "started_at": f"2026-12-03T10:0{len(variant)}:00Z",
            "variant": {"name": variant, "model": "sparkbench/tiny-llama", "args": args}, "server": {"version": "0.32.0"},
            "profile": {"hardware": cpu, "model": tiny},
            "single": {"decode_tok_s_median": 60.0, "decode_tok_s_min": 57.0, "decode_tok_s_max": 63.0},
            "protocol": {"bandwidth": {"gbps": 10.0, "method": "torch-cpu-stream-read", "when": "2026-12-03T10:00:00Z"}}}))
    assert predict_command("sparkbench/tiny-llama", "x86-cpu", "rv-cpu01", '{"dtype": "float32"}', str(tmp_path),
                           fit_variant="tiny-bf16") == 0
    out = capsys.readouterr().out
    m = FIRST_LINE.match(out.splitlines()[0])
    assert m and float(m[1]) == pytest.approx(decode_rate(wider), abs=0.05), out
    assert float(m[3]) / float(m[1]) - 1 == pytest.approx(0.05, abs=0.002)   # the fitted result's spread: 3 / 60
    assert "fitted on rv-cpu01: tiny-bf16 (run r1) measured 60.0 tok/s at 10.0 GB/s probed" in out
