"""Action ``sparkbench_plan_residents``: the host's plan with every memory plan checked against the
residents the unit lists (bench.yml, once the unit has answered).

    - sparkbench_plan_residents:
        containers: "{{ spark_host_docker.containers }}"   # community.docker.docker_host_info's list
                                                            # → fact bench_plan

``sparkbench.plan.with_residents``: the unit's own listing replaces the controller's deployment
records; a variant that cannot fit beside them is refused by its preflight. Touches no host.
"""

from __future__ import annotations

from sparkbench import plan as plan_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_plan",)
    ARGUMENTS = {"containers": {"type": "list", "elements": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        new = plan_mod.with_residents(variables["bench_plan"], args["containers"])
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
