"""A Ray cluster of Sparks: its spec, its ``ray status``, its check and its block in a result.

Pure Python (no Ansible import; the known issues are read with ``sparkbench.preflight``). Used by
the plan (``cluster_spec``, ``is_cluster_variant``), the ``ray_cluster`` role (through the
filters ``ray_cluster_spec``, ``ray_status_parse``, ``ray_cluster_check``,
``ray_cluster_with_addresses``) and the result (``cluster_block``). Facts with sources:
``shared/reference/multispark.md``.

* ``world_size(args) -> (tp, pp)``; world = TP × PP GPUs (vLLM places one worker per GPU).
* ``is_cluster_variant(args, gpus_per_node)``: TP × PP > GPUs of one node (``gpus_per_node`` of
  the hardware profile, default ``GPUS_PER_NODE`` = 1: a Spark has one GB10).
* ``cluster_spec(name, members)``: the inventory group's hosts (head first) and their variables
  (``VARIABLES``) → every node's container, environment (NVIDIA's recipe, reference §4) and
  ``ray start`` command line; bad input raises ``InputError`` naming the variable and the fix.
* ``with_addresses(spec, addresses)``: a host-network spec whose addresses were left to a probe
  of the interface (``ray_cluster_node_ip`` empty) completed with the probed IPv4s.
* ``parse_ray_status(text)``: ``ray status`` [``-v``] in both formats (reference §8).
* ``check(spec, status, probe, node_facts)``: ``{ok, failures: [{id, host, reason, remedy}], nodes, link}``,
  reasons and remedies from ``roles/vllm_server/files/known_issues.yml`` (entries with
  ``cluster_check: true``).
* ``cluster_block(...)``: the result document's ``cluster`` object.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InputError

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
#: vLLM's Ray worker actor class (vllm/v1/executor/ray_utils.py); other alive actors are kept
#: only when no actor of this class is there (the simulator names its own).
VLLM_WORKER_CLASS = "RayWorkerWrapper"

#: The host variables a cluster spec reads, with their defaults (the same defaults, documented,
#: in roles/ray_cluster/defaults/main.yml). Cluster-wide ones are read from the head.
VARIABLES: dict[str, Any] = {
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
    "spark_host_hf_cache": "/root/.cache/huggingface",
}

_ENV_IFACE = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "TP_SOCKET_IFNAME",
              "OMPI_MCA_btl_tcp_if_include")


def gpus_per_node(hardware_profile: Mapping[str, Any] | None) -> int:
    """``gpus_per_node`` of a hardware profile (``profiles/hardware/*.json``), default 1."""
    value = (hardware_profile or {}).get("gpus_per_node", GPUS_PER_NODE)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise InputError(f"hardware profile gpus_per_node is {value!r}; set it to a whole number >= 1")
    return n


def _positive_int(args: Mapping[str, Any], names: Sequence[str]) -> int:
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


def world_size(args: Mapping[str, Any] | None) -> tuple[int, int]:
    """``(tensor_parallel_size, pipeline_parallel_size)`` of a variant's args (flag names as the
    matrix normalises them, ``tp`` / ``pp`` accepted); 1 when not set. World = TP × PP GPUs."""
    args = {str(k).lstrip("-").replace("_", "-"): v for k, v in (args or {}).items()}
    return (_positive_int(args, ("tensor-parallel-size", "tp")), _positive_int(args, ("pipeline-parallel-size", "pp")))


def is_cluster_variant(args: Mapping[str, Any] | None, gpus_per_node: int = GPUS_PER_NODE) -> bool:
    """True when the variant needs more GPUs than one node has: TP × PP > ``gpus_per_node``."""
    tp, pp = world_size(args)
    return tp * pp > int(gpus_per_node)


def executor_backend(args: Mapping[str, Any] | None) -> str | None:
    """The variant's ``distributed-executor-backend`` (None when not set)."""
    args = {str(k).lstrip("-").replace("_", "-"): v for k, v in (args or {}).items()}
    value = args.get("distributed-executor-backend")
    return None if value is None else str(value)


# ---- the spec ---------------------------------------------------------------------------------

def _var(variables: Mapping[str, Any], name: str) -> Any:
    value = variables.get(name, VARIABLES[name]) if isinstance(variables, Mapping) else VARIABLES[name]
    return VARIABLES[name] if value is None and VARIABLES[name] is not None else value


def _ipv4(value: Any, variable: str, host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(str(value).strip()))
    except (ipaddress.AddressValueError, ValueError):
        raise InputError(f"{variable} of host {host} is {value!r}: not an IPv4 address; set it to the address of "
                         f"ray_cluster_interface on that host (e.g. 192.168.100.10), or leave it empty to probe it") from None


def _opt_int(value: Any, variable: str, host: str, minimum: int = 0) -> int | None:
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


def _members(members: Any, name: str) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
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


def cluster_spec(name: str, members: Any, gpus_per_node: int = GPUS_PER_NODE) -> dict[str, Any]:
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
    port = _opt_int(_var(head_vars, "ray_cluster_port"), "ray_cluster_port", head_host, 1) or RAY_PORT
    serve_port = _opt_int(_var(head_vars, "ray_cluster_serve_port"), "ray_cluster_serve_port", head_host, 1) or 8000
    join_timeout = _opt_int(_var(head_vars, "ray_cluster_join_timeout_s"), "ray_cluster_join_timeout_s", head_host, 1) or 60
    prefix = str(_var(head_vars, "ray_cluster_container_prefix") or "sparkbench-ray")

    nodes: list[dict[str, Any]] = []
    seen_addresses: dict[str, str] = {}
    for index, (host, variables) in enumerate(pairs):
        interface = str(_var(variables, "ray_cluster_interface") or "").strip()
        if not interface:
            raise InputError(f"ray_cluster_interface is not set for host {host} (cluster {name}); set it to the "
                             "interface the nodes are cabled on, the same physical port on every node (e.g. "
                             "enp1s0f1np1, the Up one in ibdev2netdev; eth0 inside a Docker network)")
        if interface.startswith("enP2p") and not _var(variables, "ray_cluster_allow_enp2p"):
            raise InputError(f"ray_cluster_interface of host {host} is {interface}, an enP2p… twin (known issue "
                             f"ray_enp2p_twin): NVIDIA's NCCL playbook says to disregard enP2p interfaces; set "
                             f"ray_cluster_interface to the enp1… twin of the same port (e.g. "
                             f"{interface.replace('enP2p', 'enp', 1)}), or ray_cluster_allow_enp2p: true if you mean it")
        ip_text = str(_var(variables, "ray_cluster_node_ip") or "").strip()
        address = _ipv4(ip_text, "ray_cluster_node_ip", host) if ip_text else None
        if address is None and mode == "bridge":
            raise InputError(f"ray_cluster_node_ip is not set for host {host}: on Docker network {docker_network} "
                             f"each node needs a fixed address in {subnet}; set it (e.g. "
                             f"{next(subnet.hosts()) + 10 + index if subnet else '172.31.250.11'})")
        if address is not None:
            if subnet is not None and ipaddress.IPv4Address(address) not in subnet:
                raise InputError(f"ray_cluster_node_ip of host {host} is {address}, outside ray_cluster_subnet "
                                 f"{subnet}; give every node an address in the cluster's subnet")
            if address in seen_addresses:
                raise InputError(f"ray_cluster_node_ip {address} is set on both {seen_addresses[address]} and {host}; "
                                 "every node needs its own address on the cluster interface")
            seen_addresses[address] = host
        gpu_less = bool(_var(variables, "sparkbench_gpu_less"))
        num_gpus = _opt_int(_var(variables, "ray_cluster_num_gpus"), "ray_cluster_num_gpus", host, 1) or int(gpus_per_node)
        num_cpus = _opt_int(_var(variables, "ray_cluster_num_cpus"), "ray_cluster_num_cpus", host, 1)
        store = _opt_int(_var(variables, "ray_cluster_object_store_bytes"), "ray_cluster_object_store_bytes", host, 1)
        image = str(_var(variables, "ray_cluster_image") or _var(variables, "bench_image") or "").strip()
        if not image:
            raise InputError(f"no image for the Ray node on {host}: set ray_cluster_image (or bench_image)")
        host_env = _var(variables, "vllm_server_env") or {}
        if not isinstance(host_env, Mapping):
            raise InputError(f"vllm_server_env of host {host} must be a mapping of NAME: value")
        role = "head" if index == 0 else "worker"
        hf_cache = str(_var(variables, "spark_host_hf_cache") or VARIABLES["spark_host_hf_cache"])
        nodes.append({
            "host": host, "role": role, "container": f"{prefix}-{host}", "image": image,
            "interface": interface, "address": address,
            "join_address": str(_var(variables, "ray_cluster_join_address") or "").strip() or None,
            "num_gpus": num_gpus, "num_cpus": num_cpus, "object_store_bytes": store,
            "gpus": not gpu_less,
            "shm_size": str(_var(variables, "ray_cluster_shm_size") or (GPU_LESS_SHM_SIZE if gpu_less else RECIPE_SHM_SIZE)),
            "volumes": [f"{hf_cache}:/root/.cache/huggingface"],
            "hostname": host if mode == "bridge" else None,
            "labels": {"org.sparkbench.cluster": name, "org.sparkbench.ray-role": role},
            "published_ports": [f"127.0.0.1:{serve_port}:{CONTAINER_SERVE_PORT}"] if mode == "bridge" and index == 0 else [],
            "ipv4_address": address if mode == "bridge" else None,
            "_host_env": {str(k): str(v) for k, v in host_env.items()},
        })
    spec = {
        "name": name, "head": head_host, "members": hosts, "ray_port": port, "head_address": None,
        "network": {"mode": mode, "docker_network": docker_network or None, "subnet": str(subnet) if subnet else None},
        "join_timeout_s": join_timeout,
        "probe": "container" if mode == "bridge" else "host",
        "link": {"expected_speed_mbps": _opt_int(_var(head_vars, "ray_cluster_expected_speed_mbps"),
                                                 "ray_cluster_expected_speed_mbps", head_host, 1) or EXPECTED_SPEED_MBPS,
                 "threshold_gbps": float(_var(head_vars, "ray_cluster_link_threshold_gbps") or LINK_THRESHOLD_GBPS)},
        "nodes": nodes,
        "serve": {"container": nodes[0]["container"], "host": "127.0.0.1", "port": serve_port,
                  "base_url": f"http://127.0.0.1:{serve_port}",
                  "listen_host": "0.0.0.0" if mode == "bridge" else "127.0.0.1",
                  "listen_port": CONTAINER_SERVE_PORT if mode == "bridge" else serve_port},
        "resolved": False,
    }
    if all(n["address"] for n in nodes):
        return _complete(spec)
    for n in nodes:
        n["env"], n["command"], n["entrypoint"] = None, None, None
    return spec


def _complete(spec: dict[str, Any]) -> dict[str, Any]:
    """Fill head_address, every node's env and ``ray start`` command from the addresses."""
    nodes = spec["nodes"]
    head = nodes[0]
    port = spec["ray_port"]
    spec["head_address"] = f"{head['address']}:{port}"
    for n in nodes:
        env = {"VLLM_HOST_IP": n["address"], **{k: n["interface"] for k in _ENV_IFACE},
               "RAY_memory_monitor_refresh_ms": "0", "MASTER_ADDR": head["address"]}
        for key, value in n.get("_host_env", {}).items():
            if key in ("VLLM_HOST_IP", "MASTER_ADDR") and value != env[key]:
                raise InputError(f"vllm_server_env of host {n['host']} sets {key}={value}, but the cluster needs "
                                 f"{env[key]} (ray_cluster_node_ip / the head's address); remove {key} from vllm_server_env")
            env[key] = value
        n["env"] = env
        cmd = ["ray", "start", "--block"]
        if n["role"] == "head":
            cmd += ["--head", f"--port={port}"]
        else:
            cmd += [f"--address={n['join_address'] or spec['head_address']}"]
        cmd += [f"--node-ip-address={n['address']}", f"--num-gpus={n['num_gpus']}"]
        if n["num_cpus"] is not None:
            cmd.append(f"--num-cpus={n['num_cpus']}")
        if n["object_store_bytes"] is not None:
            cmd.append(f"--object-store-memory={n['object_store_bytes']}")
        if n["role"] == "head":
            cmd.append("--include-dashboard=false")
        cmd.append("--disable-usage-stats")
        n["command"] = cmd
        n["entrypoint"] = cmd[:1]
    for n in nodes:
        n.pop("_host_env", None)
    spec["resolved"] = True
    return spec


def with_addresses(spec: Mapping[str, Any], addresses: Mapping[str, Any]) -> dict[str, Any]:
    """A spec with ``address`` None on some nodes (host network, ``ray_cluster_node_ip`` empty)
    completed with ``addresses`` = ``{host: IPv4 of its interface}`` (probed by the role). A
    complete spec comes back unchanged. A missing address raises ``InputError``."""
    import copy

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


def restart_plan(nodes: Sequence[Mapping[str, Any]], running: Mapping[str, Any]) -> dict[str, Any]:
    """Whether ``start`` must remove every node first and start the cluster afresh.

    ``nodes`` are the spec's nodes (head first), ``running`` maps each node's container name to
    whether it runs now (absent or exited: False). When some nodes run and others do not (a worker
    was lost and its container exited or was removed, or the head died under running workers), the
    cluster starts again as a whole: a node started alone registers with the head anew, while Ray
    keeps its old entry alive until the GCS health checks give up on it (tens of seconds, longer on
    a loaded host), so ``ray status`` would count one node and its GPU too many; and the workers
    of a dead head do not join its successor (a new GCS is another cluster to them). All running: left alone; none running: a plain start.

    Returns ``{restart, running, down, reason}`` (hosts; reason None unless restart)."""
    up = [str(n["host"]) for n in nodes if running.get(n["container"])]
    down = [str(n["host"]) for n in nodes if not running.get(n["container"])]
    restart = bool(up) and bool(down)
    reason = None
    if restart:
        reason = (f"the cluster lost {', '.join(down)} while {', '.join(up)} kept running: "
                  "every node is removed and the cluster starts again as a whole")
    return {"restart": restart, "running": up, "down": down, "reason": reason}


# ---- ray status -------------------------------------------------------------------------------

_USAGE_RE = re.compile(r"^\s*([\d.]+)([A-Za-z]*)/([\d.]+)([A-Za-z]*)\s+(\S+)(?:\s+\((.*)\))?\s*$")
_NODE_LINE_RE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")
_SECTIONS = ("Active:", "Healthy:", "Idle:", "Pending:", "Recent failures:", "Total Usage:", "Usage:",
             "From request_resources:", "Total Constraints:", "Pending Demands:", "Demands:", "Total Demands:")


def _usage(lines: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        m = _USAGE_RE.match(line)
        if not m:
            continue
        used, used_unit, total, total_unit, resource, note = m.groups()
        entry: dict[str, Any] = {"used": float(used), "total": float(total)}
        if used_unit or total_unit:
            entry.update(used=f"{used}{used_unit}", total=f"{total}{total_unit}")
        if note:
            entry["note"] = note
        out[resource] = entry
    return out


def _none_line(line: str) -> bool:
    return line.strip().startswith("(") and line.strip().endswith(")") and line.strip()[1:3] in ("no", "no ")


def parse_ray_status(text: Any) -> dict[str, Any]:
    """``ray status`` (or ``ray status -v``) output → figures.

    Formats (reference §8): Ray 2.x prints ``Active:`` (and ``Idle:`` with the v2 autoscaler:
    idle nodes are alive too) with lines `` 1 node_<id>`` and ``Total Usage:`` with lines
    `` 0.0/2.0 GPU [(… reserved in placement groups)]``; older Ray (2022) ``Healthy:`` and
    ``Usage:`` (then ``Demands:``). ``-v`` adds per-node blocks ``Node: <id> (<type>)`` [`` Id: <id>``]
    `` Usage:`` ``  0.0/1.0 GPU``. Returns ``{format, nodes_active, node_ids, node_types,
    gpus_used, gpus_total, cpus_used, cpus_total, pending_nodes, failures, pending_demands,
    resources, per_node}`` (counts as numbers; None where the text does not say; ``format`` None
    when the text is not ``ray status`` output).
    """
    raw = str(text or "").replace("\r\n", "\n")
    lines = raw.split("\n")
    # The per-node blocks of -v start at the first line "Node: ..." after the resources.
    per_node_at = next((i for i, line in enumerate(lines) if line.startswith("Node: ")), len(lines))
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines[:per_node_at]:
        stripped = line.strip()
        if stripped in _SECTIONS and not line.startswith("  "):
            current = stripped
            sections.setdefault(current, [])
            continue
        if stripped in ("Node status", "Resources") or stripped.startswith("=====") or set(stripped) == {"-"}:
            current = None
            continue
        if current and stripped:
            sections[current].append(line)
    fmt = "2.x-active" if "Active:" in sections else "legacy-healthy" if "Healthy:" in sections else None
    node_lines = sections.get("Active:", []) + sections.get("Healthy:", []) + sections.get("Idle:", [])
    nodes_active, node_ids, node_types = 0, [], []
    for line in node_lines:
        if _none_line(line):
            continue
        m = _NODE_LINE_RE.match(line)
        if not m:
            continue
        nodes_active += int(m.group(1))
        label = m.group(2)
        if label.startswith("node_"):
            node_ids.append(label[len("node_"):])
        else:
            node_types.append(label)
    usage = _usage(sections.get("Total Usage:") or sections.get("Usage:") or [])
    gpu, cpu = usage.get("GPU") or {}, usage.get("CPU") or {}
    per_node: dict[str, dict[str, Any]] = {}
    current_node = None
    for line in lines[per_node_at:]:
        m = re.match(r"^Node: (\S+)(?: \((.*)\))?\s*$", line)
        if m:
            current_node = m.group(1)
            per_node[current_node] = {"name": m.group(2), "usage": {}}
            continue
        if current_node is None:
            continue
        idm = re.match(r"^ Id: (\S+)\s*$", line)
        if idm:  # v2 autoscaler: "Node: <instance id> (<type>)" then " Id: <node id>"
            entry = per_node.pop(current_node)
            entry["instance_id"] = current_node
            current_node = idm.group(1)
            per_node[current_node] = entry
            continue
        u = _usage([line]) if line.startswith("  ") else {}
        per_node[current_node]["usage"].update(u)
    for entry in per_node.values():
        g, c = entry["usage"].get("GPU") or {}, entry["usage"].get("CPU") or {}
        entry.update(gpus_used=g.get("used"), gpus_total=g.get("total"), cpus_used=c.get("used"), cpus_total=c.get("total"))
    return {
        "format": fmt,
        "nodes_active": nodes_active if fmt else 0,
        "node_ids": node_ids, "node_types": node_types,
        "gpus_used": gpu.get("used"), "gpus_total": gpu.get("total"),
        "cpus_used": cpu.get("used"), "cpus_total": cpu.get("total"),
        "pending_nodes": [line.strip() for line in sections.get("Pending:", []) if not _none_line(line)],
        "failures": [line.strip() for line in sections.get("Recent failures:", []) if not _none_line(line)],
        "pending_demands": [line.strip() for line in sections.get("Pending Demands:", []) + sections.get("Demands:", [])
                            if not _none_line(line)],
        "resources": usage,
        "per_node": per_node,
    }


# ---- the check --------------------------------------------------------------------------------

def _issue_texts(issues: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if issues is None:
        from .preflight import load_known_issues
        issues = load_known_issues()
    return {str(i.get("id")): i for i in (issues.get("issues") or []) if isinstance(i, Mapping)}


def _render(text: Any, values: Mapping[str, Any]) -> str:
    def sub(m: re.Match[str]) -> str:
        value = values.get(m.group(1))
        return "" if value is None else str(value)
    return re.sub(r"\{match\.([A-Za-z0-9_]+)\}", sub, " ".join(str(text or "").split()))


def _same(values: Sequence[Any]) -> bool:
    known = [v for v in values if v not in (None, "")]
    return len(set(map(str, known))) <= 1


def check(spec: Mapping[str, Any], status: Mapping[str, Any] | None, probe: Mapping[str, Any] | None,
          node_facts: Mapping[str, Mapping[str, Any]] | None, issues: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Is the cluster sound, before a model loads?

    ``status`` = ``parse_ray_status`` of the head's ``ray status``; ``probe`` = the JSON of
    ``roles/ray_cluster/files/ray_probe.py`` (``nodes`` [{node_id, address, hostname, alive, gpus}],
    ``placement_groups``, ``actors``, ``ray_version``); ``node_facts`` per host = ``{container:
    {running, status, exit_code, log_tail}, image_id, image_digest, driver, model_revisions: {model:
    revision|None}, interface: {name, up, ipv4, prefixlen, mtu}, other_ipv4: ["a.b.c.d/p", ...],
    link_speed_mbps, bandwidth: {method, gbps, note}}`` (any key may be missing: not judged).
    Ray nodes are matched to hosts by registered address, then by hostname.

    Failure ids (known_issues.yml): ray_worker_not_joined, ray_head_not_running, ray_host_ip_mismatch, ray_gpu_count,
    pair_image_mismatch, pair_revision_mismatch, pair_driver_mismatch, pair_interface_down,
    pair_mtu_mismatch, ray_same_subnet, pair_link_speed (judged on real Sparks only: every node has
    a GPU and uses the host network), pair_link_bandwidth (ib_write_bw below the threshold; iperf3
    on the container network is recorded, not judged).
    """
    texts = _issue_texts(issues)
    facts = {str(k): (v or {}) for k, v in (node_facts or {}).items()}
    failures: list[dict[str, Any]] = []

    def fail(issue_id: str, host: str | None, **values: Any) -> None:
        entry = texts.get(issue_id) or {}
        values = {"host": host, "cluster": spec.get("name"), **values}
        failures.append({"id": issue_id, "host": host,
                         "reason": _render(entry.get("check_reason") or entry.get("reason") or issue_id, values),
                         "remedy": _render(entry.get("remedy") or "", values)})

    spec_nodes = list(spec.get("nodes") or [])
    ray_nodes = [n for n in ((probe or {}).get("nodes") or []) if n.get("alive")]
    matched: dict[str, Mapping[str, Any]] = {}
    used: set[str] = set()
    for n in spec_nodes:  # by registered address
        hit = next((r for r in ray_nodes if r.get("address") == n.get("address") and r.get("node_id") not in used), None)
        if hit:
            matched[n["host"]] = hit
            used.add(hit.get("node_id"))
    for n in spec_nodes:  # by hostname: the node joined, under another address
        if n["host"] in matched:
            continue
        names = {n["host"], (facts.get(n["host"]) or {}).get("hostname"), n.get("hostname")} - {None, ""}
        hit = next((r for r in ray_nodes if r.get("hostname") in names and r.get("node_id") not in used), None)
        if hit:
            matched[n["host"]] = hit
            used.add(hit.get("node_id"))
    strays = [r for r in ray_nodes if r.get("node_id") not in used]
    total = len(spec_nodes)
    alive_count = len(ray_nodes) if probe is not None else int((status or {}).get("nodes_active") or 0)
    for n in spec_nodes:
        host = n["host"]
        if host in matched:
            r = matched[host]
            if r.get("address") != n.get("address"):
                fail("ray_host_ip_mismatch", host, vllm_host_ip=n.get("address"), registered=r.get("address"),
                     interface=n.get("interface"))
            continue
        if probe is None:
            continue  # no probe: only the count of ray status says something (below)
        if strays and total - len(matched) == len(strays) == 1:
            fail("ray_host_ip_mismatch", host, vllm_host_ip=n.get("address"), registered=strays[0].get("address"),
                 interface=n.get("interface"))
            continue
        c = facts.get(host, {}).get("container") or {}
        last = ((c.get("log_tail") or "").strip().splitlines() or ["no log"])[-1].strip()
        if c and not c.get("exists", True):
            state = f"its container {n.get('container')} does not exist (run tasks_from: start)"
        elif c and not c.get("running"):
            state = f"its container is not running (status {c.get('status')}, exit code {c.get('exit_code')}): {last}"
        else:
            state = "its container runs but the node is not in the cluster"
        fail("ray_worker_not_joined" if n["role"] == "worker" else "ray_head_not_running", host,
             address=n.get("address"), head_address=n.get("join_address") or spec.get("head_address"),
             alive=alive_count, total=total, timeout=spec.get("join_timeout_s"), state=state,
             container=n.get("container"))
    if probe is None and status is not None and alive_count < total and not failures:
        fail("ray_worker_not_joined", None, alive=alive_count, total=total, timeout=spec.get("join_timeout_s"),
             head_address=spec.get("head_address"), state="ray status lists fewer nodes than the cluster has")
    for n in spec_nodes:
        r = matched.get(n["host"])
        if r is not None and r.get("gpus") is not None and float(r.get("gpus") or 0) != float(n.get("num_gpus") or 1):
            fail("ray_gpu_count", n["host"], gpus=r.get("gpus"), expected=n.get("num_gpus"))
    if status and status.get("gpus_total") is not None and not any(f["id"] == "ray_gpu_count" for f in failures):
        expected = sum(float(n.get("num_gpus") or 1) for n in spec_nodes)
        if len(ray_nodes) >= total and float(status["gpus_total"]) != expected:
            fail("ray_gpu_count", None, gpus=status["gpus_total"], expected=expected)

    hosts = [n["host"] for n in spec_nodes]

    def pair(key: str, issue_id: str, getter=None) -> None:
        values = {h: (getter(facts.get(h, {})) if getter else facts.get(h, {}).get(key)) for h in hosts}
        if not _same(list(values.values())):
            fail(issue_id, None, values=", ".join(f"{h}: {v}" for h, v in values.items()))

    pair("image_id", "pair_image_mismatch",
         lambda f: f.get("image_digest") or f.get("image_id"))
    models = sorted({m for h in hosts for m in (facts.get(h, {}).get("model_revisions") or {})})
    for model in models:
        revs = {h: (facts.get(h, {}).get("model_revisions") or {}).get(model) for h in hosts}
        if len(set(map(str, revs.values()))) > 1 or None in revs.values():
            fail("pair_revision_mismatch", None, model=model,
                 values=", ".join(f"{h}: {v or 'missing'}" for h, v in revs.items()))
    pair("driver", "pair_driver_mismatch")
    for n in spec_nodes:
        iface = facts.get(n["host"], {}).get("interface")
        if iface is None:
            continue
        if not iface.get("up") or not iface.get("ipv4"):
            fail("pair_interface_down", n["host"], interface=iface.get("name") or n.get("interface"),
                 state="down" if not iface.get("up") else "up without an IPv4 address")
            continue
        prefix = iface.get("prefixlen")
        if prefix is not None:
            own = ipaddress.IPv4Network(f"{iface['ipv4']}/{prefix}", strict=False)
            for other in facts.get(n["host"], {}).get("other_ipv4") or []:
                try:
                    other_if = ipaddress.IPv4Interface(str(other).split()[-1])
                except ValueError:
                    continue
                if other_if.ip != ipaddress.IPv4Address(iface["ipv4"]) and other_if.ip in own:
                    fail("ray_same_subnet", n["host"], interface=iface.get("name") or n.get("interface"),
                         subnet=str(own), other=str(other))
                    break
    pair("mtu", "pair_mtu_mismatch", lambda f: (f.get("interface") or {}).get("mtu"))

    link = link_summary(spec, facts)
    real_pair = all(n.get("gpus") for n in spec_nodes) and (spec.get("network") or {}).get("mode") == "host"
    if real_pair:
        for n in spec_nodes:
            speed = facts.get(n["host"], {}).get("link_speed_mbps")
            if speed is not None and int(speed) != int(link["expected_speed_mbps"]):
                fail("pair_link_speed", n["host"], speed=speed, expected=link["expected_speed_mbps"],
                     interface=n.get("interface"))
    if link.get("method") == "ib_write_bw" and link.get("gbps") is not None and link["gbps"] < link["threshold_gbps"]:
        fail("pair_link_bandwidth", None, gbps=link["gbps"], threshold=link["threshold_gbps"])

    nodes = []
    for n in spec_nodes:
        f, r = facts.get(n["host"], {}), matched.get(n["host"]) or {}
        iface = f.get("interface") or {}
        nodes.append({"host": n["host"], "role": n["role"], "address": n.get("address"),
                      "registered_address": r.get("address"), "node_id": r.get("node_id"), "alive": bool(r),
                      "gpus": r.get("gpus"), "image": n.get("image"), "image_id": f.get("image_id"),
                      "image_digest": f.get("image_digest"), "driver": f.get("driver"),
                      "interface": n.get("interface"), "mtu": iface.get("mtu"),
                      "link_speed_mbps": f.get("link_speed_mbps")})
    return {"ok": not failures, "failures": failures, "nodes": nodes, "nodes_alive": alive_count,
            "nodes_total": total, "link": link}


def link_summary(spec: Mapping[str, Any], node_facts: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The link figures of a cluster: ``{method, gbps, threshold_gbps, expected_speed_mbps,
    speed_mbps, note}`` (bandwidth measured on the head's facts, else any node's; speed = the
    lowest ethtool speed of the nodes; ``note`` says what was measured)."""
    facts = node_facts or {}
    link_cfg = spec.get("link") or {}
    hosts = [n["host"] for n in spec.get("nodes") or []]
    bw = next((facts.get(h, {}).get("bandwidth") for h in hosts if (facts.get(h) or {}).get("bandwidth")), None) or {}
    speeds = [int(facts.get(h, {}).get("link_speed_mbps")) for h in hosts
              if (facts.get(h) or {}).get("link_speed_mbps") not in (None, "")]
    gbps = bw.get("gbps")
    return {"method": bw.get("method"), "gbps": round(float(gbps), 3) if gbps is not None else None,
            "threshold_gbps": float(link_cfg.get("threshold_gbps") or LINK_THRESHOLD_GBPS),
            "expected_speed_mbps": int(link_cfg.get("expected_speed_mbps") or EXPECTED_SPEED_MBPS),
            "speed_mbps": min(speeds) if speeds else None, "note": bw.get("note")}


def failure_message(result: Mapping[str, Any]) -> str:
    """One line per failure: ``<id> (<host>): <reason>. Fix: <remedy>`` (the role's fail message)."""
    return "; ".join(f"{f['id']}{' (' + f['host'] + ')' if f.get('host') else ''}: {f['reason']}. Fix: {f['remedy']}"
                     for f in result.get("failures") or [])


# ---- the result block -------------------------------------------------------------------------

def cluster_block(spec: Mapping[str, Any], check_result: Mapping[str, Any] | None, probe: Mapping[str, Any] | None,
                  serving_status: Mapping[str, Any] | None = None, *, tensor_parallel_size: int = 1,
                  pipeline_parallel_size: int = 1) -> dict[str, Any]:
    """The result document's ``cluster`` object (tp/pp from the caller: ``world_size``).

    ``probe`` should be the serving snapshot (``tasks_from: check`` with ``ray_cluster_check_serving``):
    its placement group of TP × PP bundles (else the first CREATED one) and the alive worker actors
    (vLLM's ``RayWorkerWrapper``; else every alive actor). ``serving_status`` = parsed ``ray status``
    while serving: ``gpus_in_use`` (2.0 of 2.0 on a serving pair).
    """
    check_result = check_result or {}
    probe = probe or {}
    world = int(tensor_parallel_size) * int(pipeline_parallel_size)
    by_host = {n["host"]: n for n in check_result.get("nodes") or []}
    by_id = {n.get("node_id"): n for n in probe.get("nodes") or []}
    pgs = [p for p in probe.get("placement_groups") or [] if str(p.get("state")) == "CREATED"]
    pg = next((p for p in pgs if len(p.get("bundles") or []) == world), pgs[0] if pgs else None)
    actors = [a for a in probe.get("actors") or [] if str(a.get("state")) == "ALIVE"]
    workers = [a for a in actors if VLLM_WORKER_CLASS in str(a.get("class") or "")] or actors
    worker_nodes = {a.get("node_id") for a in workers}
    nodes = []
    for n in spec.get("nodes") or []:
        c = by_host.get(n["host"], {})
        # The node Ray knows at this host's address in the snapshot: the one holding a worker actor,
        # else an alive one. A node restarted after a loss registers anew, and its old entry can
        # still read alive for a while: the check may have matched that one.
        same = [r for r in probe.get("nodes") or [] if n.get("address") and r.get("address") == n.get("address")]
        current = (next((r for r in same if r.get("node_id") in worker_nodes), None)
                   or next((r for r in same if r.get("alive")), None))
        if current is not None:
            c = {**c, "node_id": current.get("node_id")}
        r = by_id.get(c.get("node_id")) or {}
        nodes.append({"host": n["host"], "role": n["role"], "address": n.get("address"), "node_id": c.get("node_id"),
                      "image": n.get("image"), "image_id": c.get("image_id"), "driver": c.get("driver"),
                      "alive": bool(r.get("alive", c.get("alive", False))), "gpus": r.get("gpus", c.get("gpus")),
                      "interface": n.get("interface"), "mtu": c.get("mtu"),
                      "link_speed_mbps": c.get("link_speed_mbps")})
    status = serving_status or {}
    link = dict(check_result.get("link") or link_summary(spec, {}))
    link.pop("expected_speed_mbps", None)
    return {
        "name": spec.get("name"), "head": spec.get("head"), "members": list(spec.get("members") or []),
        "backend": "ray", "ray_version": probe.get("ray_version"),
        "tensor_parallel_size": int(tensor_parallel_size), "pipeline_parallel_size": int(pipeline_parallel_size),
        "nodes": nodes, "nodes_alive": sum(1 for n in nodes if n["alive"]),
        "gpus_in_use": status.get("gpus_used"), "gpus_total": status.get("gpus_total",
                                                                         sum(float(n.get("gpus") or 0) for n in nodes) or None),
        "placement_group_id": (pg or {}).get("id"),
        "worker_actor_node_ids": [a.get("node_id") for a in workers],
        "link": link,
    }


# ---- node facts and link figures (the role's probes → node_facts) -----------------------------

def parse_node_probe(text: Any, interface: str) -> dict[str, Any]:
    """The output of ``roles/ray_cluster/files/node_probe.sh IFACE`` (``key=value`` lines; ``addr=``
    once per IPv4 of the node as ``<if> <a.b.c.d/p>``) → ``{hostname, driver, interface: {name, up,
    ipv4, prefixlen, mtu}, other_ipv4: [...], link_speed_mbps, tools: {ib_write_bw, iperf3, ethtool}}``."""
    values: dict[str, str] = {}
    addrs: list[tuple[str, str]] = []
    for line in str(text or "").splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "addr":
            parts = value.split()
            if len(parts) == 2:
                addrs.append((parts[0], parts[1]))
        else:
            values[key] = value
    own = [a for name, a in addrs if name == interface or name.split("@")[0] == interface]
    ipv4 = prefix = None
    if own:
        try:
            iface = ipaddress.IPv4Interface(own[0])
            ipv4, prefix = str(iface.ip), iface.network.prefixlen
        except ValueError:
            pass
    speed = re.search(r"(\d+)\s*Mb/s", values.get("speed", ""))
    mtu = values.get("mtu", "")
    driver = values.get("driver", "").split(",")[0].strip() or None
    return {"hostname": values.get("hostname") or None, "driver": driver,
            "interface": {"name": interface, "up": values.get("operstate") in ("up", "unknown") and bool(values.get("mtu")),
                          "operstate": values.get("operstate") or None, "ipv4": ipv4, "prefixlen": prefix,
                          "mtu": int(mtu) if mtu.isdigit() else None},
            "other_ipv4": [f"{name} {a}" for name, a in addrs if name.split("@")[0] != interface and not a.startswith("127.")],
            "link_speed_mbps": int(speed.group(1)) if speed else None,
            "tools": {t: values.get(t) == "yes" for t in ("ib_write_bw", "iperf3", "ethtool")}}


def parse_iperf3(text: Any, note: str) -> dict[str, Any]:
    """``iperf3 -c … -J`` output → ``{method: iperf3, gbps, note}`` (received bits/s of the sum;
    ``gbps`` None with the error in ``note`` when the JSON says it failed)."""
    import json

    try:
        doc = json.loads(str(text or ""))
    except ValueError:
        return {"method": "iperf3", "gbps": None, "note": f"{note}; iperf3 gave no JSON: {str(text or '')[-200:]}"}
    if doc.get("error"):
        return {"method": "iperf3", "gbps": None, "note": f"{note}; iperf3: {doc['error']}"}
    end = doc.get("end") or {}
    bps = (end.get("sum_received") or end.get("sum") or {}).get("bits_per_second")
    return {"method": "iperf3", "gbps": round(float(bps) / 1e9, 3) if bps else None, "note": note}


def parse_ib_write_bw(text: Any, note: str = "") -> dict[str, Any]:
    """``ib_write_bw --report_gbits`` client output → ``{method: ib_write_bw, gbps, note}``: the
    ``BW average[Gb/sec]`` column of the result line (``#bytes #iterations BW-peak BW-average MsgRate``)."""
    gbps = None
    header_seen = False
    for line in str(text or "").splitlines():
        if "BW average" in line:
            header_seen = True
            continue
        cols = line.split()
        if header_seen and len(cols) >= 4 and all(re.match(r"^[\d.]+$", c) for c in cols[:4]):
            gbps = float(cols[3])
    return {"method": "ib_write_bw", "gbps": gbps, "note": note or "ib_write_bw (RDMA write, 1 QP) between the nodes"}
