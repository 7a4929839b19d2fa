"""Ansible's linear strategy with each module's AnsiballZ payload kept between runs.

ansible-playbook builds the zip it sends to a unit for each module (the module and the
module_utils it imports, found by parsing their source) once per run, into a cache under its own
temporary folder, removed when the run ends: about a fifth of a one-unit run's controller CPU.
Here that cache folder is a link to a folder kept under ``~/.cache/sparkbench/ansiballz/``,
named by what a payload is built from: the Python and Ansible versions and the content of the
roles' own modules (``roles/*/library``), so an edited module or another Ansible builds afresh.
Ansible writes each payload under a lock and renames it into place, so parallel runs share it.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from ansible import constants as C
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.release import __version__ as ANSIBLE_CORE_VERSION

DOCUMENTATION = """
    name: sparkbench_linear
    short_description: the linear strategy with module payloads kept between runs
    description:
        - Ansible's linear strategy; each module's AnsiballZ payload is built once per Ansible,
          Python and role-module content, not once per run (~/.cache/sparkbench/ansiballz).
    author: sparkbench
"""

PROJECT = Path(__file__).resolve().parent.parent


def payload_key() -> str:
    """What the payloads are built from: Python, ansible-core and the collections, the roles' modules."""
    digest = hashlib.sha256(f"{sys.version}\0{ANSIBLE_CORE_VERSION}\0".encode())
    try:
        from importlib.metadata import version
        digest.update(version("ansible").encode())
    except Exception:  # noqa: BLE001 - ansible-core alone: its version above is the key
        pass
    for path in sorted(PROJECT.glob("roles/*/library/*.py")):
        digest.update(str(path.relative_to(PROJECT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def share_payload_cache() -> None:
    """Make this run's ``ansiballz_cache`` folder a link to the kept one (no-op when that fails)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkbench" / "ansiballz"
    kept = base / payload_key()
    run_cache = Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"
    try:
        kept.mkdir(parents=True, exist_ok=True)
        if not run_cache.exists():
            run_cache.symlink_to(kept, target_is_directory=True)
    except OSError:
        pass  # an unwritable home: Ansible builds the payloads in its own folder, as it always does


class StrategyModule(LinearStrategyModule):
    def __init__(self, tqm):
        super().__init__(tqm)
        share_payload_cache()
