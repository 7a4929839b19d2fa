"""Printing what a run's report says: its terminal table, its tables by key, its verdicts and
summary lines, its failures and charts. Everything printed comes from the rendered results.json
(``sparkbench.report`` owns every figure and verdict); nothing is computed here."""

from __future__ import annotations

from pathlib import Path

from sparkbench.report import closing

from .console import Printer
from .play import Played, rel

CHART_NOTES = {
    "mtp_uplift.png": "per model × build, bare single-stream tok/s (dark) plus the uplift of its best MTP "
                      "configuration (light), total on top — the article's first chart",
    "build_vs_build.png": "nvidia vs unsloth per configuration (bare, mtp2, mtp3), with unsloth's Δ % "
                          "against nvidia printed over its bars",
    "parallel_scaling.png": "combined tok/s at 1/2/4/8 parallel streams, one line per variant: the builds' "
                            "lines converge as parallelism grows",
    "fleet_bars.png": "per variant, one bar per host; hosts flagged below the fleet median are hatched",
    "history.png": "per host with earlier runs stored beside this one, each variant's single-stream tok/s "
                   "run after run (scripts/sparkbench history HOST prints the same)",
}


def indent(text: str, pad: str = "  ") -> str:
    return "\n".join(pad + line if line else line for line in text.splitlines())


def no_report(out: Printer, played: Played, what: str) -> bool:
    """Say where to look when a run wrote no report; True when it did write one."""
    if played.report.get("rows"):
        return True
    out.line(f"  no {what}: the playbook exited {played.ansible_rc}; the whole output is in {rel(played.log)}")
    return False


def terminal_table(out: Printer, report: dict) -> None:
    """The compact table the play printed (its first line says simulated or real), to the width."""
    out.line()
    for line in closing.wrap(closing.label(report), out.width - 2, rest=""):
        out.line(indent(line))
    out.line(indent(closing.compact_table(report, out.width - 2)))


def table(out: Printer, report: dict, key: str, drop: tuple[str, ...] = (), title: bool = True) -> bool:
    """One of the report's tables (results.json ``tables``) by key, without the ``drop`` columns;
    False when the report has no such table."""
    found = next((t for t in report.get("tables") or [] if t.get("key") == key), None)
    if not found or not found.get("rows"):
        return False
    keep = [i for i, h in enumerate(found["headers"]) if h not in drop]
    rows = [[row[i] for i in keep] for row in found["rows"]]
    out.line()
    if title:
        out.line(f"  {found.get('title') or key}")
    out.line(indent(closing.fit_table([found["headers"][i] for i in keep], rows, out.width - 2)))
    return True


def head_to_head(out: Printer, report: dict) -> None:
    """The builds' verdicts, one line per configuration: each metric's Δ and the verdict's words;
    the metrics without enough requests for a verdict named once at the end of the line."""
    rows = (report.get("head_to_head") or {}).get("rows") or []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r.get("host"), r.get("model_key"), r.get("config"), r.get("build"),
                           r.get("reference_build")), []).append(r)
    if not groups:
        return
    out.line()
    out.line("  Verdicts (95 % bootstrap interval over whole requests; docs/REPORTS.md, \"How to read a verdict\"):")
    for (host, _model, config, build, ref), metrics in groups.items():
        said, unjudged = [], []
        for m in metrics:
            name = "single" if m["metric"] == "single" else m["metric"].replace("combined_", "") + "×"
            v = m.get("verdict") or {}
            if v.get("kind") == "not_enough" or not v.get("text"):
                unjudged.append(name)
            else:
                said.append(f"{name}: {v['text']}")
        tail = f" · {'/'.join(unjudged)}: not enough requests for a verdict" if unjudged else ""
        out.line(f"    {build} vs {ref}, {config:<5} {' · '.join(said)}{tail}")


def summary(out: Printer, report: dict, keep=None, title: str = "What the report found:") -> None:
    """The report's summary lines (those ``keep`` accepts, all by default)."""
    lines = [s for s in report.get("summary") or [] if keep is None or keep(s)]
    if lines:
        out.line()
        out.line(f"  {title}")
        for s in lines:
            out.line(f"    - {s}")


def failures(out: Printer, report: dict) -> None:
    """Each failed variant with its stage, reason and fix."""
    for f in report.get("failures") or []:
        out.line(f"  {f['host']}/{f['variant']}: {f['status']} at {f['stage']}: {f['reason']} — fix: {f['remedy']}")


def charts(out: Printer, played: Played) -> None:
    """The charts drawn, each with what it shows, and the report's path."""
    drawn = [c for c in played.report.get("charts") or [] if c.get("path")]
    if drawn:
        out.line()
        out.line(f"  Charts ({rel(played.run_dir / 'charts')}/):")
        for c in drawn:
            name = Path(c["path"]).name
            out.line(f"    {name:<20} {CHART_NOTES.get(name, c.get('title', ''))}")
    out.line(f"  Report: {rel(played.run_dir / 'report.html')} (self-contained; open it in a browser) · also "
             f"report.md, results.csv, results.json · Ansible output: {rel(played.log)}")
