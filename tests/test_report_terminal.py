"""The end-of-play table (sparkbench.report.terminal) is printed from the rendered results.json
and shows the same figures as report.md; playbooks/report.yml renders beside a corrupt result
file and names it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkbench.report.closing import compact_table
from sparkbench.report.terminal import REAL_LABEL, SIMULATED_LABEL, terminal_table

from helpers import REPO, run_playbook

RUNS = REPO / "tests" / "fixtures" / "runs"


def render(run: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(run), "--quiet", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads((run / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("terminal") / "fleet-sim"
    shutil.copytree(RUNS / "fleet-sim", dest)
    return dest


def parse_simple(text: str) -> tuple[list[str], list[list[str]]]:
    """A tabulate 'simple' table (after its label line) → headers, rows; columns cut at the dashes."""
    lines = text.splitlines()[1:]
    spans, pos = [], 0
    for dashes in lines[1].split("  "):
        if dashes:
            start = lines[1].index(dashes, pos)
            spans.append((start, start + len(dashes)))
            pos = start + len(dashes)
    cut = [[line[a:b].strip() for a, b in spans] for line in [lines[0]] + lines[2:]]
    return cut[0], cut[1:]


def markdown_section(md: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The pipe table under ``## title`` in report.md → headers, rows."""
    body = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    table = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
             if line.startswith("|")]
    return table[0], table[2:]


@pytest.mark.sim
def test_terminal_table_is_printed_from_results_json(fleet: Path):
    doc = render(fleet)
    assert doc["terminal_table"] == terminal_table(doc)
    assert doc["terminal_table"].splitlines()[0] == SIMULATED_LABEL


@pytest.mark.sim
def test_terminal_table_and_report_md_print_the_same_figures(fleet: Path):
    """For every host × variant: single (min–max), × bare, combined at 2/4/8, acceptance,
    % of roofline or tokens per step and TTFT read the same in the terminal table and in
    report.md's host tables; the "vs <reference build>" column is report.md's head-to-head Δ."""
    doc = render(fleet)
    md = (fleet / "report.md").read_text(encoding="utf-8")
    headers, rows = parse_simple(doc["terminal_table"])
    assert headers[:5] == ["host", "variant", "single tok/s (min–max)", "× bare", "vs nvidia"]
    term = {(r[0], r[1]): dict(zip(headers, r)) for r in rows}
    pairs = {"single tok/s (min–max)": "single tok/s median (min–max)", "× bare": "× bare",
             "2× tok/s": "2 par", "4× tok/s": "4 par", "8× tok/s": "8 par", "accept/pos": "acceptance / pos",
             "% roofline or tok/step": "% roofline or tok/step", "TTFT p50 s": "TTFT p50 s"}
    h2h_headers, h2h_rows = markdown_section(md, "Head-to-head: builds of the same model (simulated)")
    h2h = {(r[0], r[2], r[3].split(" vs ")[0]): dict(zip(h2h_headers, r)) for r in h2h_rows}
    meta = {(r["host"], r["variant"]): r for r in doc["rows"]}
    compared = 0
    for host in ("spark-sim01", "spark-sim02", "spark-sim03"):
        md_headers, md_rows = markdown_section(md, f"Host {host} (simulated)")
        for cells in md_rows:
            report = dict(zip(md_headers, cells))
            line = term.pop((host, report["variant"]))
            if meta[(host, report["variant"])]["status"] == "failed":
                assert line["status"] == "failed (preflight)"
                continue
            for t_col, md_col in pairs.items():
                if md_col not in report and md_col == "% roofline or tok/step":
                    md_col = "% data-sheet roofline or tok/step"   # beside "% of measured bandwidth"
                assert line[t_col] == report[md_col], (host, report["variant"], t_col)
                compared += 1
            row = meta[(host, report["variant"])]
            vs = h2h.get((host, row["config"], row["build"]))
            assert line["vs nvidia"] == (vs["Δ single"] if vs else "–"), (host, report["variant"])
    assert term == {}, f"rows only in the terminal table: {sorted(term)}"
    assert compared == 3 * 6 * len(pairs)
    # The roofline the bare rows' % refers to is report.md's (weights + KV), e.g. nvidia-bare 47 %.
    assert "weights + KV" in md and "nvidia/Qwen3.6-35B-A3B-NVFP4 161.6 tok/s" in md


@pytest.mark.sim
def test_terminal_table_labels_and_one_host_layout(tmp_path: Path):
    run = tmp_path / "seed-v0.25"
    shutil.copytree(RUNS / "seed-v0.25", run)
    doc = render(run, "--table-format", "github")
    lines = doc["terminal_table"].splitlines()
    assert lines[0] == REAL_LABEL
    assert lines[1].startswith("| variant ")  # one host: no host column
    assert any("unsloth-mtp2" in line and "81.60" in line and "−16.7 %" in line for line in lines)


@pytest.mark.ansible
def test_report_playbook_writes_a_report_beside_a_corrupt_result_file(tmp_path: Path):
    results = tmp_path / "results"
    shutil.copytree(RUNS / "fleet-sim", results / "fleet-sim")
    run = results / "fleet-sim"
    (run / "spark-sim02" / "nvidia-bare.json").write_text('{"status": "complete", "single": ', encoding="utf-8")
    proc = run_playbook("playbooks/report.yml", "-e", "run=fleet-sim", "-e", f"bench_results_dir={results}",
                        timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "spark-sim02/nvidia-bare.json: not valid JSON" in md
    assert "not read: spark-sim02/nvidia-bare.json: not valid JSON" in proc.stdout
    assert f"Report: {run}/report.html" in proc.stdout and f"Charts: {run}/charts/" in proc.stdout
    # The play printed the closing lines of the rendered results.json, the compact table line for line.
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    out_lines = {line.strip() for line in proc.stdout.splitlines()}
    assert all(line.strip() in out_lines for line in compact_table(doc, 92).splitlines())
    # every printed line of the closing block fits COLUMNS=100, the callback's indent included
    start = proc.stdout.index("SIMULATED: figures come from")
    block = proc.stdout[proc.stdout.rindex("\n", 0, start) + 1:]
    assert all(len(line) <= 100 for line in block[:block.index("\n\n")].splitlines())
    assert len(doc["rows"]) == 20  # 21 files − the corrupt one
