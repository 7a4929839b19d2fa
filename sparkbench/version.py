"""sparkbench's version and the commit it runs from: what a user quotes when reporting a problem.

The version has one place, ``pyproject.toml`` (``[project] version``), and is read from the
installed package's metadata (``make setup`` installs the checkout again when pyproject.toml
changes). ``commit()`` is the commit of the checkout the package is installed from (its ``git
rev-parse HEAD``, read from the git files), None outside a checkout: a result names the code
that measured it."""

from __future__ import annotations

import functools
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .paths import REPO_ROOT


def _read_version() -> str:
    try:
        return version("sparkbench")
    except PackageNotFoundError:
        return "unknown"


VERSION = _read_version()


def _git_dir(root: Path) -> Path | None:
    """The checkout's git folder: ``.git``, or where a ``.git`` file (a worktree) points."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():
        text = dot.read_text(encoding="utf-8").strip()
        if text.startswith("gitdir:"):
            target = Path(text.split(":", 1)[1].strip())
            return target if target.is_absolute() else (root / target).resolve()
    return None


def _ref(git: Path, ref: str) -> str | None:
    """A ref's commit: its loose file, else its line in ``packed-refs`` (a worktree's common dir too)."""
    common = git
    if (git / "commondir").is_file():
        common = (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
    for base in (git, common):
        loose = base / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha
    return None


@functools.lru_cache(maxsize=1)
def commit(root: Path = REPO_ROOT) -> str | None:
    """The commit the checkout at ``root`` is on (read from its git files, no git process); None
    outside a git checkout."""
    try:
        git = _git_dir(root)
        if git is None:
            return None
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        sha = _ref(git, head[4:].strip()) if head.startswith("ref:") else head
    except OSError:
        return None
    return sha if sha and re.fullmatch(r"[0-9a-f]{40,64}", sha) else None


def describe() -> str:
    """``--version``: ``sparkbench X.Y.Z`` on the first line, the commit on the second."""
    return f"sparkbench {VERSION}\ncommit {commit() or 'unknown (not a git checkout)'}"
