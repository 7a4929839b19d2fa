"""sparkbench's version: one place (pyproject.toml), printed by ``--version``, named in
CHANGELOG.md; the commit read from the checkout's git files."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from sparkbench import version
from sparkbench.runner.cli import main

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def test_the_version_is_pyprojects_and_the_changelog_names_it() -> None:
    with (REPO / "pyproject.toml").open("rb") as fh:
        assert version.VERSION == tomllib.load(fh)["project"]["version"]
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(version.VERSION)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE), \
        f"CHANGELOG.md has no '## [{version.VERSION}] - YYYY-MM-DD' section: add what this version changed"


def test_dash_dash_version_prints_the_version_then_the_commit(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"sparkbench {version.VERSION}"
    assert re.fullmatch(r"commit ([0-9a-f]{40}|unknown \(not a git checkout\))", second), second


def _repo(tmp_path: Path, head: str) -> Path:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    return tmp_path


def test_commit_from_a_loose_ref_a_packed_ref_and_a_detached_head(tmp_path: Path) -> None:
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    loose = _repo(tmp_path / "loose", "ref: refs/heads/main")
    (loose / ".git" / "refs" / "heads" / "main").write_text(a + "\n")
    assert version.commit.__wrapped__(loose) == a
    packed = _repo(tmp_path / "packed", "ref: refs/heads/main")
    (packed / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{b} refs/heads/main\n")
    assert version.commit.__wrapped__(packed) == b
    assert version.commit.__wrapped__(_repo(tmp_path / "detached", c)) == c
    assert version.commit.__wrapped__(tmp_path / "nowhere") is None
    unborn = _repo(tmp_path / "unborn", "ref: refs/heads/main")  # a branch with no commit yet
    assert version.commit.__wrapped__(unborn) is None
