"""``python3 -m sparkbench.report render``: end to end on fixture runs copied to a temp dir —
outputs written, the seed's headline figures readable off the report, corrupt files reported
without losing the others, bad input as one-line errors."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.sim

RUNS = REPO / "tests" / "fixtures" / "runs"
RENDER = [sys.executable, "-m", "sparkbench.report"]


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    dest = tmp_path / "results"
    shutil.copytree(RUNS, dest, ignore=shutil.ignore_patterns("*.py", "*.md"))
    return dest


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(RENDER + ["render", *args], capture_output=True, text=True, timeout=120)


def test_seed_report_shows_minus_16_7_and_bridge(runs: Path):
    proc = render(str(runs / "seed-v0.25"), "--baseline", str(runs / "seed-v0.24"))
    assert proc.returncode == 0, proc.stderr
    run = runs / "seed-v0.25"
    for name in ("report.md", "results.csv", "results.json", "report.html"):
        assert (run / name).is_file(), name
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "−16.7 %" in md  # head-to-head table, Unsloth spec=2 vs NVIDIA spec=2
    assert "unsloth vs nvidia — single-stream 16.7 % slower (mtp2)" in md
    assert "12.13 → 12.43 (+2.5 %)" in md and "29.38 → 28.91 (-1.6 %)" in md
    assert "≤ 2.5 % → figures comparable across the runs" in md
    # published medians only: no per-request data, so no verdict — and the report says what it needs
    assert "not enough requests for a verdict (0 and 0 requests; 5 per side needed: --runs 5)" in md
    assert "by the medians alone max |Δ| 2.5 %" in md
    assert "SIMULATED" not in md  # the seed's figures are real measurements
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert doc["run_compare"]["bridge"]["comparable"] is True
    assert doc["simulated"] is False
    rows = {r["variant"]: r for r in csv.DictReader((run / "results.csv").open(encoding="utf-8"))}
    assert rows["unsloth-mtp2"]["single_tok_s"] == "81.6"
    assert rows["nvidia-bare"]["combined_8"] == ""  # not published → empty, not 0
    assert rows["nvidia-mtp3"]["acceptance_per_position"] == "0.86 0.67 0.55"
    # seed-v0.24 is stored beside this run with the same host: its trend chart is drawn too
    assert sorted(p.name for p in (run / "charts").glob("*.png")) == ["build_vs_build.png", "history.png",
                                                                      "mtp_uplift.png"]


def test_fleet_report_flags_slow_host_and_labels_simulated(runs: Path):
    proc = render(str(runs / "fleet-sim"), "--baseline", str(runs / "fleet-sim-base"))
    assert proc.returncode == 0, proc.stderr
    md = (runs / "fleet-sim" / "report.md").read_text(encoding="utf-8")
    assert "**SIMULATED**" in md
    assert ("spark-sim03 is 8.0 % below the fleet median (threshold 5 %); against its peers it differs in 6 of 6 "
            "variants; differs in: driver 580.82.07 (fleet: 580.95.05)") in md
    assert "at 8 parallel" in md and "no difference detectable: the gap is gone" in md
    # every comparison carries its verdict: Unsloth vs NVIDIA single stream differs, with an interval,
    # in all three configurations; too few streams at 2 and 4 parallel say so
    doc = json.loads((runs / "fleet-sim" / "results.json").read_text(encoding="utf-8"))
    single = [r for r in doc["head_to_head"]["rows"] if r["metric"] == "single"]
    assert {r["config"] for r in single} == {"bare", "mtp2", "mtp3"}
    for r in single:
        assert r["verdict"]["kind"] == "differs"
        assert f"| {r['config']}  " in md or f"| {r['config']} " in md
        assert r["verdict"]["text"] in md and r["verdict"]["text"].startswith("differs by −1")
    assert "not enough requests for a verdict (2 and 2 requests; 5 per side needed: measure at 5 or more parallel)" in md
    assert "## Fleet: each host against its peers (simulated)" in md
    assert "no bridge pair beyond the 2.5 % bridge tolerance → figures comparable across the runs" in md
    # every host table and comparison is labelled simulated
    for title in ("## Host spark-sim01 (simulated)", "## Head-to-head: builds of the same model (simulated)",
                  "## Fleet: host × variant (simulated)", "## Version bridge (simulated)"):
        assert title in md
    assert "preflight" in md and "add --max-num-batched-tokens 4096" in md
    rows = list(csv.DictReader((runs / "fleet-sim" / "results.csv").open(encoding="utf-8")))
    assert len(rows) == 21 and all(r["simulated"] == "True" for r in rows)
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 3 and all(r["failure_stage"] == "preflight" for r in failed)
    html = (runs / "fleet-sim" / "report.html").read_text(encoding="utf-8")
    assert html.count('src="data:image/png;base64,') == 5  # the four charts + the hosts' trend (fleet-sim-base beside it)
    assert "SIMULATED" in html


def test_fleet_threshold_option(runs: Path):
    proc = render(str(runs / "fleet-sim"), "--fleet-threshold", "10", "--quiet")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((runs / "fleet-sim" / "results.json").read_text(encoding="utf-8"))
    assert doc["fleet"]["flagged"] == [] and doc["fleet"]["threshold_pct"] == 10


def test_corrupt_file_is_named_and_others_still_reported(runs: Path):
    run = runs / "fleet-sim"
    (run / "spark-sim02" / "nvidia-mtp2.json").write_text('{"status": "complete", "single": ', encoding="utf-8")
    (run / "spark-sim01" / "unsloth-bare.json").write_text('{"status": "done"}', encoding="utf-8")
    proc = render(str(run), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "spark-sim02/nvidia-mtp2.json: not valid JSON" in proc.stderr
    assert "bench_force=true" in proc.stderr
    assert "spark-sim01/unsloth-bare.json: field 'status' is 'done'" in proc.stderr
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "spark-sim02/nvidia-mtp2.json: not valid JSON" in md
    rows = list(csv.DictReader((run / "results.csv").open(encoding="utf-8")))
    assert len(rows) == 19  # 21 files − 2 unreadable
    assert ("spark-sim02", "nvidia-mtp2") not in {(r["host"], r["variant"]) for r in rows}


def test_document_that_fails_its_model_is_named_by_field_and_others_still_reported(runs: Path):
    run = runs / "fleet-sim"
    path = run / "spark-sim03" / "nvidia-bare.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["single"]["runs"][0]["decode_tok_s"] = "fast"
    doc["server"]["simulated"] = "yes"
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = render(str(run), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "spark-sim03/nvidia-bare.json: result document does not match its model:" in proc.stderr
    assert "single.runs[0].decode_tok_s: Input should be a valid number (got 'fast')" in proc.stderr
    assert "server.simulated: Input should be a valid boolean (got 'yes')" in proc.stderr
    rows = list(csv.DictReader((run / "results.csv").open(encoding="utf-8")))
    assert len(rows) == 20 and ("spark-sim03", "nvidia-bare") not in {(r["host"], r["variant"]) for r in rows}


def test_host_and_name_mismatch_rejected(runs: Path):
    run = runs / "seed-v0.25"
    doc = json.loads((run / "seed-spark" / "nvidia-bare.json").read_text(encoding="utf-8"))
    (run / "seed-spark" / "renamed.json").write_text(json.dumps(doc), encoding="utf-8")
    proc = render(str(run), "--quiet")
    assert proc.returncode == 0
    assert "renamed.json: field 'variant.name' is 'nvidia-bare' but the file is named renamed.json" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["does-not-exist"], "does not exist; pass results/<run-id> of a stored run"),
    (["{empty}"], "has no <host>/<variant>.json result file"),
    (["{seed}", "--fleet-threshold", "-3"], "argument --fleet-threshold: expected a percentage ≥ 0"),
    (["{seed}", "--reference-build", "amd"], "reference build 'amd' is not in the results"),
    (["{seed}", "--profiles", "nowhere"], "--profiles nowhere is not a directory"),
    (["{seed}", "--host-failure", "bad host=down"], "argument --host-failure: expected HOST=REASON"),
    (["{seed}", "--host-failure", "spark02"], "argument --host-failure: expected HOST=REASON"),
])
def test_bad_input_one_line_error(runs: Path, tmp_path: Path, args: list[str], message: str):
    (tmp_path / "empty").mkdir()
    args = [a.replace("{empty}", str(tmp_path / "empty")).replace("{seed}", str(runs / "seed-v0.25")) for a in args]
    proc = render(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_profiles_fill_missing_roofline(runs: Path, tmp_path: Path):
    run = runs / "seed-v0.25"
    for p in run.glob("*/*.json"):
        doc = json.loads(p.read_text(encoding="utf-8"))
        doc.pop("profile")
        p.write_text(json.dumps(doc), encoding="utf-8")
    prof = tmp_path / "profiles"
    (prof / "hardware").mkdir(parents=True)
    (prof / "models").mkdir()
    (prof / "hardware" / "dgx-spark.json").write_text(json.dumps({"memory_bandwidth_gbps": 273}))
    (prof / "models" / "nvidia__Qwen3.6-35B-A3B-NVFP4.json").write_text(
        json.dumps({"active_params_b": 3.0, "weight_bits": 4.5}))
    assert render(str(run), "--quiet").returncode == 0
    rows = {r["variant"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert rows["nvidia-bare"]["pct_of_roofline"] is None  # no profile, no invented roofline
    assert render(str(run), "--quiet", "--profiles", str(prof)).returncode == 0
    rows = {r["variant"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert rows["nvidia-bare"]["pct_of_roofline"] == pytest.approx(76.7 / (273 / 1.6875) * 100)


def test_secrets_redacted_in_launch_commands(runs: Path):
    run = runs / "seed-v0.25"
    p = run / "seed-spark" / "nvidia-bare.json"
    doc = json.loads(p.read_text(encoding="utf-8"))
    doc["launch_command"] = "HF_TOKEN=hf_abcdefghijklmnop vllm serve m --api-key sk-secret123"
    p.write_text(json.dumps(doc), encoding="utf-8")
    assert render(str(run), "--quiet").returncode == 0
    for name in ("report.md", "report.html", "results.json"):
        text = (run / name).read_text(encoding="utf-8")
        assert "hf_abcdefghijklmnop" not in text and "sk-secret123" not in text, name
    assert "--api-key <redacted>" in (run / "report.md").read_text(encoding="utf-8")


def test_manifest_summary(runs: Path):
    assert render(str(runs / "fleet-sim"), "--quiet").returncode == 0
    doc = json.loads((runs / "fleet-sim" / "results.json").read_text(encoding="utf-8"))
    man = doc["manifest"]
    assert man["vllm_version"] == "0.25.0" and man["simulated"] == "yes"
    assert man["model"] == {"per_variant": ["nvidia/Qwen3.6-35B-A3B-NVFP4", "unsloth/Qwen3.6-35B-A3B-NVFP4"]}
    assert man["driver"]["spark-sim03"] == ["580.82.07"] and man["driver"]["spark-sim01"] == ["580.95.05"]
    assert man["launch_commands"]["nvidia-bare"].startswith("vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 --kv-cache-dtype fp8")
    md = (runs / "fleet-sim" / "report.md").read_text(encoding="utf-8")
    assert "| driver " in md and "varies by host — spark-sim01: 580.95.05; spark-sim02: 580.95.05; spark-sim03: 580.82.07" in md


def test_hosts_without_results_listed_with_reason(runs: Path):
    run = runs / "fleet-sim"
    proc = render(str(run), "--host-failure", "spark-down=unreachable: Failed to connect to the host via ssh",
                  "--host-failure", "spark-disk=Host | check free disk: HF_TOKEN=hf_abcdefghijklmnop too little disk",
                  "--host-failure", "spark-sim01=ignored: this host has result files")
    assert proc.returncode == 0, proc.stderr
    md = (run / "report.md").read_text(encoding="utf-8")
    section = " ".join(md.split("## Hosts without results", 1)[1].split("\n## ", 1)[0].split())  # padding off
    assert "| spark-down | unreachable: Failed to connect to the host via ssh |" in section
    assert "| spark-disk | Host \\| check free disk: HF_TOKEN=<redacted> too little disk |" in section
    assert "spark-sim01" not in section  # it has results: never listed as without
    assert "- spark-down: no results — unreachable: Failed to connect to the host via ssh" in md
    assert "- spark-down: no results — unreachable" in proc.stdout
    html = (run / "report.html").read_text(encoding="utf-8")
    assert '<h2 id="hosts_without_results">Hosts without results</h2>' in html and "<td" in html
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert [x["host"] for x in doc["hosts_without_results"]] == ["spark-disk", "spark-down"]
    for name in ("report.md", "report.html", "results.json"):
        assert "hf_abcdefghijklmnop" not in (run / name).read_text(encoding="utf-8"), name
    # Without the option the section is absent.
    assert render(str(run), "--quiet").returncode == 0
    assert "Hosts without results" not in (run / "report.md").read_text(encoding="utf-8")


def test_expected_hosts_without_results_get_the_default_reason(runs: Path):
    """--expected-host: the hosts the run targeted; the renderer lists those without a result file
    (the reason from --host-failure, else --missing-host-reason), never one that has results."""
    run = runs / "fleet-sim"
    proc = render(str(run), "--quiet", "--expected-host", "spark-sim01", "--expected-host", "spark-gone",
                  "--expected-host", "spark-down", "--host-failure", "spark-down=unreachable: no route",
                  "--missing-host-reason", "no result file: see the play output")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert doc["hosts_without_results"] == [{"host": "spark-down", "reason": "unreachable: no route"},
                                            {"host": "spark-gone", "reason": "no result file: see the play output"}]
    assert "- spark-gone: no results — no result file: see the play output" in (run / "report.md").read_text()
