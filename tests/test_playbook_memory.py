"""The unit's memory plan in the dry runs (check mode only: nothing starts): ``bench.yml --check``
prints each variant's plan and refuses one that cannot fit in its preflight verdict, naming the
numbers; ``playbooks/serve.yml --check`` prints the deployment's plan, and refuses one that cannot
fit (the play fails before the unit is touched). A simulated host of the tests' own (port in
19600-19649; nothing listens under --check)."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from sparkbench import settings as settings_mod
from sparkbench.launch import config_hash, launch_spec

from helpers import REPO, ansible_env, run_playbook

pytestmark = pytest.mark.ansible

HOST = "mem-sim01"
PORT = 19600 + os.getpid() % 50
MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"


def source_document(variant: str, args: dict) -> dict:
    """A complete simulated result of ``variant`` as bench.yml records it (serve.yml's source)."""
    v = {"name": variant, "build": "nvidia", "config": "bare", "model": MODEL, "revision": None,
         "image": "sparkbench/vllm-sim:v0.25.0", "env": {}, "args": args}
    launch = launch_spec(v, {"host": "127.0.0.1", "port": PORT, "container_name": f"x-{HOST}", "gpus": False,
                             "env": {}, "hf_cache": "/x/hf", "vllm_cache": "/x/vllm", "flashinfer_cache": "/x/fi"})
    settings = settings_mod.normalize({**settings_mod.DEFAULTS, "runs": 5})
    return {"schema_version": "1", "status": "complete", "simulated": True, "host": HOST, "variant": v,
            "finished_at": "2026-12-01T00:00:00Z", "launch": {k: launch[k] for k in ("argv", "command", "env", "secret_env")},
            "launch_command": launch["command"], "config_hash": config_hash(launch, settings),
            "manifest": {"image": v["image"], "image_id": None, "model": MODEL, "settings": settings, "simulated": True},
            "single": {"decode_tok_s_median": 80.0, "runs": [{"decode_tok_s": 80.0, "valid": True}] * 5},
            "profile": {}}


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory")
    results = tmp / "results"
    (results / "R1" / HOST).mkdir(parents=True)
    (results / "R1" / HOST / "half.json").write_text(json.dumps(source_document("half", {"gpu-memory-utilization": 0.5})))
    inv = {"all": {"children": {"sparks": {"children": {"sim_sparks": {"hosts": {HOST: {"vllm_server_port": PORT}}}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    extra = {"bench_results_dir": str(results), "bench_run_id": "DRY", "bench_bandwidth_probe": False,
             "spark_host_hf_cache": str(tmp / "hf"), "spark_host_vllm_cache": str(tmp / "vllm"),
             "spark_host_flashinfer_cache": str(tmp / "fi"), "serve_port": PORT + 1, "serve_candidate_port": PORT + 2}
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))

    def play(playbook: str, *args: str):
        return run_playbook(playbook, "--check", "-e", f"@{tmp / 'extra.yml'}", *args, limit=HOST,
                            inventories=[REPO / "inventory/hosts.yml", tmp / "inventory.yml"], env=ansible_env())
    return {"tmp": tmp, "play": play}


def flat(text: str) -> str:
    """The output with YAML's folding undone (one space between words)."""
    return " ".join(text.replace("''", "'").split())


def test_bench_check_prints_each_plan_and_refuses_what_cannot_fit(unit):
    variants = [{"name": "far", "build": "nvidia", "config": "bare", "args": {"max-model-len": 1000000000}},
                {"name": "half", "build": "nvidia", "config": "bare", "args": {"gpu-memory-utilization": 0.5}}]
    proc = unit["play"]("bench.yml", "-e", json.dumps({"bench_select": ["nvidia-bare", "far", "half"],
                                                        "bench_extra_variants": variants,
                                                        "bench_tenants": [{"name": "rag-store", "gb": 20}]}))
    assert proc.returncode == 0, proc.stdout[-4000:]  # a dry run fails only on a host check
    out = flat(proc.stdout)
    # nvidia-bare at 0.85 beside a 20 GB tenant: refused with the numbers, vLLM's message and the fix.
    assert ("preflight: fail — the unit's memory plan does not fit: nvidia-bare takes 108.8 GB "
            "(--gpu-memory-utilization 0.85 x 128 GB) beside reserve system 8.0 GB") in out, out[-6000:]
    assert "tenant rag-store 20.0 GB" in out and "136.8 GB of 128 GB, 8.8 GB over" in out
    assert "Free memory on device cuda:0" in out and "lower nvidia-bare's --gpu-memory-utilization to 0.78" in out
    # A context beyond the model's: refused before a container starts, in vLLM's words.
    assert "far: --max-model-len 1,000,000,000 is beyond the model's context (262,144 tokens)" in out
    assert "User-specified max_model_len (1000000000) is greater than the derived max_model_len" in out
    # One that fits: its table, its verdict, what lies inside its share.
    assert "memory plan of mem-sim01: 128 GB (hardware profile dgx-spark, unified_memory_gb)" in out
    assert "engine half 64.0 0.5 x 128 GB" in out and "→ fits: 92.0 of 128 GB, 36.0 GB free" in out
    assert "inside half's share: weights 22.6 GB" in out and out.count("preflight: pass") == 1

