"""vLLM's arguments as data (sparkbench.flags): each variant's flags are checked at plan time
against the argument schema of its image's vLLM version, so a dry run names the wrong flag and
the fix before any container starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from sparkbench import flags, matrix

from helpers import REPO, run_playbook

DATA = REPO / "sparkbench" / "data" / "vllm_args"


@pytest.mark.unit
def test_each_schema_says_how_it_was_extracted():
    for version in flags.stored_versions():
        doc = json.loads((DATA / f"{version}.json").read_text())
        assert doc["vllm_version"] == version and doc["source"]["command"] and doc["source"]["extracted_from"]
        assert all(o["flags"] and o["kind"] in ("bool", "int", "float", "str", "choice", "json") for o in doc["options"])
    full = json.loads((DATA / "0.32.0.json").read_text())
    assert not full.get("partial") and len(full["options"]) > 250  # the wheel's whole `vllm serve` parser


@pytest.mark.sim
def test_the_stored_simulator_schema_is_what_the_simulator_accepts_now():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "vllm_sim"), "args-schema"], capture_output=True,
                         text=True, env={**os.environ, "VLLM_SIM_VERSION": "0.25.0"}, timeout=60, check=True).stdout
    assert json.loads(out) == json.loads((DATA / "0.25.0.json").read_text()), \
        "regenerate: python3 scripts/vllm_sim args-schema > sparkbench/data/vllm_args/0.25.0.json"


#: Flags the simulator parses as free text where vLLM 0.32 has a choice list (the simulator
#: checks --kv-cache-dtype itself against its pacing table; --dtype and the log level change
#: nothing in a simulation).
SIM_LAXER = {"--dtype", "--kv-cache-dtype", "--uvicorn-log-level"}


@pytest.mark.unit
def test_simulator_025_parser_agrees_with_vllm_032_where_the_versions_agree():
    sim = json.loads((DATA / "0.25.0.json").read_text())["options"]
    real = {f: o for o in json.loads((DATA / "0.32.0.json").read_text())["options"] for f in o["flags"]}
    for o in sim:
        r = real.get(o["name"])
        assert r is not None, f"{o['name']}: the simulator accepts a flag vLLM 0.32 does not know"
        assert o["boolean"] == r["boolean"], o["name"]
        if o["boolean"]:
            assert o["action"] == r["action"], (o["name"], o["action"], r["action"])
        elif o["name"] not in SIM_LAXER:
            assert o["kind"] == r["kind"], (o["name"], o["kind"], r["kind"])
        if o["choices"]:
            assert set(o["choices"]) <= set(r["choices"]), (o["name"], set(o["choices"]) - set(r["choices"]))


@pytest.mark.unit
@pytest.mark.parametrize("args, version, reason, remedy", [
    ({"max-num-seqz": 8}, "0.25.0", "--max-num-seqz is not a vLLM flag", "use --max-num-seqs"),
    ({"gpu-memory-utilization": 1.5}, "0.25.0", "outside the allowed range (> 0 and ≤ 1)", "allowed: > 0 and ≤ 1"),
    ({"gpu-memory-utilization": 1.5}, "0.32.0", "outside the allowed range", "≤ 1"),
    ({"dtype": "float17"}, "0.32.0", "--dtype is 'float17', not one of auto", "use float16"),
    ({"max-num-seqs": "eight"}, "0.32.0", "must be an integer", "allowed: ≥ 1"),
    ({"max-num-batched-tokens": 0}, "0.25.0", "outside the allowed range (≥ 1)", "≥ 1"),
    ({"moe-backend": "marlinn"}, "0.25.0", "--moe-backend is 'marlinn'", "use marlin"),
    ({"enforce-eager": "yes"}, "0.32.0", "is a switch", "fix the value"),
    ({"disable-log-stats": False}, "0.32.0", "has no --no-disable-log-stats form", "fix the value"),
    ({"speculative-config": "{method: mtp"}, "0.32.0", "must be a JSON object", "fix the value"),
])
def test_a_wrong_flag_is_named_with_the_fix(args, version, reason, remedy):
    problems = flags.flag_problems(args, version)
    assert len(problems) == 1, problems
    assert reason in problems[0]["reason"] and remedy in problems[0]["remedy"], problems[0]
    assert f"vLLM {version}" in problems[0]["reason"]


@pytest.mark.unit
def test_a_version_without_a_schema_uses_the_nearest_and_says_so():
    p = flags.flag_problems({"max-num-seqz": 1}, "0.40.1")
    assert "nearest version with a stored schema; none for 0.40.1" in p[0]["reason"]


@pytest.mark.unit
def test_every_variant_in_the_inventory_passes():
    """No false alarm on the matrices we ship (the seed's, the backend set, every group's)."""
    for group in sorted((REPO / "inventory" / "group_vars").iterdir()):
        vars_: dict = {}
        for f in sorted(group.glob("*.yml")):
            vars_.update(yaml.safe_load(f.read_text()) or {})
        if "bench_builds" not in vars_:
            continue
        base = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())
        v = {**base, **vars_}
        variants = matrix.variant_matrix(v["bench_builds"], v["bench_configs"], common_args=v["bench_common_args"],
                                         extra_variants=v.get("bench_backend_variants", []) if group.name == "all" else [],
                                         image=v["bench_image"])
        for variant in variants:
            version = variant.get("vllm_version") or v.get("bench_vllm_version") or None
            assert flags.flag_problems(variant["args"], version or "0.25.0") == [], (group.name, variant["name"])


@pytest.mark.ansible
def test_the_dry_run_names_the_wrong_flags_before_anything_starts(tmp_path):
    extra = [{"name": "typo", "build": "nvidia", "config": "bare", "args": {"max-num-seqz": 8}},
             {"name": "too-much", "build": "nvidia", "config": "bare", "args": {"gpu-memory-utilization": 1.5}}]
    proc = run_playbook("bench.yml", "--check", "-e", json.dumps({
        "bench_extra_variants": extra, "bench_select": ["typo", "too-much"], "bench_results_dir": str(tmp_path),
        "bench_run_id": "flags"}), limit="spark-sim01", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    out = " ".join(proc.stdout.split())
    assert "preflight: fail — --max-num-seqz is not a vLLM flag" in out and "fix: use --max-num-seqs" in out
    assert "--gpu-memory-utilization is 1.5, outside the allowed range (> 0 and ≤ 1)" in out
    assert not (tmp_path / "flags").exists()
