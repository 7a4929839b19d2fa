"""Action ``sparkbench_serve_plan``: serve.yml's plan, on the controller, before any unit is touched.

    - sparkbench_serve_plan:         # → fact serve_plan: the serve settings checked; with serve_variant
                                     #   its container names and current record; to deploy
                                     #   (serve_state present), the deployment from its result (found,
                                     #   config hash checked) and the unit's memory plan

``serve_plan.listing`` is true without a serve_variant (serve.yml then lists the unit's residents);
``serve_plan.left_stopped`` the residents an interrupted upgrade left stopped (serve.yml starts them).
Reads the host's variables by the names in ``sparkbench.serve.deploy_plan.VARIABLES``; bad input
fails here naming the variable and the fix.
"""

from __future__ import annotations

from sparkbench import residents as residents_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import deploy_plan
from sparkbench.serve import memory as memory_mod
from sparkbench.serve import source as source_mod


class ActionModule(ControllerAction):
    VARIABLE_NAMES = tuple(deploy_plan.VARIABLES)
    ARGUMENTS: dict = {}

    def act(self, args, variables, task_vars):
        host = str(task_vars.get("inventory_hostname"))
        s = deploy_plan.settings(variables)
        results_dir = str(s["bench_results_dir"] or DEFAULT_RESULTS_DIR)
        variant = s["serve_variant"]
        plan = {"state": s["serve_state"], "variant": variant, "port": s["serve_port"],
                "results_dir": results_dir, "deployment": None, "listing": not variant,
                "left_stopped": residents_mod.left_stopped(results_dir, host),
                "stopped_file": str(residents_mod.stopped_path(results_dir, host))}
        if variant:
            plan["names"] = deploy_plan.names(s, variant)
            current = residents_mod.load(residents_mod.controller_dir(results_dir, host) / f"{variant}.json")
            plan["current"] = current.document() if current is not None else None
        if variant and s["serve_state"] == "present":
            run, path, doc = source_mod.find(results_dir, host, variant, s["serve_run"] or None)
            plan["deployment"] = deploy_plan.deployment(source_mod.source(doc, path, run), s, host)
            plan["memory"] = memory_mod.deploy_plan(plan["deployment"], s, host, results_dir)
        return {"changed": False, "ansible_facts": {"serve_plan": plan}}
