"""The fleet section: every one-unit host × variant against the fleet median, each host against
its peers, and the flagged hosts with how they differ
(:func:`sparkbench.report.compare.fleet_compare`)."""

from __future__ import annotations

from .. import compare
from ..table import DASH, Section, Table, f, pct, sim
from .verdicts import drift_notes, missing_notes, unit_mark, verdict_cell


def fleet(results: list[dict], threshold_pct: float = 5.0, drift: dict | None = None) -> Section:
    """"Fleet": the numbers, the tables (none for a one-host run) and a summary line per flagged
    host. ``drift``: see :func:`sparkbench.report.compare.fleet_compare`. ValueError for a bad
    threshold."""
    data = compare.fleet_compare(results, threshold_pct=threshold_pct, drift=drift)
    if len(data["hosts"]) < 2:
        return Section("fleet", "Fleet", data)
    hosts = data["hosts"]
    rows = []
    for v in data["variants"]:
        cells = data["matrix"].get(v, {})
        if not cells:
            continue
        row = [v, f(data["fleet_median"].get(v))]
        for h in hosts:
            row.append(f"{cells[h]:.1f} ({pct(data['deviation_pct'][v][h])})" if h in cells else DASH)
        rows.append(row)
    rows.append(["host deviation (median)", ""] + [pct(data["host_deviation_pct"].get(h)) for h in hosts])
    notes = [f"cell = single-stream tok/s (deviation from the fleet median); flagged: host deviation "
             f"below −{data['threshold_pct']:g} %"]
    if not data["can_flag"]:
        notes.append(f"fewer than {compare.MIN_HOSTS_TO_FLAG} hosts measured: no host is flagged "
                     "(with two hosts the median is their mean)")
    if data.get("clusters_left_out"):
        notes.append("not in the fleet (a cluster is not a peer of one Spark; see \"Cluster vs one unit\"): "
                     + ", ".join(data["clusters_left_out"]))
    matrix = Table("fleet", sim("Fleet: host × variant", data["simulated"]),
                   ["variant", "fleet median"] + hosts, rows, notes)
    cells = [(h, v, cell) for v, by_host in data["verdicts"].items() for h, cell in by_host.items()]
    verdict_rows = [[unit_mark(h, data["unreliable"].get(h)), v, f(data["matrix"][v].get(h), 2), verdict_cell(cell)]
                    for h, v, cell in cells]
    verdict_table = Table("fleet-verdicts", sim("Fleet: each host against its peers", data["simulated"]),
                          ["host", "variant", "single tok/s", "verdict against its peers"], verdict_rows,
                          ["the host's single-stream requests against the pooled requests of its peers: the "
                           f"other hosts within ±{data['threshold_pct']:g} % of the fleet median (all others "
                           "when none is), same variant; 95 % bootstrap interval of the ratio of medians"]
                          + missing_notes([("verdict against its peers", [c for _, _, c in cells])])
                          + drift_notes(data["unreliable"].get(h) for h, _, _ in cells))
    flag_rows, lines = [], []
    for fl in data["flagged"]:
        diffs = "; ".join(f"{d['field']} {d['value']} (fleet: {d['majority']})" for d in fl["differs"]) \
            or "no manifest difference recorded"
        kinds = [v["kind"] for v in fl["verdicts"].values()]
        said = (f"; against its peers it differs in {sum(k == 'differs' for k in kinds)} of {len(kinds)} variants"
                if any(k != "not_enough" for k in kinds) else
                ("; against its peers: not enough requests for a verdict" if kinds else ""))
        drift_note = " (unreliable: drift)" if data["unreliable"].get(fl["host"]) else ""
        flag_rows.append([fl["host"], pct(fl["deviation_pct"]), diffs])
        lines.append(sim(f"{fl['host']} is {abs(fl['deviation_pct']):.1f} % below the fleet median "
                         f"(threshold {data['threshold_pct']:g} %){said}{drift_note}; differs in: {diffs}",
                         data["simulated"]))
    tables = [matrix, verdict_table] if verdict_rows else [matrix]
    if flag_rows:
        tables.append(Table("fleet-flagged", "Flagged hosts", ["host", "deviation", "differs from the majority in"],
                            flag_rows))
    return Section("fleet", "Fleet", data, tables, lines)
