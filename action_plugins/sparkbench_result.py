"""Action ``sparkbench_result``: write one variant's result document (sparkbench.result).

    - sparkbench_result:
        entry: "{{ bench_variant }}"     # the variant's plan entry (bench_plan.variants[i])
        stage: measure                   # host | preflight | launch | measure
        ok: true                         # false: a failure document for that stage
        measure: "{{ llm_bench_measure_run | default({}) }}"    # measure.py's registered result
        startup: "{{ vllm_server_ready | default({}) }}"        # time to ready, model memory
        launch_failure: "{{ vllm_server_failure | default({}) }}"
        failed: "{{ ansible_failed_result | default({}) }}"
        reason: "..."                    # stage host: why the host failed
    - sparkbench_result: {plan: "{{ bench_plan }}", stage: host, ok: false, reason: "..."}   # every variant

Builds the document, validates it against schema/result.schema.json and writes it on the
controller (no module runs on the host). Returns ``path``, ``status``, ``variant``, ``failure``.
"""

from __future__ import annotations

from sparkbench import result as result_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("spark_host_gpu", "spark_host_image_facts", "bench_sparkbench_version", "sparkbench_gpu_less",
                      "sparkbench_simulated", "sparkbench_backend")

    def act(self, args, variables, task_vars):
        if self._task.check_mode:
            return {"skipped": True, "msg": "check mode: no result is written"}
        facts = result_mod.host_facts(variables, task_vars.get("inventory_hostname", ""))
        entries = args["plan"]["variants"] if args.get("plan") else [args["entry"]]
        records = [result_mod.record(e, facts, str(args.get("stage", "measure")), bool(args.get("ok", False)),
                                     measure=args.get("measure") or None, startup=args.get("startup") or None,
                                     launch_failure=args.get("launch_failure") or None,
                                     failed=args.get("failed") or None, reason=args.get("reason"))
                   for e in entries]
        out = {"changed": True, "records": records}
        if len(records) == 1:
            rec = records[0]
            fail = rec.get("failure") or {}
            # The runner's live view reads this fact (sparkbench.runner.progress).
            stage = {"variant": rec["variant"], "stage": "failed" if rec["status"] == "failed" else "done"}
            if fail:
                stage["reason"] = f"{fail.get('stage')}: {fail.get('reason')}"
            out.update(rec, ansible_facts={"bench_stage": stage})
        return out
