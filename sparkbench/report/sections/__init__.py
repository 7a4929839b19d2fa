"""The report's sections: each section function returns a :class:`~sparkbench.report.table.Section`
(its numbers, its :class:`~sparkbench.report.table.Table` objects, its summary lines), made from
the numbers of :mod:`sparkbench.report.numbers` and :mod:`sparkbench.report.compare` with
:mod:`sparkbench.report.table`'s formatters.

Modules by area: :mod:`.answer` (the fastest variant per model), :mod:`.hosts` (per host, quality,
image, telemetry, run protocol, failures, hosts without results), :mod:`.comparisons`
(head-to-head, configurations of a one-build model, run to run with the version bridge, drift),
:mod:`.fleet`, :mod:`.coresidence` (what sharing a unit with its residents costs), :mod:`.prediction` (the twin's prediction against the measured rate),
:mod:`.cluster` (cluster vs one unit, the clusters' manifest), :mod:`.serving`
(goodput, prefix caching, multi-turn, tool calls), :mod:`.manifest` (manifest, kernels, history); :mod:`.tune` (a tune's points and answer);
:mod:`.verdicts` the verdict cells and their notes every comparison table shares.

The order of the report lives here: :func:`report_sections` lists the sections in the order their
tables print (report.md, report.html, ``results.json`` → ``tables``): the answer
(:data:`ANSWER`, with the chart :data:`ANSWER_CHART` beside it in report.html), the findings,
then the charts, then the details (:data:`DETAILS`, folded in report.html); :data:`SUMMARY_ORDER`
is the order of their summary lines; ``results.json``'s keys follow
:data:`sparkbench.report.writers.DOC_KEYS`."""

from __future__ import annotations

from pathlib import Path

from ..load import Run
from ..table import Section
from .answer import answer
from .cluster import cluster_vs_unit, clusters
from .comparisons import configurations, drift_section, head_to_head, run_to_run
from .coresidence import coresidence
from .fleet import fleet
from .hosts import SLO_RATE_HEADER, missing_hosts, per_host, protocol_table
from .manifest import history, history_trend, kernels, manifest
from .prediction import prediction
from .serving import goodput_verdicts, multi_turn, prefix_caching, serving, tool_calls
from .tune import tune

__all__ = ["ANSWER", "ANSWER_CHART", "DETAILS", "SUMMARY_ORDER", "placed", "report_sections", "summary_lines",
           "answer", "cluster_vs_unit", "clusters", "configurations", "coresidence", "drift_section", "head_to_head", "run_to_run",
           "fleet",
           "missing_hosts", "per_host", "history", "kernels", "manifest", "prediction",
           "goodput_verdicts", "multi_turn", "prefix_caching", "serving", "tool_calls", "tune",
           # the main table's serving column and two table builders, for the tests
           "SLO_RATE_HEADER", "protocol_table", "history_trend"]

#: The sections whose summary lines the report prints, in that order: the answer first, the
#: comparisons, then what failed or went missing, then drift and the serving phases.
SUMMARY_ORDER: tuple[str, ...] = ("answer", "tune", "head_to_head", "config_compare", "cluster_vs_unit", "fleet", "prediction",
                                  "run_compare", "coresidence",
                                  "failures", "hosts_without_results", "protocol", "drift", "serving",
                                  "goodput_verdicts", "prefix_caching", "multi_turn", "tool_calls")
#: The section report.md and report.html open with (its table stands for its summary lines there).
ANSWER = "answer"
#: The chart report.html shows in the answer block: the source article's first chart.
ANSWER_CHART = "mtp_uplift"
#: The sections after the charts, folded (``<details>``) in report.html: how the figures were
#: measured (telemetry, run protocol, manifest and launch commands, the clusters' nodes, kernels)
#: and the hosts' history across runs.
DETAILS: tuple[str, ...] = ("telemetry", "protocol", "manifest", "clusters", "kernels", "history")


def report_sections(results: list[dict], missing: list[dict], drift: dict, run_path: str | Path, *,
                    baseline: Run | None = None, fleet_threshold: float = 5.0, bridge_threshold: float = 2.5,
                    reference_build: str | None = None) -> list[Section]:
    """Every section of the report of ``results`` (the run's documents in the tables), in the
    order its tables print. ``missing``: the hosts without results
    (:func:`sparkbench.report.cli.hosts_without_results`); ``drift``: the hosts' drift
    (:func:`sparkbench.report.drift.host_drift`); ``run_path``: the run's folder (its history is
    read beside it); ``baseline``: the loaded baseline run, None without one.
    ValueError for a bad threshold or an unknown reference build."""
    hosts, quality, image, telemetry, protocol, failures = per_host(results)
    return [answer(results, drift=drift), tune(run_path), hosts, missing_hosts(missing),
            head_to_head(results, reference_build, drift=drift),
            configurations(results, drift=drift),
            cluster_vs_unit(results, drift=drift),
            serving(results), goodput_verdicts(results, reference_build), prefix_caching(results),
            multi_turn(results), tool_calls(results, reference_build),
            fleet(results, fleet_threshold, drift=drift), prediction(results),
            (run_to_run(results, baseline.results, baseline.run_id, bridge_threshold, drift=drift)
             if baseline is not None else Section("run_compare", "Run to run")),
            coresidence(results), drift_section(drift), quality, image, failures,
            # the details (DETAILS): how the figures were measured, and the history
            telemetry, protocol, manifest(results), clusters(results), kernels(results), history(run_path, results)]


def summary_lines(sections: list[Section], skip: tuple[str, ...] = ()) -> list[str]:
    """The report's summary: the sections' lines in :data:`SUMMARY_ORDER`, but those of the
    sections in ``skip`` (report.md and report.html skip :data:`ANSWER`, whose table they show
    first). RuntimeError when a section with lines is not in it (add its key there)."""
    by_key = {s.key: s for s in sections}
    unlisted = [s.key for s in sections if s.lines and s.key not in SUMMARY_ORDER]
    if unlisted:
        raise RuntimeError(f"sections with summary lines missing from SUMMARY_ORDER: {', '.join(unlisted)}")
    return [line for key in SUMMARY_ORDER if key in by_key and key not in skip for line in by_key[key].lines]


def placed(sections: list[Section]) -> dict[str, list]:
    """The report's tables by place: ``answer`` (:data:`ANSWER`'s), ``findings`` (every other
    section's but the details') and ``details`` (:data:`DETAILS`'), each in print order."""
    out: dict[str, list] = {"answer": [], "findings": [], "details": []}
    for s in sections:
        where = "answer" if s.key == ANSWER else "details" if s.key in DETAILS else "findings"
        out[where] += s.tables
    return out
