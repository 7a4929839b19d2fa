"""Thin Ansible adapters over the sparkbench package (the logic and its tests live there).

* ``vllm_log_match``          text → the first known issue whose log signature matches (sparkbench.preflight)
* ``vllm_launch_failure``     log (text or the log command's result), start error, task message → why a launch
                              failed (sparkbench.preflight)
* ``sparkbench_launch_spec``  variant, server settings → the launch spec (sparkbench.launch)
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from sparkbench import launch, preflight
from sparkbench.errors import InputError


def vllm_log_match(text: Any, issues: Any = None) -> dict | None:
    """See sparkbench.preflight.vllm_log_match; ``issues`` defaults to the package's known_issues.yml."""
    try:
        return preflight.vllm_log_match(text, issues or preflight.load_known_issues())
    except InputError as exc:
        raise AnsibleFilterError(f"vllm_log_match: {exc}") from None


def vllm_launch_failure(log_text: Any, start_error: Any = "", launch_message: Any = "") -> dict:
    """See sparkbench.preflight.explain_launch: {issue, reason, remedy, log_excerpt}; ``log_text`` a
    text or the registered result of the command that read the log (stdout and stderr)."""
    return preflight.explain_launch(log_text, start_error, launch_message)


def sparkbench_launch_spec(variant: Any, server: Any) -> dict:
    """See sparkbench.launch.launch_spec."""
    try:
        return launch.launch_spec(variant, server)
    except InputError as exc:
        raise AnsibleFilterError(f"sparkbench_launch_spec: {exc}") from None


class FilterModule:
    """sparkbench filters."""

    def filters(self) -> dict:
        return {"vllm_log_match": vllm_log_match, "sparkbench_launch_spec": sparkbench_launch_spec,
                "vllm_launch_failure": vllm_launch_failure}
