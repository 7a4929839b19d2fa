"""Run-wide names of the repository's files, in one place.

The package is installed in editable mode from the checkout (``make setup``), so its data lives
beside it: profiles, the result schema, the known issues, the measurement package.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = REPO_ROOT / "profiles"
SCHEMA_PATH = REPO_ROOT / "schema" / "result.schema.json"
KNOWN_ISSUES_PATH = REPO_ROOT / "roles" / "vllm_server" / "files" / "known_issues.yml"
DEFAULT_RESULTS_DIR = REPO_ROOT / "results"


def result_path(results_dir: str | Path, run_id: str, host: str, variant: str) -> Path:
    """``<results_dir>/<run_id>/<host>/<variant>.json``: the one place that spells the layout."""
    return Path(results_dir) / str(run_id) / str(host) / f"{variant}.json"


def model_profile_path(model: str, profiles_dir: str | Path = PROFILES_DIR) -> Path:
    """``profiles/models/<org>__<name>.json`` for ``org/name``."""
    return Path(profiles_dir) / "models" / f"{str(model).replace('/', '__')}.json"


def hardware_profile_path(name: str, profiles_dir: str | Path = PROFILES_DIR) -> Path:
    """``profiles/hardware/<name>.json``."""
    return Path(profiles_dir) / "hardware" / f"{name}.json"


def write_atomic(path: str | Path, data: bytes, mode: int = 0o644) -> Path:
    """``data`` to ``path`` through a temporary file and a rename, so a reader never sees half a
    file; the folder is created when missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
