"""Action ``sparkbench_upgrade_round``: one round of ``playbooks/upgrade.yml`` for one unit, on the
controller.

    - sparkbench_upgrade_round: {image_probe: "{{ upgrade_image_version }}"}   # `vllm --version` in the image
        # → fact upgrade_round: kind measure | decided | refused, select, extra_variants, bracket,
        #   runs, stop, lines; with kind measure the measurement settings as llm_bench_* facts;
        #   once decided (each resident's gate), its <variant>.upgrade.json and the run's upgrade.md
        #   are written (again, the same, when a later call finds the same decision)

Reads the unit's residents from the controller's deployment records (``bench_results_dir/
.deployments/<host>``), their variants from the results they were deployed from, and this run's
results (``bench_results_dir/bench_run_id``). Bad input (no image, no resident, a resident that is
not there) fails naming the variable and the fix; a flag the candidate's parser refuses refuses the
upgrade before anything starts (``kind: refused``, recorded like any decision). A round that
measures notes the residents it stops on the controller first (``sparkbench.residents.stopped_path``):
a unit lost before they are started again gets them back from its next serve.yml or upgrade.yml run.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparkbench import residents as residents_mod
from sparkbench import settings as settings_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.errors import InputError
from sparkbench.paths import DEFAULT_RESULTS_DIR, write_atomic
from sparkbench.values import as_bool

VARIABLES = ("bench_results_dir", "bench_run_id", "upgrade_image", "upgrade_variant", "upgrade_model_revision",
             "upgrade_tolerance_pct", "upgrade_accept_unresolved")


class ActionModule(ControllerAction):
    VARIABLE_NAMES = VARIABLES
    ARGUMENTS = {"image_probe": {"type": "dict", "default": {}}}

    def act(self, args, variables, task_vars):
        # Here, not at the top: the gate reads the document models, which no plugin loads when it loads.
        from sparkbench.report import upgrade as report
        from sparkbench.upgrade import document as document_mod
        from sparkbench.upgrade import gate
        from sparkbench.upgrade.flags import candidate_refusals, runs_no_vllm
        from sparkbench.upgrade.rounds import plan_round
        from sparkbench.upgrade.targets import targets

        host = str(task_vars.get("inventory_hostname"))
        if not variables.get("bench_run_id"):
            raise InputError("bench_run_id is not set: an upgrade is one run; pass -e bench_run_id=ID (the same id "
                             "goes on with it), or run scripts/sparkbench upgrade, which picks one")
        results_dir = Path(str(variables.get("bench_results_dir") or DEFAULT_RESULTS_DIR))
        run_dir = results_dir / str(variables["bench_run_id"])
        try:
            tolerance = float(variables.get("upgrade_tolerance_pct") or gate.DEFAULT_TOLERANCE_PCT)
        except ValueError:
            raise InputError(f"upgrade_tolerance_pct={variables.get('upgrade_tolerance_pct')!r}: give a number of "
                             "percent, e.g. -e upgrade_tolerance_pct=2.5") from None
        image = str(variables.get("upgrade_image") or "") or None
        probe = args["image_probe"] or {}
        said = str(probe.get("stdout") or "").strip()
        version = said.splitlines()[-1].strip() if said and not probe.get("rc") else None
        found = targets(residents_mod.deployed(results_dir, host), host, variant=variables.get("upgrade_variant") or None,
                        image=image, revision=str(variables.get("upgrade_model_revision") or "") or None,
                        candidate_version=version)
        refusals = {}
        if image:  # the image does not run vllm (it cannot start a server), or its parser refuses a flag
            refusals = {t["variant"]: [runs_no_vllm(image, probe)] if probe.get("rc") else
                        candidate_refusals(t["current"].get("args"), version) for t in found}
        if any(refusals.values()):
            return self._refused(document_mod.refused_before_start(found, refusals, run_dir, host, tolerance),
                                 run_dir, report, document_mod)
        left = residents_mod.left_stopped(results_dir, host)
        rnd = plan_round(found, run_dir, host, runs=int(found[0]["settings"].get("runs") or settings_mod.DEFAULTS["runs"]),
                         tolerance_pct=tolerance, accept_unresolved=as_bool(variables.get("upgrade_accept_unresolved")),
                         left_stopped=left)
        out = {**rnd, "left_stopped": left, "stopped_file": str(residents_mod.stopped_path(results_dir, host)),
               "passed": [v for v, j in rnd["judgements"].items() if j["state"] == "passed"],
               "refused": [v for v, j in rnd["judgements"].items() if j["state"] == "refused"]}
        facts: dict = {"upgrade_round": out}
        if rnd["kind"] == "measure":
            if not self._task.check_mode:  # noted before the play stops them (tasks/residents_restore.yml)
                write_atomic(residents_mod.stopped_path(results_dir, host), json.dumps(rnd["stop"]).encode())
            facts.update({f"llm_bench_{k}": v for k, v in found[0]["settings"].items() if k in settings_mod.DEFAULTS})
        elif not self._task.check_mode:
            docs = document_mod.decided(found, rnd["judgements"], run_dir, host, tolerance)
            self._write(docs, run_dir, report, document_mod)
            out["lines"] = report.lines(docs)
        return {"changed": False, "ansible_facts": facts}

    def _write(self, docs, run_dir, report, document_mod) -> None:
        for d in docs:
            document_mod.write(d, run_dir)
        report.write(run_dir, document_mod.read_all(run_dir))

    def _refused(self, docs, run_dir, report, document_mod):
        """Every resident refused before anything starts."""
        if not self._task.check_mode:
            self._write(docs, run_dir, report, document_mod)
        rnd = {"kind": "refused", "select": [], "extra_variants": [], "bracket": False, "runs": None, "stop": [],
               "judgements": {}, "passed": [], "refused": [d["variant"] for d in docs], "lines": report.lines(docs),
               "left_stopped": [], "stopped_file": ""}
        return {"changed": False, "ansible_facts": {"upgrade_round": rnd}}
