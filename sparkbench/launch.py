"""The launch spec: one expanded variant → everything Docker and vLLM get, in one place.

``launch_spec(variant, server)`` returns::

    {argv, env, secret_env, image, container: {...docker_container arguments...}, command}

* ``argv``: the arguments after the image (``MODEL --host H --port P --flag value ...``), the
  image's entrypoint being ``vllm serve``;
* ``env``: the container environment without secret values (the host-wide ``vllm_server_env``,
  then the variant's ``env``); ``secret_env`` the names of the secrets the role adds at start
  (``HF_TOKEN``, ``VLLM_API_KEY``): their values never enter a fact, a result or a hash;
* ``container``: the ``community.docker.docker_container`` arguments (host network and IPC, the
  unit's cache folders as volumes, the GPU request unless the host is GPU-less, labels, healthcheck);
* ``command``: the equivalent ``docker run`` line, secrets shown as ``<redacted>``, recorded in
  the result and printed by the dry run;
* ``caches``: the unit's cache folders (host paths, see below) and ``unresolved``: "" once every
  one is a real path on the unit, else why the launch is refused (``vllm_server`` fails with it).

The unit's cache folders (``UNIT_CACHES``): the Hugging Face cache (model weights), vLLM's compile
cache (``VLLM_CACHE_ROOT``: torch.compile / Inductor artifacts) and FlashInfer's JIT cache, each
mounted where the image (running as root) reads it by default, so that a second launch of the same
configuration loads the compiled graphs and kernels instead of compiling them again. Their host
paths belong to the *unit*: a variable set to an absolute path is used as it is; ``~/…`` or unset
(``<unit home>/.cache/…``) is below the remote user's home on the unit, known only once the unit
has answered (``ansible_facts.user_dir``), never the controller's. Until then the path holds the
placeholder ``UNIT_HOME`` (the dry run of a unit that does not answer shows it); ``with_unit_home``
puts the home in. A path with the placeholder is never mounted.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Union

from .errors import InputError
from .secrets import REDACTED, redact_argv, redacted_env

if TYPE_CHECKING:
    from .cluster.shapes import HostVars
    from .matrix import Variant
    from .plan_types import HostVariables
    from .settings import Settings, SettingsInput

_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
#: Flags the role sets itself; a variant that sets them would silently move the server.
RESERVED_FLAGS = frozenset({"host", "port", "model"})
#: Where the image reads the Hugging Face cache (the host's cache is mounted there).
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
#: The unit's home in a path before the unit has answered (never mounted; the dry run shows it).
UNIT_HOME = "<unit home>"
#: A simulated unit's shared account (vllm_sim/unit_account.py): where its simulator
#: containers see the unit's directory, and the knob that names it.
SIM_UNIT_CONTAINER = "/run/sparkbench-unit"
SIM_UNIT_ENV = "VLLM_SIM_UNIT_DIR"
SIM_UNIT_VARIABLE = "sparkbench_sim_unit_dir"

#: A scalar as YAML or ``-e`` gives it (an environment value before it is made text).
Scalar = Union[str, int, float, bool, None]
#: One vLLM flag's value as the inventory writes it: a scalar (``true`` → ``--x``, ``false`` →
#: ``--no-x``, ``null`` → left out) or a list / mapping, given to vLLM as JSON (``speculative-config``).
FlagValue = Union[str, int, float, bool, None, list["FlagValue"], dict[str, "FlagValue"]]
#: A variant's ``args``: flag name (normalised by ``normalize_args``) → its value, in order.
FlagValues = dict[str, FlagValue]
#: An environment layer as the inventory writes it (``vllm_server_env``, a build's ``env``): name →
#: value; the launch spec's environment holds the values as text.
EnvValues = Mapping[str, Scalar]


class ServerSettings(TypedDict, total=False):
    """The launch settings of a host (``launch_spec``'s ``server``), built by
    ``sparkbench.plan.server_settings`` (a cluster variant: with ``base_url`` / ``exec_in`` / ``log_file``)."""

    host: str
    port: int | str
    container_name: str
    base_url: str
    exec_in: str
    log_file: str
    hf_cache: str
    vllm_cache: str
    flashinfer_cache: str
    unit_home: str | None
    sim_unit_dir: str
    gpus: bool
    env: EnvValues
    secret_env: list[str]
    ready_timeout_s: int | float | str


class DeviceRequest(TypedDict):
    """A ``docker_container`` GPU request (``launch_spec``: every GPU of the unit)."""

    driver: str
    count: int
    capabilities: list[list[str]]


class Healthcheck(TypedDict):
    """The server container's Docker health check (``launch_spec``)."""

    test: list[str]
    interval: str
    timeout: str
    retries: int
    start_period: str


class ContainerArgs(TypedDict, total=False):
    """The ``community.docker.docker_container`` arguments of a server (``launch_spec``; a resident's
    and a candidate's in ``sparkbench.serve.deploy_plan`` add ``restart_policy``), read by ``docker_run_line``."""

    name: str
    image: str
    command: list[str]
    network_mode: str
    ipc_mode: str
    volumes: list[str]
    env: dict[str, str]
    device_requests: list[DeviceRequest] | None
    labels: dict[str, str]
    healthcheck: Healthcheck
    restart_policy: str
    exec_in: str


class ExecSpec(TypedDict):
    """Where a cluster variant's ``vllm serve`` runs (``launch_spec``): the head's Ray container, its
    log and pid files there."""

    container: str
    log_file: str
    pid_file: str


class _LaunchSpecRequired(TypedDict):
    argv: list[str]
    env: dict[str, str]
    secret_env: list[str]
    image: str
    container: ContainerArgs
    command: str
    health_url: str
    base_url: str
    caches: dict[str, str]
    unresolved: str


class LaunchSpec(_LaunchSpecRequired, total=False):
    """The launch spec of one variant on a host (``launch_spec``, the module docstring; ``with_unit_home``
    puts the unit's home in): ``exec`` on a cluster variant only, ``sim_unit`` on a single unit only."""

    exec: ExecSpec
    sim_unit: str


class CacheFolder(TypedDict):
    """One of the unit's cache folders with its real path (``unit_cache_list``, playbooks/teardown.yml)."""

    key: str
    variable: str
    path: str
    what: str


@dataclass(frozen=True)
class UnitCache:
    """One cache folder of the unit mounted into the server (and Ray node) containers."""

    key: str            # its key in the server settings, the launch spec's ``caches`` and the plan's ``unit``
    variable: str       # the inventory variable that sets its host path (roles/spark_host/defaults)
    below_home: str     # its host path below the remote user's home when the variable is unset
    container: str      # where the image reads it (the images run as root, HOME=/root)
    what: str


#: The unit's cache folders, in mount order (the Hugging Face cache first).
UNIT_CACHES: tuple[UnitCache, ...] = (
    UnitCache("hf_cache", "spark_host_hf_cache", ".cache/huggingface", CONTAINER_HF_CACHE,
              "Hugging Face cache (model weights)"),
    # vLLM: VLLM_CACHE_ROOT = $XDG_CACHE_HOME/vllm, default ~/.cache/vllm (vllm/envs.py); the
    # compiled graphs under torch_compile_cache/<hash>/rank_*/ (docs: design/torch_compile).
    UnitCache("vllm_cache", "spark_host_vllm_cache", ".cache/vllm", "/root/.cache/vllm",
              "vLLM compile cache (torch.compile / Inductor artifacts)"),
    # FlashInfer: $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer, the base defaulting to the home
    # (flashinfer/jit/env.py: FLASHINFER_CACHE_DIR); JIT-built kernels under <arch>/cached_ops.
    UnitCache("flashinfer_cache", "spark_host_flashinfer_cache", ".cache/flashinfer", "/root/.cache/flashinfer",
              "FlashInfer JIT cache (kernels built at first use)"),
)


def unit_path(value: Any, cache: UnitCache) -> str:
    """A cache folder's host path as a plan holds it: an absolute path as set; ``~/…`` or empty →
    ``<unit home>/…`` (below the remote user's home on the unit, put in by ``resolve_unit_path``)."""
    text = str(value or "").strip()
    if not text:
        return f"{UNIT_HOME}/{cache.below_home}"
    if text == "~" or text.startswith("~/"):
        text = UNIT_HOME + text[1:]
    if text.startswith(UNIT_HOME) or text.startswith("/"):
        return text.rstrip("/") or "/"
    raise InputError(f"{cache.variable} is {text!r}: not an absolute path; set an absolute path on the unit, "
                     f"~/… (below the remote user's home there), or leave it unset (~/{cache.below_home})")


def unit_caches(values: ServerSettings | HostVariables | HostVars | None = None, home: Any = None) -> dict[str, str]:
    """``{key: host path}`` of every cache folder from ``values`` (the server settings, keyed by
    ``UnitCache.key``, or the host's Ansible variables, by its variable), with ``home`` put in when given."""
    values = values or {}
    return {c.key: resolve_unit_path(unit_path(values.get(c.key) or values.get(c.variable), c), home)
            for c in UNIT_CACHES}


def resolve_unit_path(path: str, home: Any) -> str:
    """``path`` with the unit's ``home`` in place of ``UNIT_HOME``; unchanged without a home."""
    home_text = str(home or "").strip().rstrip("/")
    if not home_text or not path.startswith(UNIT_HOME):
        return path
    if not home_text.startswith("/") or UNIT_HOME in home_text:
        raise InputError(f"the unit's home is {home!r}, not an absolute path (ansible_facts.user_dir of the "
                         "remote user); check ansible_user and the unit's passwd entry")
    return home_text + path[len(UNIT_HOME):]


def unresolved_message(caches: Mapping[str, str], where: str = "") -> str:
    """Why cache folders that still hold ``UNIT_HOME`` cannot be mounted; "" when none does."""
    left = [f"{c.variable}={caches[c.key]}" for c in UNIT_CACHES if UNIT_HOME in str(caches.get(c.key, ""))]
    if not left:
        return ""
    return (f"{where or 'the unit'}: the cache folders are not resolved on the unit ({', '.join(left)}): its home "
            "(ansible_facts.user_dir) was not read, so the path would be a literal placeholder; let the plan read "
            "it (playbooks/tasks/host.yml, sparkbench_plan_unit) or set those variables to absolute paths")


def unit_cache_list(caches: Mapping[str, str]) -> list[CacheFolder]:
    """The cache folders one by one (``{key, variable, path, what}``, ``UNIT_CACHES`` order), every
    path real: a placeholder left raises ``InputError`` (playbooks/teardown.yml removes them)."""
    problem = unresolved_message(caches)
    if problem:
        raise InputError(problem)
    return [{"key": c.key, "variable": c.variable, "path": caches[c.key], "what": c.what} for c in UNIT_CACHES]


def cache_volumes(caches: Mapping[str, str]) -> list[str]:
    """The ``host:container`` volumes of the cache folders, in ``UNIT_CACHES`` order."""
    return [f"{caches[c.key]}:{c.container}" for c in UNIT_CACHES]


def sim_unit_path(value: Any, home: Any = None) -> str:
    """A simulated unit's account directory (``sparkbench_sim_unit_dir``) as a plan holds it: "" when
    unset (no shared account: each simulator alone); an absolute path as set; ``~/…`` below the
    unit's home (``<unit home>/…`` until ``home`` is known)."""
    text = str(value or "").strip()
    if not text:
        return ""
    if text == "~" or text.startswith("~/"):
        text = UNIT_HOME + text[1:]
    if not (text.startswith(UNIT_HOME) or text.startswith("/")):
        raise InputError(f"{SIM_UNIT_VARIABLE} is {text!r}: not an absolute path; set an absolute path on the unit, "
                         "~/… (below the remote user's home there), or leave it unset (no shared unit account)")
    return resolve_unit_path(text.rstrip("/") or "/", home)


def sim_unit_mount(path: str) -> tuple[list[str], dict[str, str]]:
    """``(volumes, env)`` that give a simulator container its unit's shared account at ``path``
    (none when ``path`` is "")."""
    if not path:
        return [], {}
    return [f"{path}:{SIM_UNIT_CONTAINER}"], {SIM_UNIT_ENV: SIM_UNIT_CONTAINER}


def sim_unit_unresolved(path: str, where: str) -> str:
    """Why a unit account directory that still holds ``UNIT_HOME`` cannot be mounted; "" otherwise."""
    if UNIT_HOME not in path:
        return ""
    return (f"{where}: {SIM_UNIT_VARIABLE}={path} is not resolved on the unit (its home was not read); let the "
            "plan read it (playbooks/tasks/host.yml) or set an absolute path")


def normalize_flag(name: Any) -> str:
    """``max_num_seqs`` / ``--max-num-seqs`` / ``max-num-seqs`` → ``max-num-seqs``."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"flag name {name!r} is not a string; write flags as 'max-num-seqs: 8'")
    flag = name.strip().lstrip("-").replace("_", "-")
    if not _FLAG_RE.match(flag):
        raise InputError(f"flag name {name!r} is not a vLLM flag name; use lowercase words joined by '-', "
                         "e.g. 'max-num-seqs'")
    return flag


def normalize_args(args: Mapping[str, FlagValue] | None) -> FlagValues:
    """An ``args`` mapping with normalised flag names, in order (a later spelling wins)."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise InputError(f"variant args must be a mapping of flag: value, got {type(args).__name__}; "
                         "write e.g. 'args: {max-num-seqs: 8}'")
    out: FlagValues = {}
    for key, value in args.items():
        flag = normalize_flag(key)
        out.pop(flag, None)
        out[flag] = value
    return out


def _render_value(flag: str, value: FlagValue) -> str:
    """One flag value as vLLM's argparse expects it (JSON for structured values)."""
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise InputError(f"flag --{flag} has a value of type {type(value).__name__}; use a string, number, "
                     "boolean, list or mapping")


def flag_list(args: Mapping[str, FlagValue] | None) -> list[str]:
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


def port_number(value: Any, name: str = "vllm_server_port", example: int = 8000) -> int:
    """``value`` as a TCP port; an InputError names the variable ``name`` and an example otherwise."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} {value!r} is not a number; set it to e.g. {example}") from None
    if not 0 < port < 65536:
        raise InputError(f"{name} {port} is outside 1-65535; set it to e.g. {example}")
    return port


def vllm_argv(variant: Variant, host: str = "127.0.0.1", port: Any = 8000) -> list[str]:
    """``MODEL --host H --port P`` then the variant's flags, in the variant's ``args`` order."""
    if not isinstance(variant, Mapping) or not variant.get("name") or not variant.get("model"):
        raise InputError("a variant needs 'name' and 'model'; expand variants with sparkbench.matrix")
    return [str(variant["model"]), "--host", str(host), "--port", str(port_number(port))] + flag_list(variant.get("args"))


def docker_run_line(container: ContainerArgs, secret_env: Sequence[str] = ()) -> str:
    """The ``docker run`` line equivalent to the container arguments, secrets ``<redacted>``."""
    parts = ["docker", "run", "-d", "--name", str(container["name"])]
    if container.get("restart_policy") not in (None, "", "no"):  # a resident (sparkbench.serve)
        parts += ["--restart", str(container["restart_policy"])]
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


def docker_exec_line(container: str, argv: Sequence[str], env: EnvValues | None = None,
                     secret_env: Sequence[str] = ()) -> str:
    """The ``docker exec`` line that starts ``vllm serve`` in a running container, secrets ``<redacted>``."""
    parts = ["docker", "exec", "-d"]
    for key, value in redacted_env(env).items():
        parts += ["-e", f"{key}={value}"]
    for key in secret_env:
        parts += ["-e", f"{key}={REDACTED}"]
    parts += [str(container), "vllm", "serve"] + redact_argv(list(argv))
    return " ".join(shlex.quote(p) for p in parts)


def launch_spec(variant: Variant, server: ServerSettings) -> LaunchSpec:
    """Everything the container gets for ``variant`` on a host with ``server`` settings.

    ``server`` keys (the vllm_server role's settings): ``host``, ``port``, ``container_name``,
    ``base_url`` (optional: where the host reaches the server when that is not ``http://host:port``,
    e.g. a port published from a cluster head's container), ``exec_in`` / ``log_file`` (a cluster
    variant, see the module docstring),
    ``hf_cache`` / ``vllm_cache`` / ``flashinfer_cache`` (host paths on the unit, ``unit_path``'s
    forms; unset: below the unit's home), ``unit_home`` (the remote user's home on the unit when
    known: puts it into those paths), ``gpus`` (bool), ``env`` (host-wide environment), ``secret_env``
    (names of the secrets the role will add: ``HF_TOKEN`` when a token is set, ``VLLM_API_KEY``
    when an API key is), ``ready_timeout_s`` (the healthcheck's start period).
    """
    image = variant.get("image") if isinstance(variant, Mapping) else None
    if not image:
        raise InputError(f"variant {variant.get('name') if isinstance(variant, Mapping) else variant!r} has no image; "
                         "set bench_image or the build's image")
    host = str(server.get("host") or "127.0.0.1")
    port = port_number(server.get("port", 8000))
    argv = vllm_argv(variant, host, port)
    env = {str(k): str(v) for k, v in (server.get("env") or {}).items()}
    env.update({str(k): str(v) for k, v in (variant.get("env") or {}).items()})
    secret_env = [str(n) for n in server.get("secret_env") or [] if str(n) not in env]
    caches = unit_caches(server, server.get("unit_home"))
    sim_unit = sim_unit_path(server.get("sim_unit_dir"), server.get("unit_home"))
    sim_volumes, sim_env = sim_unit_mount(sim_unit)
    container: ContainerArgs = {
        "name": str(server.get("container_name") or "sparkbench-vllm"),
        "image": str(image),
        "command": argv,
        "network_mode": "host",
        "ipc_mode": "host",
        "volumes": cache_volumes(caches) + sim_volumes,
        "env": {**env, **sim_env},
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
        container = {**container, "name": str(server["exec_in"]), "exec_in": str(server["exec_in"]),
                     "volumes": cache_volumes(caches), "env": env}
        # The head's Ray container mounts the caches (sparkbench.cluster): nothing mounted here.
        return {"argv": argv, "env": env, "secret_env": secret_env, "image": str(image), "container": container,
                "exec": {"container": str(server["exec_in"]), "log_file": log_file, "pid_file": f"{log_file}.pid"},
                "command": docker_exec_line(server["exec_in"], argv, env, secret_env),
                "health_url": f"{base}/health", "base_url": base, "caches": caches, "unresolved": ""}
    where = f"container {container['name']}"
    return {"argv": argv, "env": env, "secret_env": secret_env, "image": str(image), "container": container,
            "command": docker_run_line(container, secret_env), "health_url": f"{base}/health",
            "base_url": base, "caches": caches, "sim_unit": sim_unit,
            "unresolved": unresolved_message(caches, where) or sim_unit_unresolved(sim_unit, where)}


def with_unit_home(spec: LaunchSpec, home: Any) -> LaunchSpec:
    """The launch spec with the unit's ``home`` put into its cache folders and its simulated unit's
    account: the volumes, the ``docker run`` line and ``unresolved`` follow; argv, environment and
    so the configuration hash do not change."""
    out = dict(spec)
    if not spec.get("caches"):
        return out
    caches = {k: resolve_unit_path(str(v), home) for k, v in spec["caches"].items()}
    out["caches"] = caches
    if spec.get("exec"):
        return out
    sim_unit = sim_unit_path(spec.get("sim_unit"), home)
    container = {**spec["container"], "volumes": cache_volumes(caches) + sim_unit_mount(sim_unit)[0]}
    out["container"] = container
    out["sim_unit"] = sim_unit
    out["command"] = docker_run_line(container, spec.get("secret_env") or [])
    where = f"container {container['name']}"
    out["unresolved"] = unresolved_message(caches, where) or sim_unit_unresolved(sim_unit, where)
    return out


def config_hash(spec: LaunchSpec, settings: Settings | SettingsInput | None = None) -> str:
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


def reach_address(listen: Any) -> str:
    """The address the unit itself reaches a server listening on ``listen`` at (a wildcard or an
    empty listen address: the loopback)."""
    text = str(listen or "").strip()
    return "127.0.0.1" if text in ("", "0.0.0.0", "::") else text
