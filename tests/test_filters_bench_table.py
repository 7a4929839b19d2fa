"""bench_table / bench_rows on stored runs, and every filter once through real Ansible templating."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "filter_plugins"))

import bench_table as bt  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "runs"


def load_run(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / name).glob("*/*.json"))]


def test_seed_run_rows_reproduce_the_seed_comparison():
    rows = {r["variant"]: r for r in bt.bench_rows(load_run("seed-v0.25"))}
    assert rows["nvidia-bare"]["single_tok_s"] == 76.7
    # Speedup vs the same build bare: 98.0 / 76.7 and 108.3 / 76.7.
    assert rows["nvidia-mtp2"]["speedup_vs_bare"] == round(98.0 / 76.7, 2) == 1.28
    assert rows["nvidia-mtp3"]["speedup_vs_bare"] == round(108.3 / 76.7, 2)
    # The 27B pairs with its own bare run, not with the 35B's (same build name, other model).
    assert rows["qwen27b-bare"]["speedup_vs_bare"] == 1.0
    # Unsloth vs NVIDIA at spec=2: (81.6 − 98.0) / 98.0 = −16.7 % (the seed's −12 … −17 %).
    assert rows["unsloth-mtp2"]["vs_reference_pct"] == round((81.6 - 98.0) / 98.0 * 100, 1) == -16.7
    assert rows["unsloth-mtp2"]["reference_build"] == "nvidia"
    assert rows["nvidia-mtp3"]["acceptance_per_position"] == [0.86, 0.67, 0.55]
    assert rows["nvidia-mtp3"]["tokens_per_step"] == 3.08
    # Roofline for bare only: bandwidth / (active params × bits / 8); MTP rows leave it empty.
    assert rows["nvidia-mtp2"]["roofline_pct"] is None
    assert rows["nvidia-bare"]["roofline_pct"] is not None and 20 < rows["nvidia-bare"]["roofline_pct"] < 100


def test_roofline_formula():
    prof = {"hardware": {"memory_bandwidth_gbps": 273}, "model": {"active_params_b": 3.0, "weight_bits": 4.5}}
    assert bt.roofline_tok_s(prof) == pytest.approx(273e9 / (3e9 * 4.5 / 8))
    prof = {"hardware": {"bandwidth_gbs": 273}, "model": {"active_params_b": 3.0, "quantization": "nvfp4"}}
    assert bt.roofline_tok_s(prof) == pytest.approx(161.78, rel=1e-3)
    assert bt.roofline_tok_s({"hardware": {}, "model": {}}) is None


def test_fleet_table_lists_every_host_and_variant_failures_and_is_labelled_simulated():
    docs = load_run("fleet-sim")
    text = bt.bench_table(docs)
    lines = text.splitlines()
    assert lines[0].startswith("SIMULATED")
    hosts = {d["host"] for d in docs}
    for d in docs:
        assert any(d["host"] in line and d["variant"]["name"] in line for line in lines)
    assert sum("failed (preflight)" in line for line in lines) == len(hosts)
    assert "vs nvidia %" in lines[1] and "8× tok/s" in lines[1]
    real = bt.bench_table([dict(d, simulated=False, manifest={}) for d in docs])
    assert real.splitlines()[0] == "Measured on real hardware"
    assert "host" not in bt.bench_table([d for d in docs if d["host"] == "spark-sim01"]).splitlines()[1].split()[0:1]


def test_bad_input_is_a_one_line_error():
    for bad, needle in [("x", "must be a list"), ([1], "not a result document"), ([{"status": "complete"}], "no variant.name")]:
        with pytest.raises(AnsibleFilterError, match=needle) as exc:
            bt.bench_table(bad)
        assert "\n" not in str(exc.value)


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    builds: [{name: nvidia, model: nvidia/Qwen3.6-35B-A3B-NVFP4, args: {quantization: modelopt}}]
    configs: [{name: bare}, {name: mtp2, args: {speculative-config: {method: mtp, num_speculative_tokens: 2}}}]
    variants: "{{ builds | variant_matrix(configs, common_args={'max-num-batched-tokens': 2048}, image='sparkbench/vllm-sim:v0.25.0') }}"
    issues: "{{ lookup('ansible.builtin.file', repo ~ '/roles/vllm_server/files/known_issues.yml') | from_yaml }}"
    model: "{{ lookup('ansible.builtin.file', repo ~ '/profiles/models/nvidia__Qwen3.6-35B-A3B-NVFP4.json') | from_json }}"
    hw: "{{ lookup('ansible.builtin.file', repo ~ '/profiles/hardware/dgx-spark.json') | from_json }}"
    argv: "{{ variants[1] | vllm_args(port=8101) }}"
    results: "{{ query('ansible.builtin.file', *query('ansible.builtin.fileglob', repo ~ '/tests/fixtures/runs/seed-v0.25/seed-spark/*.json')) }}"
  tasks:
    - name: Render every filter
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0644"
        content: "{{ {'names': variants | map(attribute='name') | list, 'argv': argv,
                      'cmd': argv | vllm_docker_command(image=variants[1].image, env={'HF_TOKEN': 'hf_x'}, gpus=false),
                      'hash': argv | vllm_config_hash(image=variants[1].image),
                      'verdict': variants[0] | vllm_preflight(issues, model, hw),
                      'match': 'could not select device driver \\"nvidia\\" with capabilities' | vllm_log_match(issues),
                      'table': results | map('from_json') | list | bench_table,
                      'rows': results | map('from_json') | list | bench_rows | length} | to_json }}"
"""


def test_filters_through_real_ansible_templating(tmp_path):
    pb = tmp_path / "render.yml"
    pb.write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(pb),
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-e", f"repo={REPO}", "-e", f"out={out}"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["names"] == ["nvidia-bare", "nvidia-mtp2"]
    assert doc["argv"][:5] == ["nvidia/Qwen3.6-35B-A3B-NVFP4", "--host", "127.0.0.1", "--port", "8101"]
    assert '{"method":"mtp","num_speculative_tokens":2}' in doc["argv"]
    assert "hf_x" not in doc["cmd"] and "HF_TOKEN=<redacted>" in doc["cmd"]
    assert len(doc["hash"]) == 64
    assert doc["verdict"]["verdict"] == "fail" and doc["verdict"]["failures"][0]["id"] == "mamba_align_block_size"
    assert doc["match"]["id"] == "nvidia_runtime_missing"
    assert "nvidia-mtp3" in doc["table"] and "108.3" in doc["table"]
    assert doc["rows"] == 6


def test_ansible_doc_shows_every_filter():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    names = ["vllm_args", "vllm_docker_command", "vllm_config_hash", "vllm_public_env", "variant_matrix",
             "vllm_preflight", "vllm_log_match", "bench_table", "bench_rows"]
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "-t", "filter", "--playbook-dir", str(REPO),
                           "--json", *names], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = json.loads(proc.stdout)
    assert set(docs) == set(names)
    for name, entry in docs.items():
        assert entry["doc"]["short_description"] and entry["doc"]["options"]["_input"], name
        assert entry["examples"], name
