"""The one exception type for bad input: a message naming the field and the fix.

Filter and action plugins turn it into Ansible's own error (``AnsibleFilterError`` / a failed
task with ``msg``); the CLIs print it on one line and exit 2.
"""


class InputError(ValueError):
    """Bad input (inventory, settings, profile, extra variable): the message names the field and the fix."""
