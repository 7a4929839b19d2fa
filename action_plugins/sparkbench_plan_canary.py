"""Action ``sparkbench_plan_canary``: the host's plan reduced to the fleet-health canary
(playbooks/health.yml), computed on the controller.

    - sparkbench_plan_canary:               # → fact bench_plan: the canary variant alone, single
                                            #   stream, bench_health_runs requests

The host's variables become the canary's (``sparkbench.health.canary_variables``: bad input names
the variable and the fix), then ``sparkbench.plan`` plans them without counting the unit's residents
(health.yml measures a unit's resident instead of starting its canary beside it). Touches no host.
"""

from __future__ import annotations

from sparkbench import cluster as cluster_mod
from sparkbench import health as health_mod
from sparkbench import plan as plan_mod
from sparkbench import settings as settings_mod
from sparkbench.ansible_action import ControllerAction

#: The plan's variables (sparkbench_plan's) and the canary's.
CANARY_VARIABLES = (*plan_mod.VARIABLES, *(f"llm_bench_{k}" for k in settings_mod.DEFAULTS),
                    "sparkbench_simulated", "bench_health_canary", "bench_health_runs", "bench_health_output_tokens")


class ActionModule(ControllerAction):
    VARIABLE_NAMES = CANARY_VARIABLES
    ARGUMENTS: dict = {}

    def act(self, args, variables, task_vars):
        canary = health_mod.canary_variables(variables)
        members = self.group_members(canary.get("bench_cluster"),
                                     (*plan_mod.VARIABLES, *cluster_mod.VARIABLES), task_vars)
        new = plan_mod.plan_host(canary, task_vars.get("inventory_hostname", ""),
                                 check_mode=bool(self._task.check_mode), members=members, residents=False)
        if not self._task.check_mode:
            plan_mod.ensure_host_dir(new)
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
