"""``sparkbench predict MODEL [--hardware NAME] [--host HOST] [--args JSON]``: the predicted decode
speed before the model is downloaded. MODEL is a model with a profile (built in, or the user's in
``profiles/models``), a model folder, or ORG/NAME on the Hub (its config.json and safetensors
headers only)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..engine_config import PredictInputError, TwinConfig, json_mapping
from ..modelfiles.command import is_hub_id
from ..modelfiles.hub import read_hub
from ..modelfiles.profile import build_profile
from ..modelfiles.sources import ModelFilesError, read_folder
from ..package_data import hardware_names, hardware_profile_file, model_profile_file
from ..paths import DEFAULT_RESULTS_DIR, PROFILES_DIR
from .calibration import calibrate, calibration_rows, launch_fit
from .estimate import predict
from .published import fit_rows
from .twin_rate import bandwidth_scale

if TYPE_CHECKING:
    from ..launch import FlagValues
    from ..plan_types import HardwareProfile, ModelProfile
    from .shapes import Prediction, ProfileFromFiles

EXIT_OK, EXIT_BAD_INPUT = 0, 4


def load_model(model: str, profiles_dir: Path, revision: str = "main") -> tuple[ModelProfile, str]:
    """(profile, where it came from): the stored profile, else one built from the model's files."""
    path = model_profile_file(model, profiles_dir)
    if model.count("/") == 1 and path.is_file():
        return json.loads(path.read_text(encoding="utf-8")), str(path)
    try:
        if is_hub_id(model):
            files = read_hub(model, revision, token=os.environ.get("HF_TOKEN") or None)
            built = cast("ProfileFromFiles", build_profile(files, model))  # model_facts' keys
            return built, f"the Hub's headers ({files.bytes_read} bytes read, no weights)"
        if Path(model).is_dir():
            files = read_folder(model)
            name = str(files.config.get("_name_or_path") or Path(model).name)
            built = cast("ProfileFromFiles", build_profile(files, name))
            return built, f"the folder's headers ({model})"
    except ModelFilesError as exc:
        raise PredictInputError(str(exc)) from exc
    raise PredictInputError(f"{model}: no profile at {path}, no such folder, and not ORG/NAME; pass a model id, "
                            "a model folder, or write its profile first (sparkbench profile MODEL_OR_FOLDER)")


def load_hardware(name: str, profiles_dir: Path) -> HardwareProfile:
    path = hardware_profile_file(name, profiles_dir)
    if not path.is_file():
        known = hardware_names(profiles_dir)
        raise PredictInputError(f"--hardware {name}: no profile at {path}; known: {', '.join(known)}")
    return json.loads(path.read_text(encoding="utf-8"))


def parse_args_json(text: str | None) -> FlagValues:
    """``--args``: a JSON object of vLLM flags ({} without one)."""
    if not text:
        return {}
    return dict(json_mapping(text, "--args", '\'{"kv-cache-dtype": "fp8", "max-model-len": 65536}\''))


def _gb(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f} GB"


def render(doc: Prediction, host: str | None) -> list[str]:
    """The lines printed: the single-stream prediction with its interval first."""
    s = doc["single"]
    where = f"{doc['hardware']}" + (f", unit {host}" if host else "")
    spec = f", MTP spec={doc['config']['spec_k']}" if doc["config"]["spec_k"] else ""
    lines = [f"{s['tok_s']:.1f} tok/s [{s['lo']:.1f}, {s['hi']:.1f}] predicted single-stream decode of "
             f"{doc['model']}{spec} on {where}",
             "  parallel: " + ", ".join(f"{n} streams {p['tok_s']:.1f} [{p['lo']:.1f}, {p['hi']:.1f}] tok/s each"
                                        for n, p in doc["parallel"].items())]
    for m in doc["mtp"]:
        acc = " / ".join(f"{a:.2f}" for a in m["acceptance"])
        lines.append(f"  MTP spec={m['k']} (acceptance {acc}): {m['tok_s']:.1f} [{m['lo']:.1f}, {m['hi']:.1f}] tok/s")
    mem = doc["memory"]
    if mem["fits"] is None:
        lines.append(f"  memory: not checked ({mem['reason']})")
    elif mem["budget_gb"] is None:
        lines.append(f"  memory: does NOT fit — {mem['reason']}")
    else:
        verdict = "fits" if mem["fits"] else "does NOT fit"
        cap = (f"; room for {mem['max_context']:,} tokens of context" if mem["max_context"] else "")
        cap += f". {mem['reason']}" if mem["reason"] else ""
        lines.append(f"  memory: {verdict} — weights {_gb(mem['weights_gb'])} ({mem['weights_source']}) + KV "
                     f"{_gb(mem['kv_gb'])} (one sequence at {mem['context']:,} tokens, {mem['kv_cache_dtype']}) "
                     f"against {_gb(mem['budget_gb'])} ({mem['gpu_memory_utilization']:g} of the unit's memory"
                     f"{', per unit of ' + str(mem['units']) if mem['units'] > 1 else ''}){cap}")
    cal = doc["calibration"]
    lines.append(f"  interval from {doc['interval_basis']}")
    fit = doc.get("launch_fit")
    if fit:
        lines.append(f"  fitted on {host}: {fit['variant']} (run {fit['run_id']}) measured {fit['measured']:.1f} tok/s at "
                     f"{fit['bandwidth_gbps']:.1f} GB/s probed: per-layer cost {fit['layer_launch_us']:.0f} us")
    elif cal:
        lines.append(f"  calibrated on {host}: x{cal['factor']:.3f} the twin's rate (median of {cal['n']} result(s)"
                     f"{', simulated' if cal['simulated'] else ''})")
    else:
        lines.append("  no measured history for this unit: the twin as shipped (fitted on published Spark figures)")
    if doc["bandwidth_scale"] != 1.0:
        lines.append(f"  bandwidth: the unit's probe reads x{doc['bandwidth_scale']:.3f} a sound unit's")
    return lines


def predict_command(model: str, hardware: str | None, host: str | None, args_json: str | None,
                    results_dir: str | None = None, profiles_dir: str | None = None, version: str = "0.25.0",
                    acceptance: str | None = None, as_json: bool = False, fit_variant: str | None = None) -> int:
    profiles = Path(profiles_dir) if profiles_dir else PROFILES_DIR
    try:
        config = TwinConfig.from_args(parse_args_json(args_json))
        profile, source = load_model(model, profiles)
        rows = calibration_rows(results_dir or DEFAULT_RESULTS_DIR, host) if host else []
        hw = load_hardware(hardware or "dgx-spark", profiles)
        probes = [r for r in rows if r.get("bandwidth_gbps")]
        scale = bandwidth_scale(probes[-1]["bandwidth_gbps"], hw, probes[-1]["bandwidth_method"]) if probes else 1.0
        acc = [float(x) for x in acceptance.split(",")] if acceptance else None
        launch = None
        if (hw.get("engine") or {}).get("layer_launch_us", 0.0) is None:  # fitted on the unit (a CPU host)
            if not host:
                raise PredictInputError(f"--hardware {hw.get('name')}: its per-layer cost is fitted on a unit; pass "
                                        "--host HOST with a measured result of the model there")
            launch = launch_fit(results_dir or DEFAULT_RESULTS_DIR, host, str(profile.get("id")), hw, fit_variant)
            rows, scale = [], 1.0
        doc = predict(profile, hw, config, fit_rows(profiles), version, scale, calibrate(rows), acc, launch)
    except (PredictInputError, ValueError) as exc:
        print(f"sparkbench predict: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    doc["profile_source"] = source
    if as_json:
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    for line in render(doc, host):
        print(line)
    print(f"  profile: {source}")
    return EXIT_OK
