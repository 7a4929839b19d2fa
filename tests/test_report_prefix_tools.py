"""The report's serving sections: "Prefix caching: with and without" (pairs by launch
flags, the verdict on per-request warm TTFTs), "Multi-turn: TTFT and decode by context depth",
"Tool calls", the goodput verdicts between variants (sparkbench.verdict.compare_shares), the
highest rate meeting the SLO as a column of the main table, results.csv / results.json figures
and the terminal table.

The documents are the real simulated run tests/fixtures/runs/serving-rates-sim (arrival-rate phase only)
completed with ``prefix_cache``, ``multi_turn`` and ``tools`` blocks built to measure.py's shapes,
plus a ``nvidia-noprefix`` variant launched with ``--no-enable-prefix-caching``; every document is validated against schema/result.schema.json."""
from __future__ import annotations

import copy
import csv
import json
import random
from pathlib import Path

import jsonschema
import pytest

from sparkbench import verdict as vd
from sparkbench.measure.tool_judge import summarise_tools
from sparkbench.report import cli, compare, numbers, sections, terminal
from sparkbench.report.terminal import terminal_table

from helpers import REPO

FIXTURES = REPO / "tests" / "fixtures" / "runs"
VALIDATOR = jsonschema.Draft202012Validator(json.loads((REPO / "schema" / "result.schema.json").read_text()))


def serving_docs() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((FIXTURES / "serving-rates-sim").glob("*/*.json"))]


def prefix_block(ttft_warm: float, prefill: float, hit_rate: float | None, seed: int, n: int = 8,
                 prefix: int = 2048, cold: float = 0.9) -> dict:
    rng = random.Random(seed)
    per = [{"i": 0, "prompt_tokens": prefix + 70, "ttft_s": cold, "e2e_s": cold + 0.2,
            "cached_tokens": 0 if hit_rate is not None else None}]
    for i in range(1, n):
        t = ttft_warm * (1 + rng.uniform(-0.03, 0.03))
        per.append({"i": i, "prompt_tokens": prefix + 70, "ttft_s": t, "e2e_s": t + 0.2,
                    "cached_tokens": (prefix if hit_rate else 0) if hit_rate is not None else None})
    warm = sorted(x["ttft_s"] for x in per[1:])
    return {"prefix_tokens": prefix, "suffix_tokens": 64, "requests": n, "completed": n, "failed": 0,
            "cold_ttft_s": cold, "ttft_s": {"p50": warm[len(warm) // 2], "p90": warm[-1], "p99": warm[-1],
                                            "mean": sum(warm) / len(warm)},
            "prefill_tok_s": prefill, "hit_rate": hit_rate, "hit_tokens": None if hit_rate is None else 1000,
            "query_tokens": None if hit_rate is None else 1100,
            "reason": None if hit_rate is not None else "the server exposes no vllm:prefix_cache_queries counter",
            "per_request": per}


def multi_turn_block(ttfts: list[float], decodes: list[float]) -> dict:
    per_turn = [{"turn": i + 1, "requests": 2, "context_tokens": 300 + 320 * i, "ttft_s": t, "decode_tok_s": d,
                 "prefill_tok_s": (300 + 320 * i) / t} for i, (t, d) in enumerate(zip(ttfts, decodes))]
    per_request = [{"conversation": c, "turn": t["turn"], "prompt_tokens": t["context_tokens"], "ttft_s": t["ttft_s"],
                    "decode_tok_s": t["decode_tok_s"]} for t in per_turn for c in range(2)]
    return {"conversations": 2, "turns": len(per_turn), "turn_tokens": 256, "output_tokens": 64,
            "completed": len(per_request), "failed": 0, "per_turn": per_turn, "per_request": per_request}


def prompt(pid: str, category: str, verdict: str, bucket: str | None = None, reason: str | None = None,
           calls: list | None = None) -> dict:
    out = {"id": pid, "category": category, "expected": [], "calls": calls or [], "verdict": verdict,
           "bucket": bucket, "reason": reason, "finish_reason": "tool_calls" if calls else "stop",
           "content_excerpt": "<tool_call><function=get_weather>…" if bucket == "unparsed" else None}
    return out


def tools_block(prompts: list[dict], tool_choice: str = "auto") -> dict:
    """The ``tools`` block as measure builds it, its counts from measure's own summary."""
    return {"tool_choice": tool_choice, "file": "/tmp/sparkbench/tools.json", "prompts": prompts,
            **summarise_tools(prompts)}


GOOD_TOOLS = [prompt("no_tool_needed", "irrelevance", "pass"),
              prompt("weather_paris", "simple", "pass", calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}]),
              prompt("convert", "multiple", "pass", calls=[{"name": "convert", "arguments": {"amount": 3}}]),
              prompt("two_cities", "parallel", "pass", calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                                               {"name": "get_weather", "arguments": {"city": "Rome"}}])]
BAD_TOOLS = [prompt("no_tool_needed", "irrelevance", "fail", "should_not_have_called",
                    "a call where none is needed: get_weather", [{"name": "get_weather", "arguments": {"city": "X"}}]),
             prompt("weather_paris", "simple", "pass", calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}]),
             prompt("convert", "multiple", "fail", "unparsed", "no tool_calls; call-looking text in content"),
             prompt("two_cities", "parallel", "fail", "wrong_tool", "1 call made, 2 expected",
                    [{"name": "get_weather", "arguments": {"city": "Oslo"}}])]


def noprefix(doc: dict) -> dict:
    """``<build>-noprefix``: the build's first configuration with enable-prefix-caching false."""
    d = copy.deepcopy(doc)
    d["variant"]["name"] = "nvidia-noprefix"
    d["variant"]["index"] = 1  # the serving plan lists it after the build's first configuration
    d["variant"]["args"]["enable-prefix-caching"] = False
    d["launch"]["argv"] = [("--no-enable-prefix-caching" if a == "--enable-prefix-caching" else a)
                           for a in d["launch"]["argv"]]
    d["rates"] = None
    d["rate_search"] = None
    return d


def run_docs() -> list[dict]:
    """nvidia-bare (caching on) and nvidia-noprefix, unsloth-bare (caching on, no pair): prefix,
    multi-turn and tools blocks on top of the real serving run."""
    nv, un = serving_docs()
    off = noprefix(nv)
    nv["prefix_cache"] = prefix_block(0.08, 26000.0, 0.95, seed=1)
    off["prefix_cache"] = prefix_block(0.52, 4000.0, 0.0, seed=2)
    un["prefix_cache"] = prefix_block(0.09, 23000.0, 0.94, seed=3)
    nv["multi_turn"] = multi_turn_block([0.10, 0.14, 0.19, 0.25], [76.0, 74.5, 72.8, 70.0])
    un["multi_turn"] = multi_turn_block([0.11, 0.16, 0.22], [66.0, 64.0, 62.0])
    nv["tools"] = tools_block(GOOD_TOOLS)
    un["tools"] = tools_block(BAD_TOOLS)
    off["multi_turn"] = off["tools"] = None
    for d in (nv, un, off):
        VALIDATOR.validate(d)
    return [nv, un, off]


def write_run(tmp_path: Path, docs: list[dict]) -> Path:
    run = tmp_path / "serving-full"
    for d in docs:
        (run / d["host"]).mkdir(parents=True, exist_ok=True)
        (run / d["host"] / f"{d['variant']['name']}.json").write_text(json.dumps(d))
    return run


# --------------------------------------------------------------------------- the share comparison

@pytest.mark.unit
def test_compare_shares_phrasing_formula_and_determinism():
    same = vd.compare_shares([True] * 10, [True] * 10)
    assert same["kind"] == "no_difference" and same["pp"] == 0.0
    assert same["text"] == f"no difference detectable above {same['mdd_pp']:.1f} pp" and same["mdd_pp"] > 0
    worse = vd.compare_shares([True] * 20, [True] * 10 + [False] * 10)
    assert worse["kind"] == "differs" and worse["pp"] == pytest.approx(-50.0)
    assert worse["lo"] < -50.0 < worse["hi"] < 0
    assert worse["text"] == f"differs by −50.0 pp [{worse['lo']:+.1f}, {worse['hi']:+.1f}]".replace("-", "−")
    assert (worse["share_reference"], worse["share_other"]) == (1.0, 0.5)
    assert vd.compare_shares([True] * 20, [True] * 10 + [False] * 10) == worse  # seeded
    few = vd.compare_shares([True] * 3, [True, False, True])
    assert few["kind"] == "not_enough" and few["pp"] is None
    assert few["text"] == "not enough requests for a verdict"  # the Trust contract's words, nothing more
    assert few["reason"].startswith("3 and 3 requests; 5 per side needed: --rate-requests 5")
    assert vd.compare_shares([False] * 5, [True] * 5)["hi"] <= 100.0
    with pytest.raises(ValueError, match="true or false"):
        vd.compare_shares([True] * 5, [1, 0, 1, 1, 1])


@pytest.mark.unit
def test_compare_shares_rarely_says_differs_for_identical_servers():
    rng = random.Random(7)
    false = 0
    for t in range(60):
        a = [rng.random() < 0.8 for _ in range(20)]
        b = [rng.random() < 0.8 for _ in range(20)]
        false += vd.compare_shares(a, b, seed=t, resamples=400)["kind"] == "differs"
    assert false <= 3  # ≈ 1–2 % in 300-trial runs (docs/REPORTS.md)


# --------------------------------------------------------------------------- sections

@pytest.mark.unit
def test_prefix_pairs_match_the_same_build_and_flags_and_judge_warm_ttfts():
    docs = run_docs()
    data = compare.prefix_pairs(docs)
    assert len(data["pairs"]) == 1
    p = data["pairs"][0]
    assert (p["variant_on"], p["variant_off"], p["build"], p["flags_match"]) == ("nvidia-bare", "nvidia-noprefix",
                                                                                  "nvidia", True)
    on, off = docs[0]["prefix_cache"], docs[2]["prefix_cache"]
    assert p["warm_ttft_p50_on_s"] == on["ttft_s"]["p50"] and p["warm_ttft_p50_off_s"] == off["ttft_s"]["p50"]
    assert p["ttft_change_pct"] == pytest.approx((on["ttft_s"]["p50"] / off["ttft_s"]["p50"] - 1) * 100)
    assert (p["hit_rate_on"], p["hit_rate_off"]) == (0.95, 0.0)
    expected = vd.compare_samples([x["ttft_s"] for x in off["per_request"][1:]],
                                  [x["ttft_s"] for x in on["per_request"][1:]], remedy="--prefix-requests 6")
    assert p["verdict"] == expected and expected["kind"] == "differs" and expected["hi"] < -80
    # the cold request is not a warm one
    assert numbers.warm_ttfts(docs[0]) == [x["ttft_s"] for x in on["per_request"][1:]]
    assert numbers.prefix_caching_on(docs[2]) is False and numbers.prefix_caching_on(docs[0]) is True


@pytest.mark.unit
def test_prefix_pairs_read_argv_when_args_are_not_a_mapping_and_say_when_flags_differ():
    nv, un, off = run_docs()
    for d in (nv, off):
        d["variant"]["args"] = None
    assert numbers.prefix_caching_on(off) is False and numbers.prefix_caching_on(nv) is True
    assert compare.prefix_pairs([nv, un, off])["pairs"][0]["flags_match"] is True
    off["launch"]["argv"] += ["--max-num-seqs", "16"]
    p = compare.prefix_pairs([nv, un, off])["pairs"][0]
    assert p["variant_on"] == "nvidia-bare" and p["flags_match"] is False
    section = sections.prefix_caching([nv, un, off])
    assert "(flags differ)" in section.tables[0].rows[0][2]
    lone = compare.prefix_pairs([un, off])
    assert lone["pairs"] == [] and "no variant of build nvidia" in lone["unpaired"][0]


@pytest.mark.unit
def test_prefix_section_tables_and_summary_line():
    section = sections.prefix_caching(run_docs())
    lines, tables = section.lines, section.tables
    assert section.key == "prefix_caching" and section.in_doc and section.data["variants"]
    assert [t.key for t in tables] == ["prefix-pairs", "prefix-cache"]
    assert tables[0].title == "Prefix caching: with and without (simulated)"
    row = dict(zip(tables[0].headers, tables[0].rows[0]))
    assert row["hit rate with"] == "95 %" and row["hit rate without"] == "0 %"
    assert row["TTFT verdict"].startswith("differs by −")
    assert row["prefill tok/s with"] == "26000" and row["Δ prefill"] == "+550.0 %"
    assert [r[1] for r in tables[1].rows] == ["nvidia-bare (simulated)", "nvidia-noprefix (simulated)",
                                              "unsloth-bare (simulated)"]
    assert [r[2] for r in tables[1].rows] == ["on", "off", "on"]
    assert len(lines) == 1 and "first token" in lines[0] and "sooner: differs by −" in lines[0]
    assert lines[0].endswith("(simulated)")


@pytest.mark.unit
def test_multi_turn_section_per_turn_and_first_to_last():
    section = sections.multi_turn(run_docs())
    entries, lines, (table,) = section.data, section.lines, section.tables
    assert [e["variant"] for e in entries] == ["nvidia-bare", "unsloth-bare"]
    assert len(table.rows) == 4 + 3
    first = dict(zip(table.headers, table.rows[0]))
    last = dict(zip(table.headers, table.rows[3]))
    assert (first["turn"], first["context tokens"], first["TTFT Δ vs turn 1"]) == ("1", "300", "–")
    assert (last["turn"], last["context tokens"], last["TTFT s"]) == ("4", "1260", "0.250")
    assert last["TTFT Δ vs turn 1"] == "+150.0 %" and last["decode Δ vs turn 1"] == "−7.9 %"
    assert entries[0]["ttft_change_pct"] == pytest.approx(150.0)
    assert "300 → 1260 tokens" in lines[0] and "TTFT 0.100 → 0.250 s (+150.0 %)" in lines[0]


@pytest.mark.unit
def test_tool_calls_section_counts_categories_and_failures():
    section = sections.tool_calls(run_docs())
    lines, (main, fails) = section.lines, section.tables
    assert main.headers[:5] == ["host", "variant", "tool choice", "passed", "skipped"]
    rows = {r[1]: dict(zip(main.headers, r)) for r in main.rows}
    good, bad = rows["nvidia-bare (simulated)"], rows["unsloth-bare (simulated)"]
    assert (good["passed"], good["irrelevance"], good["parallel"], good["failures by bucket"]) == ("4/4", "1/1", "1/1", "–")
    assert (bad["passed"], bad["irrelevance"], bad["simple"]) == ("1/4", "0/1", "1/1")
    assert bad["failures by bucket"] == "should_not_have_called 1; unparsed 1; wrong_tool 1"
    assert (good["Δ passed"], good["verdict"]) == ("–", "–")  # the reference variant
    assert bad["Δ passed"] == "−75.0 pp vs nvidia-bare"
    assert bad["verdict"] == "not enough requests for a verdict"  # why: once, under the table
    assert main.notes[-1] == ("verdict: not enough requests for a verdict (4 and 4 requests; 5 per side needed: "
                              "a --tools-file with 5 or more prompts)")
    assert [(r[2], r[4]) for r in fails.rows] == [("no_tool_needed", "should_not_have_called"),
                                                 ("convert", "unparsed"), ("two_cities", "wrong_tool")]
    assert fails.rows[2][5] == "1 call made, 2 expected"
    assert lines[1] == ("spark-sim01/unsloth-bare: tool calls 1/4 passed (tool_choice auto); failures: "
                        "should_not_have_called 1; unparsed 1; wrong_tool 1 (simulated)")
    # a check skipped as a whole (structured outputs unavailable) says why
    nv = run_docs()[0]
    nv["tools"] = dict(tools_block([dict(p, verdict="skipped", bucket=None, calls=[], content_excerpt=None)
                                    for p in GOOD_TOOLS], "required"), reason="structured outputs are not available")
    VALIDATOR.validate(nv)
    section = sections.tool_calls([nv])
    lines, (table,) = section.lines, section.tables
    assert table.rows[0][3:9] == ["0/0", "4", "–", "–", "–", "–"]
    assert lines[0].endswith("4 skipped; skipped: structured outputs are not available (simulated)")


@pytest.mark.unit
def test_goodput_verdicts_at_each_common_rate_against_the_reference_variant():
    docs = serving_docs()
    section = sections.goodput_verdicts(docs)
    data, lines, (table,) = section.data, section.lines, section.tables
    assert data["reference_build"] == "nvidia"
    assert [r["rate"] for r in data["rows"]] == [0.25, 0.5, 1.0, 2.0]
    nv, un = docs
    for row, a, b in zip(data["rows"], nv["rates"], un["rates"]):
        assert (row["reference_variant"], row["variant"]) == ("nvidia-bare", "unsloth-bare")
        assert row["pp_diff"] == pytest.approx((b["slo_met_share"] - a["slo_met_share"]) * 100)
        assert row["verdict"] == vd.compare_shares([x["good"] for x in a["per_request"]],
                                                   [x["good"] for x in b["per_request"]])
    assert data["rows"][0]["verdict"]["kind"] == "not_enough"  # 2 requests at 0.25 req/s
    assert dict(zip(table.headers, table.rows[3]))["Δ met SLO"] == "−5.0 pp"
    assert lines == ["spark-sim01: unsloth-bare vs nvidia-bare — requests meeting the SLO −5.0 pp … +0.0 pp at "
                     "0.25, 0.5, 1, 2 req/s — no difference detectable (1 of 4 rates: not enough requests) (simulated)"]
    # --reference-build turns the comparison round
    data_u = sections.goodput_verdicts(docs, "unsloth").data
    assert data_u["rows"][3]["pp_diff"] == pytest.approx(5.0)


# --------------------------------------------------------------------------- the rendered report

@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("prefix-tools"), run_docs())
    out = cli.render(run)
    return run, out


@pytest.mark.sim
def test_render_writes_every_section_and_the_main_table_column(rendered):
    run, out = rendered
    md = (run / "report.md").read_text()
    for title in ("Goodput: variants against the reference (simulated)", "Prefix caching: with and without (simulated)",
                  "Prefix cache phase (simulated)", "Multi-turn: TTFT and decode by context depth (simulated)",
                  "Tool calls (simulated)", "Tool calls: failures (simulated)", "Serving: goodput by arrival rate"):
        assert f"## {title}" in md, title
    host = next(t for t in out["tables"] if t.key == "host-spark-sim01")
    assert host.headers[-1] == sections.SLO_RATE_HEADER
    best = {r[0]: r[-1] for r in host.rows}
    assert best == {"nvidia-bare": "1", "unsloth-bare": "1", "nvidia-noprefix": "–"}
    html = (run / "report.html").read_text()
    assert "Prefix caching: with and without" in html and "Tool calls: failures" in html
    drawn = [c for c in out["charts"] if c["path"]]
    assert {"goodput", "slo_rate", "multi_turn"} <= {c["name"] for c in drawn}
    assert html.count("data:image/png;base64,") >= len(drawn)  # self-contained: every chart embedded
    assert (run / "charts" / "slo_rate.png").is_file() and (run / "charts" / "multi_turn.png").is_file()
    assert any("prefix caching (nvidia-bare vs nvidia-noprefix" in s for s in out["summary"])


@pytest.mark.sim
def test_results_json_and_csv_carry_the_new_figures(rendered):
    run, _ = rendered
    doc = json.loads((run / "results.json").read_text())
    assert set(doc) >= {"goodput_verdicts", "prefix_caching", "multi_turn", "tool_calls", "serving"}
    assert doc["prefix_caching"]["pairs"][0]["variant_off"] == "nvidia-noprefix"
    rows = {r["variant"]: r for r in doc["rows"]}
    assert rows["nvidia-bare"]["slo_best_rate"] == 1.0 and rows["nvidia-noprefix"]["slo_best_rate"] is None
    assert rows["nvidia-noprefix"]["prefix_caching"] is False and rows["nvidia-noprefix"]["prefix_hit_rate"] == 0.0
    assert (rows["unsloth-bare"]["tools_passed"], rows["unsloth-bare"]["tools_total"]) == (1, 4)
    assert rows["nvidia-bare"]["turns_ttft_last_s"] == 0.25 and rows["nvidia-bare"]["turns_context_last"] == 1260
    charts = {c["name"]: c for c in doc["charts"]}
    assert charts["slo_rate"]["data"]["best_rate"] == [1.0, 1.0] and "SIMULATED" in charts["slo_rate"]["title"]
    assert list(charts["multi_turn"]["data"]) == ["spark-sim01/nvidia-bare", "spark-sim01/unsloth-bare"]
    with (run / "results.csv").open() as fh:
        csv_rows = {r["variant"]: r for r in csv.DictReader(fh)}
    assert csv_rows["nvidia-bare"]["slo_best_rate"] == "1.0" and csv_rows["nvidia-noprefix"]["slo_best_rate"] == ""
    assert csv_rows["nvidia-bare"]["prefix_warm_ttft_p50_s"] != "" and csv_rows["unsloth-bare"]["tools_passed"] == "1"


@pytest.mark.sim
def test_terminal_table_shows_the_rate_and_tools_columns_as_report_md(rendered):
    run, out = rendered
    doc = out["doc"]
    assert doc["terminal_table"] == terminal_table(doc)
    assert "max rate @SLO" in doc["terminal_table"].splitlines()[1]
    term = {r[0]: dict(zip(terminal.headers(doc), r)) for r in terminal.rows(doc)}
    host = next(t for t in out["tables"] if t.key == "host-spark-sim01")
    md = {r[0]: dict(zip(host.headers, r)) for r in host.rows}
    tools = {r[1].replace(" (simulated)", ""): r[3] for r in next(t for t in out["tables"] if t.key == "tools").rows}
    assert set(term) == set(md) == {"nvidia-bare", "nvidia-noprefix", "unsloth-bare"}
    for variant, cells in term.items():
        assert cells["max rate @SLO"] == md[variant][sections.SLO_RATE_HEADER]
        assert cells["tools"] == tools.get(variant, "–")
    assert (term["nvidia-bare"]["max rate @SLO"], term["unsloth-bare"]["tools"]) == ("1", "1/4")


@pytest.mark.unit
def test_runs_without_the_phases_keep_their_report(tmp_path):
    docs = serving_docs()
    run = write_run(tmp_path, docs[:1])
    out = cli.render(run)
    doc = out["doc"]
    assert not {"goodput_verdicts", "prefix_caching", "multi_turn", "tool_calls"} & set(doc)
    assert "tools" not in doc["terminal_table"].splitlines()[1]
    assert all(t.key not in ("prefix-pairs", "multi-turn", "tools") for t in out["tables"])
