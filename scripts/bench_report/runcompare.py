"""Run-to-run section: per host × variant deltas against a baseline run, and the version bridge
(a reference model re-measured on both runs: are the figures comparable, with the threshold)."""

from __future__ import annotations

from .filters import run_compare as rc
from .table import DASH, Table, f, pct, sim, text


def build(results: list[dict], baseline: list[dict], baseline_id: str,
          threshold_pct: float = 2.5) -> tuple[dict, list[Table], str]:
    """(filter output, [bridge table, deltas table], bridge verdict line)."""
    data = rc.run_compare(results, baseline, threshold_pct=threshold_pct)
    simulated = data["simulated"]
    bridge = data["bridge"]
    verdict = sim(f"Version bridge against run {baseline_id}: {bridge['verdict']}", simulated)
    tables = []
    if bridge["pairs"]:
        rows = [[r["host"], r["variant"], f"{text(r['baseline_vllm'])} → {text(r['current_vllm'])}",
                 f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
                 DASH if r["single_pct"] is None else ("yes" if abs(r["single_pct"]) <= bridge["threshold_pct"] else "no")]
                for r in bridge["pairs"]]
        tables.append(Table("bridge", sim("Version bridge", simulated),
                            ["host", "variant", "vLLM", "baseline tok/s", "current tok/s", "Δ",
                             f"within {bridge['threshold_pct']:g} %"], rows,
                            [f"comparable when every bridge variant's single-stream |Δ| ≤ "
                             f"{bridge['threshold_pct']:g} % (the seed's tolerance)", bridge["verdict"]]))
    rows = [[r["host"], r["variant"], f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
             DASH if r["within_noise"] is None else ("within noise" if r["within_noise"] else "beyond noise"),
             f(r["baseline_combined_8"]), f(r["current_combined_8"]), pct(r["combined_8_pct"])]
            for r in data["rows"]]
    notes = ["Δ = (current − baseline) / baseline; within noise when the single-stream min–max ranges overlap"]
    if data["only_current"]:
        notes.append("only in this run: " + ", ".join(data["only_current"]))
    if data["only_baseline"]:
        notes.append(f"only in {baseline_id}: " + ", ".join(data["only_baseline"]))
    tables.append(Table("run-to-run", sim(f"Run to run: against {baseline_id}", simulated),
                        ["host", "variant", "baseline single", "current single", "Δ single", "noise",
                         "baseline 8 par", "current 8 par", "Δ 8 par"], rows, notes))
    return data, tables, verdict
