"""sparkbench reports: the one owner of the report's numbers and files.

``python3 -m sparkbench.report render RUN_DIR [--baseline RUN_DIR]`` reads exactly the run's
``<host>/<variant>.json`` files (:mod:`.load`, the careful loader: a bad file is named, the others
are reported) and writes beside them ``report.md``, ``results.csv``, ``results.json``,
``report.html`` and ``charts/*.png``. The numbers: :mod:`.numbers` (accessors, the roofline,
per-host rows) and :mod:`.compare` (head-to-head, fleet, run to run); the tables as text:
:mod:`.sections` with :mod:`.table`'s formatters; the end-of-play table: :mod:`.terminal`, from
the rendered ``results.json``. The Ansible role ``bench_report`` and the runner call this
renderer; nothing else computes a report figure. matplotlib is imported only when charts are drawn.
"""

from __future__ import annotations

from .cli import ReportError, render

__all__ = ["ReportError", "render"]
