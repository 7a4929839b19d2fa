"""Action ``sparkbench_result``: write one variant's result document (sparkbench.result).

    - sparkbench_result:
        entry: "{{ bench_variant }}"     # the variant's plan entry (bench_plan.variants[i])
        stage: measure                   # host | preflight | launch | measure
        ok: true                         # false: a failure document for that stage
        measure: "{{ llm_bench_measure_run | default({}) }}"    # measure.py's registered result
        startup: "{{ vllm_server_ready | default({}) }}"        # time to ready, model memory, startup log
        launch_failure: "{{ vllm_server_failure | default({}) }}"
        failed: "{{ ansible_failed_result | default({}) }}"
        reason: "..."                    # stage host: why the host failed
        drop_caches: {requested: "{{ bench_drop_caches | bool }}", run: "{{ bench_drop_caches_run }}"}
                                         # a single-host variant: whether the page cache was to be dropped
                                         # and the drop task's registered result → protocol.drop_caches
        cluster: {spec: ..., state: ..., serving: ...}   # a cluster variant: the Ray cluster's check → cluster block
    - sparkbench_result: {plan: "{{ bench_plan }}", stage: host, ok: false, reason: "..."}   # every variant
    - sparkbench_result:                 # bench_interference: the variant measured alone (measure) and
        entry: "{{ bench_variant }}"     # beside the residents, recorded in one write with its
        stage: measure                   # coresidence block (sparkbench.interference)
        ok: true                         # → fact bench_coresidence_lines
        measure: "{{ bench_interference_alone }}"
        coresidence: {idle: <measure run>, load: <measure run>, loads: <the loads' registered cat>, failure: ""}

Builds the document, validates it against schema/result.schema.json and writes it on the
controller (no module runs on the host). Returns ``path``, ``status``, ``variant``, ``failure``;
the fact ``bench_stage`` (the runner's live view) and, for a complete variant, the fact
``bench_measured_variants`` (the variants completed in this run, in order: bench.yml's bracket
condition). The host's last bandwidth probe (the fact ``bench_bandwidth``, set by the
``sparkbench_bandwidth`` action) goes into ``protocol.bandwidth`` of a document whose server
served, and its path into the fact ``bench_bandwidth_pending`` (the documents the next probe
completes with the probe after them). A bracket entry (``bench_plan.bracket``) is written to ``<variant>.bracket.json``
with its ``bracket`` object.
"""

from __future__ import annotations

from sparkbench import result as result_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("spark_host_gpu", "spark_host_image_facts", "sparkbench_gpu_less",
                      "sparkbench_simulated", "sparkbench_backend", "bench_measured_variants", "bench_bandwidth",
                      "bench_bandwidth_pending")
    #: The run's secrets: masked in what the document takes from the server log (``kernels``).
    SECRET_VARIABLES = ("spark_host_hf_token", "sparkbench_hf_token", "sparkbench_api_key")

    def act(self, args, variables, task_vars):
        if self._task.check_mode:
            return {"skipped": True, "msg": "check mode: no result is written"}
        facts = result_mod.host_facts(variables, task_vars.get("inventory_hostname", ""))
        secrets = []
        for name in self.SECRET_VARIABLES:
            try:
                secrets.append(self._templar.template(task_vars[name]) if name in task_vars else None)
            except Exception:  # an undefined vault variable: the pattern-based redaction still applies
                continue
        # protocol.drop_caches from the drop task's registered result (none for a cluster variant).
        dc = args.get("drop_caches") or {}
        drop_caches = result_mod.drop_caches_outcome(dc.get("requested"), dc.get("run")) if dc else None
        # A whole plan (a host failure): its single-unit and its cluster variants.
        entries = (list(args["plan"]["variants"]) + list(args["plan"].get("cluster_variants") or [])
                   if args.get("plan") else [args["entry"]])
        # protocol.bandwidth: the host's last bandwidth probe (none yet at a host failure).
        bandwidth = variables.get("bench_bandwidth") or None
        records = [result_mod.record(e, facts, str(args.get("stage", "measure")), bool(args.get("ok", False)),
                                     measure=args.get("measure") or None, startup=args.get("startup") or None,
                                     launch_failure=args.get("launch_failure") or None,
                                     failed=args.get("failed") or None, reason=args.get("reason"),
                                     secret_values=[str(s) for s in secrets if s],
                                     drop_caches=drop_caches,
                                     cluster=args.get("cluster") or None, bandwidth=bandwidth,
                                     coresidence=args.get("coresidence"))
                   for e in entries]
        out = {"changed": True, "records": records}
        pending = [r["path"] for r in records if r.get("bandwidth")]
        if len(records) == 1:
            rec = records[0]
            fail = rec.get("failure") or {}
            # The runner's live view reads this fact (sparkbench.runner.progress).
            stage = {"variant": rec["variant"], "stage": "failed" if rec["status"] == "failed" else "done"}
            if fail:
                stage["reason"] = f"{fail.get('stage')}: {fail.get('reason')}"
            facts = {"bench_stage": stage}
            if "coresidence" in args:  # what the play prints after the interference measurement
                facts["bench_coresidence_lines"] = rec["coresidence_lines"]
            if pending:  # completed by the next bandwidth probe (sparkbench_bandwidth)
                facts["bench_bandwidth_pending"] = list(variables.get("bench_bandwidth_pending") or []) + pending
            if rec["status"] == "complete" and not (args.get("entry") or {}).get("bracket"):
                # bench.yml brackets the reference only when its own result of this run is complete.
                done = list(variables.get("bench_measured_variants") or [])
                facts["bench_measured_variants"] = done + [rec["variant"]]
            out.update(rec, ansible_facts=facts)
        return out
