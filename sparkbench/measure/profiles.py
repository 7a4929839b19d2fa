"""Hardware and model profiles as measure reads them (``--hardware``, ``--profiles-dir``)."""
from __future__ import annotations

import json
import os
import zipfile

from .shapes import JSON, JSONObject

#: Where measure's data files live: on a unit, inside ``measure.pyz`` (sparkbench.measure_bundle packs
#: them at its root), or beside a copy of the package directory; in the checkout (or an installed
#: sparkbench), sparkbench's package data beside this package (``sparkbench/data``: the prompts and
#: the built-in profiles), with the user's own profiles in the checkout's profiles/ over the built-in ones.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def archive() -> str | None:
    """``measure.pyz``'s path when measure runs from it, else None."""
    outer = os.path.dirname(PACKAGE_DIR)
    return outer if outer.endswith(".pyz") and os.path.isfile(outer) else None


def install_dir() -> str:
    """The directory that holds the measure package directory, or ``measure.pyz`` on a unit."""
    arc = archive()
    return os.path.dirname(arc) if arc else os.path.dirname(PACKAGE_DIR)


def checkout_profiles() -> str:
    """The user's own profiles/ of the checkout this package is in (``sparkbench/measure`` -> ``profiles``)."""
    return os.path.normpath(os.path.join(PACKAGE_DIR, "..", "..", "profiles"))


def package_data(*parts: str) -> str:
    """A path in sparkbench's package data beside this package (``sparkbench/measure`` ->
    ``sparkbench/data``; the same files ``sparkbench.package_data`` names)."""
    return os.path.normpath(os.path.join(PACKAGE_DIR, "..", "data", *parts))


def _member(path: str) -> tuple[str, str] | None:
    """(archive, name) when ``path`` names a file at the root of a zipapp (``<dir>/measure.pyz/<name>``,
    as ``data_file`` and the plan's measure command line name them), else None."""
    head, name = os.path.split(path)
    return (head, name) if head.endswith(".pyz") and os.path.isfile(head) else None


def data_file(name: str) -> str:
    """``name`` (quality.json, tools.json): measure.pyz's own copy (``<measure.pyz>/<name>``), else
    the file beside the package directory, else sparkbench's own (``sparkbench/data/prompts``; the
    path reported in the error when none exists)."""
    arc = archive()
    if arc:
        try:
            with zipfile.ZipFile(arc) as zf:
                if name in zf.namelist():
                    return os.path.join(arc, name)
        except (OSError, zipfile.BadZipFile):
            pass
    beside = os.path.join(install_dir(), name)
    return beside if os.path.exists(beside) else package_data("prompts", name)


def read_json(path: str, option: str) -> JSON:
    """A JSON file an option names (or a file inside measure.pyz, ``<measure.pyz>/<name>``);
    ValueError with a one-line message naming the option."""
    member = _member(path)
    try:
        if member is not None:
            with zipfile.ZipFile(member[0]) as zf:
                return json.loads(zf.read(member[1]).decode("utf-8"))
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, KeyError):
        raise ValueError(f"{option}: {path} does not exist (give {option} PATH)") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{option}: cannot read {path}: {exc}") from None


def default_profiles_dir() -> str:
    """sparkbench's built-in profiles (``sparkbench/data/profiles``) when present, else the directory
    measure runs from."""
    built_in = package_data("profiles")
    return built_in if os.path.isdir(built_in) else install_dir()


def search_dirs(profiles_dir: str) -> list[str]:
    """Where a profile is looked up: ``profiles_dir``; when that is the built-in profiles, the
    checkout's profiles/ first (the user's own, over a built-in one of the same name)."""
    own = checkout_profiles()
    if os.path.normpath(profiles_dir) == package_data("profiles") and os.path.isdir(own):
        return [own, profiles_dir]
    return [profiles_dir]


def _bandwidth(profile: JSON) -> float | None:
    if not isinstance(profile, dict):
        return None
    for key in ("memory_bandwidth_gbps", "bandwidth_gbs"):
        v = profile.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def hardware_names(profiles_dir: str) -> list[str]:
    """Hardware profile names available in ``profiles_dir`` (hardware/*.json, or *.json that
    are hardware profiles when the directory has no hardware/ folder)."""
    sub = os.path.join(profiles_dir, "hardware")
    names = []
    for d in (sub, profiles_dir) if not os.path.isdir(sub) else (sub,):
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        for e in entries:
            if not e.endswith(".json"):
                continue
            if d != sub:
                try:
                    with open(os.path.join(d, e), encoding="utf-8") as f:
                        if _bandwidth(json.load(f)) is None:
                            continue
                except (OSError, ValueError):
                    continue
            names.append(e[:-5])
    return names


def load_hardware(spec: str, profiles_dir: str) -> tuple[JSONObject, str]:
    """The hardware profile named by --hardware (a name in profiles_dir, ``search_dirs``, or a JSON
    file) and its path. Raises ValueError with a one-line message that names the option."""
    as_file = spec.endswith(".json") or os.sep in spec or os.path.isfile(spec)
    if as_file:
        path = spec
        if not os.path.isfile(path):
            raise ValueError(f"argument --hardware: file {spec} does not exist")
    else:
        dirs = search_dirs(profiles_dir)
        path = next((cand for d in dirs for cand in (os.path.join(d, "hardware", spec + ".json"),
                                                      os.path.join(d, spec + ".json")) if os.path.isfile(cand)), "")
        if not path:
            names = sorted({name for d in dirs for name in hardware_names(d)})
            raise ValueError(f"argument --hardware: no hardware profile {spec!r} in {profiles_dir} "
                             f"(--profiles-dir); available: {', '.join(names) if names else 'none'}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"argument --hardware: cannot read {path}: {exc}") from None
    if _bandwidth(data) is None:
        raise ValueError(f"argument --hardware: {path} is not a hardware profile (it needs a positive "
                         f"memory_bandwidth_gbps)")
    return data, os.path.abspath(path)


def load_model_profile(model: str, profiles_dir: str) -> tuple[JSONObject | None, str | None]:
    """profiles_dir/models/<org>__<name>.json for a served model id (``search_dirs``), when it exists."""
    name = model.replace("/", "__") + ".json"
    dirs = search_dirs(profiles_dir)
    for cand in (c for d in dirs for c in (os.path.join(d, "models", name), os.path.join(d, name))):
        if os.path.isfile(cand):
            try:
                with open(cand, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data, os.path.abspath(cand)
    return None, None

