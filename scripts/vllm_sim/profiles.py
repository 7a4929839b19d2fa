"""Hardware and model profiles (JSON under ``profiles/``; README.md lists the fields)."""
from __future__ import annotations

import json
from pathlib import Path


class ProfileError(ValueError):
    """A profile is missing or malformed."""


def profiles_dir(override: str | None = None) -> Path:
    """The profiles folder: VLLM_SIM_PROFILES_DIR, else ``<repo or image root>/profiles``.

    The package lives at ``<root>/scripts/vllm_sim``, both in the repository and in the image.
    """
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent.parent / "profiles"


def model_file_name(model_id: str) -> str:
    """``org/name`` -> ``org__name.json`` (the shared profile naming contract)."""
    return model_id.strip("/").replace("/", "__") + ".json"


def _load(path: Path) -> dict:
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {path} is not valid JSON: {e}") from None


def load_hardware(name: str, override_dir: str | None = None) -> dict:
    """Load ``profiles/hardware/<name>.json``."""
    path = profiles_dir(override_dir) / "hardware" / f"{name}.json"
    if not path.is_file():
        raise ProfileError(f"no hardware profile {name!r} at {path}; set VLLM_SIM_HARDWARE to one of "
                           f"{sorted(p.stem for p in path.parent.glob('*.json'))}")
    hw = _load(path)
    for key in ("memory_bandwidth_gbps", "unified_memory_gb", "default_max_num_batched_tokens", "engine"):
        if key not in hw:
            raise ProfileError(f"hardware profile {path} lacks {key!r}")
    return hw


def find_model(model: str, override_dir: str | None = None) -> dict:
    """Load the model profile for a Hub id (``org/name``) or a local snapshot path.

    A path such as ``/root/.cache/huggingface/hub/models--org--name/snapshots/<rev>`` or
    ``.../org/name`` is matched on its ``org/name`` part.
    """
    base = profiles_dir(override_dir) / "models"
    candidates = [model]
    parts = [p for p in model.replace("\\", "/").split("/") if p]
    for p in parts:
        if p.startswith("models--"):
            candidates.append(p[len("models--"):].replace("--", "/", 1))
    if len(parts) >= 2:
        candidates.append("/".join(parts[-2:]))
    for cand in candidates:
        path = base / model_file_name(cand)
        if path.is_file():
            prof = _load(path)
            for key in ("id", "active_params_b", "weight_bits", "layers", "max_model_len"):
                if key not in prof:
                    raise ProfileError(f"model profile {path} lacks {key!r}")
            return prof
    known = sorted(p.stem.replace("__", "/") for p in base.glob("*.json"))
    raise ProfileError(f"no model profile for {model!r} in {base}; add {model_file_name(model)} "
                       f"there or use one of {known}")
