"""sparkbench.package_data: what sparkbench ships is package data under sparkbench/data/, read through
importlib.resources (and shipped by pyproject.toml's package-data); a user's own profile in
profiles/ (or the folder bench_profiles_dir names) overrides the built-in one of the same name,
for the plan, predict and measure; both pitfalls files go through one YAML reader."""
from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path, PurePosixPath

import pytest

import sparkbench
from sparkbench import host_failure, measure_bundle, package_data, plan, preflight
from sparkbench.measure import profiles as measure_profiles
from sparkbench.predict.command import load_hardware, load_model

pytestmark = pytest.mark.unit

PACKAGE = Path(sparkbench.__file__).resolve().parent
QWEN = "nvidia/Qwen3.6-35B-A3B-NVFP4"
GPTOSS = "openai/gpt-oss-120b"


def test_the_shipped_files_are_the_packages_data() -> None:
    assert package_data.DATA_DIR == PACKAGE / "data" == resources.files("sparkbench") / "data"
    shipped = [package_data.QUALITY_PROMPTS, package_data.TOOL_PROMPTS, package_data.KNOWN_ISSUES,
               package_data.HOST_ISSUES, package_data.PUBLISHED_FIGURES, package_data.RESULT_SCHEMA,
               package_data.BUILT_IN_PROFILES / "hardware" / "dgx-spark.json",
               package_data.BUILT_IN_PROFILES / "models" / "nvidia__Qwen3.6-35B-A3B-NVFP4.json",
               package_data.VLLM_ARGS_DIR / "0.32.0.json"]
    for path in shipped:
        assert path.is_file() and path.is_relative_to(PACKAGE / "data"), path
    assert measure_bundle.DATA == (package_data.QUALITY_PROMPTS, package_data.TOOL_PROMPTS)
    # pyproject.toml ships every file of sparkbench/data/ in the package (wheel and editable install alike)
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[tool.setuptools.package-data]", 1)[1]
    globs = json.loads(re.search(r"^sparkbench = (\[.*\])$", section, re.MULTILINE).group(1))
    files = [p for p in package_data.DATA_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    for path in files:
        inside = PurePosixPath(path.relative_to(PACKAGE).as_posix())
        assert any(inside.match(g) for g in globs), f"{inside} is not package data ({globs})"


def _own_profiles(root: Path) -> Path:
    """A user's profiles folder: an override of the built-in Qwen profile and of dgx-spark, and a
    model of its own."""
    qwen = json.loads(package_data.model_profile_file(QWEN, root).read_text())
    spark = json.loads(package_data.hardware_profile_file("dgx-spark", root).read_text())
    (root / "models").mkdir(parents=True)
    (root / "hardware").mkdir()
    (root / "models" / "nvidia__Qwen3.6-35B-A3B-NVFP4.json").write_text(json.dumps({**qwen, "revision": "mine"}))
    (root / "models" / "acme__tiny.json").write_text(json.dumps({**qwen, "id": "acme/tiny"}))
    (root / "hardware" / "dgx-spark.json").write_text(json.dumps({**spark, "memory_bandwidth_gbps": 100}))
    return root


def test_a_users_profile_overrides_the_built_in_one_of_the_same_name(tmp_path) -> None:
    built_in = package_data.BUILT_IN_PROFILES
    # no profile of the user's: the built-in ones
    assert package_data.model_profile_file(QWEN, tmp_path) == built_in / "models" / "nvidia__Qwen3.6-35B-A3B-NVFP4.json"
    assert package_data.hardware_profile_file("dgx-spark", tmp_path) == built_in / "hardware" / "dgx-spark.json"
    own = _own_profiles(tmp_path / "profiles")
    assert package_data.model_profile_file(QWEN, own) == own / "models" / "nvidia__Qwen3.6-35B-A3B-NVFP4.json"
    assert package_data.hardware_profile_file("dgx-spark", own) == own / "hardware" / "dgx-spark.json"
    assert package_data.model_profile_file(GPTOSS, own) == built_in / "models" / "openai__gpt-oss-120b.json"
    # a profile nowhere: the user's path, where one is added
    assert package_data.model_profile_file("acme/none", own) == own / "models" / "acme__none.json"
    assert {QWEN, GPTOSS, "acme/tiny"} <= set(package_data.model_ids(own))
    assert "acme/tiny" not in package_data.model_ids(tmp_path / "nowhere")
    assert {"dgx-spark", "x86-cpu"} <= set(package_data.hardware_names(own))
    # the plan reads the same: the user's override, the built-in profile of another model
    hardware, models = plan.load_profiles([QWEN, GPTOSS, "acme/tiny"], "dgx-spark", str(own))
    assert hardware["memory_bandwidth_gbps"] == 100 and models[QWEN]["revision"] == "mine"
    assert models[GPTOSS] == json.loads((built_in / "models" / "openai__gpt-oss-120b.json").read_text())
    assert models["acme/tiny"]["id"] == "acme/tiny"
    # and predict
    assert load_hardware("dgx-spark", own)["memory_bandwidth_gbps"] == 100
    assert load_model(QWEN, own)[0]["revision"] == "mine"


def test_measure_looks_in_the_checkouts_profiles_before_the_built_in_ones(tmp_path, monkeypatch) -> None:
    own = _own_profiles(tmp_path / "profiles")
    default = measure_profiles.default_profiles_dir()
    assert default == str(package_data.BUILT_IN_PROFILES)
    monkeypatch.setattr(measure_profiles, "checkout_profiles", lambda: str(own))
    assert measure_profiles.search_dirs(default) == [str(own), default]
    hw, where = measure_profiles.load_hardware("dgx-spark", default)
    assert hw["memory_bandwidth_gbps"] == 100 and where == str(own / "hardware" / "dgx-spark.json")
    assert measure_profiles.load_model_profile(GPTOSS, default)[1] == str(
        package_data.BUILT_IN_PROFILES / "models" / "openai__gpt-oss-120b.json")
    # a folder given with --profiles-dir is the only one looked in
    assert measure_profiles.search_dirs(str(own)) == [str(own)]
    with pytest.raises(ValueError, match="no hardware profile 'x86-cpu'"):
        measure_profiles.load_hardware("x86-cpu", str(own))


def test_one_yaml_reader_parses_a_file_once_per_change(tmp_path) -> None:
    path = tmp_path / "p.yml"
    path.write_text("host: []\n")
    first = package_data.load_yaml(path)
    assert first == {"host": []} and package_data.load_yaml(path) is first
    path.write_text("host: [1]\n")
    os.utime(path, ns=(1, 1))
    assert package_data.load_yaml(path) == {"host": [1]}


def test_both_pitfalls_files_go_through_the_one_reader(monkeypatch) -> None:
    read = []
    real = package_data.load_yaml
    monkeypatch.setattr(package_data, "load_yaml", lambda path: read.append(Path(path)) or real(path))
    assert preflight.load_known_issues()["issues"]
    assert host_failure.load_pitfalls()
    assert read == [package_data.KNOWN_ISSUES, package_data.HOST_ISSUES]


def test_the_version_is_the_installed_packages_and_pyprojects():
    """The version is read from the package's metadata, not from a file of the checkout; ``make
    setup`` installs again when pyproject.toml changes, so the two agree."""
    import tomllib

    from sparkbench.version import VERSION

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert VERSION == pyproject["project"]["version"]
