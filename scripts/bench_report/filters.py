"""The report filter plugins, imported by path from the repository's ``filter_plugins/`` (it is not
a package). One implementation: Ansible templates and these reports use the same functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
FILTER_DIR = REPO_ROOT / "filter_plugins"


def _load(name: str) -> ModuleType:
    """Import ``filter_plugins/<name>.py`` under the module name the plugins use for siblings."""
    mod_name = f"sparkbench_filter_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, FILTER_DIR / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {FILTER_DIR / (name + '.py')}; is the repository complete?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


report_tables = _load("report_tables")
head_to_head = _load("head_to_head")
fleet_compare = _load("fleet_compare")
run_compare = _load("run_compare")
