"""The unit's memory plan (sparkbench.memory): its arithmetic, its refusals with vLLM's own
messages, the tenants' validation, the residents it counts, and how bench's plan and serve's
deployment carry it. Pure functions over dicts and files; no Ansible, no container (the playbook
checks are in tests/test_playbook_memory.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_plan_bracket import host_vars

from sparkbench import memory, plan
from sparkbench.engine_config import TwinConfig
from sparkbench.errors import InputError
from sparkbench.memory.fit import memory_fit
from sparkbench.package_data import BUILT_IN_PROFILES
from sparkbench.paths import PROFILES_DIR
from sparkbench.serve import deploy_plan, deployment_records
from sparkbench.serve import memory as serve_memory
from sparkbench.twin.pacing import recurrent_state_bytes

pytestmark = pytest.mark.unit

QWEN = "nvidia/Qwen3.6-35B-A3B-NVFP4"


def profile(kind: str, name: str) -> dict:
    return json.loads((BUILT_IN_PROFILES / kind / f"{name.replace('/', '__')}.json").read_text())


HW, CPU, MODEL, TINY = (profile("hardware", "dgx-spark"), profile("hardware", "x86-cpu"), profile("models", QWEN),
                        profile("models", "sparkbench/tiny-llama"))


def engine(name: str, args: dict, kind: str = "engine", env: dict | None = None) -> dict:
    return memory.engine_row(kind, name, MODEL, HW, args, env or {}, 128.0)


def test_an_engines_share_is_its_utilization_of_the_total_with_predicts_weights_and_kv():
    e = engine("nvidia-bare", {"kv-cache-dtype": "fp8", "max-model-len": 65536, "gpu-memory-utilization": 0.85})
    assert e["gb"] == pytest.approx(0.85 * 128) and e["utilization"] == 0.85 and not e["problems"]
    # One implementation: predict's memory check gives the same weights and KV cache.
    fit = memory_fit(MODEL, HW, TwinConfig(kv_cache_dtype="fp8", max_model_len=65536, gpu_memory_utilization=0.85))
    c = e["contents"]
    assert c["weights_gb"] == pytest.approx(fit["weights_gb"]) and c["kv_gb"] == pytest.approx(fit["kv_gb"])
    assert (c["activations_gb"], c["cuda_graphs_gb"]) == (memory.engine.ACTIVATIONS_GB, memory.engine.CUDA_GRAPHS_GB)
    assert c["left_gb"] == pytest.approx(e["gb"] - c["weights_gb"] - c["kv_gb"] - 3.0)
    # Unset: vLLM's default (0.92, not 0.9); --enforce-eager captures no CUDA graphs; 64k is 64000.
    d = engine("d", {"enforce-eager": True, "max-model-len": "64k"})
    assert d["gb"] == pytest.approx(0.92 * 128) and "(vLLM's default)" in d["share"]
    assert d["contents"]["cuda_graphs_gb"] == 0 and d["context"] == 64000


def test_a_plan_that_fits_prints_its_table():
    ctx = memory.context("spark-sim01", HW, {})
    p = memory.plan(ctx, [], engine("nvidia-bare", {"gpu-memory-utilization": 0.85}), "none")
    assert p["fits"] is True and p["used_gb"] == pytest.approx(8 + 108.8) and p["problems"] == []
    text = "\n".join(p["lines"])
    assert "memory plan of spark-sim01: 128 GB (hardware profile dgx-spark, unified_memory_gb)" in text
    assert "  tenant/engine                GB  share                 total   free" in text
    assert "  engine nvidia-bare        108.8  0.85 x 128 GB         116.8   11.2" in text
    assert "→ fits: 116.8 of 128 GB, 11.2 GB free" in text
    assert "cannot be checked on a real Spark here" in text
    assert max(len(line) for line in p["lines"][1:-3]) < 72  # Ansible's YAML output does not fold them


def test_two_engines_at_half_and_a_20_gb_tenant_do_not_fit_128_gb():
    ctx = memory.context("spark01", HW, {"bench_tenants": [{"name": "rag-store", "gb": 20}]})
    resident = engine("sparkbench-resident-a", {"gpu-memory-utilization": 0.5}, kind="resident")
    p = memory.plan(ctx, [resident], engine("b", {"gpu-memory-utilization": 0.5}), "records")
    assert p["fits"] is False and p["used_gb"] == pytest.approx(156.0) and p["free_gb"] == pytest.approx(-28.0)
    [x] = p["problems"]
    assert x["id"] == "memory_plan"
    assert ("b takes 64.0 GB (--gpu-memory-utilization 0.5 x 128 GB) beside reserve system 8.0 GB, resident "
            "sparkbench-resident-a 64.0 GB, tenant rag-store 20.0 GB: 156.0 GB of 128 GB, 28.0 GB over") in x["reason"]
    assert "--gpu-memory-utilization to 0.28 or less (36.0 GB are left for it)" in x["remedy"]
    assert "serve_state=absent" in x["remedy"] and "bench_tenants" in x["remedy"]
    assert x["vllm"].startswith("ValueError: Free memory on device cuda:0 (33.53/119.21 GiB) on startup is less "
                                "than desired GPU memory utilization (0.5, 59.60 GiB).")
    assert x["source"].startswith("vllm/v1/worker/utils.py")
    text = memory.refusal(p)
    assert "vLLM's own message for this case" in text and "fix: lower b's" in text
    assert "  → refused: 156.0 of 128 GB, 28.0 GB over" in p["lines"]


def test_a_max_model_len_beyond_the_models_context_is_refused_with_vllms_message():
    e = engine("far", {"max-model-len": 1_000_000_000})
    [x] = e["problems"]
    assert x["id"] == "max_model_len_beyond_model"
    assert "--max-model-len 1,000,000,000 is beyond the model's context (262,144 tokens)" in x["reason"]
    assert x["vllm"].startswith("Value error, User-specified max_model_len (1000000000) is greater than the derived "
                                "max_model_len (max_position_embeddings=262144")
    assert x["source"].startswith("vllm/config/model.py") and "max-model-len: 262144 or less" in x["remedy"]
    p = memory.plan(memory.context("h", HW, {}), [], e, "none")
    assert p["fits"] is False and p["problems"] == [x]


def test_a_kv_cache_the_share_cannot_hold_is_refused_with_the_largest_length_that_fits():
    # vLLM's escape hatch lifts the context check; the KV cache of one sequence still has to fit.
    e = engine("long", {"max-model-len": 10_000_000, "gpu-memory-utilization": 0.3},
               env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    [x] = e["problems"]
    assert x["id"] == "kv_cache_beyond_share" and "at most" in x["reason"]
    estimate = int(x["remedy"].split("lower max-model-len to ")[1].split()[0])
    per_token = e["contents"]["kv_bytes_per_token"]
    state = recurrent_state_bytes(MODEL["linear_attention"])  # a hybrid model's per-sequence state
    room = 0.3 * 128e9 - e["contents"]["weights_gb"] * 1e9 - 3e9 - state
    assert estimate == pytest.approx(room / per_token, rel=1e-3) and estimate < 10_000_000
    assert x["vllm"].startswith("ValueError: To serve at least one request with the model's max seq len (10000000)")
    assert x["source"].startswith("vllm/v1/core/kv_cache_utils.py")
    small = engine("tiny-share", {"gpu-memory-utilization": 0.1})
    assert [p["id"] for p in small["problems"]] == ["weights_beyond_share"]
    assert "No available memory for the cache blocks" in small["problems"][0]["vllm"]


def test_a_cpu_hosts_share_is_its_kv_cache_space_plus_weights():
    ok = memory.engine_row("engine", "tiny", TINY, CPU, {"max-model-len": 2048}, {"VLLM_CPU_KVCACHE_SPACE": "1"}, None)
    assert ok["gb"] == pytest.approx(1 * 1024 ** 3 / 1e9 + 0.011 + memory.engine.CPU_RUNTIME_GB)
    assert ok["utilization"] is None and ok["problems"] == [] and ok["contents"]["cuda_graphs_gb"] == 0
    p = memory.plan(memory.context("cpu-real01", CPU, {}), [], ok, "none")
    assert p["fits"] is None and "the unit's total is unknown" in "\n".join(p["lines"])
    # The real-vLLM case (tests/test_real_cpu_units.py: 2,000,000 tokens, 1 GiB): refused before the start.
    far = memory.engine_row("engine", "too-long", TINY, CPU, {"max-model-len": 2_000_000},
                            {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, None)
    [x] = far["problems"]
    assert x["id"] == "kv_cache_beyond_share" and "lower max-model-len to 1048576 or less" in x["remedy"]
    assert "VLLM_CPU_KVCACHE_SPACE" in x["remedy"]
    assert memory.plan(memory.context("cpu-real01", CPU, {"bench_unit_memory_gb": 2}), [], ok, "none")["fits"] is False


@pytest.mark.parametrize("tenants, field", [
    ("rag", "bench_tenants is 'rag'"),
    ([{"name": "rag"}], "bench_tenants[0].gb is None, not a number"),
    ([{"name": "rag", "gb": -1}], "bench_tenants[0].gb is -1"),
    ([{"name": "", "gb": 1}], "bench_tenants[0].name"),
    ([{"name": "a", "gb": 1}, {"name": "a", "gb": 2}], "bench_tenants[1].name is 'a'; give each tenant its own name"),
    ([{"name": "a", "size": 1}], "bench_tenants[0] is {'name': 'a', 'size': 1}; each tenant is {name, gb}"),
])
def test_bad_tenants_name_the_field_and_the_fix(tenants, field):
    with pytest.raises(InputError) as err:
        memory.tenants(tenants)
    msg = str(err.value)
    assert field in msg and ("bench_tenants: [{name: rag-store, gb: 20}]" in msg or "e.g. gb: 20" in msg), msg
    assert memory.tenants([{"name": "comfyui", "gb": "12.5"}]) == [
        {"kind": "tenant", "name": "comfyui", "gb": 12.5, "share": "bench_tenants", "share_short": "bench_tenants"}]


def resident_on(results: Path, host: str, variant: str, util: float, port: int = 8080) -> Path:
    """A deployed resident: its source result (flags as measured) and the controller's record."""
    src = results / "R1" / host / f"{variant}.json"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(json.dumps({"variant": {"name": variant, "model": QWEN, "args": {"gpu-memory-utilization": util}},
                               "launch": {"env": {}}, "profile": {}}))
    dep = {"host": host, "variant": variant, "port": port, "names": {"resident": f"sparkbench-resident-{variant}"},
           "source": {"run": "R1", "path": str(src)}}
    deployment_records.write(results, deployment_records.record(dep, "deployed", "2026-12-01T00:00:00Z"))
    return src


def test_residents_come_from_the_units_listing_else_the_controllers_records(tmp_path):
    resident_on(tmp_path, "h1", "r1", 0.4)
    found, where = memory.present(tmp_path, "h1")
    assert [f["name"] for f in found] == ["sparkbench-resident-r1"] and "deployment records" in where
    [row] = memory.rows(found, HW, PROFILES_DIR, 128.0)
    assert row["kind"] == "resident" and row["gb"] == pytest.approx(51.2) and row["variant"] == "r1"
    # The unit lists a resident of its own run (labels) and a stopped one: only the running one counts.
    listing = [{"name": "sparkbench-resident-r2", "variant": "r2", "run": "R9", "port": "8090", "running": True},
               {"name": "sparkbench-resident-r1", "variant": "r1", "run": "R1", "port": "8080", "running": False}]
    found, where = memory.present(tmp_path, "h1", listing)
    assert [f["name"] for f in found] == ["sparkbench-resident-r2"] and "listing" in where
    [unknown] = memory.rows(found, HW, PROFILES_DIR, 128.0)
    assert unknown["gb"] is None and unknown["share"].startswith("unknown (no result at ")


def test_benchs_plan_refuses_a_variant_beside_a_resident_in_preflight(tmp_path):
    resident_on(tmp_path, "spark-sim01", "nvidia-mtp3", 0.5)
    v = host_vars(tmp_path, bench_select=["nvidia-bare"], bench_tenants=[{"name": "rag", "gb": 10}])
    p = plan.plan_host(v, "spark-sim01", check_mode=True)
    [e] = p["variants"]
    assert e["memory"]["fits"] is False and e["preflight"]["verdict"] == "fail" and p["bracket"] is None
    [f] = [f for f in e["preflight"]["failures"] if f["id"] == "memory_plan"]
    assert "resident sparkbench-resident-nvidia-mtp3 64.0 GB, tenant rag 10.0 GB" in f["reason"]
    assert "Free memory on device" in f["reason"] and "memory_plan" in e["preflight"]["checked"]
    assert e["memory"]["lines"][0].startswith("memory plan of spark-sim01: 128 GB")
    # The unit lists no resident: the plan is checked again and the variant fits beside the tenant.
    again = plan.with_residents(p, [])
    [e2] = again["variants"]
    assert e2["memory"]["fits"] is True and e2["preflight"]["verdict"] == "pass", e2["preflight"]
    assert e2["summary"][-1] == "action: dry run (--check)" and "listing" in e2["memory"]["residents_from"]
    # health.yml's canary plan counts no resident (it measures the resident instead).
    assert plan.plan_host(v, "spark-sim01", residents=False)["variants"][0]["memory"]["fits"] is True


def test_serves_plan_leaves_out_the_resident_it_replaces(tmp_path):
    src = resident_on(tmp_path, "h1", "v1", 0.5)
    resident_on(tmp_path, "h1", "v0", 0.5, port=8090)
    s = deploy_plan.settings({"bench_tenants": [{"name": "rag", "gb": 20}]})
    dep = {"variant": "v1", "port": 8080, "names": deploy_plan.names(s, "v1"), "source": {"path": str(src)}}
    p = serve_memory.deploy_plan(dep, s, "h1", str(tmp_path))
    assert [r["name"] for r in p["rows"]] == ["system", "sparkbench-resident-v0", "rag", "sparkbench-resident-v1"]
    assert "less 1 this deploy replaces" in p["residents_from"]
    assert p["fits"] is False and p["used_gb"] == pytest.approx(156.0)
    assert p["refusal"].startswith("the unit's memory plan does not fit: sparkbench-resident-v1 takes 64.0 GB")
    alone = serve_memory.deploy_plan(dep, deploy_plan.settings({}), "h1", str(tmp_path), listing=[])
    assert alone["fits"] is True and alone["refusal"] == ""
