"""Action ``sparkbench_serve_judge``: the deploy's canary judged against the source result
(playbooks/tasks/serve_deploy.yml).

    - sparkbench_serve_judge:
        measure: "{{ llm_bench_measure_run }}"   # measure's run on the candidate (stdout, rc, stderr)
                                                 # → fact serve_canary: passed, verdict, reason, the
                                                 #   single-stream median, its per-request samples

``sparkbench.serve.canary.judge`` against serve_deploy's baseline, slower by at most serve_slower_pct.
"""

from __future__ import annotations

from sparkbench.ansible_action import ControllerAction
from sparkbench.serve import canary as canary_mod
from sparkbench.serve import deploy_plan


class ActionModule(ControllerAction):
    VARIABLE_NAMES = (*deploy_plan.VARIABLES, "serve_deploy")
    ARGUMENTS = {"measure": {"type": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        s = deploy_plan.settings(variables)
        run = args["measure"] or {}
        verdict = canary_mod.judge(variables["serve_deploy"]["baseline"], run.get("stdout"), run.get("rc"),
                                   s["serve_slower_pct"], run.get("stderr"))
        verdict["samples"] = canary_mod.samples_of(run.get("stdout"))
        return {"changed": False, "ansible_facts": {"serve_canary": verdict}}
