"""Action ``sparkbench_health_resident``: the unit's canary for playbooks/health.yml when it has a
resident (its deployment's source, measured where it serves), else None.

    - sparkbench_health_resident:
        containers: "{{ bench_health_residents.containers | default([]) }}"   # docker_host_info's list
                                                      # → fact bench_health_resident

``sparkbench.serve.health_canary.canary`` over the unit's residents and the controller's deployment
records; a record that cannot be measured fails naming the fix (health.yml judges the unit failed).
"""

from __future__ import annotations

from sparkbench import residents as residents_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import health_canary


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_results_dir", "bench_run_id")
    ARGUMENTS = {"containers": {"type": "list", "elements": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        host = str(task_vars.get("inventory_hostname"))
        results_dir = str(variables.get("bench_results_dir") or DEFAULT_RESULTS_DIR)
        found = residents_mod.residents(args["containers"])
        resident = health_canary.canary(found, residents_mod.deployed(results_dir, host), results_dir,
                                        str(variables["bench_run_id"]), host)
        return {"changed": False, "ansible_facts": {"bench_health_resident": resident}}
