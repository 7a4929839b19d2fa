"""Action ``sparkbench_serve_on_unit``: the planned deployment completed with what the unit answered
(playbooks/tasks/serve_deploy.yml).

    - sparkbench_serve_on_unit:
        home: "{{ ansible_facts['user_dir'] }}"
        containers: "{{ serve_unit_containers.containers }}"   # docker_host_info's list
        meminfo: "{{ serve_meminfo.stdout }}"                   # /proc/meminfo
        image_id: "{{ ... }}"                                   # the unit's id of the result's image
                                    # → facts serve_deploy (sparkbench.serve.deploy_plan.on_unit: the
                                    #   unit's paths, the previous resident, where the candidate starts,
                                    #   the image checked) and serve_residents (the unit's residents)
"""

from __future__ import annotations

from sparkbench import residents as residents_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.launch import sim_unit_path
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import deploy_plan
from sparkbench.serve import memory as memory_mod


class ActionModule(ControllerAction):
    VARIABLE_NAMES = (*deploy_plan.VARIABLES, "serve_plan")
    ARGUMENTS = {"home": {"type": "str", "required": True},
                 "containers": {"type": "list", "elements": "dict", "required": True},
                 "meminfo": {"type": "str", "required": True},
                 "image_id": {"type": "str", "required": True}}

    def act(self, args, variables, task_vars):
        host = str(task_vars.get("inventory_hostname"))
        s = deploy_plan.settings(variables)
        planned = variables["serve_plan"]["deployment"]
        # Simulated units of one machine share its Docker engine: this unit's residents mount its account.
        found = residents_mod.on_unit(residents_mod.residents(args["containers"]),
                                      sim_unit_path(planned.get("sim_unit"), args["home"]))
        # The unit's memory plan with the previous resident kept: where the candidate may start.
        both = memory_mod.deploy_plan(planned, s, host, str(s["bench_results_dir"] or DEFAULT_RESULTS_DIR), found,
                                      beside=True)
        dep = deploy_plan.on_unit(planned, s, args["home"], found, args["meminfo"] or "", args["image_id"], both)
        return {"changed": False, "ansible_facts": {"serve_deploy": dep, "serve_residents": found}}
