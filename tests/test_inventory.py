"""The project inventory: the fleet's shape, the simulated hosts' settings and the seed matrix."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from sparkbench import matrix as vm  # noqa: E402

from helpers import BIN, REPO, ansible_env, run_playbook


def inventory() -> dict:
    env = ansible_env()
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(REPO / "inventory/hosts.yml"), "--list"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.sim
def test_fleet_groups_hosts_and_simulator_settings():
    inv = inventory()
    hv = inv["_meta"]["hostvars"]
    assert sorted(inv["sim_sparks"]["hosts"]) == ["spark-sim01", "spark-sim02", "spark-sim03"]
    assert "spark01" in inv["sparks"]["hosts"] and "sim_sparks" in inv["sparks"]["children"]
    assert "spark01" not in inv["sim_sparks"]["hosts"]
    assert [hv[h]["vllm_server_port"] for h in ("spark-sim01", "spark-sim02", "spark-sim03")] == [8101, 8102, 8103]
    for h in inv["sim_sparks"]["hosts"]:
        assert hv[h]["ansible_connection"] == "local"
        assert hv[h]["ansible_python_interpreter"] == "{{ ansible_playbook_python }}"
        assert hv[h]["sparkbench_gpu_less"] is True
    # spark-sim03: ~8 % slower and another driver; its siblings use the defaults.
    assert 0.85 <= float(hv["spark-sim03"]["sparkbench_sim_env"]["VLLM_SIM_EFFICIENCY"]) <= 0.95
    driver = hv["spark-sim03"]["sparkbench_sim_env"]["VLLM_SIM_DRIVER_VERSION"]
    hw = json.loads((REPO / "sparkbench/data/profiles/hardware/dgx-spark.json").read_text())
    assert driver != hw["default_driver_version"]
    assert hv["spark-sim01"]["sparkbench_sim_env"] == {}
    # Short simulated load for the demo (a few seconds).
    assert 0 < float(hv["spark-sim01"]["sparkbench_sim_common_env"]["VLLM_SIM_LOAD_SECONDS"]) <= 5
    # The real example uses SSH, no GPU-less flag.
    assert "ansible_connection" not in hv["spark01"] and not hv["spark01"].get("sparkbench_gpu_less")


@pytest.mark.unit
def test_group_vars_hold_the_seed_matrix_and_settings():
    matrix = yaml.safe_load((REPO / "inventory/group_vars/all/matrix.yml").read_text())
    bench = yaml.safe_load((REPO / "inventory/group_vars/all/bench.yml").read_text())
    profiles = {m: json.loads((REPO / "sparkbench/data/profiles/models" / (m.replace("/", "__") + ".json")).read_text())
                for m in (b["model"] for b in matrix["bench_builds"])}
    variants = vm.variant_matrix(matrix["bench_builds"], matrix["bench_configs"], common_args=matrix["bench_common_args"],
                                 image=matrix["bench_image"], profiles=profiles)
    assert [v["name"] for v in variants] == ["nvidia-bare", "nvidia-mtp2", "nvidia-mtp3",
                                             "unsloth-bare", "unsloth-mtp2", "unsloth-mtp3"]
    for v in variants:
        assert v["revision"] == profiles[v["model"]]["revision"]
        assert v["args"]["max-num-batched-tokens"] == 4096 and v["args"]["kv-cache-dtype"] == "fp8"
        assert v["args"]["max-model-len"] == 65536 and v["args"]["max-num-seqs"] == 8
        assert v["args"]["gpu-memory-utilization"] == 0.85 and v["args"]["reasoning-parser"] == "qwen3"
        assert v["args"]["enable-prefix-caching"] is True and v["args"]["trust-remote-code"] is True
        assert ("quantization" in v["args"]) == (v["build"] == "nvidia")
    assert variants[2]["args"]["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert matrix["bench_backend_comparison"] is False
    assert [e["args"]["moe-backend"] for e in matrix["bench_backend_variants"]] == ["auto", "marlin", "flashinfer_b12x"]
    # 5 runs, not the seed's 3: a verdict needs 5 requests per side (sparkbench.verdict.MIN_REQUESTS)
    assert (bench["llm_bench_output_tokens"], bench["llm_bench_runs"], bench["llm_bench_concurrency"]) == (256, 5, [2, 4, 8])
    assert bench["llm_bench_quality"] is True and bench["llm_bench_image"] is True and bench["bench_force"] is False
    assert bench["bench_bracket"] is True and bench["llm_bench_target_precision_pct"] is None


@pytest.mark.ansible
def test_playbooks_pass_syntax_check():
    env = ansible_env()
    for pb in ("bench.yml", "playbooks/provision.yml", "playbooks/report.yml", "playbooks/teardown.yml",
               "playbooks/health.yml"):
        proc = run_playbook(pb, "--syntax-check", env=env, timeout=120)
        assert proc.returncode == 0, (pb, proc.stdout[-1500:], proc.stderr[-1500:])
