"""The closing lines of a run (sparkbench.report.closing): every line within the width, the
compact table with the figures a user decides on, the answer with its verdict's words, and where
the report is, read from the rendered results.json of real report fixtures."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from sparkbench.report import closing
from sparkbench.runner.api import BenchResult
from sparkbench.runner.cli import summary

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"
DOCS = sorted(p.parent.name for p in GOLDEN.glob("*/results.json"))


def doc(name: str) -> dict:
    return json.loads((GOLDEN / name / "results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", DOCS)
@pytest.mark.parametrize("width", [100, 80])
def test_every_closing_line_fits_the_width(name: str, width: int) -> None:
    lines = closing.closing_lines(doc(name), width, f"results/{name}", cwd=".")
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"{name} at {width}: {too_wide[:3]}"


def test_the_compact_table_holds_the_figures_a_user_decides_on() -> None:
    d = doc("fleet-sim")
    table = closing.compact_table(d, 100).splitlines()
    header = table[0].split()
    for title in ("host", "variant", "tok/s", "×", "bare", "vs", "nvidia", "8×"):
        assert title in header, header
    # a figure reads as in the report's rows; the verdict in the Trust contract's words
    row = next(r for r in d["rows"] if r["host"] == "spark-sim01" and r["variant"] == "unsloth-bare")
    line = next(i for i, t in enumerate(table) if "unsloth-bare" in t)
    assert f"{row['single_tok_s']:.1f}" in table[line]
    text = " ".join(" ".join(table[line:line + 2]).split())
    h2h = next(r for r in d["head_to_head"]["rows"] if r["host"] == "spark-sim01" and r["variant"] == "unsloth-bare"
               and r["metric"] == "single")
    words = h2h["verdict"]["text"].split()
    assert " ".join(words[:4]) in text  # "differs by −12.5 % …", wrapped inside its column at most
    assert sum("reference" in t for t in table) == 9  # nvidia-bare/mtp2/mtp3 on three hosts
    assert any("failed (preflight)" in t for t in table)


def test_the_answer_lines_and_the_report_path_follow_the_table() -> None:
    d = doc("fleet-sim")
    lines = closing.closing_lines(d, 100, "/somewhere/results/fleet-sim", cwd="/somewhere")
    assert lines[0] == closing.SIMULATED_LABEL
    text = " ".join(" ".join(lines).split())
    for said in d["summary"]:
        assert " ".join(said.split()) in text
    assert "Report: results/fleet-sim/report.html" in lines[-2] and lines[-1] == "Charts: results/fleet-sim/charts/"


def test_fit_table_wraps_inside_columns_never_inside_words() -> None:
    rows = [["a-rather-long-variant-name", "differs by −12.5 % [−15.3, −10.7]", "76.0"]]
    text = closing.fit_table(["variant", "verdict", "tok/s"], rows, 50)
    assert max(len(line) for line in text.splitlines()) <= 50
    words = " ".join(text.split())
    assert "a-rather-long-variant-name" in words and "[−15.3," in words


def test_the_bench_summary_ends_with_the_table_the_answer_and_the_exit_code(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # paths are shown relative to where the command was run
    run = tmp_path / "results" / "fleet-sim"
    run.mkdir(parents=True)
    result = BenchResult(run_id="fleet-sim", rc=0, ansible_rc=0, status="successful",
                         states={"spark-sim01": {"nvidia-bare": "done"}}, failed_hosts={}, notes={}, run_dir=run,
                         artifacts_dir=tmp_path / "artifacts", report_html=run / "report.html",
                         report_doc=doc("fleet-sim"))
    out = io.StringIO()
    summary(result, out, width=100)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]
    assert closing.SIMULATED_LABEL in lines and any(line.startswith("host ") and "vs nvidia" in line for line in lines)
    assert any("differs by" in line for line in lines) and lines[-1] == "exit code 0"
    assert any(line.startswith("report: results/fleet-sim/report.html") for line in lines)
