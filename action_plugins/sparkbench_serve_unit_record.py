"""Action ``sparkbench_serve_unit_record``: where the unit keeps the resident's deployment record
(playbooks/tasks/serve_absent.yml, to remove it on undeploy).

    - sparkbench_serve_unit_record:
        home: "{{ ansible_facts['user_dir'] }}"   # → fact serve_unit_record: <serve_unit_dir>/<variant>.json
"""

from __future__ import annotations

from sparkbench.ansible_action import ControllerAction
from sparkbench.serve import deploy_plan


class ActionModule(ControllerAction):
    VARIABLE_NAMES = tuple(deploy_plan.VARIABLES)
    ARGUMENTS = {"home": {"type": "str", "required": True}}

    def act(self, args, variables, task_vars):
        s = deploy_plan.settings(variables)
        path = f"{deploy_plan.unit_records_dir(s, args['home'])}/{s['serve_variant']}.json"
        return {"changed": False, "ansible_facts": {"serve_unit_record": path}}
