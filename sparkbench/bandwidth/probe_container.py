"""The bandwidth probe's container on a host: one throw-away container of a variant's image.

``probe_spec(entry, gpu_probe, remote_dir)`` → the plan's ``probe``::

    {kind, method, image, program: {src, dest} | None,
     container: {image, entrypoint, command, env, volumes, device_requests}}

``kind`` follows ``spark_host_gpu_probe`` (how the host's GPU is read): ``image`` (a simulated
host: the simulator image's stand-in, ``vllm bandwidth-probe``) → ``simulated``; ``host`` (a
Spark: the vLLM image's torch on the GPU, the GPU passed in as the variant's server gets it) →
``cuda``; ``none`` (no GPU: the real-vLLM CPU image's torch) → ``cpu``. For ``cuda`` and ``cpu``
the probe program (``probe.py``) is copied to the unit's work directory as ``PROGRAM_NAME``
(``program``) and mounted read-only into the container. The environment is the variant's
(secret names only, never values; a simulated unit's knobs such as ``VLLM_SIM_EFFICIENCY`` are
what its stand-in reads). The container's name, network (none) and clean-up are the role's
(roles/spark_host, tasks_from: bandwidth).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from ..launch import DeviceRequest
    from ..plan_types import PlanEntry

#: The probe program in the checkout, and its name in the unit's work directory.
PROGRAM = Path(__file__).resolve().with_name("probe.py")
PROGRAM_NAME = "bandwidth_probe.py"
#: Where the program is mounted inside the probe's container.
MOUNT_DIR = "/sparkbench-probe"
#: spark_host_gpu_probe → the probe's kind.
KINDS = {"image": "simulated", "host": "cuda", "none": "cpu"}
#: The probe's kind → the method its reading names (the program's and the stand-in's).
METHODS = {"simulated": "simulated", "cuda": "torch-cuda-stream-read", "cpu": "torch-cpu-stream-read"}
#: The read buffer [MiB]: 1 GiB on a GPU (16 x a GB10's or an H200's L2 and more); on a CPU half
#: that (still several times a server's last-level cache, and half the time on a small host).
BUFFER_MIB = {"cuda": 1024, "cpu": 512}


class ProbeProgram(TypedDict):
    """The probe program copied to the unit (``probe_spec``): its path in the checkout and on the unit."""

    src: str
    dest: str


class ProbeContainer(TypedDict, total=False):
    """The probe's ``docker_container`` arguments (``probe_spec``; the role adds name, network, clean-up)."""

    image: str
    env: dict[str, str]
    volumes: list[str]
    device_requests: list[DeviceRequest]
    entrypoint: list[str]
    command: list[str]


class ProbeSpec(TypedDict):
    """The plan's ``probe`` (``probe_spec``, the module docstring): the probe's kind and method, the
    image it runs in, the program to copy (None: the simulator's stand-in), its container."""

    kind: Literal["simulated", "cuda", "cpu"]
    method: str
    image: str
    program: ProbeProgram | None
    container: ProbeContainer


def probe_spec(entry: PlanEntry, gpu_probe: str, remote_dir: str) -> ProbeSpec:
    """The probe's container for the host whose first launched variant is ``entry`` (a plan entry:
    its image, its launch spec's environment and GPU request)."""
    kind = KINDS[gpu_probe]
    launch = entry["launch"]
    image = str(entry["variant"]["image"])
    container: ProbeContainer = {"image": image, "env": dict(launch.get("env") or {}), "volumes": [],
                                 "device_requests": []}
    if kind == "simulated":
        return {"kind": kind, "method": METHODS[kind], "image": image, "program": None,
                "container": {**container, "entrypoint": ["vllm"], "command": ["bandwidth-probe"]}}
    dest = f"{remote_dir}/{PROGRAM_NAME}"
    inside = f"{MOUNT_DIR}/{PROGRAM_NAME}"
    container.update(entrypoint=["python3"], command=[inside, "--device", kind, "--buffer-mib", str(BUFFER_MIB[kind])],
                     volumes=[f"{dest}:{inside}:ro"])
    if kind == "cuda":
        container["device_requests"] = list((launch.get("container") or {}).get("device_requests") or [])
    return {"kind": kind, "method": METHODS[kind], "image": image, "program": {"src": str(PROGRAM), "dest": dest},
            "container": container}
