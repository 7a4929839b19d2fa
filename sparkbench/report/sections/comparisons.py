"""The comparison sections: builds head to head, the configurations of a one-build model, this run
against a baseline run with the version bridge, and the hosts' drift that marks their comparisons
unreliable. The figures come from :mod:`sparkbench.report.compare` and
:mod:`sparkbench.report.drift`; verdict cells and their notes from :mod:`.verdicts`."""

from __future__ import annotations

from ...verdict import MIN_REQUESTS
from .. import compare
from ..compare import AT_8
from ..table import Section, Table, f, pct, sim, text, yesno
from .hosts import unit_cell
from .verdicts import drift_notes, missing_notes, unit_mark, verdict_cell

__all__ = ["describe_range", "drift_section", "head_to_head", "configurations", "run_to_run", "sentence",
           "verdict_cell"]

#: the comparisons' level columns: (metric, its label in column titles)
LEVELS: tuple[tuple[str, str], ...] = tuple((m, "single" if m == "single" else f"{m.split('_')[1]} par")
                                           for m in compare.METRICS)
#: how a comparison's verdict is reached, under every table of them
VERDICT_NOTE = ("verdict: 95 % interval of the ratio of medians by a bootstrap over whole requests, and the "
                "minimum detectable difference (docs/REPORTS.md, \"How to read a verdict\"); single compares "
                "the single-stream runs, N par (combined, measured once per concurrency) the N per-stream "
                f"decode rates, so below {MIN_REQUESTS} parallel there are too few requests for a verdict")


def level_cells(by_metric: dict[str, dict]) -> list[str]:
    """Δ and verdict for each level (single, 2/4/8 par) of one compared pair."""
    cells = []
    for metric, _ in LEVELS:
        cells += [pct(by_metric[metric]["pct_diff"]), verdict_cell(by_metric[metric]["verdict"])]
    return cells


def level_headers() -> list[str]:
    """"Δ single", "single verdict", "Δ 2 par", "2 par verdict", …"""
    return [h for _, label in LEVELS for h in (f"Δ {label}", f"{label} verdict")]


def level_notes(pairs: list[dict[str, dict]]) -> list[str]:
    """Why a verdict is missing, once per level column, and the drift mark's meaning."""
    notes = missing_notes((f"{label} verdict", [m[metric]["verdict"] for m in pairs]) for metric, label in LEVELS)
    return notes + drift_notes(m["single"]["unreliable"] for m in pairs)


def _kinds_phrase(kinds: list[str], what: str) -> str:
    """`` — differs in 3 of 3 configurations`` / `` — no difference detectable: the gap is gone``
    for one summary line (``what`` = "configurations")."""
    if not kinds:
        return ""
    if all(k == "not_enough" for k in kinds):
        return " — not enough requests for a verdict"
    if all(k == "no_difference" for k in kinds):
        return " — no difference detectable: the gap is gone"
    differ = sum(k == "differs" for k in kinds)
    return f" — differs in {differ} of {len(kinds)} {what}"


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
            f"{describe_range(s['single_pct_min'], s['single_pct_max'], s['single_configs'])}"
            + _kinds_phrase(s["single_kinds"], "configurations"))
    if s["c8_configs"]:
        line += (f"; at 8 parallel {describe_range(s['c8_pct_min'], s['c8_pct_max'], s['c8_configs'])}"
                 + _kinds_phrase(s["c8_kinds"], "configurations"))
    if s.get("unreliable"):
        line += f" (unreliable: drift — {s['unreliable']})"
    return sim(line, s["simulated"])


def head_to_head(results: list[dict], reference_build: str | None = None, drift: dict | None = None) -> Section:
    """"Head-to-head": the numbers, a summary sentence per host × model × build, and the table
    (none when no model has two builds). ``drift``: see
    :func:`sparkbench.report.compare.head_to_head`. ValueError for an unknown reference build."""
    data = compare.head_to_head(results, reference_build=reference_build, drift=drift)
    if not data["rows"]:
        return Section("head_to_head", "Head-to-head", data)
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["host"], row["model_key"], row["config"], row["build"]), {})[row["metric"]] = row
    rows = []
    for (host, mkey, config, build), m in by_key.items():
        s = m["single"]
        rows.append([unit_mark(host, s["unreliable"]), mkey, config, f"{build} vs {s['reference_build']}",
                     f(s["reference_value"]), f(s["value"])] + level_cells(m))
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("head-to-head", sim("Head-to-head: builds of the same model", simulated),
                  ["host", "model", "config", "builds", "ref tok/s", "tok/s"] + level_headers(), rows,
                  [f"Δ = (build − reference) / reference; reference build = {data['reference_build']} "
                   "(first listed in the matrix)", VERDICT_NOTE] + level_notes(list(by_key.values())))
    return Section("head_to_head", "Head-to-head", data, [table], [sentence(s) for s in data["summary"]])


def config_sentence(s: dict) -> str:
    """One summary line for a configuration against the first one of its (only) build on one host,
    e.g. "cpu-real01 · tiny-llama (tiny): fp32 vs bf16 — single-stream X % slower: differs by −X %
    [lo, hi]; at 8 parallel …"."""
    def part(row: dict, what: str) -> str:
        return f"{what} {describe_range(row['pct_diff'], row['pct_diff'], [])}: {row['verdict']['text']}"
    line = (f"{s['host']} · {s['model_key']} ({s['build']}): {s['config']} vs {s['reference_config']} — "
            + part(s["single"], "single-stream"))
    if s[AT_8]["pct_diff"] is not None:
        line += "; " + part(s[AT_8], "at 8 parallel")
    if s.get("unreliable"):
        line += f" (unreliable: drift — {s['unreliable']})"
    return sim(line, s["simulated"])


def configurations(results: list[dict], drift: dict | None = None) -> Section:
    """"Configurations: against the first" (``results.json`` key ``config_compare``): for each
    model with a single build on a host, every configuration against the first one
    (:func:`sparkbench.report.compare.config_compare`), a summary sentence each and the table
    (none without such a model)."""
    data = compare.config_compare(results, drift=drift)
    if not data["rows"]:
        return Section("config_compare", "Configurations", data)
    by_key: dict[tuple, dict[str, dict]] = {}
    for row in data["rows"]:
        by_key.setdefault((row["host"], row["model_key"], row["config"]), {})[row["metric"]] = row
    rows = []
    for (host, mkey, config), m in by_key.items():
        s = m["single"]
        rows.append([unit_mark(host, s["unreliable"]), f"{mkey} ({s['build']})", f"{config} vs {s['reference_config']}",
                     f(s["reference_value"]), f(s["value"])] + level_cells(m))
    simulated = any(r["simulated"] for r in data["rows"])
    table = Table("configurations", sim("Configurations: against the first", simulated),
                  ["host", "model (build)", "configs", "ref tok/s", "tok/s"] + level_headers(), rows,
                  ["for a model with one build on the host: Δ = (configuration − first) / first, the first "
                   "configuration being the first listed in the matrix", VERDICT_NOTE]
                  + level_notes(list(by_key.values())))
    return Section("config_compare", "Configurations", data, [table], [config_sentence(s) for s in data["summary"]])


def _unresolved_note(bridge: dict) -> list[str]:
    """The bridge pairs whose verdict is neither within nor beyond the tolerance, once under the
    table (their cells hold the verdict's words alone)."""
    pairs = [f"{unit_cell(r)}/{r['variant']}" for r in bridge["pairs"]
             if r["bridge_verdict"]["kind"] != "not_enough" and r["bridge_verdict"]["within_tolerance"] is None]
    if not pairs:
        return []
    return [f"unresolved against the {bridge['threshold_pct']:g} % bridge tolerance (the interval reaches past it, "
            "or the minimum detectable difference is above it: more requests would resolve it): "
            + ", ".join(pairs)]


def run_to_run(results: list[dict], baseline: list[dict], baseline_id: str,
               threshold_pct: float = 2.5, drift: dict | None = None) -> Section:
    """"Run to run" (``results.json`` key ``run_compare``): the numbers, the "Version bridge"
    table (when a pair bridges vLLM versions) and the deltas table, and the bridge verdict as
    its summary line. ``drift``: see :func:`sparkbench.report.compare.run_compare`."""
    data = compare.run_compare(results, baseline, threshold_pct=threshold_pct, drift=drift)
    simulated = data["simulated"]
    bridge = data["bridge"]
    verdict = sim(f"Version bridge against run {baseline_id}: {bridge['verdict']}", simulated)
    tables = []
    if bridge["pairs"]:
        rows = []
        for r in bridge["pairs"]:
            ok = compare.pair_ok(r)
            if ok is None:  # no verdict: the medians alone
                ok = None if r["single_pct"] is None else abs(r["single_pct"]) <= bridge["threshold_pct"]
            rows.append([unit_mark(unit_cell(r), r["unreliable"]), r["variant"],
                         f"{text(r['baseline_vllm'])} → {text(r['current_vllm'])}",
                         f(r["baseline_single"], 2), f(r["current_single"], 2), pct(r["single_pct"]),
                         verdict_cell(r["bridge_verdict"]), yesno(ok)])
        tables.append(Table("bridge", sim("Version bridge", simulated),
                            ["host", "variant", "vLLM", "baseline tok/s", "current tok/s", "Δ", "verdict",
                             f"within {bridge['threshold_pct']:g} %"], rows,
                            [f"comparable when every bridge pair's single-stream verdict finds no detectable "
                             f"difference or puts its whole 95 % interval within ±{bridge['threshold_pct']:g} % "
                             "(the seed's tolerance); pairs without per-request data are judged by their "
                             "medians' |Δ| alone", bridge["verdict"]]
                            # without a judged pair the bridge verdict above already says why there is none
                            + (missing_notes([("verdict", [r["bridge_verdict"] for r in bridge["pairs"]])])
                               if any(compare.pair_ok(r) is not None for r in bridge["pairs"]) else [])
                            + _unresolved_note(bridge) + drift_notes(r["unreliable"] for r in bridge["pairs"])))
    rows = [[unit_mark(unit_cell(r), r["unreliable"]), r["variant"], f(r["baseline_single"], 2),
             f(r["current_single"], 2), pct(r["single_pct"]), verdict_cell(r["verdict"]),
             f(r["baseline_combined_8"]), f(r["current_combined_8"]), pct(r["combined_8_pct"]),
             verdict_cell(r["combined_8_verdict"])]
            for r in data["rows"]]
    notes = ["Δ = (current − baseline) / baseline; verdict: the current run's requests against the baseline's "
             "(95 % bootstrap interval of the ratio of medians; 8 par: the 8 per-stream decode rates)"]
    notes += missing_notes([("single verdict", [r["verdict"] for r in data["rows"]]),
                            ("8 par verdict", [r["combined_8_verdict"] for r in data["rows"]])])
    notes += drift_notes(r["unreliable"] for r in data["rows"])
    if data["only_current"]:
        notes.append("only in this run: " + ", ".join(data["only_current"]))
    if data["only_baseline"]:
        notes.append(f"only in {baseline_id}: " + ", ".join(data["only_baseline"]))
    tables.append(Table("run-to-run", sim(f"Run to run: against {baseline_id}", simulated),
                        ["host", "variant", "baseline single", "current single", "Δ single", "single verdict",
                         "baseline 8 par", "current 8 par", "Δ 8 par", "8 par verdict"], rows, notes))
    return Section("run_compare", "Run to run", data, tables, [verdict])


def drift_section(drift: dict) -> Section:
    """"Drift (bracketing)": ``drift`` (:func:`sparkbench.report.drift.host_drift`) as the
    section's numbers, its table (none without bracket documents) and a summary line per host
    that drifted."""
    if not drift:
        return Section("drift", "Drift (bracketing)", drift)
    simulated = any(d.get("simulated") for d in drift.values())
    rows, said = [], []
    for host, d in sorted(drift.items()):
        verdict = d.get("verdict") or {}
        rows.append([host, text(d.get("variant")), f(d.get("reference_median"), 2) + f" (n={d.get('n_reference', 0)})",
                     f(d.get("bracket_median"), 2) + f" (n={d.get('n_bracket', 0)})",
                     text(d.get("reason") or verdict.get("text")),
                     "unreliable" if d.get("unreliable") else
                     ("no drift seen" if verdict.get("kind") == "no_difference" else "no verdict")])
        said.append(verdict if verdict and d.get("reason") == verdict.get("text") else None)  # words in the cell
    table = Table("drift", sim("Drift (bracketing)", simulated),
                  ["host", "reference variant", "start tok/s", "end tok/s", "drift verdict", "comparisons"], rows,
                  ["start = the reference variant's single-stream median in its main result; end = the same "
                   "variant measured again after the host's last variant (<variant>.bracket.json)",
                   "unreliable: the host drifted beyond the noise while its variants ran, so its comparisons "
                   "may show the drift, not the variants"] + missing_notes([("drift verdict", said)]))
    lines = [sim(f"{host}: comparisons unreliable — {d.get('text') or 'drift beyond the noise'}",
                 bool(d.get("simulated")))
             for host, d in sorted(drift.items()) if d.get("unreliable")]
    return Section("drift", "Drift (bracketing)", drift, [table], lines)
