"""Action ``sparkbench_residents``: one line per resident of the unit (serve.yml's listing, and
bench.yml's note that residents serve beside the run). Reads no serve setting.

    - sparkbench_residents:
        containers: "{{ spark_host_docker.containers }}"   # docker_host_info's list
      register: listing                                     # → listing.serve_lines, listing.residents

``sparkbench.residents``: the containers labelled ``sparkbench.resident``.
"""

from __future__ import annotations

from sparkbench import residents as residents_mod
from sparkbench.ansible_action import ControllerAction


class ActionModule(ControllerAction):
    ARGUMENTS = {"containers": {"type": "list", "elements": "dict", "required": True}}

    def act(self, args, variables, task_vars):
        found = residents_mod.residents(args["containers"])
        return {"changed": False, "serve_lines": residents_mod.listing(str(task_vars.get("inventory_hostname")), found),
                "residents": found}
