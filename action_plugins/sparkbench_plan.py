"""Action ``sparkbench_plan``: a host's plan (sparkbench.plan), computed on the controller.

    - sparkbench_plan:                      # → fact bench_plan (every variant, complete)
    - sparkbench_plan:
        unit: {home: "{{ ansible_facts['user_dir'] }}"}  # → bench_plan with the unit's cache folders
                                                         #   resolved (unit_home.with_unit; a cluster head's
                                                         #   nodes from each member's ansible_facts)
    - sparkbench_plan:
        provisioned: "{{ spark_host_model_failures }}"   # → bench_plan with failed downloads in preflight
    - sparkbench_plan:
        residents: {containers: "{{ ... }}"}  # → bench_plan with every memory plan checked against the
                                              #   residents the unit lists (plan.with_residents)
    - sparkbench_plan:
        caches: {home: "{{ ansible_facts['user_dir'] }}"}  # → bench_unit_caches only: the unit's cache
                                                           #   folders, nothing planned (teardown.yml)
    - sparkbench_plan: {results: false}     # no results directory check (playbooks/provision.yml)
    - sparkbench_plan: {canary: true}       # the canary only (playbooks/health.yml, sparkbench.health)

Reads the host's variables by the names in ``sparkbench.plan.VARIABLES``; bad input fails the task
with the message naming the variable and the fix. Touches no host.
"""

from __future__ import annotations

from sparkbench import plan as plan_mod
from sparkbench import unit_home
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

    def _member_homes(self, plan, task_vars):
        """``{host: ansible_facts.user_dir}`` of the cluster's members whose facts were read."""
        homes = {}
        for host in ((plan.get("cluster") or {}).get("members") or []):
            facts = self._templar.template(task_vars["hostvars"][host].get("ansible_facts") or {})
            if isinstance(facts, dict) and facts.get("user_dir"):
                homes[host] = facts["user_dir"]
        return homes

    def act(self, args, variables, task_vars):
        if "caches" in args:  # playbooks/teardown.yml: the cache folders alone (role defaults are not there)
            folders = unit_home.unit_cache_folders(variables, (args.get("caches") or {}).get("home"))
            return {"changed": False, "ansible_facts": {"bench_unit_caches": folders}}
        if "unit" in args:
            new = unit_home.with_unit(variables["bench_plan"], (args.get("unit") or {}).get("home"),
                                     self._member_homes(variables["bench_plan"], task_vars))
        elif "provisioned" in args:
            new = plan_mod.provisioned(variables["bench_plan"], args.get("provisioned") or {})
        elif "residents" in args:
            new = plan_mod.with_residents(variables["bench_plan"], (args.get("residents") or {}).get("containers"))
        else:
            if args.get("canary"):  # playbooks/health.yml: the plan reduced to the canary (sparkbench.health)
                from sparkbench import health as health_mod
                variables = health_mod.canary_variables(variables)
            # health.yml measures a unit's resident instead of starting its canary beside it.
            new = plan_mod.plan_host(variables, task_vars.get("inventory_hostname", ""),
                                     check_mode=bool(self._task.check_mode), members=self._members(variables, task_vars),
                                     residents=not args.get("canary"))
            if not self._task.check_mode and args.get("results", True):
                plan_mod.ensure_host_dir(new)
        # The fact is also what the runner's live view reads (sparkbench.runner.progress).
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
