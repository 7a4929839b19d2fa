"""The launch spec: one expanded variant → everything Docker and vLLM get, in one place.

``launch_spec(variant, server)`` returns::

    {argv, env, secret_env, image, container: {...docker_container arguments...}, command}

* ``argv``: the arguments after the image (``MODEL --host H --port P --flag value ...``), the
  image's entrypoint being ``vllm serve``;
* ``env``: the container environment without secret values (the host-wide ``vllm_server_env``,
  then the variant's ``env``); ``secret_env`` the names of the secrets the role adds at start
  (``HF_TOKEN``, ``VLLM_API_KEY``): their values never enter a fact, a result or a hash;
* ``container``: the ``community.docker.docker_container`` arguments (host network and IPC, the
  Hugging Face cache volume, the GPU request unless the host is GPU-less, labels, healthcheck);
* ``command``: the equivalent ``docker run`` line, secrets shown as ``<redacted>``, recorded in
  the result and printed by the dry run.

A cluster variant (``server["exec_in"]``: the head's Ray container, ``sparkbench.cluster``) is not
a container of its own: as NVIDIA's two-Spark recipe does, ``vllm serve`` runs inside the head
node's running Ray container (``docker exec``), its output in ``server["log_file"]`` there. The spec
then has ``exec: {container, log_file, pid_file}``, ``container.exec_in`` set, and ``command`` is the
``docker exec`` line.

``config_hash(spec, settings)`` is the key that decides whether a stored result can be reused:
sha256 over the redacted argv, the image, the environment (secret names, not values) and the
measurement settings. Flag names are normalised here and nowhere else (``normalize_args``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InputError
from .secrets import REDACTED, redact_argv, redacted_env

_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
#: Flags the role sets itself; a variant that sets them would silently move the server.
RESERVED_FLAGS = frozenset({"host", "port", "model"})
#: Where the image reads the Hugging Face cache (the host's cache is mounted there).
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


def normalize_flag(name: Any) -> str:
    """``max_num_seqs`` / ``--max-num-seqs`` / ``max-num-seqs`` → ``max-num-seqs``."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"flag name {name!r} is not a string; write flags as 'max-num-seqs: 8'")
    flag = name.strip().lstrip("-").replace("_", "-")
    if not _FLAG_RE.match(flag):
        raise InputError(f"flag name {name!r} is not a vLLM flag name; use lowercase words joined by '-', "
                         "e.g. 'max-num-seqs'")
    return flag


def normalize_args(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """An ``args`` mapping with normalised flag names, in order (a later spelling wins)."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise InputError(f"variant args must be a mapping of flag: value, got {type(args).__name__}; "
                         "write e.g. 'args: {max-num-seqs: 8}'")
    out: dict[str, Any] = {}
    for key, value in args.items():
        flag = normalize_flag(key)
        out.pop(flag, None)
        out[flag] = value
    return out


def _render_value(flag: str, value: Any) -> str:
    """One flag value as vLLM's argparse expects it (JSON for structured values)."""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise InputError(f"flag --{flag} has a value of type {type(value).__name__}; use a string, number, "
                     "boolean, list or mapping")


def flag_list(args: Mapping[str, Any] | None) -> list[str]:
    """Flags as argv items: ``true`` → ``--x``, ``false`` → ``--no-x``, ``null`` → left out."""
    argv: list[str] = []
    for flag, value in normalize_args(args).items():
        if flag in RESERVED_FLAGS:
            raise InputError(f"variant sets --{flag}; the server's {flag} comes from vllm_server_{flag} "
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


def _port(value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise InputError(f"vllm_server_port {value!r} is not a number; set it to e.g. 8000") from None
    if not 0 < port < 65536:
        raise InputError(f"vllm_server_port {port} is outside 1-65535; set it to e.g. 8000")
    return port


def vllm_argv(variant: Mapping[str, Any], host: str = "127.0.0.1", port: Any = 8000) -> list[str]:
    """``MODEL --host H --port P`` then the variant's flags, in the variant's ``args`` order."""
    if not isinstance(variant, Mapping) or not variant.get("name") or not variant.get("model"):
        raise InputError("a variant needs 'name' and 'model'; expand variants with sparkbench.matrix")
    return [str(variant["model"]), "--host", str(host), "--port", str(_port(port))] + flag_list(variant.get("args"))


def docker_run_line(container: Mapping[str, Any], secret_env: Sequence[str] = ()) -> str:
    """The ``docker run`` line equivalent to the container arguments, secrets ``<redacted>``."""
    parts = ["docker", "run", "-d", "--name", str(container["name"])]
    if container.get("network_mode") == "host":
        parts += ["--network", "host"]
    if container.get("ipc_mode") == "host":
        parts += ["--ipc", "host"]
    if container.get("device_requests"):
        parts += ["--gpus", "all"]
    for volume in container.get("volumes") or []:
        parts += ["-v", str(volume)]
    for key, value in redacted_env(container.get("env")).items():
        parts += ["-e", f"{key}={value}"]
    for key in secret_env:
        parts += ["-e", f"{key}={REDACTED}"]
    parts.append(str(container["image"]))
    parts += redact_argv(container.get("command") or [])
    return " ".join(shlex.quote(p) for p in parts)


def docker_exec_line(container: str, argv: Sequence[str], env: Mapping[str, Any] | None = None,
                     secret_env: Sequence[str] = ()) -> str:
    """The ``docker exec`` line that starts ``vllm serve`` in a running container, secrets ``<redacted>``."""
    parts = ["docker", "exec", "-d"]
    for key, value in redacted_env(env).items():
        parts += ["-e", f"{key}={value}"]
    for key in secret_env:
        parts += ["-e", f"{key}={REDACTED}"]
    parts += [str(container), "vllm", "serve"] + redact_argv(list(argv))
    return " ".join(shlex.quote(p) for p in parts)


def launch_spec(variant: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the container gets for ``variant`` on a host with ``server`` settings.

    ``server`` keys (the vllm_server role's settings): ``host``, ``port``, ``container_name``,
    ``base_url`` (optional: where the host reaches the server when that is not ``http://host:port``,
    e.g. a port published from a cluster head's container), ``exec_in`` / ``log_file`` (a cluster
    variant, see the module docstring),
    ``hf_cache`` (host path), ``gpus`` (bool), ``env`` (host-wide environment), ``secret_env``
    (names of the secrets the role will add: ``HF_TOKEN`` when a token is set, ``VLLM_API_KEY``
    when an API key is), ``ready_timeout_s`` (the healthcheck's start period).
    """
    image = variant.get("image") if isinstance(variant, Mapping) else None
    if not image:
        raise InputError(f"variant {variant.get('name') if isinstance(variant, Mapping) else variant!r} has no image; "
                         "set bench_image or the build's image")
    host = str(server.get("host") or "127.0.0.1")
    port = _port(server.get("port", 8000))
    argv = vllm_argv(variant, host, port)
    env = {str(k): str(v) for k, v in (server.get("env") or {}).items()}
    env.update({str(k): str(v) for k, v in (variant.get("env") or {}).items()})
    secret_env = [str(n) for n in server.get("secret_env") or [] if str(n) not in env]
    container: dict[str, Any] = {
        "name": str(server.get("container_name") or "sparkbench-vllm"),
        "image": str(image),
        "command": argv,
        "network_mode": "host",
        "ipc_mode": "host",
        "volumes": [f"{server.get('hf_cache') or CONTAINER_HF_CACHE}:{CONTAINER_HF_CACHE}"],
        "env": env,
        "device_requests": ([{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
                            if server.get("gpus", True) else None),
        "labels": {"sparkbench.variant": str(variant["name"])},
        "healthcheck": {
            "test": ["CMD", "python3", "-c",
                     f"import urllib.request; urllib.request.urlopen('http://{host}:{port}/health', timeout=5)"],
            "interval": "30s", "timeout": "10s", "retries": 3,
            "start_period": f"{int(float(server.get('ready_timeout_s', 900)))}s",
        },
    }
    base = str(server.get("base_url") or f"http://{host}:{port}").rstrip("/")
    if server.get("exec_in"):  # a cluster variant: vllm serve inside the head's Ray container
        log_file = str(server.get("log_file") or "/tmp/sparkbench-vllm.log")
        container = {**container, "name": str(server["exec_in"]), "exec_in": str(server["exec_in"])}
        return {"argv": argv, "env": env, "secret_env": secret_env, "image": str(image), "container": container,
                "exec": {"container": str(server["exec_in"]), "log_file": log_file, "pid_file": f"{log_file}.pid"},
                "command": docker_exec_line(server["exec_in"], argv, env, secret_env),
                "health_url": f"{base}/health", "base_url": base}
    return {"argv": argv, "env": env, "secret_env": secret_env, "image": str(image), "container": container,
            "command": docker_run_line(container, secret_env), "health_url": f"{base}/health",
            "base_url": base}


def config_hash(spec: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> str:
    """sha256 (hex) of the canonical JSON of {redacted argv, image, env (secret names only), settings}.

    Rotating a token keeps the hash; any other change in flags, image, environment or measurement
    settings gives a new one.
    """
    env = redacted_env(spec.get("env"))
    env.update({name: REDACTED for name in spec.get("secret_env") or []})
    doc = {"argv": redact_argv(spec.get("argv") or []), "image": str(spec.get("image", "")), "env": env,
           "settings": dict(settings or {})}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
