"""``sparkbench profile MODEL_OR_FOLDER [--id ORG/NAME] [--revision REV]``: write the model's
profile from its files (a local folder, or the Hub's headers when the argument is ORG/NAME and no
such folder exists)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..package_data import model_profile_file
from ..paths import PROFILES_DIR
from .hub import read_hub
from .profile import ProfileMismatch, build_profile, write_profile
from .sources import ModelFilesError, read_folder

EXIT_OK, EXIT_BAD_INPUT = 0, 4


def default_id(folder: Path, config: dict) -> str | None:
    """``org/name`` from a Hugging Face cache snapshot path (``models--org--name/snapshots/REV``) or
    config.json's ``_name_or_path``; None when neither names one."""
    for part in folder.resolve().parts:
        if part.startswith("models--") and part.count("--") >= 2:
            return "/".join(part.split("--")[1:3])
    name = str(config.get("_name_or_path") or "")
    return name if name.count("/") == 1 and not name.startswith(("/", ".")) else None


def summary(profile: dict) -> list[str]:
    """The lines printed after a profile is written."""
    facts = profile.get("from_files", {}) if "decode_bytes_per_token" not in profile else profile
    dec = facts["decode_bytes_per_token"]
    kv = facts["kv_bytes_per_token"]
    moe = facts.get("moe")
    lines = [f"{profile['id']}: {facts['architecture']}, {facts['total_params_b']:.3f} B parameters "
             f"({facts['active_params_b']:.3f} B active), {facts['weight_bits']:g} bits/weight"
             + (f", {facts['quant_algo']}" if facts.get("quant_algo") else ""),
             f"  layers {facts['layers']}, hidden {facts['hidden_size']}, vocab {facts['vocab_size']}, "
             f"context {facts['max_model_len']}"
             + (f", MoE {moe['experts']} experts / {moe['experts_per_token']} per token" if moe else "")
             + (", hybrid" if facts["hybrid"] else "") + (", vision" if facts["vision"] else ""),
             f"  bytes read per decode token: {dec['total'] / 1e9:.3f} GB "
             f"(dense {dec['dense'] / 1e9:.3f}, experts {dec['routed_experts'] / 1e9:.3f}, "
             f"lm_head {dec['lm_head'] / 1e9:.3f}, state {dec['recurrent_state'] / 1e6:.2f} MB)",
             f"  KV cache per token: {kv['auto']} B (bf16), {kv['fp8']} B (fp8)"]
    return lines


def is_hub_id(model: str) -> bool:
    """ORG/NAME that is not a local path."""
    return model.count("/") == 1 and not model.startswith((".", "/", "~")) and not Path(model).exists()


def profile_command(model: str, model_id: str | None, profiles_dir: str | None, dry_run: bool,
                    revision: str = "main") -> int:
    """Build and write (or with ``dry_run`` print) one model's profile; 4 on bad input."""
    where = Path(profiles_dir) if profiles_dir else PROFILES_DIR
    try:
        if is_hub_id(model):
            files = read_hub(model, revision, token=os.environ.get("HF_TOKEN") or None)
            model_id = model_id or model
        else:
            files = read_folder(model)
    except ModelFilesError as exc:
        print(f"sparkbench profile: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    model_id = model_id or default_id(Path(model), files.config)
    if not model_id or model_id.count("/") != 1:
        print(f"sparkbench profile: {model} does not name its model; pass --id ORG/NAME", file=sys.stderr)
        return EXIT_BAD_INPUT
    hand_path = model_profile_file(model_id, where)  # the user's, else the built-in one
    hand = json.loads(hand_path.read_text(encoding="utf-8")) if hand_path.exists() else None
    try:
        profile = build_profile(files, model_id, hand)
    except ProfileMismatch as exc:
        print(f"sparkbench profile: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if dry_run:
        print(json.dumps(profile, indent=2))
        return EXIT_OK
    path = write_profile(profile, where)
    for line in summary(profile):
        print(line)
    print(f"{'updated' if hand else 'wrote'} {path} ({files.bytes_read} bytes read for "
          f"{len(files.shards)} shard(s), no weights)")
    return EXIT_OK
