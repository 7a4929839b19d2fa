"""The exception types of bad data: ``InputError`` for bad input (a message naming the field and
the fix), ``DocumentError`` for a document (a result, health.json, a deployment record) that does
not match its model.

Filter and action plugins turn them into Ansible's own error (``AnsibleFilterError`` / a failed
task with ``msg``); the CLIs print them on one line and exit 2.
"""


class InputError(ValueError):
    """Bad input (inventory, settings, profile, extra variable): the message names the field and the fix."""


class DocumentError(ValueError):
    """A document that does not match its model (or the result's schema): ``problems`` holds (field path,
    reason) for every wrong field where they are known, the message the first few."""

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.problems = problems or []
