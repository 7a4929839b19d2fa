"""Steps 3 and 4: the simulated fleet — health and the fleet comparison from one canary run on
every unit — and the version bridge v0.24 → v0.25."""

from __future__ import annotations

from .console import Printer
from .play import load_json, play, rel
from .seed import MATRIX_HOST, MATRIX_TOKENS
from .show import no_report, summary, table

FLEET = "sim_sparks"
# Step 3: playbooks/health.yml runs its canary (the reference variant nvidia-bare, single stream,
# 5 requests: a verdict needs 5 per side) on every unit at once; its results are ordinary result
# documents, so playbooks/report.yml renders the same run's fleet comparison. The canary forces
# the same tokens as step 1.
HEALTH_SETTINGS = {"bench_health_output_tokens": MATRIX_TOKENS}
# Step 4: the reference variant on the emulated vLLM 0.24.0, single stream like step 1's; the
# bridge compares it with step 1's nvidia-bare on v0.25.0 (same host, same forced tokens).
BRIDGE_VARIANT = "nvidia-bare"
BRIDGE_OLD_IMAGE = "sparkbench/vllm-sim:v0.24.0"
BRIDGE_SETTINGS = {"bench_select": [BRIDGE_VARIANT], "bench_image": BRIDGE_OLD_IMAGE,
                   "llm_bench_output_tokens": MATRIX_TOKENS, "llm_bench_runs": 5, "llm_bench_concurrency": [],
                   "llm_bench_quality": False, "llm_bench_image": False, "bench_bracket": False,
                   "llm_bench_telemetry": "off", "bench_bandwidth_probe": False}


def fleet(out: Printer, run_id: str) -> int:
    """Step 3: one verdict line per unit (health.json), then the fleet comparison of the same
    run (report.yml): each host against the fleet median and against its peers, flags, causes."""
    played = play(out, "playbooks/health.yml", run_id, limit=FLEET, extravars=HEALTH_SETTINGS, host_lines=False)
    health = load_json(played.run_dir / "health.json")
    if not health:
        out.line(f"  no health.json: the playbook exited {played.ansible_rc}; see {rel(played.log)}")
        return played.rc or 1
    out.line()
    out.line(f"  Fleet health ({rel(played.run_dir / 'health.md')}): one verdict per unit")
    for line in health.get("lines") or []:
        out.line(f"    {line}")
    out.line(f"  health.yml exit status {played.ansible_rc}: "
             f"{'a unit is slow or failed — what cron or CI would act on' if played.ansible_rc else 'all healthy'}")
    out.stamped("the fleet comparison of the same canary results: ansible-playbook playbooks/report.yml "
                f"-e run={run_id}")
    report = play(out, "playbooks/report.yml", run_id, extravars={"run": run_id}, log_name="report.log", lines=False)
    if not no_report(out, report, "fleet report"):
        return report.ansible_rc or 1
    if not table(out, report.report, "fleet-verdicts") and not table(out, report.report, "fleet"):
        out.line("  (the report has no fleet table)")
    table(out, report.report, "fleet-flagged")
    summary(out, report.report, keep=lambda s: "fleet" in s.lower() or "flag" in s.lower(),
            title="What the fleet report found:")
    out.line(f"  Report: {rel(report.run_dir / 'report.html')} (sections 'Fleet')")
    return 0  # health.yml exits non-zero when a unit is slow: here that is the finding, not a failure


def bridge(out: Printer, run_id: str, matrix_run: str) -> int:
    """Step 4: the reference variant on v0.24.0, then run-to-run against step 1's run on v0.25.0."""
    played = play(out, "bench.yml", run_id, limit=MATRIX_HOST, extravars=BRIDGE_SETTINGS)
    if played.rc != 0:
        out.line(f"  the v0.24.0 run failed (exit {played.rc}); see {rel(played.log)}")
        return played.rc
    out.stamped(f"the bridge: ansible-playbook playbooks/report.yml -e run={matrix_run} -e baseline={run_id}")
    report = play(out, "playbooks/report.yml", matrix_run, extravars={"run": matrix_run, "baseline": run_id},
                  log_name="bridge-report.log", lines=False)
    bridge = (report.report.get("run_compare") or {}).get("bridge") or {}
    if report.ansible_rc != 0 or not bridge.get("pairs"):
        out.line(f"  the run-to-run report failed (exit {report.ansible_rc}); see {rel(report.log)}")
        return report.ansible_rc or 1
    if not table(out, report.report, "bridge", drop=("host",)):
        for p in bridge["pairs"]:
            out.line(f"  {p['host']} {p['variant']}: vLLM {p['baseline_vllm']} {p['baseline_single']:.2f} tok/s → "
                     f"{p['current_vllm']} {p['current_single']:.2f} tok/s ({p['single_pct']:+.1f} %)")
    verdict = next((s for s in report.report.get("summary") or [] if s.startswith("Version bridge")),
                   bridge.get("verdict"))
    out.line()
    out.line(f"  Verdict: {verdict}")
    out.line(f"  Report: {rel(report.run_dir / 'report.html')} (step 1's report, now with 'Version bridge' and "
             f"'Run to run')")
    return 0
