"""Per-host tables in the seed's layout, quality, image check, telemetry and failures, as
:class:`~bench_report.table.Table` objects built from the ``report_tables`` filter's numbers."""

from __future__ import annotations

from .filters import report_tables as rt
from .table import DASH, Table, f, rng, sim, text, yesno

MAIN_HEADERS = ["variant", "single tok/s median (min–max)", "× bare", "2 par", "4 par", "8 par",
                "acceptance / pos", "mean acc. len", "TTFT p50 s", "% roofline or tok/step",
                "ready s", "model GiB"]


def _roof_or_step(row: dict) -> str:
    """% of roofline for bare runs, tokens per step for MTP runs."""
    if row["pct_of_roofline"] is not None:
        return f"{row['pct_of_roofline']:.0f} %"
    if row["tokens_per_step"] is not None:
        return f"{row['tokens_per_step']:.2f} tok/step"
    return DASH


def main_row(row: dict) -> list[str]:
    """One variant row of the seed-layout table."""
    if row["status"] == "failed":
        return [row["variant"], "failed (see Failures)"] + [DASH] * (len(MAIN_HEADERS) - 2)
    name = row["variant"] + (" (incomplete)" if row["status"] == "incomplete" else "")
    acc = " / ".join(f"{a:.2f}" for a in row["acceptance_per_position"]) or DASH
    return [name, rng(row["single_tok_s"], row["single_min"], row["single_max"], 2),
            f(row["speedup_vs_bare"], 2, "×"), f(row["combined_2"]), f(row["combined_4"]), f(row["combined_8"]),
            acc, f(row["mean_acceptance_length"], 2), f(row["ttft_p50_s"], 3), _roof_or_step(row),
            f(row["time_to_ready_s"], 0), f(row["model_memory_gib"], 1)]


def host_tables(data: dict) -> list[Table]:
    """One seed-layout table per host (``data`` = the ``report_tables`` filter's output)."""
    out = []
    for host, rows in data["hosts"].items():
        simulated = any(r["simulated"] for r in rows)
        bases = sorted({r["roofline_basis"] for r in rows if r["roofline_basis"]})
        notes = ["decode tok/s excludes TTFT; single = median of the runs (min–max); "
                 "2/4/8 par = combined tok/s of N parallel streams"]
        roofs = sorted({(r["model"], round(r["roofline_tok_s"], 1)) for r in rows if r["roofline_tok_s"]})
        if roofs:
            notes.append("roofline (bandwidth / bytes per token, " + ", ".join(bases) + "): "
                         + "; ".join(f"{m} {v:.1f} tok/s" for m, v in roofs)
                         + " — bare rows show % of it, MTP rows tokens per verify step")
        out.append(Table(f"host-{host}", sim(f"Host {host}", simulated), MAIN_HEADERS,
                         [main_row(r) for r in rows], notes))
    return out


def quality_table(data: dict) -> Table | None:
    """Quality per question: status and reasoning tokens."""
    if not data["quality"]:
        return None
    headers = ["host", "variant"] + [q for q in rt.QUALITY_IDS] + ["passed"]
    rows = []
    for q in data["quality"]:
        cells = [q["host"], q["variant"]]
        for qid in rt.QUALITY_IDS:
            status = q[f"q_{qid}"]
            tokens = q[f"rt_{qid}"]
            cells.append(DASH if status is None else (status + (f" ({tokens:.0f} rt)" if tokens is not None else "")))
        cells.append(f"{q['passed']}/{len(rt.QUALITY_IDS)}")
        rows.append(cells)
    return Table("quality", "Quality check", headers, rows,
                 ["status per question; (N rt) = reasoning tokens spent; truncated = the budget ran out before an answer"])


def image_table(data: dict) -> Table | None:
    """Image input check: answer right, spec decode active."""
    if not data["image"]:
        return None
    rows = [[i["host"], i["variant"], text(i["status"]), text(i["answer"]), text(i["expected"]),
             yesno(i["answer_right"]), yesno(i["spec_decode_active"])] for i in data["image"]]
    return Table("image", "Image input check",
                 ["host", "variant", "status", "answer", "expected", "answer right", "spec decode active"], rows)


def telemetry_table(data: dict) -> Table | None:
    """Power, clocks and tokens per joule where telemetry was recorded."""
    if not data["telemetry"]:
        return None
    rows = [[t["host"], t["variant"], t["phase"], f(t["power_w_mean"]), f(t["sm_clock_mhz_mean"], 0),
             f(t["temp_c_max"], 0), f(t["tokens_per_joule"], 3)] for t in data["telemetry"]]
    return Table("telemetry", "Telemetry", ["host", "variant", "phase", "power W (mean)", "SM clock MHz",
                                            "temp °C (max)", "tok/J"], rows)


def failures_table(data: dict) -> Table | None:
    """Failed and incomplete variants with stage, reason and remedy."""
    if not data["failures"]:
        return None
    rows = [[x["host"], x["variant"], text(x["status"]), text(x["stage"]), text(x["reason"]), text(x["remedy"])]
            for x in data["failures"]]
    return Table("failures", "Failures", ["host", "variant", "status", "stage", "reason", "remedy"], rows)


def build(results: list[dict]) -> tuple[dict, list[Table]]:
    """(the filter's numbers, the tables in report order)."""
    data = rt.report_tables(results)
    tables = host_tables(data)
    for extra in (quality_table(data), image_table(data), telemetry_table(data), failures_table(data)):
        if extra is not None:
            tables.append(extra)
    return data, tables
