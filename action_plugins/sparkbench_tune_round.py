"""Action ``sparkbench_tune_round``: one round of ``sparkbench tune`` (playbooks/tune.yml), on the
controller.

    - sparkbench_tune_round: {space: SPACE.yml}    # → tune_round: kind, select, extra_variants, runs, lines

Reads the host's plan variables (``sparkbench_plan``'s), plans the space's base and every point as
bench.yml would, reads what the run folder (``bench_results_dir``/``bench_run_id``) holds, and
decides what this host measures now (``sparkbench.tune.decide.plan_round``). Several units must be
peers (one hardware profile: ``sparkbench.tune.units``). The first host of the play writes ``tune.json`` and, once the tune is done, ``winner.yml``. A bad space fails the task
naming the field and the fix, before any host is touched.
"""

from __future__ import annotations

from pathlib import Path

from sparkbench import plan as plan_mod
from sparkbench import settings as settings_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.errors import InputError
from sparkbench.paths import DEFAULT_RESULTS_DIR

PLAN_VARIABLES = (*plan_mod.VARIABLES, *(f"llm_bench_{k}" for k in settings_mod.DEFAULTS), "sparkbench_simulated")


class ActionModule(ControllerAction):
    VARIABLE_NAMES = PLAN_VARIABLES
    ARGUMENTS = {"space": {"type": "path", "required": True}}

    def act(self, args, variables, task_vars):
        # Here, not at the top: the space is a pydantic model, and no plugin loads pydantic when it loads.
        from sparkbench.tune.decide import plan_round
        from sparkbench.tune.space import load_space

        space = load_space(args["space"])
        host = str(task_vars.get("inventory_hostname", ""))
        hosts = [str(h) for h in task_vars.get("ansible_play_hosts_all") or [host]]
        if len(hosts) > 1:
            from sparkbench.tune.units import peer_problem

            hostvars = task_vars.get("hostvars") or {}
            problem = peer_problem({h: (hostvars.get(h) or {}).get("bench_hardware_profile_name") for h in hosts})
            if problem:
                raise InputError(problem)
        if not variables.get("bench_run_id"):
            raise InputError("bench_run_id is not set: a tune is one run; pass -e bench_run_id=ID (the same id "
                             "resumes it), or run scripts/sparkbench tune, which picks one")
        run_dir = Path(str(variables.get("bench_results_dir") or DEFAULT_RESULTS_DIR)) / str(variables["bench_run_id"])
        rnd = plan_round(space, variables, host, hosts, run_dir,
                         write=host == hosts[0] and not self._task.check_mode)
        return {"changed": False, "tune_round": rnd}
