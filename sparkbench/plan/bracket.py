"""The bracket entry (``bench_bracket``, default true): the host's reference variant
(``reference_entry``) measured again at the end of its sequence, single stream only
(``BRACKET_SETTINGS``), as ``<variant>.bracket`` (the package docstring says why and when).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import measure_bundle
from .. import settings as settings_mod
from ..paths import result_path
from .entries import summary
from .variables import measure_command

if TYPE_CHECKING:
    from .. import plan_types as pt
    from ..settings import SettingsInput


BRACKET_SUFFIX = ".bracket"

#: What a bracket run measures: single stream only (the rest of the settings as the reference's).
BRACKET_SETTINGS: SettingsInput = {"concurrency": [], "context": [0], "quality": False, "image": False, "rates": [],
                                   "rate_search": None, "prefix_tokens": 0, "turns": 0, "tools": False}


def reference_entry(entries: list[pt.PlanEntry]) -> pt.PlanEntry | None:
    """The host's reference variant: the first entry to be measured (action ``measure``) that
    preflight does not refuse; None when there is none."""
    return next((e for e in entries if e["action"] == "measure" and e["preflight"].get("verdict") != "fail"), None)


def bracket_entry(entries: list[pt.PlanEntry], v: pt.HostVariables, host: str, remote_dir: str,
                  check_mode: bool = False) -> pt.PlanEntry | None:
    """The bracket plan entry (see the package docstring), or None without a reference."""
    ref = reference_entry(entries)
    if ref is None:
        return None
    name = f"{ref['name']}{BRACKET_SUFFIX}"
    settings = {**ref["settings"], **BRACKET_SETTINGS}
    entry = {**ref, "name": name, "action": "measure", "settings": settings,
             "result_path": str(result_path(v["bench_results_dir"], v["bench_run_id"], host, name)),
             "bracket": {"of": ref["name"], "position": "end"},
             "measure_argv": settings_mod.measure_argv(
                 settings, python=measure_command(v, remote_dir),
                 base_url=ref["launch"]["base_url"], model=ref["variant"]["model"],
                 quality_file=measure_bundle.on_unit(remote_dir, "quality.json"), sandbox_image=ref["variant"]["image"])}
    entry["summary"] = ([f"bracket: {ref['name']} again at the end of the host's sequence, single stream only "
                         f"(drift check; bench_bracket=false turns it off)"] + summary(entry, check_mode))
    return entry
