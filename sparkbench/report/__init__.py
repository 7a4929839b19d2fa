"""sparkbench reports: the one owner of the report's numbers and files.

``python3 -m sparkbench.report render RUN_DIR [--baseline RUN_DIR]`` reads exactly the run's
``<host>/<variant>.json`` files (:mod:`.load`, the careful loader: a bad file is named, the others
are reported) and writes beside them ``report.md``, ``results.csv``, ``results.json``,
``report.html`` and ``charts/*.png``. The numbers: :mod:`.numbers` (per result: accessors, the
roofline, per-host rows, the serving phases) and :mod:`.compare` (across results: head-to-head,
cluster vs one unit, fleet, run to run, the serving phases); the sections: :mod:`.sections`, each
a :class:`~.table.Section` (numbers, tables as text, summary lines) made with :mod:`.table`'s
formatters, in the report's order; the end-of-play table: :mod:`.terminal`, from the rendered
``results.json``. The Ansible role ``bench_report`` and the runner call this
renderer; nothing else computes a report figure. matplotlib is imported only when charts are drawn.
"""

from __future__ import annotations

from .cli import ReportError, render

__all__ = ["ReportError", "render"]
