"""BENCHMARKS.md is what its writer renders: perf/run_all.py's assembly of perf/results/.

BENCHMARKS.md is a short reference (issue 43): per benchmark its title, today's figure, the
machine, the load, how to reproduce it and a link to its full write-up `perf/results/<name>.md`.
`make perf` rewrites it whole from the summary block at the top of each results file, so the
checked-in page must be exactly what the assembly renders from the checked-in results (else a later
`make perf` would undo a hand edit). Nothing here runs a benchmark or a process: the assembly only
reads files.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit

from perf import common, run_all

BENCHMARKS = REPO / "BENCHMARKS.md"
HISTORY = REPO / "perf" / "HISTORY.md"


def test_benchmarks_md_is_what_run_all_renders():
    rendered = run_all.render()
    assert BENCHMARKS.read_text(encoding="utf-8") == rendered, (
        "BENCHMARKS.md differs from what perf/run_all.py assembles from perf/results/: edit the summary "
        "block of perf/results/<name>.md (or the benchmark that writes it), then run "
        "`.venv/bin/python -m perf.run_all --render-only`")


def test_the_page_is_short_and_has_a_section_per_benchmark():
    text = run_all.render()
    n = len(text.splitlines())
    assert n <= 300, f"the assembled BENCHMARKS.md has {n} lines; at most 300"
    for key, number in run_all.entries():
        heading = f"## {number}. {run_all.TITLES[key]}"
        assert heading in text, f"no section {heading!r}"
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        for part in ("**Figure.**", "**Machine.**", "**Load.**", "**Reproduce.**"):
            assert part in section, f"{heading}: no {part}"
        assert f"[perf/results/{key}.md](perf/results/{key}.md)" in section, f"{heading}: no link to its file"
        assert f"| {number} | [{run_all.TITLES[key]}](#{run_all.anchor(heading[3:])}) |" in text, \
            f"{heading}: no row in the table"


def test_every_results_file_carries_a_summary_block():
    for key, _number in run_all.entries():
        text = run_all.section_path(key).read_text(encoding="utf-8")
        summary = common.read_summary(text)
        assert summary is not None, f"perf/results/{key}.md has no summary block"
        assert set(common.SUMMARY_KEYS) <= set(summary), f"perf/results/{key}.md: {sorted(summary)}"


def test_the_run_log_lives_in_history_not_in_the_results():
    table12 = run_all.section_path("first_half_hour").read_text(encoding="utf-8")
    history = HISTORY.read_text(encoding="utf-8")
    assert "| fresh clone c1," not in table12 and "| fresh clone r2 " not in table12
    for run in ("| fresh clone r2 ", "| fresh clone c1,", "| fresh clone c53 "):
        assert run in history, f"perf/HISTORY.md lost the row {run!r}"


def test_a_section_written_by_a_benchmark_is_read_back(tmp_path: Path):
    sec = common.Section("capacity", "Client capacity", "**How:** BODY", True,
                         figure="10,000 chunks/s followed within +0.025 % at 1 token a chunk. " * 3,
                         load="`perf/sse_emitter.py` replays chunks.", today="10,000 chunks/s: met")
    res = tmp_path / "results"
    res.mkdir()
    (res / "capacity.md").write_text(
        "## 2. Client capacity\n\n_Measured now._\n\n" + common.summary_block(sec, "M, commit `abc`.")
        + "\n\n" + sec.body + "\n")
    text = run_all.render(res)
    section = text.split("## 2. Client capacity", 1)[1].split("\n## ", 1)[0]
    assert "| 2 | [Client capacity](#2-client-capacity) | ≥ 10,000 chunks/s with < 1 % timing error | " \
           "10,000 chunks/s: met |" in text
    assert "- **Machine.** M, commit `abc`." in section and "BODY" not in section
    assert " ".join(section.split()).count("followed within +0.025 % at 1 token a chunk.") == 3
    assert "**Today.**" not in section
    # a missing file says how to make it
    assert "_Not measured yet: run `make perf` or `python -m perf.run_all --only orchestration`._" in text
    assert max(len(line) for line in common.bullet("Figure", sec.figure).splitlines()) <= 100
