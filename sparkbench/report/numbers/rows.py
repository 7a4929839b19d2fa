"""The per-host rows of a run (pure, no I/O): one row per variant with its figures, and the
quality, image, telemetry, run-protocol and failure rows."""

from __future__ import annotations

from typing import Any

from ...measure.figures import COMBINED, MEAN_ACCEPTANCE_LENGTH, MODEL_MEMORY, SINGLE_DECODE, TIME_TO_READY, TTFT
from . import accessors as n
from .roofline import backend_of, measured_bandwidth, measured_roofline, roofline
from .serving import serving_fields


def _bare_median(results: list[dict], result: dict) -> float | None:
    """Single-stream median of the same host's bare variant of the same build and model."""
    for other in results:
        if (n.host_of(other) == n.host_of(result) and n.is_bare(other)
                and n.build_of(other) == n.build_of(result) and n.model_of(other) == n.model_of(result)):
            return n.single_stats(other)[0]
    return None


def variant_row(result: dict, results: list[dict]) -> dict:
    """One row of the per-host table (the source article's layout) (numbers, None where not measured)."""
    med, lo, hi = n.single_stats(result)
    bare = _bare_median(results, result)
    roof = roofline(result)
    bw = measured_bandwidth(result)
    roof_measured = measured_roofline(roof, bw["gbps"])
    mal = n.mean_acceptance_length(result)
    spec = n.is_speculative(result)
    row: dict[str, Any] = {
        "host": n.host_of(result), **n.unit_fields(result), "variant": n.variant_name(result),
        "build": n.build_of(result), "model": n.model_of(result), "config": n.config_of(result),
        "status": result.get("status"), "simulated": n.is_simulated(result), "backend": backend_of(result),
        SINGLE_DECODE.column: med, SINGLE_DECODE.low_column: lo, SINGLE_DECODE.high_column: hi,
        "speedup_vs_bare": (med / bare) if (med is not None and bare) else None,
    }
    for c in n.CONCURRENCIES:
        row[COMBINED.column_at(c)] = n.combined_at(result, c)
    row.update({
        "acceptance_per_position": n.acceptance(result),
        MEAN_ACCEPTANCE_LENGTH.column: mal,
        TTFT.column: TTFT.read(result) if n.is_measured(result) else None,
        "roofline_tok_s": roof["tok_s"],
        "roofline_basis": roof["basis"],
        "roofline_skipped": roof["skipped"],
        "pct_of_roofline": (med / roof["tok_s"] * 100.0) if (med is not None and roof["tok_s"]
                                                              and not spec) else None,
        "tokens_per_step": mal if spec else None,
        # the bandwidth probe around the variant (sparkbench.bandwidth): the roofline at what the unit streamed
        "bandwidth_gbps": bw["gbps"],
        "bandwidth_method": bw["method"],
        "roofline_measured_tok_s": roof_measured,
        "pct_of_measured_bandwidth": (med / roof_measured * 100.0) if (med is not None and roof_measured
                                                                       and not spec) else None,
        "bandwidth_drop": bw["drop"],
        TIME_TO_READY.column: TIME_TO_READY.read(result),
        MODEL_MEMORY.column: MODEL_MEMORY.read(result),
        "protocol_flags": "; ".join(f"{f.get('code')}: {f.get('reason')}" for f in protocol_flags(result)) or None,
    })
    # the kernels vLLM chose, read off the server log (sparkbench.engine_log): None when not recorded
    row.update({"attention_backend": n.dig(result, "kernels", "attention_backend"),
                "moe_backend": n.dig(result, "kernels", "moe_backend")})
    row.update(serving_fields(result))  # the serving phases: None where they did not run
    if n.is_cluster(result):  # its parallel layout and members (one-unit rows have none of these keys)
        tp, pp = n.parallel_sizes(result)
        row.update({"cluster": (n.cluster_of(result) or {}).get("name"), "members": n.cluster_members(result),
                    "parallel": n.parallel_label(result), "tensor_parallel_size": tp, "pipeline_parallel_size": pp})
    return row


def quality_rows(results: list[dict]) -> list[dict]:
    """Per host × variant: each question's status and reasoning tokens (``q_<id>``, ``rt_<id>``)."""
    rows = []
    for r in n.sort_results(results):
        if not r.get("quality"):
            continue
        row: dict[str, Any] = {"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r)}
        by_id = {q.get("id"): q for q in r["quality"] if isinstance(q, dict)}
        for qid in n.QUALITY_IDS:
            q = by_id.get(qid) or {}
            row[f"q_{qid}"] = q.get("status")
            row[f"rt_{qid}"] = n.num(q.get("reasoning_tokens"))
        row["passed"] = sum(1 for qid in n.QUALITY_IDS if row[f"q_{qid}"] == "pass")
        rows.append(row)
    return rows


def image_rows(results: list[dict]) -> list[dict]:
    """Per host × variant: image check status, answer, expected, answer right, spec decode active."""
    rows = []
    for r in n.sort_results(results):
        img = r.get("image")
        if not isinstance(img, dict):
            continue
        right = None
        if img.get("status") in ("pass", "fail"):
            right = img.get("status") == "pass"
        rows.append({"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r),
                     "status": img.get("status"), "answer": img.get("answer"), "expected": img.get("expected"),
                     "answer_right": right, "spec_decode_active": img.get("spec_decode_active")})
    return rows


def telemetry_phases(result: dict) -> dict[str, dict]:
    """Per phase: ``power_w_mean``, ``sm_clock_mhz_mean``, ``graphics_clock_mhz_mean``,
    ``temp_c_max``, ``tokens_per_joule`` — from measure.py's ``telemetry.phases.<phase>``
    (``power_w.mean``, ``sm_clock_mhz.mean``, ...), or from the flat ``telemetry.<phase>`` of
    older and synthetic documents."""
    tel = result.get("telemetry")
    if not isinstance(tel, dict):
        return {}
    if isinstance(tel.get("phases"), dict):
        return {ph: {"power_w_mean": n.num(n.dig(t, "power_w", "mean")),
                     "sm_clock_mhz_mean": n.num(n.dig(t, "sm_clock_mhz", "mean")),
                     "graphics_clock_mhz_mean": n.num(n.dig(t, "graphics_clock_mhz", "mean")),
                     "temp_c_max": n.num(n.dig(t, "temperature_c", "max")),
                     "tokens_per_joule": n.num(t.get("tokens_per_joule"))}
                for ph, t in tel["phases"].items() if isinstance(t, dict)}
    return {ph: {"power_w_mean": n.num(t.get("power_w_mean")), "sm_clock_mhz_mean": n.num(t.get("sm_clock_mhz_mean")),
                 "graphics_clock_mhz_mean": n.num(t.get("graphics_clock_mhz_mean")),
                 "temp_c_max": n.num(t.get("temp_c_max")), "tokens_per_joule": n.num(t.get("tokens_per_joule"))}
            for ph, t in tel.items() if isinstance(t, dict)}


def telemetry_rows(results: list[dict]) -> list[dict]:
    """Per host × variant × phase where telemetry was recorded: power (W), SM clock (MHz),
    max temperature (°C), tokens per joule."""
    rows = []
    for r in n.sort_results(results):
        for phase, t in telemetry_phases(r).items():
            rows.append({"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r), "phase": phase, **t})
    return rows


def protocol_flags(result: dict) -> list[dict]:
    """The run-protocol flags of a result (``protocol.flags``: ``{code, reason}``)."""
    flags = n.dig(result, "protocol", "flags")
    return [f for f in flags if isinstance(f, dict)] if isinstance(flags, list) else []


def protocol_rows(results: list[dict]) -> list[dict]:
    """Per host × variant with a ``protocol`` block: the clock under load and its maximum [MHz],
    MemAvailable and page cache before/after [GiB], swap pages moved, new kernel-log lines (or why
    none were read), the page-cache drop, the bandwidth probes before and after the variant [GB/s]
    (their method; why the one before gave no figure), and the flags."""
    rows = []
    for r in n.sort_results(results):
        p = r.get("protocol")
        if not isinstance(p, dict):
            continue

        def gib(which: str, key: str) -> float | None:
            v = n.num(n.dig(p, which, key))
            return v / 1024.0 if v is not None else None

        kl = p.get("kernel_log") if isinstance(p.get("kernel_log"), dict) else None
        rows.append({"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r),
                     "simulated": n.is_simulated(r),
                     "clock_under_load_mhz": n.num(n.dig(p, "clock", "under_load_mhz")),
                     "clock_max_mhz": n.num(n.dig(p, "clock", "max_mhz")),
                     "clock_samples": n.num(n.dig(p, "clock", "samples_under_load")),
                     "clock_reason": n.dig(p, "clock", "reason"),
                     "mem_available_before_gib": gib("memory_before", "mem_available_mib"),
                     "mem_available_after_gib": gib("memory_after", "mem_available_mib"),
                     "cached_before_gib": gib("memory_before", "cached_mib"),
                     "cached_after_gib": gib("memory_after", "cached_mib"),
                     "swap_pages": (n.num(n.dig(p, "swap", "pswpin")) or 0) + (n.num(n.dig(p, "swap", "pswpout")) or 0)
                     if isinstance(p.get("swap"), dict) else None,
                     "kernel_new_lines": len(kl.get("new_lines") or []) if kl else None,
                     "kernel_reason": p.get("kernel_log_reason"),
                     "drop_caches": p.get("drop_caches") if isinstance(p.get("drop_caches"), dict) else None,
                     "bandwidth_before_gbps": n.num(n.dig(p, "bandwidth", "gbps")),
                     "bandwidth_after_gbps": n.num(n.dig(p, "bandwidth", "after", "gbps")),
                     "bandwidth_method": n.dig(p, "bandwidth", "method"),
                     "bandwidth_reason": n.dig(p, "bandwidth", "reason"),
                     "flags": protocol_flags(r)})
    return rows


def failure_rows(results: list[dict]) -> list[dict]:
    """Failed variants (stage, reason, remedy) and incomplete ones (their recorded errors)."""
    rows = []
    for r in n.sort_results(results):
        status = r.get("status")
        if status == "failed":
            f = r.get("failure") if isinstance(r.get("failure"), dict) else {}
            rows.append({"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r), "status": status,
                         "stage": f.get("stage"), "reason": f.get("reason"), "remedy": f.get("remedy")})
        elif status == "incomplete":
            errs = [str(e.get("message") if isinstance(e, dict) else e) for e in r.get("errors") or []]
            rows.append({"host": n.host_of(r), **n.unit_fields(r), "variant": n.variant_name(r), "status": status,
                         "stage": "measure", "reason": "; ".join(errs) or "measurement incomplete",
                         "remedy": "re-run the variant (same run id, bench_force=true)"})
    return rows


def report_tables(results: list[dict]) -> dict:
    """All per-host numbers: ``{"hosts": {host: [variant_row...]}, "quality", "image",
    "telemetry", "failures", "simulated", "backends"}`` (``simulated`` true when any figure is
    simulated; ``backends`` the sorted set of what served the figures, e.g. ``["vllm-cpu"]``)."""
    ordered = n.sort_results(r for r in results if isinstance(r, dict))
    hosts: dict[str, list[dict]] = {}
    for r in ordered:
        hosts.setdefault(n.host_of(r), []).append(variant_row(r, ordered))
    return {"hosts": hosts, "quality": quality_rows(ordered), "image": image_rows(ordered),
            "telemetry": telemetry_rows(ordered), "failures": failure_rows(ordered),
            "protocol": protocol_rows(ordered),
            "simulated": any(n.is_simulated(r) for r in ordered),
            "backends": sorted({b for b in (backend_of(r) for r in ordered) if b})}
