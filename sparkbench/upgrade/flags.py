"""The resident's flags against the candidate's own vLLM parser: what the candidate image would refuse.

An upgrade keeps the resident's variant (its ``args``) and changes the image; a flag the candidate's
vLLM renamed, dropped or narrowed makes the candidate fail to start. :func:`candidate_refusals`
checks the flags with ``sparkbench.flags`` against the candidate's version (its stored schema in
``sparkbench/data/vllm_args/``, the nearest one where none is stored) or a given argument table;
:func:`table_from_schema` makes such a table from a schema document (a recorded one, in a test).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..flags import flag_problems

if TYPE_CHECKING:
    from ..flags import ArgOption, ArgSchema
    from ..launch import FlagValue
    from ..preflight import PreflightFailure

ISSUE_ID = "candidate_refuses_flag"
_RENAMED = re.compile(r"^use (--[\w-]+)")
#: the id of :func:`runs_no_vllm`'s refusal
NO_VLLM = "candidate_runs_no_vllm"
_WHY = "the resident runs with it, the candidate's parser would refuse it"
_BEFORE = "in the resident's variant before upgrading"


def table_from_schema(schema: ArgSchema, label: str) -> tuple[dict[str, ArgOption], str]:
    """``({"--flag": option}, label)`` of a schema document (the shape of a
    ``sparkbench/data/vllm_args/<version>.json`` file): every option under each of its names, as
    ``sparkbench.flags.argument_table`` returns a version's (a partial document gives its options alone)."""
    return {f: o for o in schema.get("options") or [] for f in o["flags"]}, label


def _remedy(reason: str, remedy: str) -> str:
    """The fix in the resident's variant: the flag's new name (the closest valid one, as
    ``flag_problems`` suggests it), dropping it, or the value the candidate's parser accepts."""
    if " is not a vLLM flag " in reason:
        renamed = _RENAMED.match(remedy)
        if renamed:
            return (f"rename it to {renamed.group(1)} if that is its new name (the closest flag the candidate's "
                    f"parser knows), else drop it, {_BEFORE}")
        return "drop it from the resident's variant before upgrading"
    return f"give it a value the candidate accepts {_BEFORE} ({remedy})"


def candidate_refusals(args: Mapping[str, FlagValue] | None, candidate_version: str | None,
                       table: tuple[dict[str, ArgOption], str] | None = None) -> list[PreflightFailure]:
    """One ``{id, reason, remedy}`` per flag of the resident's ``args`` (a variant's ``args``) that
    the candidate's parser would refuse: ``candidate_version``'s arguments, or ``table`` (an
    argument table and its description) when given. The reason names the candidate's arguments
    (``"--foo is not a vLLM flag (checked against vLLM 0.33.0's arguments); the resident runs
    with it, …"``), the remedy the fix before upgrading."""
    return [{"id": ISSUE_ID, "reason": f"{p['reason']}; {_WHY}", "remedy": _remedy(p["reason"], p["remedy"])}
            for p in flag_problems(args, candidate_version, table=table)]


def runs_no_vllm(image: str, probe: Mapping[str, object]) -> PreflightFailure:
    """The refusal of a candidate image whose ``vllm --version`` failed (``probe``: that command's
    registered result): it cannot start a server."""
    why = " ".join(str(probe.get("stderr") or probe.get("msg") or "").split())[-300:]
    return {"id": NO_VLLM, "reason": f"{image} does not run vllm (`vllm --version` in it exited {probe.get('rc')}: {why})",
            "remedy": "name an image with vLLM (vllm/vllm-openai:<version>, or one built with "
                      "scripts/build_vllm_cpu_image.sh)"}
