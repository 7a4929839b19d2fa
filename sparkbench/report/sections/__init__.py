"""The report's sections: each section function returns a :class:`~sparkbench.report.table.Section`
(its numbers, its :class:`~sparkbench.report.table.Table` objects, its summary lines), made from
the numbers of :mod:`sparkbench.report.numbers` and :mod:`sparkbench.report.compare` with
:mod:`sparkbench.report.table`'s formatters.

Modules by area: :mod:`.hosts` (per host, quality, image, telemetry, run protocol, failures, hosts
without results), :mod:`.comparisons` (head-to-head, run to run with the version bridge, drift),
:mod:`.fleet`, :mod:`.cluster` (cluster vs one unit, the clusters' manifest), :mod:`.serving`
(goodput, prefix caching, multi-turn, tool calls), :mod:`.manifest` (manifest, kernels, history).

The order of the report lives here: :func:`report_sections` lists the sections in the order their
tables print (report.md, report.html, ``results.json`` → ``tables``); :data:`SUMMARY_ORDER` is the
order of their summary lines; ``results.json``'s keys follow
:data:`sparkbench.report.writers.DOC_KEYS`."""

from __future__ import annotations

from pathlib import Path

from ..load import Run
from ..table import Section
from .cluster import cluster_vs_unit, clusters
from .comparisons import drift_section, head_to_head, run_to_run
from .fleet import fleet
from .hosts import SLO_RATE_HEADER, missing_hosts, per_host, protocol_table
from .manifest import history, history_trend, kernels, manifest
from .serving import goodput_verdicts, multi_turn, prefix_caching, serving, tool_calls

__all__ = ["SUMMARY_ORDER", "report_sections", "summary_lines",
           "cluster_vs_unit", "clusters", "drift_section", "head_to_head", "run_to_run", "fleet",
           "missing_hosts", "per_host", "history", "kernels", "manifest",
           "goodput_verdicts", "multi_turn", "prefix_caching", "serving", "tool_calls",
           # the main table's serving column and two table builders, for the tests
           "SLO_RATE_HEADER", "protocol_table", "history_trend"]

#: The sections whose summary lines the report prints, in that order: the comparisons first, then
#: what failed or went missing, then drift and the serving phases.
SUMMARY_ORDER: tuple[str, ...] = ("head_to_head", "cluster_vs_unit", "fleet", "run_compare", "failures",
                                  "hosts_without_results", "protocol", "drift", "serving", "goodput_verdicts",
                                  "prefix_caching", "multi_turn", "tool_calls")


def report_sections(results: list[dict], missing: list[dict], drift: dict, run_path: str | Path, *,
                    baseline: Run | None = None, fleet_threshold: float = 5.0, bridge_threshold: float = 2.5,
                    reference_build: str | None = None) -> list[Section]:
    """Every section of the report of ``results`` (the run's documents in the tables), in the
    order its tables print. ``missing``: the hosts without results
    (:func:`sparkbench.report.cli.hosts_without_results`); ``drift``: the hosts' drift
    (:func:`sparkbench.report.drift.host_drift`); ``run_path``: the run's folder (its history is
    read beside it); ``baseline``: the loaded baseline run, None without one.
    ValueError for a bad threshold or an unknown reference build."""
    hosts, *per_host_tail = per_host(results)  # rows; quality, image, telemetry, protocol, failures
    return [hosts, missing_hosts(missing),
            head_to_head(results, reference_build, drift=drift),
            cluster_vs_unit(results, drift=drift),
            serving(results), goodput_verdicts(results, reference_build), prefix_caching(results),
            multi_turn(results), tool_calls(results, reference_build),
            fleet(results, fleet_threshold, drift=drift),
            (run_to_run(results, baseline.results, baseline.run_id, bridge_threshold, drift=drift)
             if baseline is not None else Section("run_compare", "Run to run")),
            drift_section(drift),
            *per_host_tail,
            manifest(results), clusters(results), kernels(results), history(run_path, results)]


def summary_lines(sections: list[Section]) -> list[str]:
    """The report's summary: the sections' lines in :data:`SUMMARY_ORDER`. RuntimeError when a
    section with lines is not in it (add its key there)."""
    by_key = {s.key: s for s in sections}
    unlisted = [s.key for s in sections if s.lines and s.key not in SUMMARY_ORDER]
    if unlisted:
        raise RuntimeError(f"sections with summary lines missing from SUMMARY_ORDER: {', '.join(unlisted)}")
    return [line for key in SUMMARY_ORDER if key in by_key for line in by_key[key].lines]
