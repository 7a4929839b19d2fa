"""``measure.pyz``: the measure package as one zipapp for a unit, built on the controller.

A unit runs it with its own python3, isolated from its environment: ``python3 -I measure.pyz``
(no user site, no PYTHON* variables, not even the working directory on sys.path). The archive
holds ``measure/`` (the package's .py files, no caches), a ``__main__.py`` that runs it and, at
its root, the data files measure reads (``DATA``: the package's prompts quality.json and
tools.json, ``sparkbench.package_data``; found there by ``sparkbench.measure.profiles.data_file``),
so that one file is all a unit needs; its bytes depend only on the sources (fixed timestamps,
sorted entries), so two builds of the same checkout are identical. ``llm_bench`` builds it once
per host at copy time (the action ``sparkbench_bundle``), or by hand:

    python -m sparkbench.measure_bundle OUT.pyz
"""
from __future__ import annotations

import io
import os
import sys
import zipfile
from pathlib import Path

from .package_data import QUALITY_PROMPTS, TOOL_PROMPTS
from .paths import write_atomic

PACKAGE = Path(__file__).resolve().parent / "measure"
MAIN = (b'"""measure.pyz: sparkbench\'s measurement (python3 -I measure.pyz --help)."""\n'
        b"import runpy\n\nrunpy.run_module(\"measure\", run_name=\"__main__\", alter_sys=True)\n")
_EPOCH = (1980, 1, 1, 0, 0, 0)
#: The package's data files packed at the archive's root, under their own names.
DATA = (QUALITY_PROMPTS, TOOL_PROMPTS)


def on_unit(remote_dir: str, name: str | None = None) -> str:
    """measure.pyz in a host's work directory, or the data file ``name`` inside it (the path
    measure's ``--quality-file`` / ``--tools-file`` take: ``<dir>/measure.pyz/quality.json``)."""
    path = f"{remote_dir}/measure.pyz"
    return f"{path}/{name}" if name else path


def sources(package: Path = PACKAGE) -> list[Path]:
    """The package's Python files, sorted (caches and other files left out)."""
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def _entry(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def build(out: str | os.PathLike[str], package: Path = PACKAGE, data: tuple[Path, ...] = DATA) -> Path:
    """Write the zipapp to ``out`` (atomically: a reader never sees half a file); returns its path."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        _entry(zf, "__main__.py", MAIN)
        for src in sources(package):
            _entry(zf, "measure/" + src.relative_to(package).as_posix(), src.read_bytes())
        for path in data:
            _entry(zf, path.name, path.read_bytes())
    return write_atomic(out, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m sparkbench.measure_bundle OUT.pyz\n")
        return 2
    print(build(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
