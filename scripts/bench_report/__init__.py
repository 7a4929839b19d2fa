"""sparkbench reports: ``python3 scripts/bench_report render RUN_DIR [--baseline RUN_DIR]``.

Reads exactly the run's ``<host>/<variant>.json`` files and writes beside them ``report.md``,
``results.csv``, ``results.json``, ``report.html`` and ``charts/*.png``. The numbers come from the
filter plugins in ``filter_plugins/`` (one implementation shared with the Ansible side); this
package loads, formats, charts and writes.
"""

from __future__ import annotations

__all__ = ["render"]


def render(*args, **kwargs):
    """See :func:`bench_report.cli.render`."""
    from .cli import render as _render
    return _render(*args, **kwargs)
