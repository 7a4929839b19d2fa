"""Charts (matplotlib, headless Agg backend) written to ``<run>/charts/*.png``.

Every chart function returns what it plotted — ``{"name", "path", "title", "data"}`` with
``path`` None when there was nothing to plot — so tests check the numbers, not pixels. Across a
fleet, a variant's figure is the median over the hosts that measured it (per-host figures are in
the fleet chart)."""

from __future__ import annotations

import os
from pathlib import Path
from statistics import median
from typing import Any

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import numbers as nb  # noqa: E402

DARK, LIGHT = "#1f4e9a", "#8fb4e8"
BUILD_COLOURS = ["#1f4e9a", "#2e9a4f", "#c77c0e", "#8e3ea8", "#b22d2d"]
PARALLEL = (1, 2, 4, 8)


def _variants(results: list[dict]) -> dict[str, list[dict]]:
    """Measured results grouped by variant name, in report order."""
    out: dict[str, list[dict]] = {}
    for r in nb.sort_results(results):
        if nb.is_measured(r):
            out.setdefault(nb.variant_name(r), []).append(r)
    return out


def _fleet(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return median(vals) if vals else None


def _title(title: str, results: list[dict]) -> str:
    return title + (" — SIMULATED" if any(nb.is_simulated(r) for r in results) else "")


def _save(fig: Any, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def mtp_uplift(results: list[dict], out_dir: Path) -> dict:
    """Stacked bars per model × build: bare single-stream tok/s (dark) + the uplift of its best MTP
    configuration (light), the source article's first chart. data: labels, bare, uplift, best_config, total."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for name, rs in _variants(results).items():
        r0 = rs[0]
        key = (nb.model_of(r0) or "?", nb.build_of(r0) or "?")
        g = groups.setdefault(key, {"bare": None, "best": None, "best_config": None})
        value = _fleet([nb.single_stats(r)[0] for r in rs])
        if value is None:
            continue
        if nb.is_bare(r0):
            g["bare"] = value
        elif nb.is_speculative(r0) and (g["best"] is None or value > g["best"]):
            g["best"], g["best_config"] = value, nb.config_of(r0) or name
    data: dict[str, list] = {"labels": [], "bare": [], "uplift": [], "total": [], "best_config": []}
    for (model, build), g in groups.items():
        if g["bare"] is None:
            continue
        uplift = max(g["best"] - g["bare"], 0.0) if g["best"] is not None else 0.0
        data["labels"].append(f"{model.rsplit('/', 1)[-1]}\n[{build}]")
        data["bare"].append(g["bare"])
        data["uplift"].append(uplift)
        data["total"].append(g["bare"] + uplift)
        data["best_config"].append(g["best_config"])
    title = _title("Single-stream decode: bare + MTP uplift", results)
    if not data["labels"]:
        return {"name": "mtp_uplift", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(data["labels"])), 4.2))
    x = range(len(data["labels"]))
    ax.bar(x, data["bare"], color=DARK, label="bare")
    ax.bar(x, data["uplift"], bottom=data["bare"], color=LIGHT, label="MTP uplift (best config)")
    for i, total in enumerate(data["total"]):
        ax.text(i, total, f"{total:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), data["labels"], fontsize=8)
    ax.set_ylabel("tok/s (single stream)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return {"name": "mtp_uplift", "path": _save(fig, out_dir / "mtp_uplift.png"), "title": title, "data": data}


def build_vs_build(results: list[dict], out_dir: Path, builds_order: list[str] | None = None) -> dict:
    """Grouped bars per configuration, one bar per build of the same model (single-stream tok/s,
    fleet median). data: {model_key: {"configs": [...], "builds": {build: [tok/s or None]}}}."""
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    configs: dict[str, list[str]] = {}
    for name, rs in _variants(results).items():
        r0 = rs[0]
        mkey, build, cfg = nb.model_key(r0), nb.build_of(r0), nb.config_of(r0)
        if not (mkey and build and cfg):
            continue
        table.setdefault(mkey, {}).setdefault(build, {})[cfg] = _fleet([nb.single_stats(r)[0] for r in rs])
        if cfg not in configs.setdefault(mkey, []):
            configs[mkey].append(cfg)
    data: dict[str, dict] = {}
    for mkey, by_build in table.items():
        if len(by_build) < 2:
            continue
        order = [b for b in (builds_order or []) if b in by_build] + sorted(b for b in by_build if b not in (builds_order or []))
        data[mkey] = {"configs": configs[mkey], "builds": {b: [by_build[b].get(c) for c in configs[mkey]] for b in order}}
    title = _title("Build vs build per configuration (single stream)", results)
    if not data:
        return {"name": "build_vs_build", "path": None, "title": title, "data": data}
    fig, axes = plt.subplots(1, len(data), figsize=(max(6, 5 * len(data)), 4.2), squeeze=False)
    for ax, (mkey, d) in zip(axes[0], data.items()):
        n = len(d["builds"])
        width = 0.8 / n
        for j, (build, vals) in enumerate(d["builds"].items()):
            xs = [i + (j - (n - 1) / 2) * width for i in range(len(d["configs"]))]
            heights = [v if v is not None else 0.0 for v in vals]
            ax.bar(xs, heights, width=width, color=BUILD_COLOURS[j % len(BUILD_COLOURS)], label=build)
            ref_vals = next(iter(d["builds"].values()))
            for x, v, ref in zip(xs, vals, ref_vals):
                label = "–" if v is None else f"{v:.1f}"
                if j > 0 and v is not None and ref:
                    label += f"\n{(v - ref) / ref * 100:+.1f} %".replace("-", "−")
                ax.text(x, v or 0.0, label, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(d["configs"])), d["configs"])
        ax.set_ylabel("tok/s (single stream)")
        ax.set_title(mkey, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return {"name": "build_vs_build", "path": _save(fig, out_dir / "build_vs_build.png"), "title": title, "data": data}


def parallel_scaling(results: list[dict], out_dir: Path) -> dict:
    """Combined tok/s against parallelism (1 = single-stream median) per variant, fleet median.
    data: {"x": [1, 2, 4, 8], "series": {variant: [tok/s or None ×4]}}; variants with no parallel
    figure are left out."""
    series: dict[str, list[float | None]] = {}
    for name, rs in _variants(results).items():
        ys = [_fleet([nb.single_stats(r)[0] for r in rs])] + [_fleet([nb.combined_at(r, n) for r in rs]) for n in PARALLEL[1:]]
        if any(y is not None for y in ys[1:]):
            series[name] = ys
    data = {"x": list(PARALLEL), "series": series}
    title = _title("Combined throughput vs parallelism", results)
    if not series:
        return {"name": "parallel_scaling", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, ys in series.items():
        pts = [(x, y) for x, y in zip(PARALLEL, ys) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(PARALLEL), [str(x) for x in PARALLEL])
    ax.set_xlabel("parallel streams")
    ax.set_ylabel("combined tok/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return {"name": "parallel_scaling", "path": _save(fig, out_dir / "parallel_scaling.png"), "title": title, "data": data}


def fleet_bars(results: list[dict], out_dir: Path, fleet: dict | None = None) -> dict:
    """Per variant, one bar per host (single-stream tok/s), flagged hosts hatched.
    data: {"hosts": [...], "variants": [...], "values": {host: [tok/s or None per variant]},
    "flagged": [...]}; nothing is plotted for a one-host run."""
    hosts = sorted({nb.host_of(r) for r in results if nb.is_measured(r)})
    variants = list(_variants(results))
    values = {h: [] for h in hosts}
    for v in variants:
        for h in hosts:
            match = [nb.single_stats(r)[0] for r in results if nb.host_of(r) == h and nb.variant_name(r) == v]
            values[h].append(match[0] if match else None)
    flagged = [x["host"] for x in (fleet or {}).get("flagged", [])]
    data = {"hosts": hosts, "variants": variants, "values": values, "flagged": flagged}
    title = _title("Single-stream tok/s per host across the fleet", results)
    if len(hosts) < 2:
        return {"name": "fleet_bars", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(variants)), 4.2))
    width = 0.8 / len(hosts)
    for j, h in enumerate(hosts):
        xs = [i + (j - (len(hosts) - 1) / 2) * width for i in range(len(variants))]
        ax.bar(xs, [v or 0.0 for v in values[h]], width=width, color=BUILD_COLOURS[j % len(BUILD_COLOURS)],
               hatch="//" if h in flagged else None, edgecolor="black" if h in flagged else None,
               label=h + (" (flagged)" if h in flagged else ""))
    ax.set_xticks(range(len(variants)), variants, rotation=20, fontsize=8)
    ax.set_ylabel("tok/s (single stream)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return {"name": "fleet_bars", "path": _save(fig, out_dir / "fleet_bars.png"), "title": title, "data": data}


def history_lines(trends: dict[str, list[dict]] | None, out_dir: Path, max_hosts: int = 4) -> dict:
    """Each host's trend over the stored runs (``sparkbench.history.host_trends``): one panel per
    host with at least two runs (the first ``max_hosts`` hosts by name), one line per variant,
    single-stream median tok/s per run in run order (a run without a complete result of that
    variant is a gap). data: {"hosts": {host: {"runs": [run ids], "series": {variant: [tok/s or
    None per run]}}}}; nothing is drawn when no host has two runs."""
    hosts: dict[str, dict[str, Any]] = {}
    simulated = False
    for host in sorted(trends or {}):
        rows = (trends or {})[host]
        runs: list[str] = []
        for r in rows:
            if r["run_id"] not in runs:
                runs.append(r["run_id"])
        if len(runs) < 2:
            continue
        series: dict[str, list[float | None]] = {}
        for r in rows:
            ys = series.setdefault(r["variant"], [None] * len(runs))
            if r["status"] == "complete" and r["single_median"] is not None:
                ys[runs.index(r["run_id"])] = r["single_median"]
        hosts[host] = {"runs": runs, "series": series}
        simulated = simulated or any(r.get("simulated") for r in rows)
    title = "Single-stream tok/s over the stored runs, per host" + (" — SIMULATED" if simulated else "")
    data = {"hosts": hosts}
    if not hosts:
        return {"name": "history", "path": None, "title": title, "data": data}
    shown = list(hosts)[:max_hosts]
    fig, axes = plt.subplots(len(shown), 1, figsize=(7, 2.6 * len(shown)), squeeze=False)
    for ax, host in zip(axes[:, 0], shown):
        runs = hosts[host]["runs"]
        for variant, ys in hosts[host]["series"].items():
            pts = [(i, y) for i, y in enumerate(ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant)
        ax.set_xticks(range(len(runs)), runs, rotation=15, fontsize=7)
        ax.set_ylabel("tok/s")
        ax.set_title(host, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=3)
    fig.suptitle(title, fontsize=10)
    return {"name": "history", "path": _save(fig, out_dir / "history.png"), "title": title, "data": data}


def goodput_curves(results: list[dict], out_dir: Path) -> dict:
    """Goodput against the arrival rate, one line per unit × variant (the dashed diagonal: every
    request good); the highest rate meeting the SLO of each line is ringed (its figures:
    :func:`slo_rate_bars`). data: {label: [[rate, goodput], ...]}; nothing is drawn without a rate
    phase."""
    data: dict[str, list[list[float]]] = {}
    best: dict[str, float | None] = {}
    for r in results:
        pts = sorted([float(x["rate"]), float(x["goodput"])] for x in nb.rates_of(r)
                     if isinstance(x.get("rate"), (int, float)) and x.get("goodput") is not None)
        if pts:
            data[f"{nb.unit_of(r)}/{nb.variant_name(r)}"] = pts
            best[f"{nb.unit_of(r)}/{nb.variant_name(r)}"] = nb.highest_rate_meeting_slo(r)[0]
    title = _title("Goodput (requests/s meeting every SLO) by arrival rate", results)
    if not data:
        return {"name": "goodput", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = max(p[0] for pts in data.values() for p in pts)
    ax.plot([0, top], [0, top], linestyle="--", color="grey", linewidth=0.8, label="every request good")
    ringed = False
    for label, pts in data.items():
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        at = [p for p in pts if best.get(label) is not None and p[0] == best[label]]
        if at:
            ax.plot([at[0][0]], [at[0][1]], marker="o", markersize=13, markerfacecolor="none",
                    markeredgecolor=line.get_color(), linestyle="none",
                    label=None if ringed else "highest rate meeting the SLO")
            ringed = True
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("goodput (requests/s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return {"name": "goodput", "path": _save(fig, out_dir / "goodput.png"), "title": title, "data": data}


def slo_rate_bars(results: list[dict], out_dir: Path) -> dict:
    """The highest arrival rate meeting the SLO (:func:`~sparkbench.report.numbers.highest_rate_meeting_slo`),
    one bar per unit × variant that ran the arrival-rate phase (0 and "none" when no rate tried met
    it). data: labels, best_rate (None = none met), target_share."""
    data: dict[str, list] = {"labels": [], "best_rate": [], "target_share": []}
    for r in nb.sort_results(results):
        if not nb.is_measured(r) or not nb.rates_of(r):
            continue
        best, target = nb.highest_rate_meeting_slo(r)
        data["labels"].append(f"{nb.unit_of(r)}/{nb.variant_name(r)}")
        data["best_rate"].append(best)
        data["target_share"].append(target)
    title = _title("Highest arrival rate meeting the SLO", results)
    if not data["labels"]:
        return {"name": "slo_rate", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(data["labels"]) + 2), 3.8))
    values = [b or 0.0 for b in data["best_rate"]]
    bars = ax.bar(range(len(values)), values, color=DARK)
    for bar, best in zip(bars, data["best_rate"]):
        ax.annotate("none" if best is None else f"{best:g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(values)), data["labels"], rotation=15, fontsize=7)
    shares = sorted({t for t in data["target_share"] if t is not None})
    ax.set_ylabel("requests/s (" + "/".join(f"{100 * t:.0f}" for t in shares) + " % of requests within every SLO)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return {"name": "slo_rate", "path": _save(fig, out_dir / "slo_rate.png"), "title": title, "data": data}


def multi_turn_lines(results: list[dict], out_dir: Path) -> dict:
    """TTFT (left) and decode tok/s (right) against the context tokens of each turn, one line per
    unit × variant with the multi-turn phase. data: {label: {"context": [...], "ttft_s": [...],
    "decode_tok_s": [...]}}."""
    data: dict[str, dict[str, list]] = {}
    for r in nb.sort_results(results):
        turns = nb.multi_turn_rows(r)
        if turns:
            data[f"{nb.unit_of(r)}/{nb.variant_name(r)}"] = {
                "context": [t["context_tokens"] for t in turns], "ttft_s": [t["ttft_s"] for t in turns],
                "decode_tok_s": [t["decode_tok_s"] for t in turns]}
    title = _title("Multi-turn: TTFT and decode by context depth", results)
    if not data:
        return {"name": "multi_turn", "path": None, "title": title, "data": data}
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for label, d in data.items():
        for ax, key in ((left, "ttft_s"), (right, "decode_tok_s")):
            pts = [(x, y) for x, y in zip(d["context"], d[key]) if x is not None and y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for ax, ylabel in ((left, "TTFT (s)"), (right, "decode tok/s")):
        ax.set_xlabel("context tokens")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    return {"name": "multi_turn", "path": _save(fig, out_dir / "multi_turn.png"), "title": title, "data": data}


def tune_trials(tune: dict, results: list[dict], out_dir: Path) -> dict:
    """A tune's measured points in the order measured (by the time of their result): the first
    objective per trial, the winner marked; with two objectives, the points on the plane of both
    and the Pareto front joined. data: names, values (per objective), front, winner."""
    names = [o for o in tune.get("objectives") or ["single"]]
    started = {nb.variant_name(r): str(r.get("started_at") or "") for r in results}
    trials = sorted((t for t in tune["trials"] if t.get("status") == "measured"),
                    key=lambda t: started.get(t["name"], ""))
    winner = (tune.get("winner") or {}).get("name")
    data = {"names": [t["name"] for t in trials], "values": {o: [t["figures"].get(o) for t in trials] for o in names},
            "front": tune.get("front"), "winner": winner}
    title = _title(f"Tune: {names[0]} per trial", results)
    if not trials:
        return {"name": "tune_trials", "path": None, "title": title, "data": data}
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(trials)), 4.0))
    if len(names) == 1:
        ys = [v or 0.0 for v in data["values"][names[0]]]
        ax.plot(range(1, len(ys) + 1), ys, "o-", color=DARK)
        for i, t in enumerate(trials):
            ax.annotate(t["name"].rpartition(".")[2] + (" (winner)" if t["name"] == winner else ""),
                        (i + 1, ys[i]), fontsize=7, ha="center", va="bottom")
        ax.set_xticks(range(1, len(ys) + 1))
        ax.set_xlabel("trial (in the order measured)")
        ax.set_ylabel(f"{names[0]} tok/s")
    else:
        xs, ys = (data["values"][names[0]], data["values"][names[1]])
        ax.scatter(xs, ys, color=LIGHT)
        front = [i for i, t in enumerate(trials) if t["name"] in (tune.get("front") or [])]
        front.sort(key=lambda i: xs[i] or 0.0)
        ax.plot([xs[i] for i in front], [ys[i] for i in front], "o-", color=DARK, label="Pareto front")
        ax.set_xlabel(f"{names[0]} tok/s")
        ax.set_ylabel(f"{names[1]} tok/s")
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return {"name": "tune_trials", "path": _save(fig, out_dir / "tune_trials.png"), "title": title, "data": data}


def all_charts(results: list[dict], out_dir: Path, fleet: dict | None = None,
               builds_order: list[str] | None = None, trends: dict[str, list[dict]] | None = None,
               tune: dict | None = None) -> list[dict]:
    """Every chart, in report order (entries with ``path`` None were not drawn); ``trends`` are
    the hosts' history rows for the trend chart. The fleet chart leaves cluster results out (a
    cluster is not a peer of one Spark)."""
    one_unit = [r for r in results if not nb.is_cluster(r)]
    return [mtp_uplift(results, out_dir), build_vs_build(results, out_dir, builds_order),
            parallel_scaling(results, out_dir), fleet_bars(one_unit, out_dir, fleet), history_lines(trends, out_dir),
            goodput_curves(results, out_dir), slo_rate_bars(results, out_dir), multi_turn_lines(results, out_dir)] + \
        ([tune_trials(tune, results, out_dir)] if tune else [])
