"""Drift by bracketing in the report: bracket documents are loaded apart from the results,
compared with their reference (``sparkbench.report.drift``) and shown as "Drift (bracketing)".

Fixture: the simulated fleet run (tests/fixtures/runs/fleet-sim, 5 single-stream requests per
variant) plus one ``nvidia-bare.bracket.json`` per host, made from that host's nvidia-bare
result: spark-sim01's end measurement 10 % slower (a drift), spark-sim02's the same requests in
another order (no drift), spark-sim03's bracket failed at launch.
"""
from __future__ import annotations

import copy
import json
import shutil
import statistics
from pathlib import Path

import pytest

from sparkbench.report import cli, drift, load

from helpers import REPO

FLEET = REPO / "tests" / "fixtures" / "runs" / "fleet-sim"


def bracket_of(doc: dict, factor: float | None, order: list[int] | None = None) -> dict:
    """A bracket document from a main result: its runs' rates × factor (None: a failed bracket)."""
    b = copy.deepcopy(doc)
    b["bracket"] = {"of": doc["variant"]["name"], "position": "end"}
    b["finished_at"] = "2026-12-01T12:00:00Z"
    b["parallel"], b["quality"], b["image"] = [], [], None
    if factor is None:
        b.update(status="failed", single=None,
                 failure={"stage": "launch", "reason": "container exited before /health answered",
                          "remedy": "read the log", "log_excerpt": "", "issues": []})
        return b
    runs = [b["single"]["runs"][i] for i in (order or range(len(b["single"]["runs"])))]
    for r in runs:
        r["decode_tok_s"] = round(r["decode_tok_s"] * factor, 2)
    rates = [r["decode_tok_s"] for r in runs]
    b["single"].update(runs=runs, decode_tok_s_median=statistics.median(rates), decode_tok_s_min=min(rates),
                       decode_tok_s_max=max(rates))
    return b


@pytest.fixture
def run(tmp_path) -> Path:
    out = tmp_path / "fleet-sim"
    shutil.copytree(FLEET, out)
    for host, factor, order in (("spark-sim01", 0.90, None), ("spark-sim02", 1.0, [4, 2, 0, 3, 1]),
                                ("spark-sim03", None, None)):
        main = json.loads((out / host / "nvidia-bare.json").read_text())
        (out / host / "nvidia-bare.bracket.json").write_text(json.dumps(bracket_of(main, factor, order)))
    return out


def rates(path: Path) -> list[float]:
    return [r["decode_tok_s"] for r in json.loads(path.read_text())["single"]["runs"]]


@pytest.mark.ansible
def test_bracket_files_are_loaded_apart_from_the_results(run):
    r = load.load_run(run)
    assert len(r.results) == len(list(FLEET.glob("*/*.json"))) == 21 and r.errors == []
    assert not any("bracket" in d for d in r.results)
    assert sorted((d["host"], d["variant"]["name"], d["bracket"]["of"]) for d in r.brackets) == [
        (h, "nvidia-bare", "nvidia-bare") for h in ("spark-sim01", "spark-sim02", "spark-sim03")]
    assert [p.name for p in load.result_files(run) if "bracket" in p.name] == []
    assert len(load.bracket_files(run)) == 3


@pytest.mark.ansible
def test_a_bracket_file_that_names_another_variant_is_a_load_error(run):
    path = run / "spark-sim01" / "nvidia-bare.bracket.json"
    doc = json.loads(path.read_text())
    doc["bracket"]["of"] = "unsloth-bare"
    path.write_text(json.dumps(doc))
    (run / "spark-sim02" / "nvidia-mtp2.bracket.json").write_text("{not json")
    r = load.load_run(run)
    messages = {e.path: e.message for e in r.errors}
    assert "field 'bracket.of' is 'unsloth-bare' but the file is named nvidia-bare.bracket.json" in \
        messages["spark-sim01/nvidia-bare.bracket.json"]
    assert "not valid JSON" in messages["spark-sim02/nvidia-mtp2.bracket.json"]
    assert len(r.brackets) == 2 and len(r.results) == 21


@pytest.mark.ansible
def test_drift_verdict_per_host(run):
    r = load.load_run(run)
    d = drift.host_drift(r.results, r.brackets)
    assert sorted(d) == ["spark-sim01", "spark-sim02", "spark-sim03"]
    ref, end = rates(run / "spark-sim01/nvidia-bare.json"), rates(run / "spark-sim01/nvidia-bare.bracket.json")
    one = d["spark-sim01"]
    assert one["variant"] == "nvidia-bare" and one["unreliable"] is True and one["verdict"]["kind"] == "differs"
    assert one["verdict"]["pct"] == pytest.approx((statistics.median(end) / statistics.median(ref) - 1) * 100)
    assert one["verdict"]["pct"] == pytest.approx(-10.0, abs=0.05) and one["verdict"]["hi"] < 0
    assert one["text"] == f"nvidia-bare measured again at the end: {one['verdict']['text']}"
    assert one["text"].startswith("nvidia-bare measured again at the end: differs by −10.0 % [")
    assert (one["n_reference"], one["n_bracket"], one["simulated"]) == (5, 5, True)
    two = d["spark-sim02"]
    assert two["unreliable"] is False and two["verdict"]["kind"] == "no_difference"
    assert two["verdict"]["pct"] == pytest.approx(0.0, abs=1e-9)
    assert two["text"].startswith("nvidia-bare measured again at the end: no difference detectable above ")
    three = d["spark-sim03"]
    assert three["unreliable"] is False and three["verdict"]["kind"] == "not_enough"
    assert three["bracket_status"] == "failed" and three["n_bracket"] == 0
    assert "the bracket run failed at launch: container exited before /health answered" in three["text"]
    # seeded: the same documents give the same verdict
    assert drift.host_drift(r.results, r.brackets) == d


@pytest.mark.ansible
def test_a_bracket_without_its_main_result_and_the_latest_bracket_per_host(run):
    r = load.load_run(run)
    results = [x for x in r.results if not (x["host"] == "spark-sim02" and x["variant"]["name"] == "nvidia-bare")]
    d = drift.host_drift(results, r.brackets)
    assert "no main result of nvidia-bare in this run" in d["spark-sim02"]["text"]
    assert d["spark-sim02"]["verdict"]["kind"] == "not_enough"
    # two brackets on one host (a resumed run bracketed another reference): the later one counts
    older = copy.deepcopy(next(b for b in r.brackets if b["host"] == "spark-sim01"))
    older.update(finished_at="2026-11-30T00:00:00Z", bracket={"of": "nvidia-mtp2", "position": "end"})
    older["variant"]["name"] = "nvidia-mtp2"
    assert drift.host_drift(r.results, r.brackets + [older])["spark-sim01"]["variant"] == "nvidia-bare"


@pytest.mark.ansible
def test_report_has_the_drift_section_and_marks_the_drifted_host(run):
    out = cli.render(run)
    md = (run / "report.md").read_text()
    assert "Drift (bracketing) (simulated)" in md
    section = md[md.index("Drift (bracketing)"):]
    section = section[:section.index("\n#", 1)] if "\n#" in section[1:] else section
    rows = [line for line in section.splitlines() if line.startswith("| spark-sim")]
    assert len(rows) == 3, section
    assert "| unreliable" in rows[0] and "differs by −10.0 %" in rows[0]
    assert "no drift seen" in rows[1] and "no difference detectable above" in rows[1]
    assert "no verdict" in rows[2] and "the bracket run failed at launch" in rows[2]
    assert any(s.startswith("spark-sim01: comparisons unreliable — nvidia-bare measured again at the end: differs by")
               for s in out["summary"])
    assert not any(s.startswith(("spark-sim02: comparisons", "spark-sim03: comparisons")) for s in out["summary"])
    doc = json.loads((run / "results.json").read_text())
    assert doc["drift"]["spark-sim01"]["unreliable"] is True and doc["drift"]["spark-sim02"]["unreliable"] is False
    # bracket documents are never rows, variants or CSV lines
    assert len(doc["rows"]) == 21 and not any(".bracket" in json.dumps(row) for row in doc["rows"])
    assert ".bracket" not in (run / "results.csv").read_text()
    # the comparisons of the drifted host (and only those) are marked
    assert "unreliable: drift" in md
    h2h = [line for line in md.splitlines() if line.startswith("| spark-sim02") and "unreliable: drift" in line]
    assert h2h == []


@pytest.mark.unit
def test_no_bracket_no_section(tmp_path):
    out = tmp_path / "fleet-sim"
    shutil.copytree(FLEET, out)
    res = cli.render(out)
    assert "Drift (bracketing)" not in (out / "report.md").read_text() and res["doc"]["drift"] == {}
