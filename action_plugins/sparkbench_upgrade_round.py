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

VARIABLES = ("bench_results_dir", "bench_run_id", "upgrade_image", "upgrade_variant", "upgrade_model_revision",
             "upgrade_tolerance_pct", "upgrade_accept_unresolved")


def _flag(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class ActionModule(ControllerAction):
    VARIABLE_NAMES = VARIABLES
    ARGUMENTS = {"image_probe": {"type": "dict", "default": {}}}

    def act(self, args, variables, task_vars):
        # Here, not at the top: the gate reads the document models, which no plugin loads when it loads.
        from sparkbench.report import upgrade as report
        from sparkbench.upgrade import document as document_mod
        from sparkbench.upgrade import gate
        from sparkbench.upgrade.flags import candidate_refusals
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
        accept = _flag(variables.get("upgrade_accept_unresolved"))
        refusals = {t["variant"]: candidate_refusals(t["current"].get("args"), version) for t in found} \
            if image else {}
        if image and probe.get("rc"):  # the image does not run vllm: it cannot start a server
            why = " ".join(str(probe.get("stderr") or probe.get("msg") or "").split())[-300:]
            refusals = {t["variant"]: [{"id": "candidate_runs_no_vllm", "reason": f"{image} does not run vllm "
                                        f"(`vllm --version` in it exited {probe['rc']}: {why})",
                                        "remedy": "name an image with vLLM (vllm/vllm-openai:<version>, or one "
                                                  "built with scripts/build_vllm_cpu_image.sh)"}] for t in found}
        if any(refusals.values()):
            return self._refused(found, refusals, run_dir, host, tolerance, report, document_mod)
        runs = int(found[0]["settings"].get("runs") or settings_mod.DEFAULTS["runs"])
        rnd = plan_round(found, run_dir, host, runs=runs, tolerance_pct=tolerance, accept_unresolved=accept)
        left = residents_mod.left_stopped(results_dir, host)
        facts: dict = {"upgrade_round": {**rnd, "passed": [], "refused": [], "left_stopped": left,
                                         "stopped_file": str(residents_mod.stopped_path(results_dir, host))}}
        if rnd["kind"] == "measure":
            # what an interrupted round left stopped is started again with this round's residents
            rnd["stop"] += [{**r, "health_url": None} for r in left
                            if r["container"] not in {s["container"] for s in rnd["stop"]}]
            if not self._task.check_mode:  # noted before the play stops them (tasks/residents_restore.yml)
                write_atomic(residents_mod.stopped_path(results_dir, host), json.dumps(rnd["stop"]).encode())
            facts.update({f"llm_bench_{k}": v for k, v in found[0]["settings"].items() if k in settings_mod.DEFAULTS})
            return {"changed": False, "ansible_facts": facts}
        if not self._task.check_mode:
            docs = [document_mod.document(t, run_dir, host, state=rnd["judgements"][t["variant"]]["state"],
                                          reason=rnd["judgements"][t["variant"]]["reason"],
                                          figures=rnd["judgements"][t["variant"]]["figures"], tolerance_pct=tolerance,
                                          flags=[], accepted_unresolved=rnd["judgements"][t["variant"]]["accepted_unresolved"])
                    for t in found]
            for d in docs:
                document_mod.write(d, run_dir)
            report.write(run_dir, document_mod.read_all(run_dir))
            facts["upgrade_round"]["lines"] = report.lines(docs)
        facts["upgrade_round"]["passed"] = [v for v, j in rnd["judgements"].items() if j["state"] == "passed"]
        facts["upgrade_round"]["refused"] = [v for v, j in rnd["judgements"].items() if j["state"] == "refused"]
        return {"changed": False, "ansible_facts": facts}

    def _refused(self, found, refusals, run_dir, host, tolerance, report, document_mod):
        """Every resident refused before anything starts: the candidate image runs no vllm, or its
        parser refuses a resident's flag."""
        docs = []
        for t in found:
            said = refusals.get(t["variant"]) or []
            why = "; ".join(f"{r['reason']} ({r['remedy']})" for r in said)
            if not said:
                reason = "not measured: another resident's flags refused the upgrade of this unit"
            elif said[0]["id"] == "candidate_runs_no_vllm":
                reason, said = f"the candidate cannot start a server: {why}", []
            else:
                reason = f"the candidate's parser refuses {why}"
            docs.append(document_mod.document(t, run_dir, host, state="refused", reason=reason, figures=[],
                                              tolerance_pct=tolerance, flags=said))
        if not self._task.check_mode:
            for d in docs:
                document_mod.write(d, run_dir)
            report.write(run_dir, document_mod.read_all(run_dir))
        rnd = {"kind": "refused", "select": [], "extra_variants": [], "bracket": False, "runs": None, "stop": [],
               "judgements": {}, "passed": [], "refused": [t["variant"] for t in found], "lines": report.lines(docs),
               "left_stopped": [], "stopped_file": ""}
        return {"changed": False, "ansible_facts": {"upgrade_round": rnd}}
