"""Action ``sparkbench_plan_unit``: the host's plan with the unit's home put in (playbooks/tasks/host.yml).

    - sparkbench_plan_unit:
        home: "{{ ansible_facts['user_dir'] }}"   # → fact bench_plan with every cache folder resolved

``sparkbench.unit_home.with_unit``: every launch spec, summary line and the bracket, and on a
cluster's head each node with its own member's home (each member's ``ansible_facts``, read from
hostvars). Touches no host.
"""

from __future__ import annotations

from sparkbench import unit_home
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_plan",)
    ARGUMENTS = {"home": {"type": "str", "required": True}}

    def _member_homes(self, plan, task_vars):
        """``{host: ansible_facts.user_dir}`` of the cluster's members whose facts were read."""
        homes = {}
        for host in ((plan.get("cluster") or {}).get("members") or []):
            facts = self._templar.template(task_vars["hostvars"][host].get("ansible_facts") or {})
            if isinstance(facts, dict) and facts.get("user_dir"):
                homes[host] = facts["user_dir"]
        return homes

    def act(self, args, variables, task_vars):
        plan = variables["bench_plan"]
        new = unit_home.with_unit(plan, args["home"], self._member_homes(plan, task_vars))
        return {"changed": False, "ansible_facts": {"bench_plan": new}}
