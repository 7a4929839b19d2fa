"""The guides (docs/guides/) and the README: their shape, and the commands in their ``sh`` blocks.

Every line of a ```` ```sh ```` block in README.md or a guide that starts with
``scripts/sparkbench`` (or ``sparkbench``) must parse with the runner's own parser
(``sparkbench.runner.cli.parser``), and every ``ansible-playbook`` line must pass
``ansible-playbook --syntax-check`` with its playbook and its ``-i`` / ``-l`` / ``-e`` arguments.
Trailing ``# comments`` are ignored and ``\\`` continuations joined. The syntax checks run once per
distinct playbook and arguments, the playbooks that share their arguments in one
``ansible-playbook`` call.

The parse checks and the shape checks are ``unit`` tests; the syntax checks run ansible-playbook
(``ansible``). Each test carries its own layer marker: a module-level ``unit`` marker would also
cover the syntax test, and conftest forbids a ``unit`` test to start a process.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import BIN, REPO, ansible_env

GUIDES = REPO / "docs" / "guides"
README = REPO / "README.md"
BENCHMARKS = REPO / "BENCHMARKS.md"
#: The reference pages the README must keep linking to.
REFERENCE_PAGES = ("ARCHITECTURE.md", "MEASUREMENT.md", "RELIABILITY.md", "REPORTS.md", "ANSIBLE.md")
#: ansible-playbook options that do not change what --syntax-check reads: dropped.
DROPPED = {"--check", "-C", "-K", "--ask-become-pass", "--diff", "-D", "--verbose"}
#: ansible-playbook options kept for the syntax check, each with its value.
KEPT = {"-i": "-i", "--inventory": "-i", "-l": "-l", "--limit": "-l", "-e": "-e", "--extra-vars": "-e"}


@dataclass(frozen=True)
class Command:
    """One command line of an ``sh`` block: where it is, its text (continuations joined), its argv."""

    doc: Path
    lineno: int
    text: str
    argv: tuple[str, ...]

    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.lineno}: {self.text}"


def guides() -> list[Path]:
    """The guides: every Markdown file of docs/guides/ but its index."""
    return sorted(p for p in GUIDES.glob("*.md") if p.name != "README.md")


def sh_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(line number of the block's first line, its lines) of every ```sh block."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    start = 0
    for n, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if current is None and re.fullmatch(r"```sh", fence):
            current, start = [], n + 1
        elif current is not None and fence == "```":
            blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def outside_fences(lines: list[str]) -> list[str]:
    """The lines of a Markdown text outside its fenced code blocks."""
    out, fenced = [], False
    for line in lines:
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def commands(doc: Path) -> list[Command]:
    """Every command line of ``doc``'s sh blocks, ``\\`` continuations joined, comments left out."""
    out: list[Command] = []
    for start, lines in sh_blocks(doc.read_text(encoding="utf-8")):
        pending, first = "", 0
        for offset, line in enumerate(lines):
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if not pending:
                first = start + offset
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            text = (pending + stripped).strip()
            pending = ""
            argv = tuple(shlex.split(text, comments=True))
            if argv:
                out.append(Command(doc, first, " ".join(argv), argv))
    return out


def documented() -> list[Command]:
    return [c for doc in [README, *guides()] for c in commands(doc)]


def sparkbench_lines() -> list[Command]:
    return [c for c in documented() if c.argv[0] in ("scripts/sparkbench", "sparkbench")]


def playbook_lines() -> list[Command]:
    return [c for c in documented() if c.argv[0] == "ansible-playbook"]


def syntax_args(cmd: Command) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the options --syntax-check keeps, the playbooks) of an ansible-playbook line."""
    kept: list[str] = []
    playbooks: list[str] = []
    argv = list(cmd.argv[1:])
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in DROPPED or re.fullmatch(r"-v+", arg):
            i += 1
        elif arg in KEPT and i + 1 < len(argv):
            kept += [KEPT[arg], argv[i + 1]]
            i += 2
        elif "=" in arg and arg.split("=", 1)[0] in KEPT and arg.startswith("--"):
            name, value = arg.split("=", 1)
            kept += [KEPT[name], value]
            i += 1
        elif arg.startswith(("-e", "-i", "-l")) and not arg.startswith("--") and len(arg) > 2:
            kept += [arg[:2], arg[2:]]
            i += 1
        elif arg.startswith("-"):
            pytest.fail(f"{cmd.where()}\n  option {arg} is neither kept nor dropped by this test: add it to KEPT "
                        "or DROPPED in tests/test_docs_guides.py", pytrace=False)
        else:
            playbooks.append(arg)
            i += 1
    if not playbooks:
        pytest.fail(f"{cmd.where()}\n  names no playbook", pytrace=False)
    return tuple(kept), tuple(playbooks)


def _id(cmd: Command) -> str:
    return f"{cmd.doc.name}:{cmd.lineno}"


# ---- shape ---------------------------------------------------------------------------------------

@pytest.mark.unit
def test_there_are_at_least_eight_guides():
    assert len(guides()) >= 8, [p.name for p in guides()]


@pytest.mark.unit
@pytest.mark.parametrize("guide", guides(), ids=lambda p: p.name)
def test_a_guide_has_a_title_a_goal_commands_and_what_to_do_when_it_fails(guide: Path):
    text = guide.read_text(encoding="utf-8")
    lines = text.splitlines()
    name = guide.relative_to(REPO)
    prose = outside_fences(lines)
    first = next((ln for ln in lines if ln.strip()), "")
    assert re.match(r"# \S", first), f"{name}: the first line must be a level-1 title, got {first!r}"
    assert sum(1 for ln in prose if re.match(r"# \S", ln)) == 1, f"{name}: more than one level-1 title"
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    goal = " ".join(paragraphs[1].split()) if len(paragraphs) > 1 else ""
    assert re.fullmatch(r"\*\*Goal:\*\* \S.*\.", goal), \
        f"{name}: the paragraph after the title must be the goal in one sentence, '**Goal:** … .', got {goal[:120]!r}"
    assert sh_blocks(text), f"{name}: no ```sh block with the commands"
    assert any(re.match(r"##+ .*\bfail", ln, re.IGNORECASE) for ln in prose), \
        f"{name}: no section on failures (a heading such as '## When it fails')"


@pytest.mark.unit
def test_the_index_and_the_readme_link_every_guide():
    index = (GUIDES / "README.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for guide in guides():
        assert f"]({guide.name})" in index, f"docs/guides/README.md does not link {guide.name}"
        assert f"(docs/guides/{guide.name})" in readme, f"README.md does not link docs/guides/{guide.name}"


@pytest.mark.unit
def test_the_readme_is_short_and_links_the_reference_pages():
    text = README.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert n <= 250, f"README.md has {n} lines; at most 250 (move the detail into a guide under docs/guides/)"
    for page in REFERENCE_PAGES:
        assert f"(docs/{page}" in text, f"README.md does not link docs/{page}"
    assert "<!-- first-run:begin -->" in text and "<!-- first-run:end -->" in text, \
        "README.md lost the first-run markers tests/test_ssh_units.py runs"


@pytest.mark.unit
def test_benchmarks_is_a_short_reference():
    n = len(BENCHMARKS.read_text(encoding="utf-8").splitlines())
    assert n <= 300, f"BENCHMARKS.md has {n} lines; at most 300 (run-by-run history goes to perf/HISTORY.md)"


@pytest.mark.unit
@pytest.mark.parametrize("doc", [README, GUIDES / "README.md", *guides()], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_at_files_that_exist(doc: Path):
    text = doc.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.relative_to(REPO)} links to paths that do not exist: {missing}"


# ---- commands ------------------------------------------------------------------------------------

@pytest.mark.unit
def test_the_docs_hold_commands_of_both_kinds():
    assert sparkbench_lines() and playbook_lines()


@pytest.mark.unit
@pytest.mark.parametrize("cmd", sparkbench_lines(), ids=_id)
def test_a_sparkbench_line_parses(cmd: Command, monkeypatch):
    from sparkbench import version
    from sparkbench.runner.cli import parser

    # --version's text names the checkout's commit (git): not this test's concern, and no process here
    monkeypatch.setattr(version, "commit", lambda: "0000000")
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            parser().parse_args(list(cmd.argv[1:]))
    except SystemExit as exc:  # argparse: 0 after --version / --help, 4 (EXIT_USAGE) on a bad line
        if exc.code not in (0, None):
            pytest.fail(f"{cmd.where()}\n  does not parse (exit {exc.code}): {err.getvalue().strip()}",
                        pytrace=False)


@pytest.mark.ansible
def test_every_playbook_line_passes_syntax_check():
    groups: dict[tuple[str, ...], dict[str, list[Command]]] = {}
    for cmd in playbook_lines():
        kept, playbooks = syntax_args(cmd)
        for playbook in playbooks:
            groups.setdefault(kept, {}).setdefault(playbook, []).append(cmd)
    assert groups, "no ansible-playbook line in README.md or docs/guides/"

    def check(kept: tuple[str, ...], playbooks: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", *kept, *playbooks], cwd=REPO,
                              env=ansible_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=300)

    failures = []
    for kept, by_playbook in groups.items():
        proc = check(kept, list(by_playbook))
        if proc.returncode == 0:
            continue
        for playbook, cmds in by_playbook.items():  # which playbook of the batch failed
            alone = proc if len(by_playbook) == 1 else check(kept, [playbook])
            if alone.returncode != 0:
                tail = (alone.stdout + alone.stderr).strip().splitlines()[-8:]
                failures.append("\n".join([*(c.where() for c in cmds),
                                           f"  ansible-playbook --syntax-check {shlex.join([*kept, playbook])}: "
                                           f"rc {alone.returncode}", *(f"    {ln}" for ln in tail)]))
    assert not failures, "\n\n".join(failures)
