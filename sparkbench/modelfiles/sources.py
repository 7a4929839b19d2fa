"""Where a model's files are read from: a local folder (a Hugging Face snapshot, a checkpoint a
user wrote), reading config.json, the shard index and each shard's header only."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .safetensors_header import HeaderError, Tensor, read_file_header

INDEX = "model.safetensors.index.json"


class ModelFilesError(ValueError):
    """A model folder that cannot be profiled: the message names the file and the fix."""


@dataclass
class ModelFiles:
    """What a profile is built from."""

    source: str
    config: dict
    tensors: list[Tensor]
    hf_quant: dict | None
    shards: list[str]
    bytes_read: int


def shard_names(index: dict | None, listed: list[str]) -> list[str]:
    """The shards to read: the index's weight map (each file once, in order), else the folder's
    ``*.safetensors`` files."""
    if index:
        seen: dict[str, None] = {}
        for shard in index.get("weight_map", {}).values():
            seen.setdefault(shard, None)
        return list(seen)
    return sorted(listed)


def _json(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelFilesError(f"{path}: not JSON ({exc})") from exc


def read_folder(folder: str | Path) -> ModelFiles:
    """A local model folder's config and every shard's header (the weights are never read)."""
    root = Path(folder)
    if not root.is_dir():
        raise ModelFilesError(f"{root}: not a folder; give a model folder (config.json and *.safetensors)")
    config = _json(root / "config.json")
    if config is None:
        raise ModelFilesError(f"{root}: no config.json; a profile needs the model's config.json beside its shards")
    shards = shard_names(_json(root / INDEX), [p.name for p in root.glob("*.safetensors")])
    if not shards:
        raise ModelFilesError(f"{root}: no *.safetensors file and no {INDEX}; only safetensors checkpoints "
                              "can be profiled")
    tensors: list[Tensor] = []
    bytes_read = 0
    for shard in shards:
        path = root / shard
        if not path.exists():
            raise ModelFilesError(f"{path}: listed in {INDEX} but missing; download the whole snapshot")
        try:
            with path.open("rb") as fh:
                found, _meta = read_file_header(fh, str(path))
                bytes_read += fh.tell()
        except HeaderError as exc:
            raise ModelFilesError(str(exc)) from exc
        tensors += found
    return ModelFiles(str(root), config, tensors, _json(root / "hf_quant_config.json"), shards, bytes_read)
