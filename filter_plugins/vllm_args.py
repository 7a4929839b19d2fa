"""Filters that turn an expanded variant into what Docker and vLLM get.

* ``vllm_args``          variant → the argument list after the image (``MODEL --flag value ...``)
* ``vllm_docker_command`` the equivalent ``docker run`` command line, secrets redacted
* ``vllm_config_hash``    sha256 over flags, image, environment (secret values excluded) and
                          measurement settings: the key that decides whether a stored result
                          can be reused

Pure functions over plain data (no I/O), so they are tested directly with pytest.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

try:  # Ansible is present on the controller; the fallback keeps the module importable alone.
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without Ansible installed
    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in when Ansible is not importable."""

REDACTED = "<redacted>"
_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# Environment variable names whose values are secrets (never logged, never hashed).
_SECRET_ENV_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL)", re.I)
# vLLM flags whose value is a secret.
SECRET_FLAGS = frozenset({"api-key"})
# Flags the role sets itself; a variant that sets them would silently move the server.
_RESERVED_FLAGS = frozenset({"host", "port", "model"})


def normalize_flag(name: Any) -> str:
    """``max_num_seqs`` / ``--max-num-seqs`` / ``max-num-seqs`` → ``max-num-seqs``."""
    if not isinstance(name, str) or not name.strip():
        raise AnsibleFilterError(f"vllm_args: flag name {name!r} is not a string; write flags as 'max-num-seqs: 8'")
    flag = name.strip().lstrip("-").replace("_", "-")
    if not _FLAG_RE.match(flag):
        raise AnsibleFilterError(
            f"vllm_args: flag name {name!r} is not a vLLM flag name; use lowercase words joined by '-', e.g. 'max-num-seqs'")
    return flag


def normalize_args(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Normalise flag names of an ``args`` mapping, keeping order (later keys win)."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise AnsibleFilterError(
            f"vllm_args: variant args must be a mapping of flag: value, got {type(args).__name__}; "
            "write e.g. 'args: {max-num-seqs: 8}'")
    out: dict[str, Any] = {}
    for key, value in args.items():
        out[normalize_flag(key)] = value
    return out


def _render_value(flag: str, value: Any) -> str:
    """One flag value as vLLM's argparse expects it (JSON for structured values)."""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise AnsibleFilterError(
        f"vllm_args: flag --{flag} has a value of type {type(value).__name__}; use a string, number, "
        "boolean, list or mapping")


def flag_list(args: Mapping[str, Any] | None) -> list[str]:
    """Flags as argv items: ``true`` → ``--x``, ``false`` → ``--no-x``, ``null`` → left out."""
    argv: list[str] = []
    for flag, value in normalize_args(args).items():
        if flag in _RESERVED_FLAGS:
            raise AnsibleFilterError(
                f"vllm_args: variant sets --{flag}; the server's {flag} comes from vllm_server_{flag} "
                "(or the variant's 'model'), remove it from args")
        if value is None:
            continue
        if value is True:
            argv.append(f"--{flag}")
        elif value is False:
            argv.append(f"--no-{flag}")
        else:
            argv.extend([f"--{flag}", _render_value(flag, value)])
    return argv


def _require_variant(variant: Any, filter_name: str) -> Mapping[str, Any]:
    if not isinstance(variant, Mapping):
        raise AnsibleFilterError(
            f"{filter_name}: input must be an expanded variant (a mapping from variant_matrix), "
            f"got {type(variant).__name__}")
    for key in ("name", "model"):
        if not variant.get(key):
            raise AnsibleFilterError(
                f"{filter_name}: variant is missing '{key}'; expand variants with the variant_matrix filter")
    return variant


def vllm_args(variant: Mapping[str, Any], host: str = "127.0.0.1", port: int = 8000) -> list[str]:
    """Argument list for ``vllm serve`` (the image's entrypoint): model, host, port, then flags.

    Flag order is the variant's ``args`` order (common flags, then build, config, overrides).
    """
    variant = _require_variant(variant, "vllm_args")
    try:
        port_int = int(port)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"vllm_args: port {port!r} is not a number; set vllm_server_port to e.g. 8000") from None
    if not 0 < port_int < 65536:
        raise AnsibleFilterError(f"vllm_args: port {port_int} is outside 1-65535; set vllm_server_port to e.g. 8000")
    return [str(variant["model"]), "--host", str(host), "--port", str(port_int)] + flag_list(variant.get("args"))


def is_secret_env(name: str, secret_keys: Sequence[str] | None = None) -> bool:
    """True when an environment variable holds a secret (by name or pattern)."""
    return name in set(secret_keys or ()) or bool(_SECRET_ENV_RE.search(name))


def redact_args(argv: Sequence[str]) -> list[str]:
    """Replace values of secret flags (``--api-key X``, ``--api-key=X``) with ``<redacted>``."""
    out: list[str] = []
    hide_next = False
    for item in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        stripped = item[2:] if item.startswith("--") else None
        if stripped is not None and "=" in stripped and stripped.split("=", 1)[0] in SECRET_FLAGS:
            out.append(f"--{stripped.split('=', 1)[0]}={REDACTED}")
        else:
            out.append(item)
            hide_next = stripped in SECRET_FLAGS
    return out


def vllm_docker_command(argv: Sequence[str], image: str, name: str = "vllm",
                        env: Mapping[str, Any] | None = None, gpus: bool = True,
                        hf_cache: str = "~/.cache/huggingface", secret_keys: Sequence[str] | None = None,
                        ipc_host: bool = True, network_host: bool = True) -> str:
    """The ``docker run`` command line equivalent to the role's container, secrets redacted.

    Mirrors the community.docker.docker_container call in roles/vllm_server (host network, host
    IPC, the HF cache volume, GPU device request unless the host is GPU-less).
    """
    if not image:
        raise AnsibleFilterError("vllm_docker_command: image is empty; set the variant's image or vllm_server_image")
    parts = ["docker", "run", "-d", "--name", name]
    if network_host:
        parts += ["--network", "host"]
    if ipc_host:
        parts += ["--ipc", "host"]
    if gpus:
        parts += ["--gpus", "all"]
    parts += ["-v", f"{hf_cache}:/root/.cache/huggingface"]
    for key, value in (env or {}).items():
        shown = REDACTED if is_secret_env(str(key), secret_keys) else str(value)
        parts += ["-e", f"{key}={shown}"]
    parts.append(image)
    parts += redact_args([str(a) for a in argv])
    return " ".join(shlex.quote(p) for p in parts)


def vllm_config_hash(argv: Sequence[str], image: str, env: Mapping[str, Any] | None = None,
                     settings: Mapping[str, Any] | None = None,
                     secret_keys: Sequence[str] | None = None) -> str:
    """sha256 (hex) over the canonical JSON of {argv with secrets redacted, image, env, settings}.

    Secret environment values are excluded (only their names count), so rotating a token does
    not invalidate results; any other change in flags, image, environment or measurement
    settings gives a new hash.
    """
    env_items = {str(k): (REDACTED if is_secret_env(str(k), secret_keys) else str(v))
                 for k, v in (env or {}).items()}
    doc = {"argv": redact_args([str(a) for a in argv]), "image": str(image), "env": env_items,
           "settings": dict(settings or {})}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def public_env(env: Mapping[str, Any] | None, secret_keys: Sequence[str] | None = None) -> dict[str, str]:
    """The environment with secret entries removed (what a result file may carry)."""
    return {str(k): str(v) for k, v in (env or {}).items() if not is_secret_env(str(k), secret_keys)}


class FilterModule:
    """vLLM argument, command-line and configuration-hash filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "vllm_args": vllm_args,
            "vllm_docker_command": vllm_docker_command,
            "vllm_config_hash": vllm_config_hash,
            "vllm_public_env": public_env,
        }
