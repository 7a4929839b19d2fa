"""Tables over result documents (``results/<run-id>/<host>/<variant>.json``).

* ``bench_rows(results)``  → one flat mapping per result (the CSV/JSON rows of a run)
* ``bench_table(results)`` → the main comparison table as text (tabulate), labelled simulated
  when any figure comes from the simulator

Definitions (docs/ANSIBLE.md, DESIGN.md):

* single tok/s = median decode tok/s of the single-stream runs (min–max shown beside it)
* × bare = single tok/s / single tok/s of the same host's same build in the ``bare`` configuration
* vs <ref> [%] = (single − reference) / reference × 100, the reference being the same host and
  configuration of the first build listed (variant ``index`` order): the seed's −12 … −17 %
* 2×/4×/8× = combined tok/s at that concurrency = total completion tokens / (last token − first start)
* accept/pos = Δaccepted_per_pos[i] / Δdrafts per draft position; tokens/step = 1 + Σ
* % roofline (bare only) = single / (bandwidth / bytes per token) × 100, bytes per token = active
  parameters × bits per weight / 8 (NVFP4 = 4.5 bits: 4 + one FP8 scale per 16 weights); KV-cache
  reads at the short benchmark prompt are left out (< 1 % here). MTP rows show tokens/step instead.

Pure functions (no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in when Ansible is not importable."""

BITS_BY_QUANT = {"nvfp4": 4.5, "mxfp4": 4.25, "fp8": 8.0, "int8": 8.0, "bf16": 16.0, "fp16": 16.0, "int4": 4.0}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _get(doc: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def roofline_tok_s(profile: Mapping[str, Any] | None) -> float | None:
    """bandwidth [GB/s] × 1e9 / (active params × bits per weight / 8) [bytes per token] → tok/s."""
    hardware = _get(profile, "hardware") or {}
    model = _get(profile, "model") or {}
    bandwidth = _num(hardware.get("bandwidth_gbs", hardware.get("memory_bandwidth_gbps")))
    active = _num(model.get("active_params"))
    if active is None:
        billions = _num(model.get("active_params_b", model.get("active_params_billion")))
        active = billions * 1e9 if billions is not None else None
    elif active < 1e6:  # written in billions
        active *= 1e9
    bits = _num(model.get("bits_per_weight", model.get("weight_bits")))
    if bits is None:
        bits = BITS_BY_QUANT.get(str(model.get("quantization", model.get("weight_format", ""))).lower())
    if not bandwidth or not active or not bits:
        return None
    return bandwidth * 1e9 / (active * bits / 8.0)


def _variant(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    variant = doc.get("variant")
    if isinstance(variant, str):
        return {"name": variant}
    return variant if isinstance(variant, Mapping) else {}


def _check_results(results: Any, name: str) -> list[Mapping[str, Any]]:
    if isinstance(results, Mapping) and "results" in results:
        results = results["results"]
    if not isinstance(results, Sequence) or isinstance(results, (str, bytes)):
        raise AnsibleFilterError(f"{name}: input must be a list of result documents (results/<run>/<host>/<variant>.json), "
                                 f"got {type(results).__name__}")
    for i, doc in enumerate(results):
        if not isinstance(doc, Mapping):
            raise AnsibleFilterError(f"{name}: results[{i}] is a {type(doc).__name__}, not a result document")
        if not _variant(doc).get("name"):
            raise AnsibleFilterError(f"{name}: results[{i}] has no variant.name; is it a sparkbench result file?")
    return list(results)


def bench_rows(results: Sequence[Mapping[str, Any]], reference_build: str | None = None,
               bare_config: str = "bare") -> list[dict[str, Any]]:
    """One flat row per result, ordered by host then variant order; derived figures included."""
    docs = _check_results(results, "bench_rows")
    docs.sort(key=lambda d: (str(d.get("host", "")), _num(_variant(d).get("index")) or 0.0, str(_variant(d).get("name"))))
    if reference_build is None:
        ordered = sorted(docs, key=lambda d: _num(_variant(d).get("index")) if _num(_variant(d).get("index")) is not None else 1e9)
        reference_build = next((_variant(d).get("build") for d in ordered if _variant(d).get("build")), None)

    # Pairing key: host, build, model, configuration (a build name may cover several models).
    single: dict[tuple[str, str, str, str], float] = {}
    for doc in docs:
        var = _variant(doc)
        value = _num(_get(doc, "single", "decode_tok_s_median"))
        if value and var.get("kind", "matrix") == "matrix" and doc.get("status") != "failed":
            single[(str(doc.get("host", "")), str(var.get("build")), str(var.get("model")), str(var.get("config")))] = value

    rows: list[dict[str, Any]] = []
    for doc in docs:
        var = _variant(doc)
        host, build, config = str(doc.get("host", "")), var.get("build"), var.get("config")
        median = _num(_get(doc, "single", "decode_tok_s_median"))
        spec = doc.get("spec_decode") if isinstance(doc.get("spec_decode"), Mapping) else None
        accept = [round(x, 2) for x in (_num(v) for v in (spec or {}).get("acceptance_per_position") or []) if x is not None]
        mean_len = _num((spec or {}).get("mean_acceptance_length"))
        if mean_len is None and accept:
            mean_len = 1.0 + sum(accept)
        row: dict[str, Any] = {
            "host": host, "variant": var.get("name"), "build": build, "config": config,
            "status": doc.get("status", "unknown"), "simulated": bool(doc.get("simulated") or _get(doc, "manifest", "simulated")),
            "single_tok_s": _round(median),
            "single_min": _round(_num(_get(doc, "single", "decode_tok_s_min"))),
            "single_max": _round(_num(_get(doc, "single", "decode_tok_s_max"))),
            "ttft_s": _round(_num(_get(doc, "single", "ttft_s_median")), 4),
            "speedup_vs_bare": None, "vs_reference_pct": None, "reference_build": reference_build,
            "acceptance_per_position": accept, "tokens_per_step": round(mean_len, 2) if mean_len else None,
            "roofline_tok_s": None, "roofline_pct": None,
        }
        for entry in doc.get("parallel") or []:
            if isinstance(entry, Mapping) and entry.get("concurrency") is not None:
                row[f"c{int(entry['concurrency'])}_tok_s"] = _round(_num(entry.get("combined_tok_s")))
        model = str(var.get("model"))
        bare = single.get((host, str(build), model, bare_config))
        if median and bare:
            row["speedup_vs_bare"] = round(median / bare, 2)
        # The reference build's counterpart: same host and configuration, the model of the same
        # family (the model name after the organisation, e.g. Qwen3.6-35B-A3B-NVFP4).
        family = model.split("/")[-1]
        ref = next((v for (h, b, m, c), v in single.items()
                    if h == host and b == reference_build and c == str(config) and m.split("/")[-1] == family), None)
        if median and ref and build != reference_build:
            row["vs_reference_pct"] = round((median - ref) / ref * 100.0, 1)
        roof = roofline_tok_s(doc.get("profile"))
        if roof:
            row["roofline_tok_s"] = round(roof, 1)
            speculative = (spec is not None or "speculative" in str(var.get("args", ""))
                           or str(config).startswith(("mtp", "spec", "eagle")))
            if median and not speculative:
                row["roofline_pct"] = round(median / roof * 100.0, 1)
        quality = [q for q in doc.get("quality") or [] if isinstance(q, Mapping)]
        row["quality"] = f"{sum(1 for q in quality if q.get('status') == 'pass')}/{len(quality)}" if quality else None
        row["image"] = _get(doc, "image", "status")
        failure = doc.get("failure") if isinstance(doc.get("failure"), Mapping) else {}
        row["failure_stage"] = failure.get("stage")
        row["failure_reason"] = failure.get("reason")
        row["failure_remedy"] = failure.get("remedy")
        row["time_to_ready_s"] = _num(_get(doc, "server_startup", "time_to_ready_s"))
        row["config_hash"] = doc.get("config_hash")
        rows.append(row)
    return rows


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def bench_table(results: Sequence[Mapping[str, Any]], fmt: str = "simple", reference_build: str | None = None,
                bare_config: str = "bare", title: bool = True) -> str:
    """The main table: rows = host × variant; a title line says when the figures are simulated."""
    try:
        from tabulate import tabulate
    except ImportError as exc:  # pragma: no cover - tabulate is in requirements.txt
        raise AnsibleFilterError("bench_table: the tabulate package is missing; run 'make setup'") from exc
    rows = bench_rows(results, reference_build=reference_build, bare_config=bare_config)
    concurrencies = sorted({int(k[1:-6]) for row in rows for k in row if k.startswith("c") and k.endswith("_tok_s")})
    ref = rows[0]["reference_build"] if rows else None
    multi_host = len({r["host"] for r in rows}) > 1
    headers = (["host"] if multi_host else []) + ["variant", "single tok/s", "min–max", "× bare", f"vs {ref} %"] \
        + [f"{c}× tok/s" for c in concurrencies] + ["accept/pos", "tok/step", "% roofline", "quality", "image", "status"]
    table = []
    for r in rows:
        span = f"{_fmt(r['single_min'])}–{_fmt(r['single_max'])}" if r["single_min"] is not None else "–"
        pct = r["vs_reference_pct"]
        status = r["status"] if r["status"] != "failed" else f"failed ({r['failure_stage'] or '?'})"
        line = ([r["host"]] if multi_host else []) + [
            r["variant"], _fmt(r["single_tok_s"]), span,
            _fmt(r["speedup_vs_bare"], 2) if r["speedup_vs_bare"] is not None else "–",
            f"{pct:+.1f}" if pct is not None else "–",
        ] + [_fmt(r.get(f"c{c}_tok_s")) for c in concurrencies] + [
            "/".join(f"{a:.2f}" for a in r["acceptance_per_position"]) or "–",
            _fmt(r["tokens_per_step"], 2), _fmt(r["roofline_pct"]), _fmt(r["quality"]), _fmt(r["image"]), status]
        table.append(line)
    text = tabulate(table, headers=headers, tablefmt=fmt, disable_numparse=True)
    if title:
        simulated = any(r["simulated"] for r in rows)
        label = ("SIMULATED: figures come from the vLLM simulator (sparkbench/vllm-sim), not from a GPU"
                 if simulated else "Measured on real hardware")
        text = f"{label}\n{text}"
    return text


class FilterModule:
    """Result tables."""

    def filters(self) -> dict[str, Any]:
        return {"bench_table": bench_table, "bench_rows": bench_rows}
