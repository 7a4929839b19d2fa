"""No import cycle in ``sparkbench/``, function-local imports included.

import-linter (``make lint``, ``make check``; the contracts in pyproject.toml) holds the layers of
docs/ARCHITECTURE.md; this test holds the rest: no two modules that import each other, directly or
through others. Every import statement counts (at module level, inside a function, a package's
``__init__`` re-exporting its modules) but those under ``if TYPE_CHECKING:``, which never run.
Importing ``a.b.c`` also runs ``a.b``'s ``__init__``: an edge to every package above the imported
module that is not a package of the importer itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name → (file, is a package) for every module below ``root`` (a package folder)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node inside an ``if TYPE_CHECKING:`` block."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _targets(name: str, package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The modules one import statement names (``from p import m`` names ``p.m`` when that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = name.split(".") if package else name.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
    else:
        base = []
    target = ".".join(base + ([node.module] if node.module else []))
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of the same top package it imports when it runs."""
    mods = _modules(root)
    top = root.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, package) in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            for target in _targets(name, package, node, set(mods)):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if not target or target.split(".")[0] != top:
                    continue
                parents = {".".join(target.split(".")[:i]) for i in range(1, target.count(".") + 1)}
                graph[name].update(m for m in ({target} | parents) if m in mods and m not in own)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_no_import_cycle_in_sparkbench():
    found = cycles(import_graph(REPO / "sparkbench"))
    assert not found, "import cycles (function-local imports count): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_check_sees_function_local_imports_and_package_inits(tmp_path):
    """A cycle closed by an import inside a function, and one closed by a package's ``__init__``,
    are both found; an ``if TYPE_CHECKING:`` import is not an edge."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "sub" / "__init__.py").write_text("from .inner import y\n")
    (pkg / "sub" / "inner.py").write_text("from ..c import z\n")
    (pkg / "c.py").write_text("from .sub.other import w\n")
    (pkg / "sub" / "other.py").write_text("")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import v\n")
    (pkg / "e.py").write_text("from .d import u\n")
    found = cycles(import_graph(pkg))
    assert ["pkg.a", "pkg.b"] in found
    assert ["pkg.c", "pkg.sub", "pkg.sub.inner"] in found
    assert not any("pkg.d" in c for c in found)
