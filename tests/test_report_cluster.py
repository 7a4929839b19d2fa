"""Reports with a cluster: a variant served across two Sparks (Ray, TP=2 / PP=2) is one
unit, "sim_pair (spark-sim11 + spark-sim12)"; its manifest lists every node; it is compared with
the same build on one Spark (the head) through the verdict machinery, and never with the fleet.

Fixture: tests/fixtures/runs/pair-sim (synthetic, written by its make_fixture.py): spark-sim11
gptoss-single / gptoss-tp2 / gptoss-pp2 (the last two with a ``cluster`` block), spark-sim12
gptoss-single; single-stream 57.5 / 69.0 / 56.0 tok/s, 5 requests per side."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sparkbench import verdict as vd
from sparkbench.report import compare
from sparkbench.report import numbers as n
from sparkbench.report.charts import fleet_bars

from helpers import REPO

RUNS = REPO / "tests" / "fixtures" / "runs"
PAIR = RUNS / "pair-sim"
SCHEMA = json.loads((REPO / "schema" / "result.schema.json").read_text(encoding="utf-8"))
UNIT = "sim_pair (spark-sim11 + spark-sim12)"


def load(run: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(run.glob("*/*.json"))]


def by_name(results: list[dict], host: str, variant: str) -> dict:
    return next(r for r in results if r["host"] == host and r["variant"]["name"] == variant)


@pytest.fixture(scope="module")
def pair() -> list[dict]:
    return load(PAIR)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """pair-sim rendered once (report.md, report.html, results.json) in a temporary copy."""
    run = tmp_path_factory.mktemp("cluster") / "pair-sim"
    shutil.copytree(PAIR, run, ignore=shutil.ignore_patterns("*.py"))
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(run), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return run


@pytest.mark.unit
def test_fixture_documents_validate_and_are_what_make_fixture_writes(pair):
    assert sorted((r["host"], r["variant"]["name"]) for r in pair) == [
        ("spark-sim11", "gptoss-pp2"), ("spark-sim11", "gptoss-single"), ("spark-sim11", "gptoss-tp2"),
        ("spark-sim12", "gptoss-single")]
    for doc in pair:
        jsonschema.validate(doc, SCHEMA)
        assert doc["_fixture"] == "synthetic" and doc["variant"]["model"] == "openai/gpt-oss-120b"
        assert len(doc["single"]["runs"]) == 5
    spec = importlib.util.spec_from_file_location("pair_fixture", PAIR / "make_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for doc in pair:
        again = mod.document(doc["host"], doc["variant"]["name"], doc["variant"]["index"], doc["started_at"])
        assert json.loads(json.dumps(again)) == doc, doc["variant"]["name"]
    tp2 = by_name(pair, "spark-sim11", "gptoss-tp2")
    assert tp2["cluster"]["head"] == tp2["host"] == "spark-sim11"
    assert "cluster" not in by_name(pair, "spark-sim11", "gptoss-single")


@pytest.mark.sim
def test_the_cluster_is_one_unit_labelled_with_its_layout(pair, rendered):
    tp2, pp2 = by_name(pair, "spark-sim11", "gptoss-tp2"), by_name(pair, "spark-sim11", "gptoss-pp2")
    single = by_name(pair, "spark-sim11", "gptoss-single")
    assert n.unit_of(tp2) == n.unit_of(pp2) == UNIT and n.unit_of(single) == "spark-sim11"
    assert (n.parallel_sizes(tp2), n.parallel_label(tp2)) == ((2, 1), "TP=2")
    assert (n.parallel_sizes(pp2), n.parallel_label(pp2)) == ((1, 2), "PP=2")
    assert n.parallel_sizes(single) == (1, 1) and n.parallel_label(single) is None
    # without the block's sizes, the launch flags say the same
    flags_only = {**tp2, "cluster": {"name": "sim_pair", "head": "spark-sim11", "members": ["spark-sim11", "spark-sim12"]}}
    assert n.parallel_label(flags_only) == "TP=2"

    doc = json.loads((rendered / "results.json").read_text(encoding="utf-8"))
    rows = {(r["host"], r["variant"]): r for r in doc["rows"]}
    assert rows[("spark-sim11", "gptoss-tp2")]["unit"] == UNIT
    assert rows[("spark-sim11", "gptoss-tp2")]["parallel"] == "TP=2"
    assert rows[("spark-sim11", "gptoss-tp2")]["members"] == ["spark-sim11", "spark-sim12"]
    assert "unit" not in rows[("spark-sim11", "gptoss-single")]  # one-unit rows keep their keys
    titles = [t["title"] for t in doc["tables"]]
    assert titles[0] == "Answer: the fastest variant per model (simulated)"  # the report answers first
    assert titles[1:4] == ["Host spark-sim11 (simulated)", f"Cluster {UNIT} (simulated)", "Host spark-sim12 (simulated)"]
    cluster_table = next(t for t in doc["tables"] if t["key"] == "cluster-sim_pair")
    assert [r[0] for r in cluster_table["rows"]] == ["gptoss-tp2 (TP=2)", "gptoss-pp2 (PP=2)"]
    head_table = next(t for t in doc["tables"] if t["key"] == "host-spark-sim11")
    assert [r[0] for r in head_table["rows"]] == ["gptoss-single"]
    # TP=2: each node reads half the bytes → twice one node's roofline; PP=2 keeps one node's bound
    assert rows[("spark-sim11", "gptoss-tp2")]["roofline_tok_s"] == pytest.approx(
        2 * rows[("spark-sim11", "gptoss-single")]["roofline_tok_s"])
    assert rows[("spark-sim11", "gptoss-pp2")]["roofline_tok_s"] == pytest.approx(
        rows[("spark-sim11", "gptoss-single")]["roofline_tok_s"])
    # the other tables name the unit, not the head alone
    quality = next(t for t in doc["tables"] if t["key"] == "quality")
    assert [UNIT, "gptoss-tp2"] == quality["rows"][1][:2]
    # the terminal table: the unit in the host column, the layout beside the variant, Δ against one unit
    term = doc["terminal_table"]
    assert "vs one unit" in term.splitlines()[1]
    line = next(x for x in term.splitlines() if "gptoss-tp2 (TP=2)" in x)
    assert line.startswith(UNIT) and "+20.0 %" in line
    assert "−2.6 %" in next(x for x in term.splitlines() if "gptoss-pp2 (PP=2)" in x)


@pytest.mark.sim
def test_clusters_section_lists_every_node_and_the_link(rendered):
    doc = json.loads((rendered / "results.json").read_text(encoding="utf-8"))
    nodes = next(t for t in doc["tables"] if t["key"] == "clusters")
    assert nodes["title"] == "Clusters: nodes (simulated)"
    cols = {h: i for i, h in enumerate(nodes["headers"])}
    assert {"node", "address", "image", "image id", "driver", "alive"} <= set(cols)
    by_node = {r[cols["node"]]: r for r in nodes["rows"]}
    assert sorted(by_node) == ["spark-sim11", "spark-sim12"]  # same facts for both variants: one row per node
    for host, addr, role in (("spark-sim11", "172.31.250.11", "head"), ("spark-sim12", "172.31.250.12", "worker")):
        row = by_node[host]
        assert row[cols["cluster"]] == UNIT and row[cols["address"]] == addr and row[cols["role"]] == role
        assert row[cols["image"]] == "sparkbench/vllm-sim-ray:v0.25.0"
        assert row[cols["image id"]].startswith("sha256:9d41c3b0")
        assert row[cols["driver"]] == "580.95.05" and row[cols["alive"]] == "yes"
        assert row[cols["variants"]] == "gptoss-tp2, gptoss-pp2"
    placement = next(t for t in doc["tables"] if t["key"] == "cluster-placement")
    cols = {h: i for i, h in enumerate(placement["headers"])}
    rows = {r[cols["variant"]]: r for r in placement["rows"]}
    pair = load(PAIR)
    for variant, layout in (("gptoss-tp2", "TP=2"), ("gptoss-pp2", "PP=2")):
        block = by_name(pair, "spark-sim11", variant)["cluster"]
        row = rows[variant]
        assert row[cols["parallel"]] == layout and row[cols["nodes alive"]] == "2 of 2"
        assert row[cols["placement group"]] == block["placement_group_id"]
        assert row[cols["worker actors on nodes"]] == ", ".join(block["worker_actor_node_ids"])
        assert row[cols["link test"]] == "iperf3" and row[cols["link Gb/s"]] == "9.41"
        assert row[cols["link note"]] == "iperf3, container network (GPU-less hosts), not a CX-7 link"
    assert [c["variant"] for c in doc["clusters"]] == ["gptoss-tp2", "gptoss-pp2"]
    md = (rendered / "report.md").read_text(encoding="utf-8")
    assert "## Clusters: nodes (simulated)" in md and "## Clusters: placement and link (simulated)" in md


@pytest.mark.sim
def test_cluster_vs_one_unit_verdicts_use_the_verdict_machinery(pair, rendered):
    data = compare.cluster_vs_unit(pair)
    assert data["unmatched"] == []
    rows = {(r["variant"], r["metric"]): r for r in data["rows"]}
    assert sorted({v for v, _ in rows}) == ["gptoss-pp2", "gptoss-tp2"]
    single = by_name(pair, "spark-sim11", "gptoss-single")
    for variant in ("gptoss-tp2", "gptoss-pp2"):
        other = by_name(pair, "spark-sim11", variant)
        for metric in compare.METRICS:
            row = rows[(variant, metric)]
            assert row["unit"] == UNIT and row["reference_variant"] == "gptoss-single"
            assert row["reference_host"] == "spark-sim11" and row["flags_match"] is True
            expected = vd.compare_samples(vd.samples(single, metric), vd.samples(other, metric),
                                          remedy=compare.remedy(metric))
            assert row["verdict"] == expected, (variant, metric)
    tp, pp = rows[("gptoss-tp2", "single")], rows[("gptoss-pp2", "single")]
    assert (tp["reference_value"], tp["value"]) == (57.5, 69.0)
    assert tp["pct_diff"] == pytest.approx(20.0) and tp["verdict"]["kind"] == "differs"
    assert tp["verdict"]["lo"] > 0
    assert pp["pct_diff"] == pytest.approx((56.0 / 57.5 - 1) * 100)
    assert pp["verdict"]["kind"] == "no_difference"  # −2.6 % is inside the noise of 5 requests per side
    for variant in ("gptoss-tp2", "gptoss-pp2"):
        assert rows[(variant, "combined_8")]["verdict"]["kind"] == "differs"
        assert rows[(variant, "combined_8")]["pct_diff"] > 0
        assert rows[(variant, "combined_2")]["verdict"]["kind"] == "not_enough"
        assert rows[(variant, "combined_4")]["verdict"]["kind"] == "not_enough"

    md = (rendered / "report.md").read_text(encoding="utf-8")
    table = md.split("## Cluster vs one unit (simulated)\n", 1)[1].split("\n## ", 1)[0]
    tp_line = next(x for x in table.splitlines() if "gptoss-tp2 (TP=2)" in x)
    assert UNIT in tp_line and "gptoss-single on spark-sim11" in tp_line
    assert "+20.0 %" in tp_line and tp["verdict"]["text"] in tp_line
    pp_line = next(x for x in table.splitlines() if "gptoss-pp2 (PP=2)" in x)
    assert "−2.6 %" in pp_line and pp["verdict"]["text"] in pp_line
    assert (f"{UNIT} · gpt-oss-120b: gptoss-tp2 (TP=2) vs gptoss-single on spark-sim11 — single-stream "
            f"20.0 % faster: {tp['verdict']['text']}") in md


@pytest.mark.unit
def test_reference_is_the_head_hosts_one_unit_variant_of_the_same_build(pair):
    tp2 = by_name(pair, "spark-sim11", "gptoss-tp2")
    ref, match = compare.one_unit_reference(tp2, pair)
    assert ref is by_name(pair, "spark-sim11", "gptoss-single") and match
    # the worker's one-unit result is never the reference, nor another build
    without_head_single = [r for r in pair if not (r["host"] == "spark-sim11" and r["variant"]["name"] == "gptoss-single")]
    assert compare.one_unit_reference(tp2, without_head_single) == (None, False)
    assert compare.cluster_vs_unit(without_head_single)["unmatched"] == [f"{UNIT}/gptoss-tp2", f"{UNIT}/gptoss-pp2"]
    other_build = json.loads(json.dumps(tp2))
    other_build["variant"]["build"] = "other"
    assert compare.one_unit_reference(other_build, pair) == (None, False)


@pytest.mark.sim
def test_no_cluster_in_the_fleet(pair, rendered, tmp_path):
    data = compare.fleet_compare(pair)
    assert data["hosts"] == ["spark-sim11", "spark-sim12"] and data["variants"] == ["gptoss-single"]
    assert set(data["matrix"]["gptoss-single"]) == {"spark-sim11", "spark-sim12"}
    assert data["clusters_left_out"] == [f"{UNIT}/gptoss-tp2", f"{UNIT}/gptoss-pp2"]
    assert set(data["verdicts"]) == {"gptoss-single"}
    # mixed with the simulated fleet, still only one-unit results
    fleet = load(RUNS / "fleet-sim")
    mixed = compare.fleet_compare(fleet + pair)
    assert not {"gptoss-tp2", "gptoss-pp2"} & set(mixed["variants"])
    assert "clusters_left_out" not in compare.fleet_compare(fleet)
    doc = json.loads((rendered / "results.json").read_text(encoding="utf-8"))
    chart = next(c for c in doc["charts"] if c["name"] == "fleet_bars")
    assert chart["data"]["variants"] == ["gptoss-single"]
    assert fleet_bars([r for r in pair if not n.is_cluster(r)], tmp_path)["data"]["variants"] == ["gptoss-single"]
    fleet_table = next(t for t in doc["tables"] if t["key"] == "fleet")
    assert [r[0] for r in fleet_table["rows"]] == ["gptoss-single", "host deviation (median)"]
    assert any("a cluster is not a peer of one Spark" in x for x in fleet_table["notes"])


@pytest.mark.sim
def test_html_holds_the_unit_the_clusters_and_the_verdicts(pair, rendered):
    html = (rendered / "report.html").read_text(encoding="utf-8")
    for title in (f"Cluster {UNIT} (simulated)", "Cluster vs one unit (simulated)"):
        assert f">{title}</h2>" in html, title
    for title in ("Clusters: nodes (simulated)", "Clusters: placement and link (simulated)"):  # details, folded
        assert f"<summary>{title}</summary>" in html, title
    assert 'id="cluster-vs-unit"' in html and 'id="clusters"' in html
    assert "gptoss-tp2 (TP=2)" in html and "gptoss-pp2 (PP=2)" in html
    for text in ("172.31.250.12", "sparkbench/vllm-sim-ray:v0.25.0", "580.95.05",
                 "iperf3, container network (GPU-less hosts), not a CX-7 link"):
        assert text in html, text
    rows = {(r["variant"], r["metric"]): r for r in compare.cluster_vs_unit(pair)["rows"]}
    assert rows[("gptoss-tp2", "single")]["verdict"]["text"] in html
    assert rows[("gptoss-pp2", "combined_8")]["verdict"]["text"] in html


@pytest.mark.sim
def test_a_run_without_clusters_reports_as_before(tmp_path):
    run = tmp_path / "fleet-sim"
    shutil.copytree(RUNS / "fleet-sim", run)
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(run), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert "cluster_vs_unit" not in doc and "clusters" not in doc and "clusters_left_out" not in doc["fleet"]
    assert all("unit" not in r and "parallel" not in r for r in doc["rows"])
    assert "vs one unit" not in doc["terminal_table"]
    assert not any(t["key"].startswith("cluster") for t in doc["tables"])


@pytest.mark.sim
def test_a_failed_cluster_variant_keeps_its_unit(tmp_path):
    """A worker lost mid-run: the variant's failure document (with the cluster block as far as it
    was read) is listed under its unit, and only the measured cluster variant is compared."""
    run = tmp_path / "pair-sim"
    shutil.copytree(PAIR, run, ignore=shutil.ignore_patterns("*.py"))
    path = run / "spark-sim11" / "gptoss-tp2.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    failed = {k: doc[k] for k in ("_fixture", "schema_version", "simulated", "host", "variant", "launch",
                                  "launch_command", "config_hash", "manifest", "profile", "preflight")}
    failed.update(status="failed", cluster={"name": "sim_pair", "head": "spark-sim11",
                                            "members": ["spark-sim11", "spark-sim12"], "nodes_alive": 1},
                  failure={"stage": "measure", "reason": "ray_worker_lost: the engine died (RayActorError)",
                           "remedy": "check the worker's container", "log_excerpt": "", "issues": []})
    jsonschema.validate(failed, SCHEMA)
    path.write_text(json.dumps(failed), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(run), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads((run / "results.json").read_text(encoding="utf-8"))
    tables = {t["key"]: t for t in out["tables"]}
    assert tables["cluster-sim_pair"]["rows"][0][:2] == ["gptoss-tp2 (TP=2)", "failed (see Failures)"]
    assert tables["failures"]["rows"][0][:4] == [UNIT, "gptoss-tp2", "failed", "measure"]
    assert f"{UNIT}/gptoss-tp2: failed at measure — ray_worker_lost: the engine died (RayActorError)" in out["summary"]
    assert {r["variant"] for r in out["cluster_vs_unit"]["rows"]} == {"gptoss-pp2"}
    placement = {r[1]: r for r in tables["cluster-placement"]["rows"]}
    assert placement["gptoss-tp2 (failed)"][5] == "1 of 2"
    assert "failed (measure)" in next(x for x in out["terminal_table"].splitlines() if "gptoss-tp2" in x)
