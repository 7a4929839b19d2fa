"""Steps 1 and 2: the source article's matrix on one simulated Spark — its speed table first, then
its quality and image checks."""

from __future__ import annotations

from .console import Printer
from .play import play, rel
from .show import charts, failures, head_to_head, no_report, summary, table, terminal_table

MATRIX_HOST = "spark-sim01"
# Step 1: the article's speed figures for the whole matrix (2 builds × bare/mtp2/mtp3): single
# stream, 2/4/8 parallel, acceptance per draft position. Shortened for the demo (said in the
# output): 128 forced tokens instead of 256 and, to keep the single-stream median as precise, 8
# requests instead of 5 (an MTP request's speed varies with the drafts accepted, more so over fewer
# tokens); no quality/image phase (step 2), no drift bracket, no nvidia-smi sampling.
MATRIX_TOKENS = 128
MATRIX_RUNS = 8
MATRIX_SETTINGS = {"llm_bench_output_tokens": MATRIX_TOKENS, "llm_bench_runs": MATRIX_RUNS,
                   "llm_bench_quality": False, "llm_bench_image": False, "bench_bracket": False,
                   "llm_bench_telemetry": "off"}
MATRIX_SHORTENED = (f"{MATRIX_TOKENS} forced tokens per request instead of the article's 256, and {MATRIX_RUNS} "
                    "single-stream requests instead of 5 so that the median stays as precise (decode speed excludes "
                    "TTFT, so single-stream tok/s reads the same; combined tok/s at 2/4/8 reads a few % lower, TTFT "
                    "being a larger share of a shorter request); the quality and image checks come in step 2; no "
                    "drift bracket, no nvidia-smi sampling. The full method: ansible-playbook bench.yml -l "
                    "spark-sim01")
# Step 2: the article ran its 4 quality questions on both builds, and the image question with MTP
# on; here on each build's mtp3 (the configuration the article ends with), 1 single-stream request
# each (the speed figures are step 1's), the quality budget as configured (4096 tokens, above the
# 2048 the article recommends for a reasoning model).
QUALITY_VARIANTS = ["nvidia-mtp3", "unsloth-mtp3"]
QUALITY_SETTINGS = {"bench_select": QUALITY_VARIANTS, "llm_bench_quality": True, "llm_bench_image": True,
                    "llm_bench_runs": 1, "llm_bench_warmup": 0, "llm_bench_concurrency": [],
                    "bench_bracket": False, "bench_bandwidth_probe": False}
QUALITY_SHORTENED = ("two variants, not six: each build's mtp3 (the article checked quality per build and the image "
                     "input with MTP on); one single-stream request each (step 1 has the speed figures); the quality "
                     "budget stays 4096 tokens (the article recommends at least 2048 for a reasoning model); no bandwidth probe "
                     "(step 1 probed the unit around its variants)")


def matrix(out: Printer, run_id: str, extra: dict) -> int:
    """Step 1: the table, the verdicts, the summary, the charts."""
    played = play(out, "bench.yml", run_id, limit=MATRIX_HOST, extravars={**MATRIX_SETTINGS, **extra})
    if not no_report(out, played, "report"):
        return played.rc or 1
    terminal_table(out, played.report)
    failures(out, played.report)
    table(out, played.report, "answer", drop=("host",))  # the report's answer first, where it gives one
    head_to_head(out, played.report)
    summary(out, played.report)
    charts(out, played)
    return played.rc


def quality(out: Printer, run_id: str) -> int:
    """Step 2: the quality questions (pass/fail and reasoning tokens per question) and the image
    question (answer right, speculative decoding still active) per build."""
    played = play(out, "bench.yml", run_id, limit=MATRIX_HOST, extravars=QUALITY_SETTINGS, figures=False)
    if not no_report(out, played, "quality report"):
        return played.rc or 1
    shown = table(out, played.report, "quality", drop=("host",))
    shown = table(out, played.report, "image", drop=("host",)) or shown
    if not shown:  # a report without those tables: the terminal table has their columns
        terminal_table(out, played.report)
    failures(out, played.report)
    out.line(f"  Report: {rel(played.run_dir / 'report.html')} · Ansible output: {rel(played.log)}")
    return played.rc
