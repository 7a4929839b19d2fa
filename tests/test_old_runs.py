"""Runs written by earlier sparkbench render and compare beside new ones.

Fixture: ``tests/fixtures/old-runs/main-d597743`` — ``bench.yml -l spark-sim01`` with two variants
and the bracket, written by sparkbench at main ``d597743`` against the simulator (the unit's home
written as /home/spark). That version wrote the bandwidth probe after a variant into the document
itself; this one writes it to ``<host>/probe-after/<variant>.json`` (``sparkbench.result``). The
fixture lives outside ``tests/fixtures/runs`` so that the golden reports' history tables do not
change with it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparkbench import result
from sparkbench.report.cli import render

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD = FIXTURES / "old-runs" / "main-d597743"
NEW = FIXTURES / "runs" / "serving-sim"
HOST = "spark-sim01"


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.py", "*.md"))
    return dest


def test_an_old_run_renders_with_the_probe_after_kept_in_its_documents(tmp_path):
    out = render(_copy(OLD, tmp_path / "results" / "main-d597743"))
    assert out["load_errors"] == []
    rows = {r["variant"]: r for r in out["doc"]["rows"]}
    assert set(rows) == {"nvidia-bare", "nvidia-mtp2"} and all(r["status"] == "complete" for r in rows.values())
    assert rows["nvidia-mtp2"]["single_tok_s"] > rows["nvidia-bare"]["single_tok_s"] > 0
    protocol = {r["variant"]: r for r in out["doc"]["protocol"]}
    assert protocol["nvidia-bare"]["bandwidth_after_gbps"] > 0  # the probe after, inside the old document
    assert out["doc"]["drift"][HOST]["variant"] == "nvidia-bare"  # its bracket document read as one


def test_a_new_run_compares_against_an_old_baseline(tmp_path):
    results = tmp_path / "results"
    _copy(OLD, results / "main-d597743")
    out = render(_copy(NEW, results / "serving-sim"), baseline=results / "main-d597743")
    assert out["load_errors"] == [] and out["doc"]["baseline_run_id"] == "main-d597743"
    rows = out["doc"]["run_compare"]["rows"]
    pair = next(r for r in rows if r["host"] == HOST and r["variant"] == "nvidia-bare")
    assert pair["single_pct"] is not None and pair["verdict"]["text"], pair


def test_the_probe_after_in_a_file_of_its_own_reads_as_inside_the_document(tmp_path):
    """The two layouts give one report: the document with ``protocol.bandwidth.after`` (an old run)
    and the document without it beside ``probe-after/<variant>.json`` (a run of this version)."""
    inline = _copy(OLD, tmp_path / "inline" / "main-d597743")
    split = _copy(OLD, tmp_path / "split" / "main-d597743")
    for path in sorted((split / HOST).glob("*.json")):
        doc = json.loads(path.read_text())
        after = doc["protocol"]["bandwidth"]["after"]
        doc["protocol"]["bandwidth"].update(after=None, drop=None)
        path.write_text(json.dumps(doc))
        result.probe_after_path(path).parent.mkdir(exist_ok=True)
        result.probe_after_path(path).write_text(json.dumps(after))
    assert result.stored(split / HOST / "nvidia-bare.json") == result.stored(inline / HOST / "nvidia-bare.json")
    texts = {}
    for name, run in (("inline", inline), ("split", split)):
        render(run)
        texts[name] = (run / "report.md").read_text().replace(str(run.parent), "<results>")
    strip = [line for line in texts["inline"].splitlines() if not line.startswith("generated ")]
    assert strip == [line for line in texts["split"].splitlines() if not line.startswith("generated ")]
