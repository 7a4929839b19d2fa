"""The controller-side actions take one verb each (action_plugins/): every task that calls one gives
the arguments its spec names (none unknown, every required one there), and a wrong argument fails
the task with a message naming it and what the action takes. Static: the playbooks are read as
YAML, the actions' specs checked by Ansible's own validator; nothing runs a playbook."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from sparkbench.ansible_action import ControllerAction

from helpers import REPO

pytestmark = pytest.mark.unit

PLUGINS = REPO / "action_plugins"
TASK_LISTS = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")


def action(name: str) -> type[ControllerAction]:
    """The ``ActionModule`` of ``action_plugins/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"action_{name}", PLUGINS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ActionModule


#: The actions that declare their arguments (the rest take theirs as given).
CHECKED = sorted(p.stem for p in PLUGINS.glob("*.py") if action(p.stem).ARGUMENTS is not None)


def tasks(node: object):
    """Every task of a playbook or task file, blocks opened."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        nested = [node[k] for k in TASK_LISTS if isinstance(node.get(k), list)]
        if not nested or "name" in node and "hosts" not in node:
            yield node
        for inner in nested:
            yield from tasks(inner)


def calls() -> list[tuple[str, str, dict]]:
    """``(where, action, arguments)`` of every task that calls a checked action."""
    files = [REPO / "bench.yml", *sorted((REPO / "playbooks").rglob("*.yml")),
             *sorted((REPO / "roles").glob("*/tasks/*.yml"))]
    out = []
    for path in files:
        for task in tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            for name in CHECKED:
                if name in task:
                    out.append((f"{path.relative_to(REPO)}: {task.get('name')}", name, task[name] or {}))
    return out


def test_the_split_actions_declare_their_arguments():
    assert {"sparkbench_plan", "sparkbench_plan_canary", "sparkbench_plan_unit", "sparkbench_plan_provisioned",
            "sparkbench_plan_residents", "sparkbench_unit_caches", "sparkbench_residents", "sparkbench_serve_plan",
            "sparkbench_serve_memory", "sparkbench_serve_on_unit", "sparkbench_serve_unit_record",
            "sparkbench_serve_judge", "sparkbench_serve_record", "sparkbench_health_resident"} <= set(CHECKED)
    assert not (PLUGINS / "sparkbench_serve.py").exists()


def test_every_call_gives_the_arguments_its_action_takes():
    found = calls()
    assert {name for _, name, _ in found} == set(CHECKED), "an action no playbook calls, or one not found"
    for where, name, args in found:
        spec = action(name).ARGUMENTS
        unknown = set(args) - set(spec)
        missing = {k for k, v in spec.items() if v.get("required")} - set(args)
        assert not unknown and not missing, f"{where}: {name} unknown {sorted(unknown)}, missing {sorted(missing)}"


@pytest.mark.parametrize(("name", "args", "words"), [
    ("sparkbench_plan_unit", {}, ["missing required arguments: home", "it takes home (required)"]),
    ("sparkbench_serve_on_unit", {"hom": "/root", "containers": [], "meminfo": "", "image_id": ""},
     ["unknown argument(s) hom", "missing required arguments: home"]),
    ("sparkbench_serve_record", {"state": "deploy"}, ["state must be one of: deployed, failed, undeployed"]),
    ("sparkbench_serve_plan", {"plan": {}}, ["unknown argument(s) plan", "it takes no argument"]),
    ("sparkbench_plan_residents", {"containers": "docker ps"}, ["'containers'", "convert to dict"]),
])
def test_a_wrong_argument_is_named_with_what_the_action_takes(name, args, words):
    spec = action(name).ARGUMENTS
    checked = ArgumentSpecValidator(dict(spec)).validate(dict(args))
    assert checked.error_messages
    me = SimpleNamespace(ARGUMENTS=spec, _task=SimpleNamespace(action=name))
    msg = ControllerAction._argument_errors(me, args, checked.errors)
    assert msg.startswith(f"{name}: ")
    for w in words:
        assert w in msg, msg


def test_the_record_coerces_what_is_left_behind_to_flags():
    spec = action("sparkbench_serve_record").ARGUMENTS
    checked = ArgumentSpecValidator(dict(spec)).validate(
        {"state": "failed", "left": {"stopped_previous": "True", "unreachable": "false"}})
    assert not checked.error_messages
    assert checked.validated_parameters["left"] == {"stopped_previous": True, "unreachable": False}
    assert checked.validated_parameters["when"] is None
