"""Fleet section: host × variant matrix of single-stream tok/s with each cell's deviation from the
fleet median, each host's overall deviation, and the hosts flagged as slow with the manifest
fields in which they differ from the majority."""

from __future__ import annotations

from .filters import fleet_compare as fc
from .table import DASH, Table, f, pct, sim


def build(results: list[dict], threshold_pct: float = 5.0) -> tuple[dict, list[Table], list[str]]:
    """(filter output, tables, flag lines). Empty tables for a one-host run."""
    data = fc.fleet_compare(results, threshold_pct=threshold_pct)
    if len(data["hosts"]) < 2:
        return data, [], []
    hosts = data["hosts"]
    rows = []
    for v in data["variants"]:
        cells = data["matrix"].get(v, {})
        if not cells:
            continue
        row = [v, f(data["fleet_median"].get(v))]
        for h in hosts:
            if h in cells:
                row.append(f"{cells[h]:.1f} ({pct(data['deviation_pct'][v][h])})")
            else:
                row.append(DASH)
        rows.append(row)
    rows.append(["host deviation (median)", ""] + [pct(data["host_deviation_pct"].get(h)) for h in hosts])
    notes = [f"cell = single-stream tok/s (deviation from the fleet median); flagged: host deviation "
             f"below −{data['threshold_pct']:g} %"]
    if not data["can_flag"]:
        notes.append(f"fewer than {fc.MIN_HOSTS_TO_FLAG} hosts measured: no host is flagged "
                     "(with two hosts the median is their mean)")
    matrix = Table("fleet", sim("Fleet: host × variant", data["simulated"]),
                   ["variant", "fleet median"] + hosts, rows, notes)
    flag_rows, lines = [], []
    for fl in data["flagged"]:
        diffs = "; ".join(f"{d['field']} {d['value']} (fleet: {d['majority']})" for d in fl["differs"]) \
            or "no manifest difference recorded"
        flag_rows.append([fl["host"], pct(fl["deviation_pct"]), diffs])
        lines.append(sim(f"{fl['host']} is {abs(fl['deviation_pct']):.1f} % below the fleet median "
                         f"(threshold {data['threshold_pct']:g} %); differs in: {diffs}", data["simulated"]))
    tables = [matrix]
    if flag_rows:
        tables.append(Table("fleet-flagged", "Flagged hosts", ["host", "deviation", "differs from the majority in"],
                            flag_rows))
    return data, tables, lines
