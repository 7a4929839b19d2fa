"""Action ``sparkbench_plan_provisioned``: the host's plan with its failed model downloads
(playbooks/tasks/host.yml, after the spark_host role).

    - sparkbench_plan_provisioned:
        failures: "{{ spark_host_model_failures }}"   # {model: what the download said}
                                                      # → fact bench_plan, each variant of a failed
                                                      #   model refused in its preflight verdict

``sparkbench.plan.provisioned`` (reason and remedy from known_issues.yml). Touches no host.
"""

from __future__ import annotations

from sparkbench import plan as plan_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_plan",)
    ARGUMENTS = {"failures": {"type": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        new = plan_mod.provisioned(variables["bench_plan"], args["failures"] or {})
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
