"""Head-to-head section: builds of the same model per configuration, % difference against the
reference build (first listed), "within noise" where ranges overlap, and one sentence per build
that states the gap single-stream and at 8 parallel (the seed's "12–17 % slower, gap gone at 8")."""

from __future__ import annotations

from .filters import head_to_head as h2h
from .table import DASH, Table, f, pct, sim


def _noise(value: bool | None) -> str:
    return DASH if value is None else ("within noise" if value else "beyond noise")


def describe_range(lo: float | None, hi: float | None, configs: list[str]) -> str:
    """``12.0–16.7 % slower`` / ``3.1 % faster`` / ``−0.5 … +0.9 %`` over ``configs``."""
    if lo is None or hi is None:
        return "not measured"
    where = f" ({', '.join(configs)})" if configs else ""
    if hi < 0:
        a, b = abs(hi), abs(lo)
        span = f"{a:.1f} %" if round(a, 1) == round(b, 1) else f"{a:.1f}–{b:.1f} %"
        return f"{span} slower{where}"
    if lo > 0:
        span = f"{lo:.1f} %" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}–{hi:.1f} %"
        return f"{span} faster{where}"
    return f"{pct(lo)} … {pct(hi)}{where}"


def sentence(s: dict) -> str:
    """One summary line for a build against the reference build on one host."""
    line = (f"{s['host']} · {s['model_key']}: {s['build']} vs {s['reference_build']} — single-stream "
            f"{describe_range(s['single_pct_min'], s['single_pct_max'], s['single_configs'])}")
    if s["c8_configs"]:
        line += f"; at 8 parallel {describe_range(s['c8_pct_min'], s['c8_pct_max'], s['c8_configs'])}"
        if s["c8_all_within_noise"]:
            line += " — within noise: the gap is gone"
        elif s["c8_all_within_noise"] is False:
            line += " — beyond noise"
    return sim(line, s["simulated"])


def build(results: list[dict], reference_build: str | None = None) -> tuple[dict, list[str], Table | None]:
    """(filter output, summary sentences, comparison table or None when no model has two builds)."""
    data = h2h.head_to_head(results, reference_build=reference_build)
    if not data["rows"]:
        return data, [], None
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["host"], row["model_key"], row["config"], row["build"]), {})[row["metric"]] = row
    rows = []
    for (host, mkey, config, build), m in by_key.items():
        s = m["single"]
        rows.append([host, mkey, config, f"{build} vs {s['reference_build']}", f(s["reference_value"]),
                     f(s["value"]), pct(s["pct_diff"]), _noise(s["within_noise"]),
                     pct(m["combined_2"]["pct_diff"]), pct(m["combined_4"]["pct_diff"]),
                     pct(m["combined_8"]["pct_diff"]), _noise(m["combined_8"]["within_noise"])])
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("head-to-head", sim("Head-to-head: builds of the same model", simulated),
                  ["host", "model", "config", "builds", "ref tok/s", "tok/s", "Δ single", "single noise",
                   "Δ 2 par", "Δ 4 par", "Δ 8 par", "8 par noise"], rows,
                  [f"Δ = (build − reference) / reference; reference build = {data['reference_build']} "
                   "(first listed in the matrix)",
                   "single: within noise when the min–max ranges overlap; combined (measured once): when "
                   "|Δ| ≤ the larger single-stream spread of the two variants"])
    return data, [sentence(s) for s in data["summary"]], table
