"""The base of sparkbench's action plugins (``action_plugins/``): controller-side, no connection,
variables read by name and templated, ``InputError`` (bad input) and ``DocumentError`` (a document
that does not match its model, named by its field) turned into a failed task with its message."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar, cast

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

    def act(self, args: dict, variables: VariablesT, task_vars: dict) -> dict:  # pragma: no cover
        raise NotImplementedError

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        variables = cast("VariablesT", {n: self._templar.template(task_vars[n])
                                        for n in self.VARIABLE_NAMES if n in task_vars})
        try:
            result.update(self.act(dict(self._task.args), variables, task_vars))
        except (InputError, DocumentError) as exc:
            result.update(failed=True, msg=str(exc))
        return result
