"""Action ``sparkbench_plan``: the host's plan (sparkbench.plan), computed on the controller.

    - sparkbench_plan:                      # → fact bench_plan: every variant, complete
    - sparkbench_plan: {results: false}     # the same, without checking the results directory
                                            #   (playbooks/provision.yml)

Reads the host's variables by the names in ``sparkbench.plan.VARIABLES`` (a cluster's members' from
hostvars); bad input fails the task with the message naming the variable and the fix. Touches no
host. The plan's later steps are their own actions: ``sparkbench_plan_unit``,
``sparkbench_plan_provisioned``, ``sparkbench_plan_residents``; health.yml's canary is
``sparkbench_plan_canary``.
"""

from __future__ import annotations

from sparkbench import cluster as cluster_mod
from sparkbench import plan as plan_mod
from sparkbench import settings as settings_mod
from sparkbench.ansible_action import ControllerAction

#: What the plan reads of the host: sparkbench.plan's variables and the measurement's settings.
PLAN_VARIABLES = (*plan_mod.VARIABLES, *(f"llm_bench_{k}" for k in settings_mod.DEFAULTS),
                  "sparkbench_simulated")
#: What the plan reads of each member of the host's cluster (``bench_cluster``).
MEMBER_VARIABLES = (*plan_mod.VARIABLES, *cluster_mod.VARIABLES)


class ActionModule(ControllerAction):
    VARIABLE_NAMES = PLAN_VARIABLES
    ARGUMENTS = {"results": {"type": "bool", "default": True}}

    def act(self, args, variables, task_vars):
        members = self.group_members(variables.get("bench_cluster"), MEMBER_VARIABLES, task_vars)
        new = plan_mod.plan_host(variables, task_vars.get("inventory_hostname", ""),
                                 check_mode=bool(self._task.check_mode), members=members)
        if not self._task.check_mode and args["results"]:
            plan_mod.ensure_host_dir(new)
        # The fact is also what the runner's live view reads (sparkbench.runner.progress).
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
