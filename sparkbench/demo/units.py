"""Steps 5 and 6: two simulated Sparks serving one model over a real Ray cluster, and the same
pipeline on real vLLM (its CPU build) on this machine."""

from __future__ import annotations

from pathlib import Path

import yaml

from .console import Printer
from .play import play, rel
from .show import failures, no_report, summary, table, terminal_table

PAIR_GROUP = "sim_pair"
PAIR_MODEL = "openai/gpt-oss-120b"
# Ray nodes that start slowly on a loaded 2-core machine still join (inventory default: 30 s).
PAIR_SETTINGS = {"ray_cluster_join_timeout_s": 90}
REAL_HOST = "cpu-real01"
REAL_IMAGE = "sparkbench/vllm-cpu:v0.32.0"
REAL_GROUP_VARS = Path(__file__).resolve().parents[2] / "inventory" / "group_vars" / "real_cpu" / "main.yml"


def real_settings() -> dict:
    """Two configurations of the real_cpu matrix (inventory/group_vars/real_cpu/main.yml): the
    weights' dtype, bf16 against fp32 (the rest of that matrix, bf16-seqs2, is left out), with
    the matrix's common flags plus ``--enforce-eager``: each server starts without compiling the
    model (60-90 s less per start on 2 cores; both configurations alike, so the comparison holds)."""
    common = yaml.safe_load(REAL_GROUP_VARS.read_text(encoding="utf-8"))["bench_common_args"]
    return {"bench_select": ["tiny-bf16", "tiny-fp32"], "bench_common_args": {**common, "enforce-eager": True}}


def pair(out: Printer, run_id: str) -> int:
    """Step 5: gpt-oss-120b on each unit alone, then across both (TP=2, PP=2); the table with the
    cluster rows beside the single-unit rows, and the cluster-vs-one-unit verdicts."""
    played = play(out, "bench.yml", run_id, limit=PAIR_GROUP, extravars=PAIR_SETTINGS)
    if not no_report(out, played, "two-Spark report"):
        return played.rc or 1
    terminal_table(out, played.report)
    failures(out, played.report)
    summary(out, played.report, keep=lambda s: "TP=" in s or "PP=" in s or "cluster" in s.lower(),
            title="Cluster against one unit:")
    out.line(f"  Report: {rel(played.run_dir / 'report.html')} (the cluster's nodes, link and verdicts: 'Clusters')")
    return played.rc


def real(out: Printer, run_id: str) -> int:
    """Step 6: real vLLM's CPU build on cpu-real01, bf16 against fp32: its table (labelled real,
    not simulated; no Spark roofline) and the report's comparison of the configurations."""
    played = play(out, "bench.yml", run_id, limit=REAL_HOST, extravars=real_settings())
    if not no_report(out, played, "real-vLLM report"):
        return played.rc or 1
    terminal_table(out, played.report)
    failures(out, played.report)
    for row in played.report["rows"]:
        if row.get("roofline_skipped"):
            out.line(f"  roofline: {row['roofline_skipped']}")
            break
    man = played.report.get("manifest") or {}
    out.line(f"  manifest: backend {man.get('backend', '?')}, vLLM {man.get('vllm_version', '?')}, "
             f"gpu {man.get('gpu', '?')}, simulated {man.get('simulated', '?')}")
    # The report's comparison of the configurations against the first (bf16), with its verdicts.
    table(out, played.report, "configurations", drop=("host",))
    summary(out, played.report)
    out.line(f"  Report: {rel(played.run_dir / 'report.html')} (the same format as step 1's)")
    return played.rc
