"""The measure package's shape and its one option table (docs/ARCHITECTURE.md, "measure").

The table (``sparkbench/measure/options.py``) is the only place a measurement setting is defined:
measure's parser, ``sparkbench.settings`` and the options table of docs/MEASUREMENT.md are derived
from it, and ``inventory/group_vars/all/bench.yml`` keeps the same values. The package is standard
library only with relative imports, small modules and short functions, and it runs from a copy
outside the repository: as ``measure.pyz`` with ``python3 -I`` and as a directory with
``python3 -E -s -m measure``.
"""
from __future__ import annotations

import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkbench import measure_bundle, settings
from sparkbench.measure import cli, options, profiles
from sparkbench.measure.options import OPTIONS, SETTINGS

from helpers import REPO, ansible_env

PACKAGE = REPO / "sparkbench" / "measure"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _parse(*args: str):
    return cli.build_parser().parse_args(["--base-url", "http://127.0.0.1:9", "--out", "-", *args])


@pytest.mark.unit
@pytest.mark.unit
def test_parser_and_settings_defaults_come_from_the_table() -> None:
    parser = cli.build_parser()
    for o in OPTIONS:
        assert parser.get_default(o.dest) == o.default, o.key
    assert settings.DEFAULTS == {o.key: o.inventory_default for o in SETTINGS}
    inv = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "bench.yml").read_text())
    assert {k: inv[f"llm_bench_{k}"] for k in settings.DEFAULTS} == settings.DEFAULTS


@pytest.mark.unit
@pytest.mark.unit
def test_every_bound_is_enforced_alike_on_the_command_line_and_in_the_inventory() -> None:
    """The value just past a bound is refused by measure's parser (exit 2, naming the flag) and by
    the inventory check (naming the variable); the bound itself is accepted by both."""
    checked = 0
    for o in OPTIONS:
        if o.kind not in ("int", "float") or o.minimum is None:
            continue
        low = o.minimum if o.strict else (o.minimum - 1 if o.kind == "int" else o.minimum - 0.5)
        ok = o.minimum + (0.5 if o.strict else 0)
        ok = int(ok) if o.kind == "int" else ok
        with pytest.raises(SystemExit):
            _parse(o.flag, str(low))
        assert getattr(_parse(o.flag, str(ok)), o.dest) == ok
        if o.setting:
            assert any(o.variable in e for e in settings.settings_errors({o.key: low})), o.key
            assert options.setting_error(o, ok) is None, o.key
        checked += 1
    assert checked >= 20


@pytest.mark.unit
@pytest.mark.unit
def test_prefix_requests_needs_a_warm_request_on_both_sides() -> None:
    """The first prefix-cache request fills the cache: 2 is the fewest that measure a warm one,
    on the command line and in the inventory alike."""
    with pytest.raises(SystemExit):
        _parse("--prefix-requests", "1")
    assert any("llm_bench_prefix_requests is 1" in e for e in settings.settings_errors({"prefix_requests": 1}))


@pytest.mark.unit
@pytest.mark.unit
def test_measure_argv_round_trips_every_setting() -> None:
    """Every setting of a plan reaches measure's parser with its value (every phase on)."""
    raw = settings.from_vars({"bench_workloads": "serving", "llm_bench_target_precision_pct": 2,
                              "llm_bench_max_runs": 30, "llm_bench_rate_requests": 12,
                              "llm_bench_rate_max_concurrency": 3, "llm_bench_rate_search": 0.9,
                              "llm_bench_concurrency": [2, 4], "llm_bench_context": [0, 4096]})
    assert settings.settings_errors(raw) == []
    s = settings.normalize(raw)
    argv = settings.measure_argv(s, python=["python3", "-I", "/x/measure.pyz"], base_url="http://h:1", model="m",
                                 quality_file="q.json", sandbox_image="img", tools_file="t.json")
    assert argv[:3] == ["python3", "-I", "/x/measure.pyz"]
    args = cli.build_parser().parse_args(argv[3:])
    for o in SETTINGS:
        want = s[o.key]
        got = getattr(args, o.dest)
        if o.key == "rates":
            want = [float(r) for r in want]
        assert got == want, o.key


@pytest.mark.unit
@pytest.mark.unit
def test_docs_options_table_is_the_table() -> None:
    text = (REPO / "docs" / "MEASUREMENT.md").read_text()
    start = text.index("<!-- options table: generated from sparkbench/measure/options.py -->")
    end = text.index("<!-- end of the options table -->")
    assert text[start:end].split("\n", 1)[1].strip() == options.options_table(), \
        "docs/MEASUREMENT.md's options table is stale: regenerate it (the command is above the table)"


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


@pytest.mark.unit
@pytest.mark.unit
def test_package_is_small_modules_of_short_functions_with_relative_imports_only() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 15
    for path in files:
        text = path.read_text()
        where = path.relative_to(REPO)
        assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{where}: {len(text.splitlines())} lines"
        tree = ast.parse(text)
        for fn in _functions(tree):
            assert fn.end_lineno - fn.lineno + 1 <= MAX_FUNCTION_LINES, f"{where}: {fn.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in stdlib for a in node.names), f"{where}: {ast.dump(node)}"
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in stdlib, f"{where}: from {node.module} import"


@pytest.mark.unit
@pytest.mark.unit
def test_phases_are_registered_in_run_order() -> None:
    from sparkbench.measure.phases import PHASES
    assert [p.name for p in PHASES] == ["warmup", "single", "parallel", "context", "prefix_cache", "multi_turn",
                                        "rates", "tools", "quality", "image"]
    a = _parse()
    assert [p.name for p in PHASES if p.enabled(a)] == ["warmup", "single", "parallel"]
    a = _parse("--quality", "--prefix-tokens", "512", "--turns", "2", "--tools", "--rate", "1", "--context", "64")
    assert len([p for p in PHASES if p.enabled(a)]) == 9


@pytest.mark.unit
@pytest.mark.unit
def test_perf_modules_import() -> None:
    """perf/*.py import measure's internals: every module imports, and what they read is there."""
    for path in sorted((REPO / "perf").glob("*.py")):
        importlib.import_module(f"perf.{path.stem}")
    assert importlib.import_module("perf.verdict_accuracy").runs_default() == 5


@pytest.mark.unit
@pytest.mark.unit
def test_zipapp_is_reproducible_and_holds_the_package(tmp_path: Path) -> None:
    a = measure_bundle.build(tmp_path / "a.pyz")
    b = measure_bundle.build(tmp_path / "b.pyz")
    assert a.read_bytes() == b.read_bytes()
    import zipfile
    names = zipfile.ZipFile(a).namelist()
    assert names[0] == "__main__.py" and "measure/phases/single.py" in names
    # The data files measure reads sit at the root, byte for byte the checkout's.
    assert zipfile.ZipFile(a).read("quality.json") == (REPO / "sparkbench/data/prompts/quality.json").read_bytes()
    assert zipfile.ZipFile(a).read("tools.json") == (REPO / "sparkbench/data/prompts/tools.json").read_bytes()
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py") and n not in ("quality.json", "tools.json")]
    assert measure_bundle.on_unit("/tmp/w") == "/tmp/w/measure.pyz"
    assert measure_bundle.on_unit("/tmp/w", "tools.json") == "/tmp/w/measure.pyz/tools.json"


@pytest.mark.unit
def test_a_data_file_inside_measure_pyz_reads_like_a_file_and_a_missing_one_names_the_option(tmp_path: Path) -> None:
    arc = measure_bundle.build(tmp_path / "measure.pyz")
    assert profiles.read_json(str(arc / "tools.json"), "--tools-file") == json.loads(
        (REPO / "sparkbench/data/prompts/tools.json").read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match=r"--quality-file: .*measure.pyz/nope.json does not exist"):
        profiles.read_json(str(arc / "nope.json"), "--quality-file")
    # Run from the checkout (not from an archive), the default is the checkout's own file.
    assert profiles.data_file("quality.json") == str(REPO / "sparkbench/data/prompts/quality.json")


@pytest.mark.ansible
def test_the_bundle_action_builds_measure_pyz_on_the_controller_and_names_a_wrong_path(tmp_path: Path) -> None:
    """llm_bench's ``sparkbench_bundle`` (an action: no module run) writes the same bytes as
    ``measure_bundle.build``; a path that does not end in measure.pyz is refused, naming the variable."""
    def adhoc(dest: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-c", "local",
                               "-m", "sparkbench_bundle", "-a", f"dest={dest}"], cwd=REPO, env=ansible_env(),
                              capture_output=True, text=True, timeout=120)

    good = adhoc(tmp_path / "spark01" / "measure.pyz")
    assert good.returncode == 0, good.stdout + good.stderr
    assert (tmp_path / "spark01" / "measure.pyz").read_bytes() == measure_bundle.build(tmp_path / "ref.pyz").read_bytes()
    bad = adhoc(tmp_path / "bundle.pyz")
    assert bad.returncode != 0 and "llm_bench_bundle" in bad.stdout and "/measure.pyz" in bad.stdout, bad.stdout
    assert not (tmp_path / "bundle.pyz").exists()


def _system_python() -> str:
    """A python3 outside the virtualenv (the unit's own), else this one."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(cand).exists():
            return cand
    return shutil.which("python3") or sys.executable


@pytest.mark.sim
@pytest.mark.sim
def test_copies_outside_the_repository_measure_the_simulator(sim_factory, tmp_path: Path) -> None:
    """measure.pyz alone (``python3 -I``, as llm_bench runs it: its own quality.json, also when
    the plan names it and when an older file lies beside it) and a copy of the package directory
    (``python3 -E -s -m measure``, quality.json and tools.json beside it), with no --tools-file,
    measure the simulator with a python3 outside the virtualenv."""
    sim = sim_factory(args=["--max-num-batched-tokens", "4096"], env={"VLLM_SIM_RATE": "400"})
    unit, package_copy = tmp_path / "unit", tmp_path / "package-copy"
    unit.mkdir()
    package_copy.mkdir()
    measure_bundle.build(unit / "measure.pyz")
    # A file left beside measure.pyz by an older copy: the archive's own is read, not this one.
    (unit / "quality.json").write_text(json.dumps({"questions": [{"id": "stale", "prompt": "old"}]}))
    for name in ("quality.json", "tools.json"):
        shutil.copy(REPO / "sparkbench/data/prompts" / name, package_copy / name)
    shutil.copytree(PACKAGE, package_copy / "measure", ignore=shutil.ignore_patterns("__pycache__"))
    common = ["--base-url", sim.base_url, "--runs", "2", "--warmup", "0", "--output-tokens", "16",
              "--concurrency", "none", "--telemetry", "off", "--kernel-log", "off", "--quality", "--out", "-"]
    inside = str(unit / "measure.pyz" / "quality.json")
    py = _system_python()
    for cwd, argv, quality_file in ((unit, [py, "-I", "measure.pyz", *common], inside),
                                    (unit, [py, "-I", "measure.pyz", "--quality-file", inside, *common], inside),
                                    (package_copy, [py, "-E", "-s", "-m", "measure", *common],
                                     str(package_copy / "quality.json"))):
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
        assert p.returncode == 0, p.stderr[-2000:]
        doc = json.loads(p.stdout)
        assert doc["status"] == "complete" and doc["single"]["valid_runs"] == 2
        assert doc["settings"]["quality_file"] == quality_file
        assert [q["id"] for q in doc["quality"]] == ["capital_50", "free_text", "code", "arithmetic"]
