"""Hardware and model profiles and the quality prompts (README.md lists the fields): the ones
sparkbench ships (``sparkbench.package_data``) under the user's own profiles folder, where a file of
the same name overrides the built-in one."""
from __future__ import annotations

import json
from pathlib import Path

from sparkbench import package_data, paths


class ProfileError(ValueError):
    """A profile is missing or malformed."""


def profiles_dir(override: str | None = None) -> Path:
    """The user's profiles folder: VLLM_SIM_PROFILES_DIR, else ``<repo or image root>/profiles``."""
    return Path(override) if override else paths.PROFILES_DIR


def quality_prompts(override_dir: str | None = None) -> Path:
    """The quality checks' prompts: ``quality.json`` in the user's profiles folder when there is
    one, else the built-in ones."""
    own = profiles_dir(override_dir) / "quality.json"
    return own if own.is_file() else package_data.QUALITY_PROMPTS


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
    """Load hardware profile ``name`` (``hardware/<name>.json``, the user's or the built-in one)."""
    path = package_data.hardware_profile_file(name, profiles_dir(override_dir))
    if not path.is_file():
        folders = (package_data.BUILT_IN_PROFILES / "hardware", path.parent)
        known = sorted({p.stem for folder in folders for p in folder.glob("*.json")})
        raise ProfileError(f"no hardware profile {name!r} at {path}; set VLLM_SIM_HARDWARE to one of {known}")
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
    base = profiles_dir(override_dir)
    candidates = [model]
    parts = [p for p in model.replace("\\", "/").split("/") if p]
    for p in parts:
        if p.startswith("models--"):
            candidates.append(p[len("models--"):].replace("--", "/", 1))
    if len(parts) >= 2:
        candidates.append("/".join(parts[-2:]))
    for cand in candidates:
        path = package_data.model_profile_file(cand.strip("/"), base)
        if path.is_file():
            prof = _load(path)
            for key in ("id", "active_params_b", "weight_bits", "layers", "max_model_len"):
                if key not in prof:
                    raise ProfileError(f"model profile {path} lacks {key!r}")
            return prof
    known = package_data.model_ids(base)
    raise ProfileError(f"no model profile for {model!r} in {base / 'models'}; add {model_file_name(model)} "
                       f"there or use one of {known}")
