"""A model profile (the user's ``profiles/models/<org>__<name>.json``) from the model's own files.

Without a hand profile, the profile is the files' facts. With one, the hand profile's fields are
kept (its fitted and recipe fields: pacing calibration, MTP acceptance, parsers, revision) and
every architecture fact both know must agree; the files' figures go under ``from_files``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..paths import model_profile_path, write_atomic
from .facts import model_facts
from .sources import ModelFiles

#: Facts a hand profile and the files must agree on: (path in the profile, tolerance as a fraction).
ARCHITECTURE_FACTS = (
    ("architecture", 0), ("hidden_size", 0), ("vocab_size", 0), ("layers", 0), ("max_model_len", 0),
    ("hybrid", 0), ("vision", 0),
    ("moe.experts", 0), ("moe.experts_per_token", 0), ("moe.moe_layers", 0),
    ("attention.full_attention_layers", 0), ("attention.num_kv_heads", 0), ("attention.head_dim", 0),
    ("linear_attention.layers", 0), ("linear_attention.num_v_heads", 0), ("linear_attention.num_k_heads", 0),
    ("linear_attention.head_k_dim", 0), ("linear_attention.head_v_dim", 0),
    ("total_params_b", 0.05),
)


class ProfileMismatch(ValueError):
    """A hand profile that contradicts the model's files."""


def _get(doc: dict | None, path: str):
    for key in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def disagreements(hand: dict, facts: dict) -> list[str]:
    """Every architecture fact on which a hand profile and the files differ, as readable lines."""
    out = []
    for path, tol in ARCHITECTURE_FACTS:
        have, found = _get(hand, path), _get(facts, path)
        if have is None or found is None:
            continue
        if isinstance(have, (int, float)) and not isinstance(have, bool) and tol:
            if abs(float(found) - float(have)) > tol * abs(float(have)):
                out.append(f"{path}: the profile says {have}, the files {found:.4g} (tolerance {tol:.0%})")
        elif have != found:
            out.append(f"{path}: the profile says {have!r}, the files {found!r}")
    return out


def build_profile(files: ModelFiles, model_id: str, hand: dict | None = None) -> dict:
    """The profile document for ``model_id``: the hand profile's fields kept where there is one."""
    facts = model_facts(files.config, files.tensors, files.hf_quant)
    provenance = {"source": files.source, "shards": len(files.shards), "tensors": len(files.tensors),
                  "bytes_read": files.bytes_read}
    if hand:
        wrong = disagreements(hand, facts)
        if wrong:
            raise ProfileMismatch(f"{model_id}: the hand profile contradicts the model's files:\n  - "
                                  + "\n  - ".join(wrong) + "\nfix the hand profile (or point at the right model)")
        return {**hand, "from_files": {**facts, **provenance}}
    return {"id": model_id, **facts, "from_files": provenance,
            "_notes": "Written by `sparkbench profile` from config.json and the safetensors headers; "
                      "no fitted fields (pacing_calibration, MTP acceptance) until a unit measures it."}


def write_profile(profile: dict, profiles_dir: str | Path) -> Path:
    """Write the profile to ``profiles_dir``, the user's own profiles, where the plan and the
    simulator look first (over a built-in profile of the same name)."""
    path = model_profile_path(profile["id"], profiles_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, (json.dumps(profile, indent=2) + "\n").encode("utf-8"))
