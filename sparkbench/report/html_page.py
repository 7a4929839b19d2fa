"""report.html: one self-contained page (tables + charts embedded as base64 data URIs, inline CSS)
rendered from ``templates/report.html.j2``; opens from disk with no server. Its first screen
(1400 × 900 CSS px) holds the answer and the source article's first chart; no table is wider than
the page (cells wrap); the details are folded. A small inline script writes how many chart
images loaded (natural width > 0) into ``#chart-check``."""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_html(context: dict, charts: list[dict]) -> str:
    """The page as a string. ``context``: run_id, generated_at, simulated, n_files, n_hosts,
    load_errors, summary (lines), the tables by place (:func:`sparkbench.report.sections.placed`:
    answer, findings, details; Table objects) and answer_chart (the name of the chart shown in
    the answer block); ``charts``: every chart (those with a path were drawn). The page: the
    answer's table and its chart first, the summary, the findings, the other charts, then the
    details folded."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    embedded = []
    for c in charts:
        if c.get("path"):
            data = Path(c["path"]).read_bytes()
            embedded.append({"name": c.get("name"), "title": c["title"],
                             "b64": base64.b64encode(data).decode("ascii")})
    first = [c for c in embedded if c["name"] == context["answer_chart"]]
    return env.get_template("report.html.j2").render(**context, answer_charts=first,
                                                     charts=[c for c in embedded if c not in first])
