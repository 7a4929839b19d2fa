"""Golden renders of the fixture runs: the one render + normalise implementation shared by
``tests/test_report_golden.py`` (compares) and ``scripts/regen_golden.py`` (writes / ``--check``).

Each :data:`CASES` entry renders one run of ``tests/fixtures/runs/`` with
``python3 -m sparkbench.report render RUN [options] --quiet`` — in process, through
``sparkbench.report.cli.main`` (the command line's own argument parsing) — on a fresh copy of the
whole fixture folder laid out as ``<tmp>/results/<run-id>/<host>/<variant>.json``, as
``tests/test_report_render.py`` does: the runs stored beside a run feed its "History" section and
trend chart, so each case sees the same sibling runs, and no case sees another case's outputs.
Its ``report.md``, ``results.json`` and ``results.csv`` are compared byte for byte with
``tests/fixtures/golden/<case>/`` after :func:`normalise`, which replaces exactly what differs
from one render to the next and nothing else:

* the generation time: ``generated <UTC time> from`` in report.md's second line and the top-level
  ``"generated_at": "<UTC time>"`` of results.json (``datetime.now()`` in the renderer) →
  :data:`GENERATED_AT`;
* the temporary folder the run was copied to: the absolute chart paths of results.json
  (``charts[].path``, ``<tmp>/results/<run>/charts/<name>.png``) → :data:`RESULTS_DIR`
  (``<RESULTS_DIR>/<run>/charts/<name>.png``).

results.csv holds neither, and is compared as written. report.html and the chart PNGs are not
compared (the HTML embeds the PNGs, whose bytes can change with the matplotlib and FreeType builds).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "tests" / "fixtures" / "runs"
GOLDEN = REPO / "tests" / "fixtures" / "golden"
FILES = ("report.md", "results.json", "results.csv")
GENERATED_AT = "<GENERATED_AT>"
RESULTS_DIR = "<RESULTS_DIR>"
_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"  # cli.render: strftime("%Y-%m-%dT%H:%M:%SZ")
_MD_GENERATED = re.compile(rf"^generated {_TIME} from ", re.M)
_JSON_GENERATED = re.compile(rf'^ "generated_at": "{_TIME}",$', re.M)  # results.json: indent=1, top level


@dataclass(frozen=True)
class Case:
    """One render: ``run`` (a folder of tests/fixtures/runs/), its golden folder ``name`` and the
    extra command-line options; ``{results}`` in an option is the copied results folder."""

    name: str
    run: str
    options: tuple[str, ...] = ()

    def argv(self, results: Path) -> list[str]:
        return ["render", str(results / self.run), "--quiet",
                *(o.replace("{results}", str(results)) for o in self.options)]


#: Every fixture run rendered plain, plus the option sets the report tests use: the run-to-run
#: comparison / version bridge (--baseline) of the seed and the fleet, and the "Hosts without
#: results" options with another terminal-table format on the smallest run.
CASES: tuple[Case, ...] = (
    Case("seed-v0.25", "seed-v0.25"),
    Case("seed-v0.24", "seed-v0.24"),
    Case("fleet-sim", "fleet-sim"),
    Case("fleet-sim-base", "fleet-sim-base"),
    Case("pair-sim", "pair-sim"),
    Case("serving-sim", "serving-sim"),
    Case("serving-rates-sim", "serving-rates-sim"),
    Case("seed-v0.25--baseline-seed-v0.24", "seed-v0.25", ("--baseline", "{results}/seed-v0.24")),
    Case("fleet-sim--baseline-fleet-sim-base", "fleet-sim", ("--baseline", "{results}/fleet-sim-base")),
    Case("seed-v0.24--hosts-github", "seed-v0.24",
         ("--expected-host", "seed-spark", "--expected-host", "spark-gone", "--expected-host", "spark-down",
          "--host-failure", "spark-down=unreachable: no route", "--missing-host-reason",
          "no result file: see the play output", "--table-format", "github")),
)


def normalise(name: str, text: str, results: Path) -> str:
    """``text`` of the output file ``name`` with the generation time and the temporary results
    folder ``results`` replaced by placeholders (see the module docstring); nothing else changes."""
    for root in {str(results), str(Path(results).resolve())}:
        text = text.replace(root, RESULTS_DIR)
    if name == "report.md":
        text = _MD_GENERATED.sub(f"generated {GENERATED_AT} from ", text, count=1)
    elif name == "results.json":
        text = _JSON_GENERATED.sub(f' "generated_at": "{GENERATED_AT}",', text, count=1)
    return text


def render_case(case: Case, workdir: Path | None = None) -> dict[str, str]:
    """Render ``case`` on a fresh copy of the fixture runs under ``workdir`` (a temporary folder,
    removed afterwards, when None); returns ``{file name: normalised text}`` for :data:`FILES`.
    Raises RuntimeError when the renderer does not exit 0."""
    from sparkbench.report import cli  # the sparkbench on sys.path: the code under test

    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkbench-golden-")))
        results = Path(workdir) / case.name / "results"
        shutil.copytree(RUNS, results, ignore=shutil.ignore_patterns("*.py", "*.md"))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(case.argv(results))
            except SystemExit as exc:  # argparse: bad option
                rc = exc.code
        if rc != 0:
            raise RuntimeError(f"{case.name}: render exited {rc}: {err.getvalue().strip()}")
        run = results / case.run
        texts = {f: normalise(f, (run / f).read_bytes().decode("utf-8"), results) for f in FILES}
    if json.loads(texts["results.json"]).get("generated_at", GENERATED_AT) != GENERATED_AT:
        raise RuntimeError(f"{case.name}: results.json's generated_at escaped golden_render.normalise "
                           "(did its layout change?)")
    return texts


def golden_path(case: Case, name: str, golden: Path = GOLDEN) -> Path:
    return golden / case.name / name


def short_diff(expected: str, actual: str, label: str, limit: int = 40,
               sides: tuple[str, str] = ("golden", "rendered")) -> str:
    """A unified diff (3 lines of context) of golden → rendered, cut after ``limit`` lines."""
    lines = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(), f"{sides[0]}/{label}",
                                      f"{sides[1]}/{label}", lineterm=""))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def compare_case(case: Case, rendered: dict[str, str], golden: Path = GOLDEN) -> list[str]:
    """The differences of ``rendered`` (from :func:`render_case`) with the golden files: one
    entry per differing or missing file, each a header line and a short diff."""
    problems = []
    for name in FILES:
        path = golden_path(case, name, golden)
        label = f"{case.name}/{name}"
        if not path.is_file():
            problems.append(f"{label}: golden file missing ({path})")
            continue
        expected = path.read_bytes().decode("utf-8")
        if expected != rendered[name]:
            problems.append(f"{label}: differs\n{short_diff(expected, rendered[name], label)}")
    return problems


def write_case(case: Case, rendered: dict[str, str], golden: Path = GOLDEN) -> list[Path]:
    """Write ``rendered`` as the golden files of ``case``; returns the paths written."""
    paths = []
    for name in FILES:
        path = golden_path(case, name, golden)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rendered[name].encode("utf-8"))
        paths.append(path)
    return paths


def stale_cases(golden: Path = GOLDEN) -> list[Path]:
    """Golden folders no case writes any more."""
    names = {c.name for c in CASES}
    return sorted(p for p in golden.iterdir() if p.is_dir() and p.name not in names) if golden.is_dir() else []
