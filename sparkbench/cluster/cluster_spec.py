"""The cluster spec: an inventory group's hosts and variables → every node's container,
environment and ``ray start`` command line (NVIDIA's recipe, ``shared/reference/multispark.md``
§4); world size and cluster variants; whether ``start`` restarts a cluster as a whole."""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..launch import cache_volumes, resolve_unit_path, unit_caches, unresolved_message
from ..measure.shapes import JSON
from .shapes import ClusterSpec, HostVars, RestartPlan, SpecNode

if TYPE_CHECKING:
    from ..launch import FlagValue
    from ..plan_types import HardwareProfile

#: GPUs of one node when the hardware profile does not say (``gpus_per_node``): one GB10 per Spark.
GPUS_PER_NODE = 1
#: Ray's GCS port (``ray start --port``; docs ``ray-core/configure``); sparkrun uses 46379.
RAY_PORT = 6379
#: The port ``vllm serve`` listens on inside a bridge-network head container (published on the host).
CONTAINER_SERVE_PORT = 8000
#: ``ethtool`` speed of a CX-7 port at full rate (multi-sparks-through-switch: ``200000Mb/s``).
EXPECTED_SPEED_MBPS = 200000
#: NVIDIA's warning threshold for the link (spark_cluster_setup.py: 21.875 GB/s = 175 Gb/s).
LINK_THRESHOLD_GBPS = 175.0
#: The recipe's ``--shm-size`` (run_cluster.sh); GPU-less nodes (the simulator) get a small one.
RECIPE_SHM_SIZE = "10.24g"
GPU_LESS_SHM_SIZE = "512m"

#: The host variables a cluster spec reads, with their defaults (the same defaults, documented,
#: in roles/ray_cluster/defaults/main.yml). Cluster-wide ones are read from the head.
VARIABLES: dict[str, JSON] = {
    "ray_cluster_interface": "",             # per node, required: the CX-7 netdev (sim: eth0)
    "ray_cluster_node_ip": "",               # per node; '' = the interface's IPv4, probed on the host
    "ray_cluster_join_address": "",          # per worker; '' = the head's address:port (tests set a wrong one)
    "ray_cluster_port": RAY_PORT,            # head
    "ray_cluster_docker_network": "",        # head; '' = host network (the recipe); a name = bridge network
    "ray_cluster_subnet": "",                # head; bridge: the network's subnet; host: optional check
    "ray_cluster_serve_port": 8000,          # head; where the cluster's vllm serve answers on the head host
    "ray_cluster_join_timeout_s": 60,        # head; seconds check waits for every node
    "ray_cluster_num_cpus": None,            # per node; None = Ray counts the cores
    "ray_cluster_num_gpus": None,            # per node; None = gpus_per_node
    "ray_cluster_object_store_bytes": None,  # per node; None = Ray's default (30 % of memory)
    "ray_cluster_container_prefix": "sparkbench-ray",  # head; containers <prefix>-<host>
    "ray_cluster_image": "",                 # per node; '' = bench_image
    "ray_cluster_shm_size": "",              # per node; '' = 10.24g (recipe), 512m on GPU-less hosts
    "ray_cluster_allow_enp2p": False,        # per node; true accepts an enP2p… interface
    "ray_cluster_link_threshold_gbps": LINK_THRESHOLD_GBPS,   # head
    "ray_cluster_expected_speed_mbps": EXPECTED_SPEED_MBPS,   # head
    "bench_image": "sparkbench/vllm-sim:latest",
    "vllm_server_env": {},
    "sparkbench_gpu_less": False,
    # per node: the unit's cache folders (sparkbench.launch.UNIT_CACHES; '' = below the node's home)
    "spark_host_hf_cache": "",
    "spark_host_vllm_cache": "",
    "spark_host_flashinfer_cache": "",
    # per node: its facts when gathered (``user_dir``, the remote user's home, puts it into the
    # cache folders; without it they hold <unit home> until ``with_homes``)
    "ansible_facts": {},
}

_ENV_IFACE = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "TP_SOCKET_IFNAME",
              "OMPI_MCA_btl_tcp_if_include")


# ---- world size -------------------------------------------------------------------------------

def gpus_per_node(hardware_profile: HardwareProfile | None) -> int:
    """``gpus_per_node`` of a hardware profile (``profiles/hardware/*.json``), default 1."""
    value = (hardware_profile or {}).get("gpus_per_node", GPUS_PER_NODE)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise InputError(f"hardware profile gpus_per_node is {value!r}; set it to a whole number >= 1")
    return n


def _positive_int(args: Mapping[str, FlagValue], names: Sequence[str]) -> int:
    for name in names:
        if name in args and args[name] is not None:
            value = args[name]
            try:
                if isinstance(value, bool):
                    raise ValueError
                n = int(value)
                if n != float(value) or n < 1:
                    raise ValueError
            except (TypeError, ValueError):
                raise InputError(f"args.{name} is {value!r}; set it to a whole number >= 1 (e.g. {name}: 2)") from None
            return n
    return 1


def world_size(args: Mapping[str, FlagValue] | None) -> tuple[int, int]:
    """``(tensor_parallel_size, pipeline_parallel_size)`` of a variant's args (flag names as the
    matrix normalises them, ``tp`` / ``pp`` accepted); 1 when not set. World = TP × PP GPUs."""
    args = {str(k).lstrip("-").replace("_", "-"): v for k, v in (args or {}).items()}
    return (_positive_int(args, ("tensor-parallel-size", "tp")), _positive_int(args, ("pipeline-parallel-size", "pp")))


def is_cluster_variant(args: Mapping[str, FlagValue] | None, gpus_per_node: int = GPUS_PER_NODE) -> bool:
    """True when the variant needs more GPUs than one node has: TP × PP > ``gpus_per_node``."""
    tp, pp = world_size(args)
    return tp * pp > int(gpus_per_node)


# ---- reading the variables ----------------------------------------------------------------------

def _var(variables: HostVars, name: str) -> JSON:
    value = variables.get(name, VARIABLES[name]) if isinstance(variables, Mapping) else VARIABLES[name]
    return VARIABLES[name] if value is None and VARIABLES[name] is not None else value


def _ipv4(value: JSON, variable: str, host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(str(value).strip()))
    except (ipaddress.AddressValueError, ValueError):
        raise InputError(f"{variable} of host {host} is {value!r}: not an IPv4 address; set it to the address of "
                         f"ray_cluster_interface on that host (e.g. 192.168.100.10), or leave it empty to probe it") from None


def _opt_int(value: JSON, variable: str, host: str, minimum: int = 0) -> int | None:
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        n = int(value)
        if n < minimum:
            raise ValueError
    except (TypeError, ValueError):
        raise InputError(f"{variable} of host {host} is {value!r}; set a whole number >= {minimum} or leave it empty") from None
    return n


def _host_int(variables: HostVars, name: str, host: str) -> int | None:
    """A whole-number variable >= 1 of ``host``, None when empty."""
    return _opt_int(_var(variables, name), name, host, 1)


def _members(members: Any, name: str) -> list[tuple[str, HostVars]]:
    out: list[tuple[str, HostVars]] = []
    if isinstance(members, Mapping):
        members = list(members.items())
    for item in members or []:
        if isinstance(item, Mapping) and "host" in item:
            host, variables = item["host"], item.get("vars") or {}
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
            host, variables = item
        else:
            raise InputError(f"bench_cluster {name}: members must be (host, variables) pairs, got {item!r}")
        out.append((str(host), variables or {}))
    return out


def _member_pairs(name: str, members: Any) -> list[tuple[str, HostVars]]:
    """The members as ``(host, variables)``, head first: at least two, each host once."""
    if not name:
        raise InputError("bench_cluster is empty; set it to the inventory group of the cluster (its first host is the head)")
    pairs = _members(members, name)
    if len(pairs) < 2:
        raise InputError(f"bench_cluster {name} has {len(pairs)} host(s) ({', '.join(h for h, _ in pairs) or 'none'}); "
                         f"a cluster needs at least 2: put the head and its workers in inventory group {name} "
                         "(the first host is the head)")
    hosts = [h for h, _ in pairs]
    if len(set(hosts)) != len(hosts):
        raise InputError(f"bench_cluster {name} lists a host twice ({', '.join(hosts)}); list each Spark once")
    return pairs


# ---- the spec -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    """What every node of one cluster shares: its network and the head's settings."""

    name: str
    mode: str                                # "host" | "bridge"
    docker_network: str                      # "" on the host network
    subnet: ipaddress.IPv4Network | None
    prefix: str                              # container names <prefix>-<host>
    serve_port: int
    gpus_per_node: int


def _network(name: str,
             pairs: Sequence[tuple[str, HostVars]]) -> tuple[str, str, ipaddress.IPv4Network | None]:
    """``(mode, docker_network, subnet)`` from the head's variables; every member must name the same network."""
    head_host, head_vars = pairs[0]
    docker_network = str(_var(head_vars, "ray_cluster_docker_network") or "").strip()
    mode = "bridge" if docker_network else "host"
    subnet_text = str(_var(head_vars, "ray_cluster_subnet") or "").strip()
    subnet = None
    if subnet_text:
        try:
            subnet = ipaddress.IPv4Network(subnet_text, strict=False)
        except ValueError:
            raise InputError(f"ray_cluster_subnet of host {head_host} is {subnet_text!r}; write a CIDR like "
                             "172.31.250.0/24") from None
    elif mode == "bridge":
        raise InputError(f"ray_cluster_subnet is not set for cluster {name} (head {head_host}) but "
                         f"ray_cluster_docker_network is {docker_network}; set the network's subnet, e.g. 172.31.250.0/24")
    for host, variables in pairs[1:]:
        other = str(_var(variables, "ray_cluster_docker_network") or "").strip()
        if other != docker_network:
            raise InputError(f"ray_cluster_docker_network is {other or 'empty (host network)'} on {host} but "
                             f"{docker_network or 'empty (host network)'} on the head {head_host}; set it on the "
                             f"cluster's group ({name}) so every node uses the same")
    return mode, docker_network, subnet


def _interface(layout: _Layout, host: str, variables: HostVars) -> str:
    """The node's cluster interface: set, and not an enP2p… twin unless allowed."""
    interface = str(_var(variables, "ray_cluster_interface") or "").strip()
    if not interface:
        raise InputError(f"ray_cluster_interface is not set for host {host} (cluster {layout.name}); set it to the "
                         "interface the nodes are cabled on, the same physical port on every node (e.g. "
                         "enp1s0f1np1, the Up one in ibdev2netdev; eth0 inside a Docker network)")
    if interface.startswith("enP2p") and not _var(variables, "ray_cluster_allow_enp2p"):
        raise InputError(f"ray_cluster_interface of host {host} is {interface}, an enP2p… twin (known issue "
                         f"ray_enp2p_twin): NVIDIA's NCCL playbook says to disregard enP2p interfaces; set "
                         f"ray_cluster_interface to the enp1… twin of the same port (e.g. "
                         f"{interface.replace('enP2p', 'enp', 1)}), or ray_cluster_allow_enp2p: true if you mean it")
    return interface


def _node_address(layout: _Layout, index: int, host: str, variables: HostVars,
                  seen: dict[str, str]) -> str | None:
    """``ray_cluster_node_ip`` of the node (None: probed later, host network only): in the subnet,
    not taken by an earlier node (``seen``: address → host, updated)."""
    ip_text = str(_var(variables, "ray_cluster_node_ip") or "").strip()
    address = _ipv4(ip_text, "ray_cluster_node_ip", host) if ip_text else None
    subnet = layout.subnet
    if address is None and layout.mode == "bridge":
        raise InputError(f"ray_cluster_node_ip is not set for host {host}: on Docker network {layout.docker_network} "
                         f"each node needs a fixed address in {subnet}; set it (e.g. "
                         f"{next(subnet.hosts()) + 10 + index if subnet else '172.31.250.11'})")
    if address is not None:
        if subnet is not None and ipaddress.IPv4Address(address) not in subnet:
            raise InputError(f"ray_cluster_node_ip of host {host} is {address}, outside ray_cluster_subnet "
                             f"{subnet}; give every node an address in the cluster's subnet")
        if address in seen:
            raise InputError(f"ray_cluster_node_ip {address} is set on both {seen[address]} and {host}; "
                             "every node needs its own address on the cluster interface")
        seen[address] = host
    return address


def _node(layout: _Layout, index: int, host: str, variables: HostVars, seen: dict[str, str]) -> SpecNode:
    """One node of the spec, without its environment and command line (``_complete`` adds them)."""
    interface = _interface(layout, host, variables)
    address = _node_address(layout, index, host, variables, seen)
    gpu_less = bool(_var(variables, "sparkbench_gpu_less"))
    num_gpus = _host_int(variables, "ray_cluster_num_gpus", host) or int(layout.gpus_per_node)
    num_cpus = _host_int(variables, "ray_cluster_num_cpus", host)
    store = _host_int(variables, "ray_cluster_object_store_bytes", host)
    image = str(_var(variables, "ray_cluster_image") or _var(variables, "bench_image") or "").strip()
    if not image:
        raise InputError(f"no image for the Ray node on {host}: set ray_cluster_image (or bench_image)")
    host_env = _var(variables, "vllm_server_env") or {}
    if not isinstance(host_env, Mapping):
        raise InputError(f"vllm_server_env of host {host} must be a mapping of NAME: value")
    role = "head" if index == 0 else "worker"
    bridge = layout.mode == "bridge"
    facts = _var(variables, "ansible_facts")
    caches = unit_caches(variables, (facts or {}).get("user_dir") if isinstance(facts, Mapping) else None)
    return {
        "host": host, "role": role, "container": f"{layout.prefix}-{host}", "image": image,
        "interface": interface, "address": address,
        "join_address": str(_var(variables, "ray_cluster_join_address") or "").strip() or None,
        "num_gpus": num_gpus, "num_cpus": num_cpus, "object_store_bytes": store,
        "gpus": not gpu_less,
        "shm_size": str(_var(variables, "ray_cluster_shm_size") or (GPU_LESS_SHM_SIZE if gpu_less else RECIPE_SHM_SIZE)),
        # The unit's cache folders (vllm serve runs in these containers: compiled graphs and kernels too).
        "caches": caches, "volumes": cache_volumes(caches),
        "hostname": host if bridge else None,
        "labels": {"org.sparkbench.cluster": layout.name, "org.sparkbench.ray-role": role},
        "published_ports": [f"127.0.0.1:{layout.serve_port}:{CONTAINER_SERVE_PORT}"] if bridge and index == 0 else [],
        "ipv4_address": address if bridge else None,
        "_host_env": {str(k): str(v) for k, v in host_env.items()},
    }


def cluster_spec(name: str, members: Any, gpus_per_node: int = GPUS_PER_NODE) -> ClusterSpec:
    """The cluster of inventory group ``name``: ``members`` = ``[(host, variables), ...]`` in
    inventory order (the first host is the head; variables as ``VARIABLES`` names them).

    Returns ``{name, head, members, ray_port, head_address, network: {mode, docker_network, subnet},
    join_timeout_s, probe, link: {expected_speed_mbps, threshold_gbps}, nodes: [...], serve: {...}}``
    with per node ``{host, role, container, image, interface, address, env, command, entrypoint,
    published_ports, ipv4_address, gpus, num_gpus, shm_size, volumes, hostname, labels}``.
    ``address`` is None on the host network when ``ray_cluster_node_ip`` is empty: the role probes
    the interface's IPv4 and completes the spec with ``with_addresses``.
    """
    name = str(name or "").strip()
    pairs = _member_pairs(name, members)
    head_host, head_vars = pairs[0]
    mode, docker_network, subnet = _network(name, pairs)
    port = _host_int(head_vars, "ray_cluster_port", head_host) or RAY_PORT
    serve_port = _host_int(head_vars, "ray_cluster_serve_port", head_host) or 8000
    join_timeout = _host_int(head_vars, "ray_cluster_join_timeout_s", head_host) or 60
    layout = _Layout(name=name, mode=mode, docker_network=docker_network, subnet=subnet, serve_port=serve_port,
                     prefix=str(_var(head_vars, "ray_cluster_container_prefix") or "sparkbench-ray"),
                     gpus_per_node=gpus_per_node)
    seen: dict[str, str] = {}
    nodes = [_node(layout, index, host, variables, seen) for index, (host, variables) in enumerate(pairs)]
    bridge = mode == "bridge"
    spec: ClusterSpec = {
        "name": name, "head": head_host, "members": [h for h, _ in pairs], "ray_port": port, "head_address": None,
        "network": {"mode": mode, "docker_network": docker_network or None, "subnet": str(subnet) if subnet else None},
        "join_timeout_s": join_timeout,
        "probe": "container" if bridge else "host",
        "link": {"expected_speed_mbps": _host_int(head_vars, "ray_cluster_expected_speed_mbps", head_host)
                 or EXPECTED_SPEED_MBPS,
                 "threshold_gbps": float(_var(head_vars, "ray_cluster_link_threshold_gbps") or LINK_THRESHOLD_GBPS)},
        "nodes": nodes,
        "serve": {"container": nodes[0]["container"], "host": "127.0.0.1", "port": serve_port,
                  "base_url": f"http://127.0.0.1:{serve_port}",
                  "listen_host": "0.0.0.0" if bridge else "127.0.0.1",
                  "listen_port": CONTAINER_SERVE_PORT if bridge else serve_port},
        "resolved": False,
        "unresolved_caches": _unresolved_caches(nodes),
    }
    if all(n["address"] for n in nodes):
        return _complete(spec)
    for n in nodes:
        n["env"], n["command"], n["entrypoint"] = None, None, None
    return spec


def _node_env(n: SpecNode, head_address: str) -> dict[str, str]:
    """The node's container environment: NVIDIA's recipe, then ``vllm_server_env`` (which may not
    contradict the cluster's own addresses)."""
    env = {"VLLM_HOST_IP": n["address"], **{k: n["interface"] for k in _ENV_IFACE},
           "RAY_memory_monitor_refresh_ms": "0", "MASTER_ADDR": head_address}
    for key, value in n.get("_host_env", {}).items():
        if key in ("VLLM_HOST_IP", "MASTER_ADDR") and value != env[key]:
            raise InputError(f"vllm_server_env of host {n['host']} sets {key}={value}, but the cluster needs "
                             f"{env[key]} (ray_cluster_node_ip / the head's address); remove {key} from vllm_server_env")
        env[key] = value
    return env


def _ray_start(n: SpecNode, port: int, head_address: str) -> list[str]:
    """The node's ``ray start --block`` command line."""
    cmd = ["ray", "start", "--block"]
    if n["role"] == "head":
        cmd += ["--head", f"--port={port}"]
    else:
        cmd += [f"--address={n['join_address'] or head_address}"]
    cmd += [f"--node-ip-address={n['address']}", f"--num-gpus={n['num_gpus']}"]
    if n["num_cpus"] is not None:
        cmd.append(f"--num-cpus={n['num_cpus']}")
    if n["object_store_bytes"] is not None:
        cmd.append(f"--object-store-memory={n['object_store_bytes']}")
    if n["role"] == "head":
        cmd.append("--include-dashboard=false")
    cmd.append("--disable-usage-stats")
    return cmd


def _complete(spec: ClusterSpec) -> ClusterSpec:
    """Fill head_address, every node's env and ``ray start`` command from the addresses."""
    nodes = spec["nodes"]
    head = nodes[0]
    port = spec["ray_port"]
    spec["head_address"] = f"{head['address']}:{port}"
    for n in nodes:
        n["env"] = _node_env(n, head["address"])
        n["command"] = _ray_start(n, port, spec["head_address"])
        n["entrypoint"] = n["command"][:1]
    for n in nodes:
        n.pop("_host_env", None)
    spec["resolved"] = True
    return spec


def with_addresses(spec: ClusterSpec, addresses: Mapping[str, str | None]) -> ClusterSpec:
    """A spec with ``address`` None on some nodes (host network, ``ray_cluster_node_ip`` empty)
    completed with ``addresses`` = ``{host: IPv4 of its interface}`` (probed by the role). A
    complete spec comes back unchanged. A missing address raises ``InputError``."""
    if spec.get("resolved"):
        return dict(spec)
    out = copy.deepcopy(dict(spec))
    seen: dict[str, str] = {}
    for n in out["nodes"]:
        if not n.get("address"):
            value = (addresses or {}).get(n["host"])
            if not value:
                raise InputError(f"interface {n['interface']} of host {n['host']} has no IPv4 address (known issue "
                                 f"pair_interface_down); give it one (netplan, reference §2) or set ray_cluster_node_ip")
            n["address"] = _ipv4(value, f"the IPv4 of {n['interface']}", n["host"])
        if n["address"] in seen:
            raise InputError(f"hosts {seen[n['address']]} and {n['host']} have the same address {n['address']} on "
                             "the cluster interface; give each node its own (ray_cluster_node_ip or netplan)")
        seen[n["address"]] = n["host"]
        n.setdefault("_host_env", {})
        for key, value in (n.get("env") or {}).items():
            n["_host_env"].setdefault(key, value)
    return _complete(out)


def _unresolved_caches(nodes: Sequence[SpecNode]) -> str:
    """Why some node's cache folders cannot be mounted ("" when every one is a real path)."""
    return "; ".join(m for m in (unresolved_message(n["caches"], f"Ray node {n['host']}") for n in nodes) if m)


def with_homes(spec: ClusterSpec, homes: Mapping[str, str | None]) -> ClusterSpec:
    """The spec with each node's cache folders below its own unit's home (``homes``: ``{host:
    ansible_facts.user_dir}``; a node without one keeps ``<unit home>``, and ``unresolved_caches``
    says so: ``ray_cluster`` start refuses such a spec)."""
    out = copy.deepcopy(dict(spec))
    for n in out["nodes"]:
        home = (homes or {}).get(n["host"])
        if home and n.get("caches"):
            n["caches"] = {k: resolve_unit_path(str(v), home) for k, v in n["caches"].items()}
            n["volumes"] = cache_volumes(n["caches"])
    out["unresolved_caches"] = _unresolved_caches(out["nodes"])
    return out


def restart_plan(nodes: Sequence[SpecNode], running: Mapping[str, bool]) -> RestartPlan:
    """Whether ``start`` must remove every node first and start the cluster afresh.

    ``nodes`` are the spec's nodes (head first), ``running`` maps each node's container name to
    whether it runs now (absent or exited: False). When some nodes run and others do not (a worker
    was lost and its container exited or was removed, or the head died under running workers), the
    cluster starts again as a whole: a node started alone registers with the head anew, while Ray
    keeps its old entry alive until the GCS health checks give up on it (tens of seconds, longer on
    a loaded host), so ``ray status`` would count one node and its GPU too many; and the workers
    of a dead head do not join its successor (a new GCS is another cluster to them). All running:
    left alone; none running: a plain start.

    Returns ``{restart, running, down, reason}`` (hosts; reason None unless restart)."""
    up = [str(n["host"]) for n in nodes if running.get(n["container"])]
    down = [str(n["host"]) for n in nodes if not running.get(n["container"])]
    restart = bool(up) and bool(down)
    reason = None
    if restart:
        reason = (f"the cluster lost {', '.join(down)} while {', '.join(up)} kept running: "
                  "every node is removed and the cluster starts again as a whole")
    return {"restart": restart, "running": up, "down": down, "reason": reason}
