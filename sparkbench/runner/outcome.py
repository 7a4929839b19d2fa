"""The run's outcome: one exit-status policy for ``ansible-playbook bench.yml`` and the runner.

A run fails — bench.yml exits non-zero, ``scripts/sparkbench bench`` exits 1 (a variant) or 2 (a
host) — if and only if a variant or a host failed, decided after the report is written, from what
the report says (its ``results.json``) and the host failures bench.yml recorded:

- a failed variant: a result document with ``status: failed`` (``results.json`` → ``failures``;
  a bracket run that failed counts too: ``drift`` → ``bracket_status``). An *incomplete* variant
  (measured in part, its figures kept) does not fail the run; the report lists it under Failures.
- a failed host: one under "Hosts without results" (``results.json`` → ``hosts_without_results``:
  unreachable, provisioning failed, no result at all), or one bench.yml recorded as failed
  (``host_failures``: host → its host failure object or reason, ``sparkbench.host_failure``).

Only the hosts the run targeted count (``hosts``; ``ansible-playbook -l spark01`` with a run id
that spark02 shares is judged on spark01's documents). A dry run (``--check``, ``check=True``)
measures nothing: only a host whose check failed fails it.
Pure; the ``sparkbench_run_outcome`` filter (bench.yml's report play) and the runner's exit code
(:func:`sparkbench.runner.api.exit_code`) read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from ..host_failure import HostFailure

DRY_RUN_LINE = ("Dry run (--check): nothing was started or measured; each variant's command and preflight "
                "verdict are above.")


class MissingHost(TypedDict, total=False):
    """One of ``results.json``'s ``hosts_without_results`` (``sparkbench.report.cli.hosts_without_results``)."""

    host: str
    reason: str


class FailureRow(TypedDict, total=False):
    """One of ``results.json``'s ``failures`` (``sparkbench.report.numbers.rows.failure_rows``), the keys read here."""

    host: str
    unit: str
    variant: str
    status: str
    stage: str | None
    reason: str | None


class DriftEntry(TypedDict, total=False):
    """A host's entry of ``results.json``'s ``drift`` (``sparkbench.report.drift``), the keys read here."""

    variant: str
    bracket_status: str | None
    reason: str


class ReportOutcomeFacts(TypedDict, total=False):
    """What the outcome reads of the rendered ``results.json``."""

    hosts_without_results: list[MissingHost]
    failures: list[FailureRow]
    drift: dict[str, DriftEntry]


class Outcome(TypedDict):
    """A run's outcome (:func:`outcome`)."""

    failed: bool
    failed_variants: list[str]
    failed_hosts: dict[str, str]
    lines: list[str]
    message: str


def _reason(value: HostFailure | str | None) -> str:
    if isinstance(value, Mapping):
        return str(value.get("summary") or value.get("reason") or "failed")
    return str(value or "failed")


def outcome(report: ReportOutcomeFacts | None, host_failures: Mapping[str, HostFailure | str] | None = None,
            check: bool = False, hosts: Iterable[str] | None = None) -> Outcome:
    """``{"failed", "failed_variants", "failed_hosts", "message", "lines"}`` of a run.

    ``report``: the rendered ``results.json`` (None or ``{}`` when none was written); ``hosts``:
    the hosts the run targeted (None: every host of the report);
    ``failed_variants``: ``["<unit>/<variant>: <stage>: <reason>", …]``; ``failed_hosts``:
    ``{host: reason}``; ``lines``: what to print (one per failure; a dry run's first line says
    nothing was started); ``message``: the lines joined, one line per failure."""
    report = report if isinstance(report, Mapping) else {}
    scope = None if hosts is None else {str(h) for h in hosts}

    def ours(host: object) -> bool:
        return scope is None or str(host) in scope

    failed_hosts: dict[str, str] = {str(h): _reason(v) for h, v in (host_failures or {}).items() if ours(h)}
    variants: list[str] = []
    if not check:
        for x in report.get("hosts_without_results") or []:
            if isinstance(x, Mapping) and x.get("host") and ours(x["host"]):
                failed_hosts.setdefault(str(x["host"]), str(x.get("reason") or "no results"))
        for f in report.get("failures") or []:
            if isinstance(f, Mapping) and f.get("status") == "failed" and ours(f.get("host")):
                unit = f.get("unit") or f.get("host")
                variants.append(f"{unit}/{f.get('variant')}: {f.get('stage') or '?'}: {f.get('reason') or '?'}")
        for host, d in sorted((report.get("drift") or {}).items()):
            if (isinstance(d, Mapping) and d.get("bracket_status") == "failed" and ours(host)
                    and host not in failed_hosts):
                variants.append(f"{host}/{d.get('variant')}.bracket: {d.get('reason') or 'failed'}")
    lines = [DRY_RUN_LINE] if check else []
    if failed_hosts:
        lines.append(f"{len(failed_hosts)} host(s) failed" + (" the host check" if check else "") + ":")
        lines += [f"  {h}: {r}" for h, r in sorted(failed_hosts.items())]
    if variants:
        lines.append(f"{len(variants)} variant(s) failed:")
        lines += [f"  {v}" for v in variants]
    failed = bool(failed_hosts or variants)
    if not check:
        lines.append("Run failed: exit status non-zero." if failed else "No variant and no host failed.")
    return {"failed": failed, "failed_variants": variants, "failed_hosts": failed_hosts, "lines": lines,
            "message": "\n".join(lines)}
