"""Run-wide names of the files outside the package, in one place: the checkout the package is
installed from (``make setup``: editable), the user's own profiles in it (``profiles/``) and the
run folders (``results/``), and the layout of each.

What sparkbench ships (built-in profiles, prompts, known issues, the result schema, …) is package
data, read through ``sparkbench.package_data``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The user's own profiles (``sparkbench profile`` writes here); one overrides a built-in profile of
#: the same name (``sparkbench.package_data``).
PROFILES_DIR = REPO_ROOT / "profiles"
DEFAULT_RESULTS_DIR = REPO_ROOT / "results"


#: an upgrade's decision for one resident, ``<run>/<host>/<variant>.upgrade.json`` (sparkbench.upgrade):
#: beside the results, not one of them
UPGRADE_SUFFIX = ".upgrade.json"


def result_path(results_dir: str | Path, run_id: str, host: str, variant: str) -> Path:
    """``<results_dir>/<run_id>/<host>/<variant>.json``: the one place that spells the layout."""
    return Path(results_dir) / str(run_id) / str(host) / f"{variant}.json"


def model_profile_path(model: str, profiles_dir: str | Path = PROFILES_DIR) -> Path:
    """``<profiles_dir>/models/<org>__<name>.json`` for ``org/name`` (the layout of every profiles
    folder; where a profile is read from: ``sparkbench.package_data.model_profile_file``)."""
    return Path(profiles_dir) / "models" / f"{str(model).replace('/', '__')}.json"


def hardware_profile_path(name: str, profiles_dir: str | Path = PROFILES_DIR) -> Path:
    """``<profiles_dir>/hardware/<name>.json`` (read from: ``package_data.hardware_profile_file``)."""
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
