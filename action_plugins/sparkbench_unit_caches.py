"""Action ``sparkbench_unit_caches``: the unit's cache folders, nothing planned (playbooks/teardown.yml).

    - sparkbench_unit_caches:
        home: "{{ ansible_facts['user_dir'] }}"   # → fact bench_unit_caches: [{key, variable, path, what}]

``sparkbench.unit_home.unit_cache_folders`` from the host's cache variables (teardown.yml has no
role defaults) and the unit's home. Touches no host.
"""

from __future__ import annotations

from sparkbench import unit_home
from sparkbench.ansible_action import ControllerAction
from sparkbench.launch import UNIT_CACHES


class ActionModule(ControllerAction):
    VARIABLE_NAMES = tuple(c.variable for c in UNIT_CACHES)
    ARGUMENTS = {"home": {"type": "str", "required": True}}

    def act(self, args, variables, task_vars):
        folders = unit_home.unit_cache_folders(variables, args["home"])
        return {"changed": False, "ansible_facts": {"bench_unit_caches": folders}}
