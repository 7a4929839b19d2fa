"""Action ``sparkbench_serve_record``: the deployment record, written on the controller
(sparkbench.serve.deployment_records: its history entry, and the variant's current record unless
the deploy failed).

    - sparkbench_serve_record:
        state: deployed | failed | undeployed
        canary: "{{ serve_canary }}"                # the canary's judgement (deployed; failed at the canary)
        failure: {stage: ..., reason: ..., log_excerpt: ...}    # failed
        left: {stopped_previous: ..., unreachable: ...}         # failed: what runs on the unit after it
        when: "2026-01-01T00:00:00Z"                # default: now (UTC)
                                                    # → fact serve_record (None: nothing to undeploy)

A failed deploy on a unit that stopped answering before it was read is recorded with the
deployment as planned (serve_plan's).
"""

from __future__ import annotations

from datetime import datetime, timezone

from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import deploy_plan
from sparkbench.serve import deployment_records as records_mod


class ActionModule(ControllerAction):
    VARIABLE_NAMES = (*deploy_plan.VARIABLES, "serve_plan", "serve_deploy")
    ARGUMENTS = {"state": {"type": "str", "required": True, "choices": ["deployed", "failed", "undeployed"]},
                 "when": {"type": "str"},
                 "canary": {"type": "dict"},
                 "failure": {"type": "dict"},
                 "left": {"type": "dict", "options": {"stopped_previous": {"type": "bool", "default": False},
                                                      "unreachable": {"type": "bool", "default": False}}}}

    def act(self, args, variables, task_vars):
        s = deploy_plan.settings(variables)
        when = args["when"] or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if args["state"] == "undeployed":
            current = variables["serve_plan"].get("current")
            if not current:
                return {"changed": False, "ansible_facts": {"serve_record": None}}
            rec = records_mod.undeployed(records_mod.as_record(current), when)
        else:
            dep = variables.get("serve_deploy") or variables["serve_plan"]["deployment"]
            left = args["left"]
            if left is not None:
                left = records_mod.left_behind(dep, str((args["failure"] or {}).get("stage")),
                                               left["stopped_previous"], left["unreachable"])
            rec = records_mod.record(dep, args["state"], when, canary=args["canary"] or None,
                                     failure=args["failure"] or None, left=left)
        paths = records_mod.write(str(s["bench_results_dir"] or DEFAULT_RESULTS_DIR), rec)
        return {"changed": True, "paths": paths, "ansible_facts": {"serve_record": rec.document()}}
