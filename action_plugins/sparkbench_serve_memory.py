"""Action ``sparkbench_serve_memory``: serve_plan's memory plan checked again against the residents
the unit lists (serve.yml, not under --check).

    - sparkbench_serve_memory:
        containers: "{{ serve_unit_containers.containers }}"   # docker_host_info's list
                                                                # → fact serve_plan, its memory plan
                                                                #   with the unit's own residents

``sparkbench.serve.memory.deploy_plan`` with the unit's listing (``sparkbench.residents``) in place
of the controller's deployment records.
"""

from __future__ import annotations

from sparkbench import residents as residents_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import deploy_plan
from sparkbench.serve import memory as memory_mod


class ActionModule(ControllerAction):
    VARIABLE_NAMES = (*deploy_plan.VARIABLES, "serve_plan")
    ARGUMENTS = {"containers": {"type": "list", "elements": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        s = deploy_plan.settings(variables)
        plan = dict(variables["serve_plan"])
        listed = residents_mod.on_unit(residents_mod.residents(args["containers"]),
                                       plan["deployment"].get("sim_unit"))
        plan["memory"] = memory_mod.deploy_plan(plan["deployment"], s, str(task_vars.get("inventory_hostname")),
                                                str(s["bench_results_dir"] or DEFAULT_RESULTS_DIR), listed)
        return {"changed": False, "ansible_facts": {"serve_plan": plan}}
