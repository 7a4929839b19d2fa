"""Golden reports: every fixture run of ``tests/fixtures/runs/`` (plain, and with the options the
report tests use) renders to the same report.md, results.json and results.csv as the golden
files in ``tests/fixtures/golden/<case>/``, the generation time and the temporary path aside
(``tests/golden_render.py``, shared with ``scripts/regen_golden.py``).

A failure after a refactor means the reports changed. When the change is deliberate, regenerate
with ``.venv/bin/python scripts/regen_golden.py`` and review ``git diff tests/fixtures/golden``."""

from __future__ import annotations

from pathlib import Path

import pytest

from golden_render import CASES, compare_case, render_case

pytestmark = pytest.mark.unit


@pytest.mark.unit
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_run_renders_as_golden(case, tmp_path: Path):
    problems = compare_case(case, render_case(case, tmp_path))
    assert not problems, ("\n\n".join(problems)
                          + "\n\nreports changed; if deliberate: .venv/bin/python scripts/regen_golden.py")
