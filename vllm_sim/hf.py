"""``hf download`` / ``huggingface-cli download`` stand-in for the simulator image.

Writes the Hugging Face cache layout for a model that has a profile::

    $HF_HOME/hub/models--org--name/refs/main                      (the pinned revision)
    $HF_HOME/hub/models--org--name/snapshots/<rev>/config.json    (+ tokenizer, index, shards)

Gated models (profile ``gated: true``) need a token (HF_TOKEN, --token or $HF_HOME/token); the
token is never printed, but its SHA-256 is written to ``snapshots/<rev>/.sparkbench_token_sha256``
so a test can prove which token reached the container.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from . import profiles
from .knobs import KnobError, Knobs

SAFETENSORS_STUB_META = {"__metadata__": {"format": "pt", "sparkbench_simulated": "true"}}


def _err(msg: str, code: int = 1) -> int:
    sys.stderr.write(msg.rstrip() + "\n")
    return code


def hub_cache(cache_dir: str | None) -> Path:
    """--cache-dir, else HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def _token(cli_token: str | None) -> str | None:
    if cli_token:
        return cli_token
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(var):
            return os.environ[var]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    p = Path(home) / "token"
    if p.is_file():
        return p.read_text().strip() or None
    return None


def config_json(prof: dict) -> dict:
    """A config.json carrying the architecture facts vLLM (and the preflight rules) read."""
    cfg = {"architectures": [prof.get("architecture", "")], "model_type": prof.get("family", ""),
           "hidden_size": prof.get("hidden_size"), "num_hidden_layers": prof.get("layers"),
           "vocab_size": prof.get("vocab_size"), "max_position_embeddings": prof.get("max_model_len"),
           "sparkbench_simulated": True}
    if prof.get("moe"):
        cfg.update({"num_experts": prof["moe"]["experts"], "num_experts_per_tok": prof["moe"]["experts_per_token"]})
    if (prof.get("mtp") or {}).get("supported"):
        cfg["mtp_num_hidden_layers"] = prof["mtp"].get("n_predict", 1)
    fmt = prof.get("checkpoint_format")
    if fmt == "modelopt":
        cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": prof.get("quant_algo")}
    elif fmt:
        cfg["quantization_config"] = {"quant_method": fmt, "format": "nvfp4-pack-quantized"}
    return cfg


def download(args) -> int:
    try:
        knobs = Knobs.from_env()
        prof = profiles.find_model(args.repo_id, knobs.profiles_dir)
    except (KnobError, profiles.ProfileError) as e:
        return _err(f"huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for "
                    f"{args.repo_id} (simulated hub: {e})")
    pinned = prof["revision"]
    rev = args.revision or "main"
    if rev not in ("main", pinned):
        return _err(f"huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found for "
                    f"{args.repo_id}@{rev}; the pinned revision is {pinned}.")
    token = _token(args.token)
    if prof.get("gated") and not token:
        return _err(f"huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo "
                    f"{args.repo_id}: access to model {args.repo_id} is restricted and you are not authenticated. "
                    "Set HF_TOKEN to a token whose account has accepted the model's licence.")
    repo_dir = hub_cache(args.cache_dir) / ("models--" + args.repo_id.replace("/", "--"))
    snap = repo_dir / "snapshots" / pinned
    if args.local_dir:                      # --local-dir: plain files in that folder, no cache layout
        snap = Path(args.local_dir)
    if os.environ.get("HF_HUB_OFFLINE") == "1" and not (snap / "config.json").is_file():
        return _err(f"huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk "
                    f"cache and outgoing traffic has been disabled (HF_HUB_OFFLINE=1): {args.repo_id}")
    snap.mkdir(parents=True, exist_ok=True)
    if not args.local_dir:
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "blobs").mkdir(exist_ok=True)
    size = float(prof.get("download_size_gb", 1.0))
    shards = max(1, int(size // 5) + 1)
    files = {"config.json": json.dumps(config_json(prof), indent=2),
             "generation_config.json": json.dumps({"do_sample": True, "temperature": 0.6}),
             "tokenizer_config.json": json.dumps({"model_max_length": prof.get("max_model_len")}),
             "model.safetensors.index.json": json.dumps({"metadata": {"total_size": int(size * 1e9)}, "weight_map": {}})}
    header = json.dumps(SAFETENSORS_STUB_META).encode()
    stub = len(header).to_bytes(8, "little") + header
    already = (snap / "config.json").is_file()
    delay = float(os.environ.get("VLLM_SIM_DOWNLOAD_SECONDS", "0.5") or 0)
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        if not args.quiet:
            print(f"Fetching {name} ({size / shards:.2f} GB){' (cached)' if already else ''}", flush=True)
        if not already:
            time.sleep(delay / shards)
        (snap / name).write_bytes(stub)
    for name, text in files.items():
        (snap / name).write_text(text + "\n", encoding="utf-8")
    if not args.local_dir:
        (repo_dir / "refs" / "main").write_text(pinned, encoding="utf-8")
    if token:
        (snap / ".sparkbench_token_sha256").write_text(hashlib.sha256(token.encode()).hexdigest() + "\n")
    print(str(snap), flush=True)
    return 0


def main(argv: list[str]) -> int:
    """``hf download REPO_ID [--revision REV] [--cache-dir DIR] [--token T] [--quiet]``."""
    p = argparse.ArgumentParser(prog="hf", description="Hugging Face Hub CLI (sparkbench simulated stand-in)")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download")
    d.add_argument("repo_id")
    d.add_argument("filenames", nargs="*")
    d.add_argument("--revision", default=None)
    d.add_argument("--cache-dir", default=None)
    d.add_argument("--local-dir", default=None)
    d.add_argument("--token", default=None)
    d.add_argument("--repo-type", default="model")
    d.add_argument("--quiet", action="store_true")
    d.add_argument("--max-workers", type=int, default=8)
    sub.add_parser("version")
    args = p.parse_args(argv)
    if args.cmd == "version":
        print("huggingface_hub version: 0.36.0 (sparkbench simulated)")
        return 0
    return download(args)
