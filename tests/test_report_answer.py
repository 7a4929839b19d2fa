"""The report answers first: the fastest variant per host and model single stream and at 8
parallel with its lead and verdict (sparkbench.report.compare.answer, the "Answer" section), the
configurations of a model with one build compared with its first configuration
(compare.config_compare: the CPU matrix's fp32 vs bf16), and verdict cells that hold the Trust
contract's words alone, with why a verdict is missing said once under the table."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from sparkbench.report import cli, compare
from sparkbench.report.sections import head_to_head
from sparkbench.report.sections.verdicts import missing_notes

from helpers import REPO

pytestmark = pytest.mark.unit

RUNS = REPO / "tests" / "fixtures" / "runs"
#: the Trust contract's three phrasings, and nothing more in a verdict cell
VERDICT_WORDS = re.compile(r"(differs by [+−]\d+\.\d (%|pp) \[[+−]\d+\.\d, [+−]\d+\.\d\]"
                           r"|no difference detectable above \d+\.\d (%|pp)|not enough requests for a verdict|–)")


def load(run: str) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((RUNS / run).glob("*/*.json"))]


def cpu_like(tmp_path: Path) -> Path:
    """A run shaped like the real-vLLM CPU matrix: one build (tiny) of one model, configurations
    bf16 and fp32 (spark-sim01's nvidia-mtp2 and nvidia-bare figures: fp32 is the slower one)."""
    run = tmp_path / "cpu-like" / "cpu-real01"
    run.mkdir(parents=True)
    for source, config, index in (("nvidia-mtp2", "bf16", 0), ("nvidia-bare", "fp32", 1)):
        doc = json.loads((RUNS / "fleet-sim" / "spark-sim01" / f"{source}.json").read_text(encoding="utf-8"))
        doc["host"] = "cpu-real01"
        doc["variant"].update(name=f"tiny-{config}", build="tiny", config=config, model="sparkbench/tiny-llama",
                              index=index)
        (run / f"tiny-{config}.json").write_text(json.dumps(doc), encoding="utf-8")
    return run.parent


def test_answer_names_the_fastest_variant_per_host_against_the_runner_up():
    fleet = load("fleet-sim")
    rows = {r["host"]: r for r in compare.answer(fleet)["rows"]}
    assert sorted(rows) == ["spark-sim01", "spark-sim02", "spark-sim03"]
    for host, row in rows.items():
        docs = [d for d in fleet if d["host"] == host and d["status"] == "complete"]
        ranked = sorted(docs, key=lambda d: -d["single"]["decode_tok_s_median"])
        single = row["single"]
        assert (single["variant"], single["runner_up"]) == (ranked[0]["variant"]["name"], ranked[1]["variant"]["name"])
        assert single["variant"] == "nvidia-mtp3" and single["runner_up"] == "nvidia-mtp2"
        assert single["pct_diff"] == pytest.approx((ranked[0]["single"]["decode_tok_s_median"]
                                                    / ranked[1]["single"]["decode_tok_s_median"] - 1) * 100)
        assert single["verdict"]["kind"] == "differs" and single["verdict"]["lo"] > 0
        # at 8 parallel nvidia-mtp3 leads unsloth-mtp3 by 0.8 %: within the noise, and the verdict says so
        c8 = row["combined_8"]
        assert (c8["variant"], c8["runner_up"]) == ("nvidia-mtp3", "unsloth-mtp3")
        assert c8["verdict"]["kind"] == "no_difference"


def test_answer_of_a_model_measured_once_and_a_cluster_under_its_head():
    rows = {r["host"]: r for r in compare.answer(load("pair-sim"))["rows"]}
    assert rows["spark-sim11"]["single"]["label"] == "gptoss-tp2 (TP=2)"  # the cluster competes on its head
    alone = rows["spark-sim12"]["single"]
    assert alone["runner_up"] is None and alone["verdict"] is None and alone["value"] > 0
    seed = {r["model_key"]: r for r in compare.answer(load("seed-v0.25"))["rows"]}
    assert seed["Qwen3.6-35B-A3B-NVFP4"]["single"]["variant"] == "nvidia-mtp3"
    assert seed["Qwen3.6-35B-A3B-NVFP4"]["combined_8"] is None  # the article publishes no 8-parallel figure
    assert seed["Qwen3.6-27B-NVFP4"]["single"]["verdict"]["kind"] == "not_enough"  # medians only


def test_one_build_compares_its_configurations_with_the_first(tmp_path: Path):
    run = cpu_like(tmp_path)
    out = cli.render(run)
    doc = out["doc"]
    single = [r for r in doc["config_compare"]["rows"] if r["metric"] == "single"]
    assert [(r["variant"], r["reference_variant"]) for r in single] == [("tiny-fp32", "tiny-bf16")]
    assert single[0]["verdict"]["kind"] == "differs" and single[0]["pct_diff"] < 0
    assert doc["head_to_head"]["rows"] == []  # one build: nothing to pair head to head
    # the terminal table: a "vs bf16" column and the verdict, never an empty "vs tiny"
    header = doc["terminal_table"].splitlines()[1]
    assert "vs bf16" in header and "single verdict" in header and "vs tiny" not in header
    fp32 = next(line for line in doc["terminal_table"].splitlines() if line.startswith("tiny-fp32"))
    assert single[0]["verdict"]["text"] in fp32
    line = next(s for s in out["summary"] if "fp32 vs bf16" in s)
    assert line.startswith("cpu-real01 · tiny-llama (tiny): fp32 vs bf16 — single-stream ")
    assert single[0]["verdict"]["text"] in line
    # the answer says the same: bf16 is the fastest, ahead of fp32 with a verdict
    answer = doc["answer"]["rows"][0]["single"]
    assert (answer["variant"], answer["runner_up"], answer["verdict"]["kind"]) == ("tiny-bf16", "tiny-fp32", "differs")
    assert out["summary"][0].startswith("cpu-real01 · tiny-llama — single stream: tiny-bf16 ")
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "## Configurations: against the first" in md and "| fp32 vs bf16 " in md


def test_verdict_cells_hold_the_words_alone_and_the_reason_is_said_once(tmp_path: Path):
    shutil.copytree(RUNS, tmp_path / "runs")
    out = cli.render(tmp_path / "runs" / "fleet-sim", tmp_path / "runs" / "fleet-sim-base")
    checked = 0
    for table in out["tables"]:
        for i, title in enumerate(table.headers):
            if "verdict" in title:
                for row in table.rows:
                    assert VERDICT_WORDS.fullmatch(row[i]), (table.title, title, row[i])
                    checked += 1
    assert checked > 100
    h2h = next(t for t in out["tables"] if t.key == "head-to-head")
    assert h2h.notes[-2:] == [
        "2 par verdict: not enough requests for a verdict (2 and 2 requests; 5 per side needed: measure at 5 or more "
        "parallel)",
        "4 par verdict: not enough requests for a verdict (4 and 4 requests; 5 per side needed: measure at 5 or more "
        "parallel)"]
    md = (tmp_path / "runs" / "fleet-sim" / "report.md").read_text(encoding="utf-8")
    assert md.count("(2 and 2 requests;") == 1  # once, under the head-to-head


def test_missing_notes_group_columns_by_reason_and_count_rows():
    short = {"kind": "not_enough", "text": "not enough requests for a verdict", "reason": "2 and 2 requests; x"}
    other = dict(short, reason="0 and 0 requests; x")
    done = {"kind": "differs", "text": "differs by +1.0 % [+0.5, +1.5]", "reason": None}
    assert missing_notes([("a verdict", [short, short]), ("b verdict", [short, short, None]),
                          ("c verdict", [done, other])]) == [
        "a verdict, b verdict: not enough requests for a verdict (2 and 2 requests; x)",
        "c verdict: not enough requests for a verdict (0 and 0 requests; x) in 1 of 2 rows"]
    assert missing_notes([("d verdict", [done, None])]) == []


def test_a_drifted_host_is_marked_once_in_its_row_not_in_its_verdicts():
    fleet = copy.deepcopy(load("fleet-sim"))
    drift = {"spark-sim02": {"unreliable": True, "text": "nvidia-bare drifted −3.1 %"}}
    table = head_to_head(fleet, drift=drift).tables[0]
    marked = [r for r in table.rows if r[0] == "spark-sim02 (unreliable: drift)"]
    assert len(marked) == 3 and all(VERDICT_WORDS.fullmatch(c) for r in marked for c in r[7::2])
    assert any(n.startswith("(unreliable: drift) = ") for n in table.notes)
