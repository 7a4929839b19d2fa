"""ansible-playbook bench.yml end to end on two simulated hosts (real Docker, real simulator image).

A reduced matrix (fast simulator rate, short load, few tokens) with two extra variants that set
--max-num-batched-tokens 2048 on the hybrid 35B-A3B: one is stopped by preflight with the Mamba
remedy, the other bypasses preflight and is explained by the container log's signature. The
others complete. Ports 18300-18399; containers are named with a per-session prefix and removed
at teardown.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import jsonschema
import pytest
import yaml

from sparkbench import result as result_mod
from sparkbench.version import VERSION

from conftest import image_present

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
IMAGE = "sparkbench/vllm-sim:v0.25.0"
# Two ports in 18300-18399 picked by process id, so two sessions running this file at once do not
# collide (container names carry the session prefix too).
_BASE = 18300 + 2 * (os.getpid() % 40)  # 18300-18379; Molecule uses 18390
HOSTS = {"pt-sim01": _BASE, "pt-sim02": _BASE + 1}
SECRET = "hf_sparkbenchTestSecret_9f3a"
VARIANTS = ["nvidia-bare", "unsloth-mtp2", "nvidia-mnbt2048", "nvidia-mnbt2048-nopf"]
# pt-sim02 gets the simulator knobs of the inventory's slow unit, spark-sim03 (efficiency 0.89).
SLOW_ENV = yaml.safe_load((REPO / "inventory/hosts.yml").read_text())[
    "all"]["children"]["sparks"]["children"]["sim_sparks"]["hosts"]["spark-sim03"]["sparkbench_sim_env"]


def docker_ok() -> bool:
    return image_present(IMAGE)


pytestmark = pytest.mark.skipif(not docker_ok(), reason=f"Docker engine or {IMAGE} missing: run make setup")
pytestmark = [pytestmark, pytest.mark.ansible]


def containers(prefix: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"name={prefix}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, check=True).stdout
    return [n for n in out.split() if n.startswith(prefix)]


class Bench:
    """A test inventory + extra vars in a temp dir, and a runner for ansible-playbook."""

    def __init__(self, tmp: Path, prefix: str) -> None:
        self.tmp, self.prefix = tmp, prefix
        self.results = tmp / "results"
        hosts = {h: {"vllm_server_port": p} for h, p in HOSTS.items()}
        hosts["pt-sim02"]["sparkbench_sim_env"] = SLOW_ENV
        inv = {"all": {"children": {"sparks": {"children": {"sim_sparks": {"hosts": hosts}}}}}}
        (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
        extra = {
            "bench_results_dir": str(self.results),
            "spark_host_hf_cache": str(tmp / "hf"),
            "vllm_server_container_prefix": prefix,
            "spark_host_probe_container": prefix + "-probe-{{ inventory_hostname }}",
            "spark_host_download_container": prefix + "-download-{{ inventory_hostname }}",
            "sparkbench_sim_common_env": {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_RATE": "1500",
                                          "VLLM_SIM_SHORT_THINKING": "1"},
            "bench_select": VARIANTS,
            "bench_extra_variants": [
                {"name": "nvidia-mnbt2048", "build": "nvidia", "config": "bare",
                 "args": {"max-num-batched-tokens": 2048}},
                {"name": "nvidia-mnbt2048-nopf", "build": "nvidia", "config": "bare",
                 "args": {"max-num-batched-tokens": 2048}, "preflight": False},
            ],
            "llm_bench_output_tokens": 32, "llm_bench_runs": 2, "llm_bench_warmup": 0,
            "llm_bench_concurrency": [2], "llm_bench_quality": False, "llm_bench_image": False,
            "llm_bench_telemetry": "off", "llm_bench_remote_dir": str(tmp / "work-{{ inventory_hostname }}"),
        }
        (tmp / "extra.yml").write_text(yaml.safe_dump(extra))

    def run(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", HF_TOKEN=SECRET, PATH=f"{BIN}:{os.environ.get('PATH', '')}",
                   COLUMNS="100")
        cmd = [str(BIN / "ansible-playbook"), "-i", str(REPO / "inventory/hosts.yml"), "-i", str(self.tmp / "inventory.yml"),
               "-l", ",".join(HOSTS), "-e", f"@{self.tmp / 'extra.yml'}", "bench.yml", *args]
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    prefix = f"sbtest-pb{os.getpid()}"
    b = Bench(tmp_path_factory.mktemp("bench"), prefix)
    yield b
    for name in containers(prefix):
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


@pytest.fixture(scope="module")
def first_run(bench):
    t0 = time.monotonic()
    proc = bench.run("-e", "bench_run_id=T1")
    return proc, time.monotonic() - t0


def test_every_host_and_variant_has_a_result_and_the_table_is_printed(bench, first_run):
    proc, _ = first_run
    # Two variants fail by design (preflight, launch): the run exits non-zero after the report.
    assert proc.returncode != 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Run failed: exit status non-zero." in proc.stdout and "host(s) failed" not in proc.stdout
    run = bench.results / "T1"
    for host in HOSTS:
        assert sorted(p.stem for p in (run / host).glob("*.json")
                      if not p.name.endswith(".bracket.json")) == sorted(VARIANTS)
    out = proc.stdout
    # The play ends with the closing lines (sparkbench.report.closing): the label, the compact table
    # (a host's name on its first row), the answer; within COLUMNS=100 with the callback's indent.
    start = out.rindex("SIMULATED: figures come from the vLLM simulator")
    block = out[out.rindex("\n", 0, start) + 1:]
    block = block[:block.index("\n\n")].splitlines()  # as printed, with the callback's indent
    assert all(len(line) <= 100 for line in block), [line for line in block if len(line) > 100]
    header = block[1].split()
    # no build pair: no "vs" column; the combined column at the one concurrency measured (2)
    assert "variant" in header and "tok/s" in header and "2×" in header and "8×" not in header
    for host in HOSTS:
        assert sum(line.strip().startswith(host) for line in block) == 1, host
    for v in VARIANTS:
        assert sum(f" {v} " in f" {line} " for line in block) == len(HOSTS), v
    # Every document, complete or failed, is the result builder's and matches the schema.
    schema = json.loads((REPO / "schema/result.schema.json").read_text())
    for path in run.glob("*/*.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)
    assert json.loads((run / "pt-sim01" / "nvidia-mnbt2048.json").read_text())["failure"]["stage"] == "preflight"
    assert containers(bench.prefix) == [], "containers left running after the play"


def test_complete_results_carry_the_contract_fields(bench, first_run):
    schema = json.loads((REPO / "schema/result.schema.json").read_text())
    for host, port in HOSTS.items():
        for name in ("nvidia-bare", "unsloth-mtp2"):
            doc = json.loads((bench.results / "T1" / host / f"{name}.json").read_text())
            jsonschema.validate(doc, schema)
            assert doc["status"] == "complete" and doc["simulated"] is True and doc["host"] == host
            v = doc["variant"]
            assert v["name"] == name and v["build"] == name.split("-")[0] and v["config"] == name.split("-")[1]
            assert v["image"] == IMAGE and v["model"].endswith("/Qwen3.6-35B-A3B-NVFP4")
            argv = doc["launch"]["argv"]  # variant.args is the flag mapping; the argv is the launch spec's
            assert v["args"]["max-num-batched-tokens"] == 4096 and argv[argv.index("--max-num-batched-tokens") + 1] == "4096"
            assert doc["launch_command"].startswith("docker run -d --name ")
            assert f"--port {port}" in doc["launch_command"] and "--gpus" not in doc["launch_command"]
            assert len(doc["config_hash"]) == 64
            m = doc["manifest"]
            assert m["image_id"].startswith("sha256:") and m["image_digest"] is None
            assert m["vllm_version"] == "0.25.0" and m["model_revision"] and m["gpu"].startswith("NVIDIA GB10")
            assert m["driver"] and m["cuda"] == "13.0" and m["os"] and m["kernel"] and m["hostname"]
            # sparkbench's version and the commit it ran from, at the top level and in the manifest
            assert doc["sparkbench_version"] == m["sparkbench_version"] == VERSION
            assert doc["sparkbench_commit"] == m["sparkbench_commit"] and len(doc["sparkbench_commit"]) >= 40
            assert m["settings"]["output_tokens"] in ("32", 32)
            # the simulated load (1 s) comes before /health answers; the wait gives up at its timeout
            assert 1.0 <= doc["server_startup"]["time_to_ready_s"] < 900
            assert doc["server_startup"]["model_memory_gib"] > 1
            k = doc["kernels"]  # read off the startup log the wait returned (sparkbench.engine_log)
            assert k["moe_backend"] and k["kv_cache_tokens"] > 0 and k["model_load_gib"] == doc["server_startup"]["model_memory_gib"]
            assert doc["profile"]["hardware"]["bandwidth_gbs"] == 273
            assert doc["profile"]["model"]["active_params_b"] > 0
            assert doc["single"]["decode_tok_s_median"] > 0
        mtp = json.loads((bench.results / "T1" / host / "unsloth-mtp2.json").read_text())
        assert len(mtp["spec_decode"]["acceptance_per_position"]) == 2


def test_the_reference_variant_is_measured_again_at_the_end(bench, first_run):
    """Bracketing: nvidia-bare (each host's first measured variant) once more after the host's
    last variant, single stream only, into nvidia-bare.bracket.json; the main result untouched."""
    proc, _ = first_run
    schema = json.loads((REPO / "schema/result.schema.json").read_text())
    run = bench.results / "T1"
    for host in HOSTS:
        assert [p.name for p in (run / host).glob("*.bracket.json")] == ["nvidia-bare.bracket.json"]
        b = json.loads((run / host / "nvidia-bare.bracket.json").read_text())
        main = json.loads((run / host / "nvidia-bare.json").read_text())
        jsonschema.validate(b, schema)
        assert b["bracket"] == {"of": "nvidia-bare", "position": "end"} and "bracket" not in main
        assert b["status"] == "complete" and b["host"] == host and b["variant"]["name"] == "nvidia-bare"
        assert b["config_hash"] == main["config_hash"] and b["launch_command"] == main["launch_command"]
        assert b["parallel"] == [] and b["quality"] == [] and b["image"] is None and main["parallel"]
        assert b["single"]["valid_runs"] == 2 and b["single"]["decode_tok_s_median"] > 0
        # per-token gaps, or why not: a loaded machine can deliver a short answer in one read
        valid = [r for r in b["single"]["runs"] + main["single"]["runs"] if r["valid"]]
        assert all(r["itl_ms"] or r.get("itl_reason") for r in valid), valid
        assert all(min(r["itl_ms"]) >= 0 for r in valid if r["itl_ms"]), valid
        # it ran last: after every other variant of the host had finished
        others = [json.loads(p.read_text()) for p in (run / host).glob("*.json") if not p.name.endswith(".bracket.json")]
        assert b["started_at"] >= max(d["finished_at"] for d in others if d.get("finished_at"))
    # The report compares the two (2 requests a side: too few for a verdict, and it says so).
    report = (run / "report.md").read_text()
    section = report[report.index("## Drift (bracketing)"):]
    assert "not enough requests for a verdict (2 and 2 requests" in section
    assert "TASK [Bench | bracket the sequence with the reference variant]" in proc.stdout


def test_every_served_result_carries_the_bandwidth_probes_around_it(bench, first_run):
    """protocol.bandwidth (sparkbench.bandwidth): the simulator's stand-in probed before each variant
    and after its server stopped (between variants: it costs under 10 s), SIMULATED; pt-sim02, with
    spark-sim03's knobs, reads lower by its efficiency; a variant that never served has none."""
    run = bench.results / "T1"
    figures: dict[str, list[float]] = {}
    for host in HOSTS:
        for path in sorted((run / host).glob("*.json")):
            # the document with the probe after it, which the probe wrote to a file of its own
            doc = result_mod.stored(path)
            raw = (json.loads(path.read_text()).get("protocol") or {}).get("bandwidth") or {}
            assert raw.get("after") is None, path  # the result itself is never written again
            bw = (doc.get("protocol") or {}).get("bandwidth")
            if doc["status"] == "failed" and doc["failure"]["stage"] in ("preflight", "launch"):
                assert bw is None, path
                continue
            assert bw["method"] == "simulated" and bw["simulated"] is True and bw["gbps"] > 0, (path, bw)
            assert bw["spread"]["min"] <= bw["gbps"] <= bw["spread"]["max"] and bw["image"] == IMAGE
            after = bw["after"]
            assert after and after["gbps"] > 0 and bw["drop"] is None, (path, bw)
            # probed while no server ran: before the launch, after measure had finished
            assert bw["when"] <= doc["started_at"] <= doc["finished_at"] <= after["when"], (path, bw)
            figures.setdefault(host, []).append(bw["gbps"])
    assert all(len(figures[h]) == 3 for h in HOSTS), figures  # nvidia-bare, unsloth-mtp2, the bracket
    ratio = median(figures["pt-sim02"]) / median(figures["pt-sim01"])
    assert ratio == pytest.approx(float(SLOW_ENV["VLLM_SIM_EFFICIENCY"]), rel=0.02), figures
    report = (run / "report.md").read_text()
    assert "| % of measured bandwidth " in report and "bandwidth GB/s before → after" in report
    assert "TASK [Bench | probe the bandwidth before the first variant]" in first_run[0].stdout


def test_mamba_variant_fails_at_preflight_and_bypassed_one_at_launch_by_log_signature(bench, first_run):
    for host in HOSTS:
        pre = json.loads((bench.results / "T1" / host / "nvidia-mnbt2048.json").read_text())
        assert pre["status"] == "failed" and pre["failure"]["stage"] == "preflight"
        assert "Mamba cache align mode" in pre["failure"]["reason"]
        assert "--max-num-batched-tokens 4096" in pre["failure"]["remedy"]
        assert pre["variant"]["name"] == "nvidia-mnbt2048" and pre["launch_command"]
        log = json.loads((bench.results / "T1" / host / "nvidia-mnbt2048-nopf.json").read_text())
        assert log["status"] == "failed" and log["failure"]["stage"] == "launch"
        assert log["failure"]["issues"] == ["mamba_align_block_size"]
        assert "--max-num-batched-tokens 4096" in log["failure"]["remedy"]
        assert "AssertionError: In Mamba cache align mode, block_size (2096)" in log["failure"]["log_excerpt"]


def test_report_files_and_no_secret_anywhere(bench, first_run):
    proc, _ = first_run
    run = bench.results / "T1"
    rows = list(csv.DictReader((run / "results.csv").open()))
    assert len(rows) == len(HOSTS) * len(VARIANTS)
    assert {r["failure_stage"] for r in rows if r["variant"] == "nvidia-mnbt2048"} == {"preflight"}
    assert json.loads((run / "results.json").read_text())["simulated"] is True
    report = (run / "report.md").read_text()
    # report.md is labelled simulated and lists each failure with its stage.
    assert "SIMULATED" in report.upper() and "nvidia-mnbt2048-nopf" in report and "preflight" in report
    # One implementation (scripts/bench_report) wrote every report file, the HTML and the charts.
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 2 and "SIMULATED" in html
    charts = {p.name for p in (run / "charts").glob("*.png")}
    assert {"mtp_uplift.png", "build_vs_build.png", "parallel_scaling.png"} <= charts, charts
    # The play ends with the table, then the paths of report.html and the charts folder.
    tail = proc.stdout[proc.stdout.rindex("SIMULATED: figures come from the vLLM simulator"):]
    assert f"Report: {run}/report.html" in tail and f"Charts: {run}/charts/" in tail
    texts = [proc.stdout.encode(), proc.stderr.encode()] + [p.read_bytes() for p in run.rglob("*") if p.is_file()]
    assert not any(SECRET.encode() in t for t in texts), "HF token leaked into output or results"
    # The token did reach the container side: HF_TOKEN is in the launch command, redacted.
    doc = json.loads((run / "pt-sim01" / "nvidia-bare.json").read_text())
    assert "HF_TOKEN=<redacted>" in doc["launch_command"]


def report_playbook(bench: Bench, *extra: str) -> subprocess.CompletedProcess:
    """ansible-playbook playbooks/report.yml over the test's results folder (no host contacted)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    cmd = [str(BIN / "ansible-playbook"), "playbooks/report.yml", "-e", f"bench_results_dir={bench.results}", *extra]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_report_playbook_compares_with_a_baseline_and_names_stored_runs(bench, first_run):
    # A baseline made from T1's complete results, marked as measured on vLLM 0.24.0 with single
    # stream 2 % slower: the re-render of T1 against it has a run-to-run section and a bridge verdict.
    base = bench.results / "T0"
    for host in HOSTS:
        (base / host).mkdir(parents=True, exist_ok=True)
        for name in ("nvidia-bare", "unsloth-mtp2"):
            doc = json.loads((bench.results / "T1" / host / f"{name}.json").read_text())
            doc["manifest"]["vllm_version"] = "0.24.0"
            for key in ("decode_tok_s_median", "decode_tok_s_min", "decode_tok_s_max"):
                doc["single"][key] *= 0.98
            for r in doc["single"]["runs"]:
                if r["decode_tok_s"] is not None:
                    r["decode_tok_s"] *= 0.98
            (base / host / f"{name}.json").write_text(json.dumps(doc))
    results_before = {p: p.read_bytes() for p in (bench.results / "T1").glob("*/*.json")}

    proc = report_playbook(bench, "-e", "run=T1", "-e", "baseline=T0")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    run = bench.results / "T1"
    report = (run / "report.md").read_text()
    assert "## Run to run: against T0" in report and "## Version bridge" in report
    doc = json.loads((run / "results.json").read_text())
    assert doc["baseline_run_id"] == "T0"
    pairs = doc["run_compare"]["bridge"]["pairs"]
    assert {(p["host"], p["variant"]) for p in pairs} == {(h, v) for h in HOSTS for v in ("nvidia-bare", "unsloth-mtp2")}
    assert all(1.5 < p["single_pct"] < 2.6 for p in pairs), pairs  # 1 / 0.98 − 1 = +2.04 %
    # 2 runs per side: below the 5 a verdict needs, and the bridge says so.
    assert all(p["bridge_verdict"]["kind"] == "not_enough" for p in pairs), pairs
    assert "not enough requests for a verdict" in (run / "report.md").read_text()
    assert "Version bridge against run T0: vLLM 0.24.0 → 0.25.0" in proc.stdout
    assert "figures comparable across the runs" in " ".join(proc.stdout.split())  # wrapped to the width
    assert f"Report: {run}/report.html" in proc.stdout
    assert {p: p.read_bytes() for p in run.glob("*/*.json")} == results_before, "report.yml changed a result file"

    # A run id that does not exist: one clear line with the stored run ids, nothing rendered.
    missing = report_playbook(bench, "-e", "run=NOPE")
    assert missing.returncode != 0
    assert "no run NOPE under" in missing.stdout and "available run ids: T0, T1" in missing.stdout
    assert not (bench.results / "NOPE").exists()


def test_rerun_with_the_same_run_id_skips_complete_results(bench, first_run):
    run = bench.results / "T1" / "pt-sim01"
    before = {p.name: p.stat().st_mtime_ns for p in run.glob("*.json")}
    # One host of the first run (the last --limit is the one ansible-playbook reads): what is skipped
    # and what is tried again is decided per host.
    proc = bench.run("-e", "bench_run_id=T1", "-e", '{"bench_select": ["nvidia-bare", "nvidia-mnbt2048"], '
                     '"bench_extra_variants": [{"name": "nvidia-mnbt2048", "build": "nvidia", "config": "bare", '
                     '"args": {"max-num-batched-tokens": 2048}}]}', "-l", "pt-sim01")
    # nvidia-mnbt2048 fails again (and the run's other failed documents stand): exit non-zero.
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "Run failed: exit status non-zero." in proc.stdout
    assert "skip: complete result with the same configuration hash" in proc.stdout
    # Nothing launched: the complete variant is skipped, the failed one stops at preflight again.
    assert "Vllm server | start container" not in proc.stdout
    after = {p.name: p.stat().st_mtime_ns for p in run.glob("*.json")}
    assert after["nvidia-bare.json"] == before["nvidia-bare.json"]
    # A failed variant is tried again (here: fails again at preflight and its failure is recorded).
    assert after["nvidia-mnbt2048.json"] != before["nvidia-mnbt2048.json"]
    assert json.loads((run / "nvidia-mnbt2048.json").read_text())["failure"]["stage"] == "preflight"


def test_check_mode_shows_commands_and_verdicts_and_starts_nothing(bench):
    since = str(int(time.time()) - 1)
    proc = bench.run("--check", "-e", "bench_run_id=DRY")
    assert proc.returncode == 0, proc.stdout[-3000:]
    out = proc.stdout
    for v in VARIANTS:
        assert f"TASK [Bench variant | plan {v}]" in out
    assert out.count("command: docker run -d --name") == len(HOSTS) * len(VARIANTS)
    assert "preflight: fail — hybrid model with prefix caching" in out
    assert "preflight: skipped" in out and out.count("preflight: pass") == 2 * len(HOSTS)
    assert "action: dry run (--check)" in out
    events = subprocess.run(["docker", "events", "--since", since, "--until", str(int(time.time()) + 1),
                             "--filter", "type=container", "--filter", "event=create", "--format", "{{.Actor.Attributes.name}}"],
                            capture_output=True, text=True, timeout=30).stdout.split()
    # Other suites may create containers meanwhile: only this session's (its prefix) count.
    assert [e for e in events if e.startswith(bench.prefix)] == []
    assert not (bench.results / "DRY").exists()
