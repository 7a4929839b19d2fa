"""Action ``sparkbench_bandwidth``: read one bandwidth probe and complete the documents waiting for it
(sparkbench.bandwidth).

    - sparkbench_bandwidth:
        probe: "{{ bench_plan.probe }}"               # the probe's container spec (sparkbench.bandwidth.probe_container)
        run: "{{ spark_host_bandwidth_run }}"         # the probe container task's registered result
        started: "{{ bench_bandwidth_started }}"      # the controller's clock when the step began (epoch s)

Runs on the controller. The reading (the figure, or why there is none: a probe never fails the
variant) becomes the fact ``bench_bandwidth``, the probe before every variant recorded from now
on (``sparkbench_result`` puts it into ``protocol.bandwidth``); every document recorded since the
previous probe (the fact ``bench_bandwidth_pending``) gets it as the probe after it, in a file of its
own beside the document (``sparkbench.result.write_after_probe``: the document is not written again;
a drop marks that variant where it is read), and the list is emptied.
The fact ``bench_bandwidth_between``: whether the probe is cheap enough to run between variants
(``sparkbench.bandwidth.reading.between``). Returns ``reading``, ``amended`` and a one-line ``msg``.
"""

from __future__ import annotations

import time

from sparkbench import result as result_mod
from sparkbench.ansible_action import ControllerAction
from sparkbench.bandwidth import reading as bandwidth_mod


class ActionModule(ControllerAction):
    VARIABLE_NAMES = ("bench_bandwidth_pending",)

    def act(self, args, variables, task_vars):
        if self._task.check_mode:
            return {"skipped": True, "msg": "check mode: no probe ran"}
        cost = time.time() - float(args.get("started") or time.time())
        reading = bandwidth_mod.reading(args.get("run") or {}, args.get("probe") or {}, cost)
        amended = [result_mod.write_after_probe(p, reading) for p in variables.get("bench_bandwidth_pending") or []]
        figure = (f"{reading['gbps']:.1f} GB/s ({reading['method']}{', SIMULATED' if reading['simulated'] else ''})"
                  if reading["gbps"] is not None else f"no figure: {reading['reason']}")
        drops = [a["drop"] for a in amended if a["drop"]]
        return {"changed": bool(amended), "reading": reading, "amended": amended,
                "msg": f"bandwidth {figure} in {reading['cost_s']:.1f} s" + "".join(f"; {d}" for d in drops),
                "ansible_facts": {"bench_bandwidth": reading, "bench_bandwidth_pending": [],
                                  "bench_bandwidth_between": bandwidth_mod.between(reading)}}
