"""Action ``sparkbench_plan``: a host's plan (sparkbench.plan), computed on the controller.

    - sparkbench_plan:                      # → fact bench_plan (every variant, complete)
    - sparkbench_plan:
        provisioned: "{{ spark_host_model_failures }}"   # → bench_plan with failed downloads in preflight
    - sparkbench_plan: {results: false}     # no results directory check (playbooks/provision.yml)
    - sparkbench_plan: {canary: true}       # the canary only (playbooks/health.yml, sparkbench.health)

Reads the host's variables by the names in ``sparkbench.plan.VARIABLES``; bad input fails the task
with the message naming the variable and the fix. Touches no host.
"""

from __future__ import annotations

from sparkbench import plan as plan_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = (list(plan_mod.VARIABLES) + [f"llm_bench_{k}" for k in plan_mod.settings_mod.DEFAULTS]
                      + ["bench_plan", "sparkbench_simulated", "bench_health_canary", "bench_health_runs", "bench_health_output_tokens"])

    def _members(self, variables, task_vars):
        """``(host, variables)`` of every member of the host's cluster (``bench_cluster``: a group),
        in inventory order, each templated by the names sparkbench.cluster reads; [] without one."""
        group = str(variables.get("bench_cluster") or "")
        if not group:
            return []
        hosts = (task_vars.get("groups") or {}).get(group) or []
        names = set(plan_mod.VARIABLES) | set(plan_mod.cluster_mod.VARIABLES)
        out = []
        for host in hosts:
            hv = task_vars["hostvars"][host]
            out.append((host, {n: self._templar.template(hv[n]) for n in names if n in hv}))
        return out

    def act(self, args, variables, task_vars):
        if "provisioned" in args:
            new = plan_mod.provisioned(variables["bench_plan"], args.get("provisioned") or {})
        else:
            if args.get("canary"):  # playbooks/health.yml: the plan reduced to the canary (sparkbench.health)
                from sparkbench import health as health_mod
                variables = health_mod.canary_variables(variables)
            new = plan_mod.plan_host(variables, task_vars.get("inventory_hostname", ""),
                                     check_mode=bool(self._task.check_mode), members=self._members(variables, task_vars))
            if not self._task.check_mode and args.get("results", True):
                plan_mod.ensure_host_dir(new)
        # The fact is also what the runner's live view reads (sparkbench.runner.progress).
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
