"""The report's serving section (sparkbench.report.sections.serving, charts.goodput_curves) on a
real simulated run with the arrival-rate phase (tests/fixtures/runs/serving-sim/): the table per
rate, the highest rate meeting the SLO, the summary line and the goodput chart; runs without the
phase keep their reports as they were."""
from __future__ import annotations

import json
import shutil

import pytest

from sparkbench.report import cli, numbers, sections

from helpers import REPO

pytestmark = pytest.mark.unit

FIXTURES = REPO / "tests" / "fixtures" / "runs"


def docs(run: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / run).glob("*/*.json"))]


def test_highest_rate_meeting_the_slo_is_the_highest_listed_rate_with_90_percent():
    for d in docs("serving-sim"):
        shares = {r["rate"]: r["slo_met_share"] for r in d["rates"]}
        best, target = numbers.highest_rate_meeting_slo(d)
        assert target == 0.9
        assert best == max(rate for rate, share in shares.items() if share >= 0.9)
        assert all(share < 0.9 for rate, share in shares.items() if rate > best)


def test_the_serving_table_has_one_row_per_rate_and_the_goodput():
    section = sections.serving(docs("serving-sim"))
    entries, lines, (table,) = section.data, section.lines, section.tables
    assert section.key == "serving" and section.in_doc
    assert [e["variant"] for e in entries] == ["nvidia-bare", "unsloth-bare", "nvidia-bare-noprefix",
                                              "unsloth-bare-noprefix"]
    assert len(table.rows) == sum(len(d["rates"]) for d in docs("serving-sim"))
    header = table.headers
    first = dict(zip(header, table.rows[0]))
    rate0 = docs("serving-sim")[0]["rates"][0]
    assert first["rate req/s"] == f"{rate0['rate']:g}"
    assert first["goodput req/s"] == f"{rate0['goodput']:.2f}"
    assert first["met SLO"] == f"{100 * rate0['slo_met_share']:.0f} %"
    assert "SIMULATED" in table.title.upper() or "simulated" in table.title
    assert any("highest arrival rate meeting the SLO" in line and "requests/s" in line for line in lines)


def test_the_rendered_report_has_the_section_the_line_and_the_chart(tmp_path):
    run = tmp_path / "serving-sim"
    shutil.copytree(FIXTURES / "serving-sim", run)
    out = cli.render(run)
    md = (run / "report.md").read_text()
    assert "## Serving: goodput by arrival rate" in md
    assert (run / "charts" / "goodput.png").is_file()
    doc = json.loads((run / "results.json").read_text())
    assert [e["variant"] for e in doc["serving"]] == ["nvidia-bare", "unsloth-bare", "nvidia-bare-noprefix",
                                                      "unsloth-bare-noprefix"]
    assert any("highest arrival rate meeting the SLO" in s for s in out["summary"])


def test_a_run_without_the_rate_phase_has_no_serving_section(tmp_path):
    run = tmp_path / "pair-sim"
    shutil.copytree(FIXTURES / "pair-sim", run)
    cli.render(run)
    assert "Serving: goodput" not in (run / "report.md").read_text()
    assert "serving" not in json.loads((run / "results.json").read_text())
    assert not (run / "charts" / "goodput.png").exists()


def test_the_full_serving_run_renders_every_serving_section_from_real_measure_output(tmp_path):
    """The fixture is a real simulated run of every serving phase (prefix pair, multi-turn, tools)."""
    run = tmp_path / "serving-sim"
    shutil.copytree(FIXTURES / "serving-sim", run)
    cli.render(run)
    md = (run / "report.md").read_text()
    pairs = md[md.index("## Prefix caching: with and without"):md.index("## Prefix cache phase")]
    for build in ("nvidia", "unsloth"):
        on, off = (json.loads((run / "spark-sim01" / f"{build}-bare{s}.json").read_text()) for s in ("", "-noprefix"))
        assert on["prefix_cache"]["hit_rate"] > 0.5 and off["prefix_cache"]["hit_rate"] is None
        row = next(line for line in pairs.splitlines() if f"{build}-bare vs {build}-bare-noprefix" in line)
        assert "differs by −" in row  # caching cuts the warm TTFT, with a verdict over 7 + 7 requests
    tools = md[md.index("## Tool calls"):]
    assert "| 6/6 " in tools.splitlines()[4]
    turns = md[md.index("## Multi-turn"):md.index("## Tool calls")]
    assert all(f"| {t} " in turns for t in (1, 2, 3, 4))
    assert (run / "charts" / "multi_turn.png").is_file() and (run / "charts" / "slo_rate.png").is_file()
