"""report.html answers first, in headless Chromium at 1400 × 900 CSS px (Debian's package, installed
by scripts/setup_chromium.sh): the first screen (elements whose top is above 900 px) holds, per
host and model, the single-stream and the 8-parallel winner with a verdict in the Trust contract's
words and the source article's first chart (mtp_uplift); no element is wider than the page, the
folded details opened. A small script injected into a copy of the page measures the layout and
writes it into the DOM, read back with --dump-dom."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

RUNS = REPO / "tests" / "fixtures" / "runs"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, FIRST_SCREEN = 1400, 900
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--virtual-time-budget=5000", f"--window-size={WIDTH},{FIRST_SCREEN}"]
VERDICT = re.compile(r"differs by [+−]\d+\.\d % \[[+−]\d+\.\d, [+−]\d+\.\d\]|no difference detectable above "
                     r"\d+\.\d %|not enough requests for a verdict")

pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason="chromium missing: run scripts/setup_chromium.sh (make setup does)"),
              pytest.mark.sim]

#: The measuring script: the table rows and other blocks whose top is above the first screen's
#: bottom, the answer chart's box; then, with every <details> opened, the page's scroll width
#: and the right edge of the widest element.
PROBE = """
window.addEventListener("load", function () {
  var first = %(first)d, rows = [], blocks = [];
  document.querySelectorAll("tr").forEach(function (tr) {
    var r = tr.getBoundingClientRect();
    if (r.height > 0 && r.top < first) { rows.push(Array.from(tr.cells).map(function (c) { return c.innerText; })); }
  });
  document.querySelectorAll("h1, h2, .banner, .note, li").forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.height > 0 && r.top < first) { blocks.push(el.innerText); }
  });
  var img = document.querySelector("img.answer-chart"), box = img ? img.getBoundingClientRect() : null;
  var chart = img ? {id: img.id, top: box.top, bottom: box.bottom, width: box.width, natural: img.naturalWidth} : null;
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var right = 0, widest = "";
  document.querySelectorAll("body *").forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.right > right) { right = r.right; widest = el.tagName + "#" + el.id; }
  });
  var out = document.createElement("pre");
  out.id = "probe"; out.hidden = true;
  out.textContent = JSON.stringify({innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
                                    right: right, widest: widest, rows: rows, blocks: blocks, chart: chart,
                                    details: document.querySelectorAll("details").length});
  document.body.appendChild(out);
});
""" % {"first": FIRST_SCREEN}


def render(run: Path, *args: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "sparkbench.report", "render", str(run), "--quiet", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return run / "report.html"


def measure(report: Path, tmp_path: Path) -> dict:
    """The probe's figures for ``report`` at 1400 px wide (a copy of the page with the script)."""
    page = report.read_text(encoding="utf-8")
    probe = report.with_name("probe.html")
    probe.write_text(page.replace("</body>", f"<script>{PROBE}</script>\n</body>"), encoding="utf-8")
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="probe"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    assert m, "the probe did not run: " + proc.stdout[-500:]
    out = json.loads(html.unescape(m.group(1)))
    assert out["innerWidth"] == WIDTH
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("first-screen") / "runs"
    shutil.copytree(RUNS, dest)
    return dest


def winners(run: Path) -> dict[str, dict[str, str]]:
    """host → the variant with the highest single-stream median and the one with the highest
    combined tok/s at 8 parallel, from results.json's rows (not from the answer section)."""
    rows = json.loads((run / "results.json").read_text(encoding="utf-8"))["rows"]
    out: dict[str, dict[str, str]] = {}
    for host in sorted({r["host"] for r in rows}):
        done = [r for r in rows if r["host"] == host and r["status"] == "complete"]
        out[host] = {"single stream": max(done, key=lambda r: r["single_tok_s"])["variant"],
                     "8 parallel": max(done, key=lambda r: r["combined_8"])["variant"]}
    return out


def test_first_screen_answers_per_model_and_nothing_is_wider_than_the_page(runs: Path, tmp_path: Path):
    """The seed's full matrix (fleet-sim: 2 builds × bare/mtp2/mtp3, single and 2/4/8 parallel,
    on three hosts) with a baseline run (the version bridge and run-to-run tables too)."""
    run = runs / "fleet-sim"
    out = measure(render(run, "--baseline", str(runs / "fleet-sim-base")), tmp_path)
    assert out["scrollWidth"] <= WIDTH and out["right"] <= WIDTH, (out["scrollWidth"], out["right"], out["widest"])
    assert out["details"] >= 4  # telemetry, protocol, manifest, launch commands, kernels, history: folded
    first = [" | ".join(cells) for cells in out["rows"]]
    for host, best in winners(run).items():
        for at, variant in best.items():
            line = next((x for x in first if x.startswith(f"{host} | Qwen3.6-35B-A3B-NVFP4 | {at} | {variant} |")),
                        None)
            assert line, f"{host} {at} {variant} not on the first screen: {first}"
            assert VERDICT.search(line) and " over " in line, line  # the lead over the runner-up and the verdict
    # the source article's first chart, loaded, starts on the first screen
    chart = out["chart"]
    assert chart and chart["id"] == "chart-mtp_uplift" and chart["natural"] > 0 and chart["top"] < FIRST_SCREEN
    # the answer comes first, before any long table: no host or head-to-head table on the first screen
    titles = [b for b in out["blocks"] if b.startswith(("Answer", "Summary", "Host ", "Head-to-head"))]
    assert titles[0] == "Answer: the fastest variant per model (simulated)"
    assert not any(b.startswith(("Host ", "Head-to-head")) for b in titles), titles


@pytest.mark.parametrize("run, args", [("pair-sim", ()), ("serving-sim", ()),
                                       ("seed-v0.25", ("--baseline", "{runs}/seed-v0.24"))])
def test_no_report_is_wider_than_the_page(runs: Path, tmp_path: Path, run: str, args: tuple[str, ...]):
    """The other fixture runs (clusters, the serving phases' wide tables, the seed's published
    figures with the version bridge), their folded details opened."""
    report = render(runs / run, *(a.replace("{runs}", str(runs)) for a in args))
    out = measure(report, tmp_path)
    assert out["scrollWidth"] <= WIDTH and out["right"] <= WIDTH, (out["scrollWidth"], out["right"], out["widest"])


def with_coresidence(run: Path) -> int:
    """Every complete result of ``run`` gets a ``coresidence`` block (sparkbench.interference.coresidence) beside
    two residents with long names, idle and under load; returns how many documents got one."""
    from sparkbench.interference import coresidence

    residents = [{"name": f"sparkbench-resident-{v}", "variant": v, "port": 8080 + i}
                 for i, v in enumerate(("nvidia-qwen36-35b-a3b-mtp3", "unsloth-qwen36-35b-a3b-mtp2"))]
    block = {"residents": residents, "load_rps": 1.5, "runs": 5,
             "loads": [{"resident": r["name"]} for r in residents]}
    load = json.dumps({"status": "incomplete", "rates": [{"requests": 9, "completed": 8, "achieved_rate": 1.46,
                                                          "output_tok_s": 180.0, "stopped": "interrupted by SIGTERM"}]})

    def measured(rates: list[float], scale: float) -> dict:
        return {"rc": 0, "stdout": json.dumps({"single": {"runs": [{"decode_tok_s": x * scale, "valid": True}
                                                                     for x in rates]}})}
    n = 0
    for path in sorted(run.glob("*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("status") != "complete":
            continue
        rates = [r["decode_tok_s"] for r in doc["single"]["runs"]]
        doc["coresidence"] = coresidence.coresidence(doc, block, measured(rates, 0.999), measured(rates, 0.62),
                                                     [load] * 2)
        path.write_text(json.dumps(doc), encoding="utf-8")
        n += 1
    return n


def test_the_coresidence_table_is_no_wider_than_the_page(runs: Path, tmp_path: Path):
    """The Co-residence section (bench_interference) on the seed's full matrix: every variant of three
    hosts beside two residents with long names, idle and under load."""
    run = runs / "fleet-sim-coresidence"
    shutil.copytree(runs / "fleet-sim", run)
    assert with_coresidence(run) >= 12
    report = render(run)
    assert "Co-residence" in report.read_text(encoding="utf-8")
    out = measure(report, tmp_path)
    assert out["scrollWidth"] <= WIDTH and out["right"] <= WIDTH, (out["scrollWidth"], out["right"], out["widest"])
