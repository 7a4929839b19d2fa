"""Entry point for ``python3 scripts/bench_report render RUN_DIR ...`` (a directory run as a script)."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a directory: Python put this folder first on sys.path, where its module names could
    # shadow the standard library's. Put the parent (scripts/) there instead and import the package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))
    from bench_report.cli import main
else:
    from .cli import main

if __name__ == "__main__":
    sys.exit(main())
