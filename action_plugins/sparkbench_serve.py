"""Action ``sparkbench_serve``: a resident's deployment (sparkbench.serve), on the controller.

    - sparkbench_serve: {plan: {}}       # → fact serve_plan: the settings, and unless listing
                                         #   (no serve_variant) or undeploying, the deployment from
                                         #   its result (found, hash checked) and the unit's memory
                                         #   plan (sparkbench.serve.memory); bad input fails here
    - sparkbench_serve:
        memory: {containers: ...}        # → fact serve_plan with its memory plan checked against
                                         #   the residents the unit lists
    - sparkbench_serve:
        unit: {home, containers, meminfo, image_id}  # → fact serve_deploy (spec.on_unit) and
                                                          #   serve_residents (the unit's residents)
    - sparkbench_serve:
        unit_record: {home: ...}         # → fact serve_unit_record: the variant's record on the unit
    - sparkbench_serve:
        judge: {measure: "{{ llm_bench_measure_run }}"}   # → fact serve_canary (canary.judge)
    - sparkbench_serve:
        record: {state: deployed|failed|undeployed, when: ..., canary: ..., failure: ..., left: ...}
                                         # → fact serve_record, written on the controller (record.write)
    - sparkbench_serve:
        listing: {containers: ...}       # → serve_lines: one line per resident of the unit
    - sparkbench_serve:
        health: {containers: ...}        # health.yml: → fact bench_health_resident, the unit's
                                         #   resident canary (sparkbench.serve.health.canary) or None

Reads the host's variables by the names in ``sparkbench.serve.spec.VARIABLES``. Touches no host.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR
from sparkbench.serve import canary as canary_mod
from sparkbench.serve import health as health_mod
from sparkbench.serve import memory as memory_mod
from sparkbench.serve import record as record_mod
from sparkbench.serve import source as source_mod
from sparkbench.serve import spec as spec_mod


def _bool(value):
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


class ActionModule(ControllerAction):
    VARIABLE_NAMES = list(spec_mod.VARIABLES) + ["serve_plan", "serve_deploy", "serve_canary", "bench_run_id"]

    def act(self, args, variables, task_vars):
        host = str(task_vars.get("inventory_hostname"))
        if "listing" in args:  # also bench.yml's note on residents: no serve setting is read
            found = record_mod.residents((args["listing"] or {}).get("containers") or [])
            return {"changed": False, "serve_lines": record_mod.listing(host, found), "residents": found}
        if "health" in args:  # health.yml: the unit's canary is its resident, if it has one
            results_dir = str(variables.get("bench_results_dir") or DEFAULT_RESULTS_DIR)
            found = record_mod.residents((args["health"] or {}).get("containers") or [])
            resident = health_mod.canary(found, record_mod.deployed(results_dir, host), results_dir,
                                         str(variables["bench_run_id"]), host)
            return {"changed": False, "ansible_facts": {"bench_health_resident": resident}}
        s = spec_mod.settings(variables)
        results_dir = str(s["bench_results_dir"] or DEFAULT_RESULTS_DIR)
        if "plan" in args:
            plan = {"state": s["serve_state"], "variant": s["serve_variant"], "port": s["serve_port"],
                    "results_dir": results_dir, "deployment": None, "listing": not s["serve_variant"]}
            if s["serve_variant"]:
                plan["names"] = spec_mod.names(s, s["serve_variant"])
                current = record_mod.load(record_mod.controller_dir(results_dir, host) / f"{s['serve_variant']}.json")
                plan["current"] = current.document() if current is not None else None
            if s["serve_variant"] and s["serve_state"] == "present":
                run, path, doc = source_mod.find(results_dir, host, s["serve_variant"], s["serve_run"] or None)
                plan["deployment"] = spec_mod.deployment(source_mod.source(doc, path, run), s, host)
                plan["memory"] = memory_mod.deploy_plan(plan["deployment"], s, host, results_dir)
            return {"changed": False, "ansible_facts": {"serve_plan": plan}}
        if "memory" in args:  # the plan again, with the residents the unit lists
            listed = record_mod.on_unit(record_mod.residents((args["memory"] or {}).get("containers") or []),
                                        variables["serve_plan"]["deployment"].get("sim_unit"))
            plan = dict(variables["serve_plan"])
            plan["memory"] = memory_mod.deploy_plan(plan["deployment"], s, host, results_dir, listed)
            return {"changed": False, "ansible_facts": {"serve_plan": plan}}
        if "unit" in args:
            unit = args["unit"] or {}
            planned = variables["serve_plan"]["deployment"]
            # Simulated units of one machine share its Docker engine: this unit's residents mount its account.
            found = record_mod.on_unit(record_mod.residents(unit.get("containers") or []),
                                       spec_mod.sim_unit_path(planned.get("sim_unit"), unit.get("home")))
            # The unit's memory plan with the previous resident kept: where the candidate may start.
            both = memory_mod.deploy_plan(planned, s, host, results_dir, found, beside=True)
            dep = spec_mod.on_unit(planned, s, unit.get("home"), found, str(unit.get("meminfo") or ""),
                                   unit.get("image_id"), both)
            return {"changed": False, "ansible_facts": {"serve_deploy": dep, "serve_residents": found}}
        if "unit_record" in args:  # undeploy: the resident's record on the unit
            home = (args["unit_record"] or {}).get("home")
            path = f"{spec_mod.unit_records_dir(s, home)}/{s['serve_variant']}.json"
            return {"changed": False, "ansible_facts": {"serve_unit_record": path}}
        if "judge" in args:
            run = (args["judge"] or {}).get("measure") or {}
            verdict = canary_mod.judge(variables["serve_deploy"]["baseline"], run.get("stdout"), run.get("rc"),
                                       s["serve_slower_pct"], run.get("stderr"))
            verdict["samples"] = canary_mod.samples_of(run.get("stdout"))
            return {"changed": False, "ansible_facts": {"serve_canary": verdict}}
        if "record" in args:
            a = args["record"] or {}
            when = str(a.get("when") or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            if a.get("state") == "undeployed":
                current = variables["serve_plan"].get("current")
                if not current:
                    return {"changed": False, "ansible_facts": {"serve_record": None}}
                rec = record_mod.undeployed(record_mod.as_record(current), when)
            else:
                # A unit that stopped answering before it was read: the deployment as planned.
                dep = variables.get("serve_deploy") or variables["serve_plan"]["deployment"]
                left = a.get("left")
                if isinstance(left, dict):
                    left = record_mod.left_behind(dep, str((a.get("failure") or {}).get("stage")),
                                                  _bool(left.get("stopped_previous")), _bool(left.get("unreachable")))
                rec = record_mod.record(dep, str(a.get("state")), when, canary=a.get("canary") or None,
                                        failure=a.get("failure") or None, left=left)
            paths = record_mod.write(results_dir, rec)
            return {"changed": True, "paths": paths, "ansible_facts": {"serve_record": rec.document()}}
        return {"failed": True, "msg": "sparkbench_serve: give one of plan, memory, unit, judge, record, listing, health"}
