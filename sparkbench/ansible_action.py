"""The base of sparkbench's action plugins (``action_plugins/``): controller-side, no connection,
the task's arguments checked against the action's argument spec, variables read by name and
templated, ``InputError`` (bad input) and ``DocumentError`` (a document that does not match its
model, named by its field) turned into a failed task with its message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar, cast

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase

from .errors import DocumentError, InputError

#: The host variables an action reads: a ``TypedDict`` (``total=False``) of its ``VARIABLE_NAMES``
#: (e.g. ``sparkbench.result_inputs.ResultVariables``), each present only where the host sets it.
VariablesT = TypeVar("VariablesT")


class ControllerAction(ActionBase, Generic[VariablesT]):
    """Runs on the controller only; subclasses implement ``act(args, variables, task_vars)`` and may
    name the shape of their variables (``ControllerAction[ResultVariables]``)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    #: Host variables the action reads (templated before ``act``).
    VARIABLE_NAMES: Iterable[str] = ()

    #: The task's arguments as Ansible's argument spec (``{name: {type, required, default,
    #: choices}}``): an unknown, missing or mistyped one fails the task naming it, and ``act`` gets
    #: them with their defaults. None: the arguments as the task gives them, unchecked.
    ARGUMENTS: Mapping[str, dict] | None = None

    def act(self, args: dict, variables: VariablesT, task_vars: dict) -> dict:  # pragma: no cover
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        if self.ARGUMENTS is not None:
            checked = ArgumentSpecValidator(dict(self.ARGUMENTS)).validate(args)
            if checked.error_messages:
                result.update(failed=True, msg=self._argument_errors(args, checked.errors))
                return result
            args = checked.validated_parameters
        variables = cast("VariablesT", {n: self._templar.template(task_vars[n])
                                        for n in self.VARIABLE_NAMES if n in task_vars})
        try:
            result.update(self.act(args, variables, task_vars))
        except (InputError, DocumentError) as exc:
            result.update(failed=True, msg=str(exc))
        return result

    def _argument_errors(self, given: Mapping, errors: Iterable[Exception]) -> str:
        """One line naming every wrong argument of the task and what the action takes."""
        spec = self.ARGUMENTS or {}
        unknown = sorted(set(given) - set(spec))
        found = [f"unknown argument(s) {', '.join(unknown)}"] if unknown else []
        found += [str(getattr(e, "msg", e)) for e in errors if not isinstance(e, UnsupportedError)]
        takes = ", ".join(f"{k} (required)" if v.get("required") else k for k, v in spec.items()) or "no argument"
        return f"{self._task.action}: {'; '.join(found)}; it takes {takes}"

    def group_members(self, group: object, names: Iterable[str], task_vars: dict) -> list[tuple[str, dict]]:
        """``(host, variables)`` of every host of the inventory group ``group`` in inventory order,
        each with those of ``names`` it sets, templated; [] without a group."""
        if not group:
            return []
        wanted = set(names)
        out = []
        for host in (task_vars.get("groups") or {}).get(str(group)) or []:
            hv = task_vars["hostvars"][host]
            out.append((host, {n: self._templar.template(hv[n]) for n in wanted if n in hv}))
        return out
