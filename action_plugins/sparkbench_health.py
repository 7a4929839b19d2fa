"""Action ``sparkbench_health``: judge the fleet's canary results (sparkbench.health), on the controller.

    - sparkbench_health:
        hosts: "{{ ansible_play_hosts_all }}"   # every unit of the run, failed ones included
      run_once: true

Per host it reads the host's canary result (``bench_plan`` → its canary's ``result_path``) and
why the host failed (``bench_host_failure_reason``) from hostvars; the unit's history baseline
from the history index (sparkbench.history, rebuilt when stale). A unit whose canary was its
resident (the fact ``bench_health_resident``, sparkbench.serve.health_canary) is read from that entry's
``result_path`` and judged against its deployment instead of its history. Writes
``results/<run>/health.json`` and ``health.md``. Returns ``lines`` (one verdict line per unit),
``unhealthy`` (slow or failed units), ``paths`` and the judgement. It never fails itself:
playbooks/health.yml's last task fails when ``unhealthy`` > 0.
"""

from __future__ import annotations

from pathlib import Path

from sparkbench import health as health_mod
from sparkbench import history as history_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.paths import DEFAULT_RESULTS_DIR, result_path


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_results_dir", "bench_run_id", "bench_health_k", "bench_health_floor_pct")

    def act(self, args, variables, task_vars):
        hostvars = task_vars["hostvars"]
        results_dir = Path(str(variables.get("bench_results_dir") or DEFAULT_RESULTS_DIR))
        run_id = str(variables["bench_run_id"])
        units, history = [], {}
        for host in args.get("hosts") or []:
            hv = hostvars[host]
            plan = hv.get("bench_plan") or {}
            canary = str(hv.get("bench_health_canary") or "")
            resident = hv.get("bench_health_resident") or None
            entry = next((e for e in plan.get("variants") or [] if e.get("name") == canary), None)
            if resident:  # the unit's canary was its resident (sparkbench.serve.health_canary)
                entry = resident["entry"]
            path = Path(entry["result_path"]) if entry else result_path(results_dir, run_id, host, canary)
            doc = health_mod.load_unit(path) if canary or resident else None
            reason = hv.get("bench_host_failure_reason")
            if not canary and not resident:
                reason = "bench_health_canary is not set for this host (inventory group_vars)"
            elif doc is None and not reason:
                reason = "no canary result: the host did not reach the canary (see the play output above)"
            unit = {"host": host, "doc": doc, "reason": reason}
            if resident:
                unit["deployment"] = resident["deployment"]
            units.append(unit)
            if doc and doc.get("status") == "complete" and not resident:
                past = history_mod.previous_healthy(results_dir, host, canary, doc.get("config_hash"), run_id)
                if past:
                    past_doc = health_mod.load_unit(past["path"])
                    if past_doc:
                        history[host] = {**past_doc, "_run_id": past["run_id"]}
        judgement = health_mod.judge(units, history, k=float(variables.get("bench_health_k") or health_mod.DEFAULT_K),
                                     floor_pct=float(variables.get("bench_health_floor_pct")
                                                     if variables.get("bench_health_floor_pct") is not None
                                                     else health_mod.DEFAULT_FLOOR_PCT))
        paths = health_mod.write(results_dir / run_id, judgement, run_id)
        history_mod.ensure(results_dir)  # index this run's verdicts now
        # The fact bench_health_verdict: the run's verdict is decided (the runner's live view reads
        # the play's failing on it as the verdict, not as a failure of the host it ran on).
        return {"changed": True, "lines": judgement["lines"], "unhealthy": judgement["unhealthy"],
                "paths": paths, "judgement": judgement,
                "ansible_facts": {"bench_health_verdict": {"unhealthy": judgement["unhealthy"]}}}
