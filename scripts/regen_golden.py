#!/usr/bin/env python3
"""Regenerate the golden reports of the fixture runs: ``tests/fixtures/golden/<case>/``
{report.md, results.json, results.csv}, which ``tests/test_report_golden.py`` compares every
render with.

Run it after a DELIBERATE change of what the report says or how it is laid out (a new section,
another wording, a new results.json field), then review ``git diff tests/fixtures/golden`` — the
diff is the change the reports' readers will see — and commit it with the change. Never run it to
make a failing golden test pass after a refactor that was not meant to change the reports: that
failure is the test doing its job.

    .venv/bin/python scripts/regen_golden.py           # render every case, write the golden files
    .venv/bin/python scripts/regen_golden.py --check   # compare only; exit 1 listing the differing files

Every case of ``tests/golden_render.CASES`` (each fixture run plain, plus its --baseline and
host-option renders) is rendered in a temporary folder with the ``sparkbench`` package of the
checkout this script lives in, and normalised (generation time and temporary path replaced by
placeholders) by ``tests/golden_render.py`` — the same code as the test. Writing renders each case
twice and refuses to write when the two differ (a render that is not deterministic, or a varying
field the normalisation does not cover). Golden folders that no case writes any more are removed
(``--check`` lists them). Standard library + the sparkbench package only.

Exit status: 0 written / no difference; 1 (--check) differences; 2 a render failed or was not
deterministic.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # sparkbench itself is the package make venv installed from here


def _golden_render():
    """tests/golden_render.py (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("golden_render", REPO / "tests" / "golden_render.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["golden_render"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="compare the renders with the golden files instead of writing them; exit 1 on a difference")
    args = p.parse_args(argv)
    gr = _golden_render()
    import sparkbench

    print(f"sparkbench from {Path(sparkbench.__file__).parent}", flush=True)
    t0 = time.monotonic()
    problems: list[str] = []
    renders = []
    for case in gr.CASES:  # every case rendered before anything is written: no half-written set
        try:
            rendered = gr.render_case(case)
            if not args.check:
                again = gr.render_case(case)
                unstable = [n for n in gr.FILES if again[n] != rendered[n]]
                if unstable:
                    for n in unstable:
                        print(f"{case.name}/{n}: two renders differ — nothing written\n"
                              f"{gr.short_diff(rendered[n], again[n], f'{case.name}/{n}', sides=('render1', 'render2'))}", file=sys.stderr)
                    return 2
        except RuntimeError as exc:
            print(f"regen_golden: {exc}", file=sys.stderr)
            return 2
        renders.append((case, rendered))
    for case, rendered in renders:
        if args.check:
            problems += gr.compare_case(case, rendered)
        else:
            for path in gr.write_case(case, rendered):
                print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size} bytes)")
    for stale in gr.stale_cases():
        if args.check:
            problems.append(f"{stale.relative_to(REPO)}: golden folder of no case (run without --check to remove it)")
        else:
            shutil.rmtree(stale)
            print(f"removed {stale.relative_to(REPO)} (no case writes it)")
    took = f"{len(gr.CASES)} cases in {time.monotonic() - t0:.1f} s"
    if problems:
        print("\n\n".join(problems))
        print(f"\n{len(problems)} golden file(s) differ ({took}). A deliberate report change? "
              f"Run {Path(__file__).relative_to(REPO)} without --check and review git diff.")
        return 1
    print(("no difference" if args.check else "golden files written") + f" ({took})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
