"""Action ``sparkbench_bundle``: build ``measure.pyz`` on the controller (sparkbench.measure_bundle:
the measure package with quality.json and tools.json inside).

    - sparkbench_bundle:
        dest: "{{ llm_bench_bundle }}"   # the archive's path on the controller

Runs in the controller's worker (no module run on any host), under ``--check`` too: the file is
the controller's, and the copy after it then shows the unit's real difference. The same sources
give the same bytes, so the copy changes nothing on a unit that has them. Returns ``path``.
"""

from __future__ import annotations

import os

from sparkbench import measure_bundle
from sparkbench.ansible_action import ControllerAction
from sparkbench.errors import InputError


class ActionModule(ControllerAction):
    def act(self, args, variables, task_vars):
        dest = args.get("dest")
        if not isinstance(dest, str) or os.path.basename(dest) != "measure.pyz":
            raise InputError(f"llm_bench_bundle is {dest!r}: it must be a path on the controller ending in "
                             "/measure.pyz (the name the copy gives the file on the host)")
        try:
            path = measure_bundle.build(dest)
        except OSError as exc:
            raise InputError(f"sparkbench_bundle: cannot write {dest}: {exc} (set llm_bench_bundle to a "
                             "writable path on the controller)") from None
        return {"changed": False, "path": str(path), "msg": f"measure.pyz built at {path}"}
