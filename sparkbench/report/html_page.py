"""report.html: one self-contained page (tables + charts embedded as base64 data URIs, inline CSS)
rendered from ``templates/report.html.j2``; opens from disk with no server. A small inline script
writes how many chart images loaded (natural width > 0) into ``#chart-check``."""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render_html(context: dict, charts: list[dict]) -> str:
    """The page as a string. ``context``: run_id, generated_at, simulated, n_files, n_hosts,
    load_errors, summary (lines), tables (Table objects); ``charts``: drawn charts (path set)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    embedded = []
    for c in charts:
        if c.get("path"):
            data = Path(c["path"]).read_bytes()
            embedded.append({"title": c["title"], "b64": base64.b64encode(data).decode("ascii")})
    return env.get_template("report.html.j2").render(**context, charts=embedded)
