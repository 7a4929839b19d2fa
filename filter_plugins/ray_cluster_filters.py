"""Thin Ansible adapters over sparkbench.cluster for roles/ray_cluster (the logic and its tests live there).

* ``ray_cluster_spec``            group name, groups, hostvars → the cluster spec (head = the group's first host)
* ``ray_cluster_with_addresses``  spec, {host: IPv4} → the spec completed with probed addresses
* ``ray_cluster_addresses``       looped ``ip -4 -o addr show dev IF`` results → {host: IPv4}
* ``ray_cluster_restart_plan``    spec, looped docker_container_info results → nodes running, nodes down, restart as a whole?
* ``ray_status_parse``            ``ray status`` [-v] text → figures (both formats)
* ``ray_probe_parse``             ray_probe.py stdout → its JSON (``RAY_PROBE_JSON {...}``)
* ``ray_node_probe_parse``        node_probe.sh stdout, interface → node facts
* ``ray_cluster_node_facts``      check.yml's registered per-node results → node_facts
* ``ray_link_iperf3`` / ``ray_link_ib_write_bw``  client output, note → {method, gbps, note}
* ``ray_cluster_check``           spec, status, probe, node_facts → {ok, failures, nodes, link}
* ``ray_cluster_failure_message`` check result → one line per failure with its remedy
* ``ray_cluster_block``           spec, check, probe, serving status, tp, pp → the result's cluster object
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from sparkbench import cluster
from sparkbench.errors import InputError


def _wrap(name: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except InputError as exc:
        raise AnsibleFilterError(f"{name}: {exc}") from None


def ray_cluster_spec(group: Any, groups: Any, hostvars: Any, gpus_per_node: int = cluster.GPUS_PER_NODE) -> dict:
    """See sparkbench.cluster.cluster_spec; members = groups[group] in inventory order, their
    variables (sparkbench.cluster.VARIABLES) read from hostvars."""
    name = str(group or "")
    hosts = list((groups or {}).get(name) or [])
    members = []
    for host in hosts:
        hv = hostvars[host]
        members.append((host, {k: hv[k] for k in cluster.VARIABLES if k in hv}))
    return _wrap("ray_cluster_spec", cluster.cluster_spec, name, members, gpus_per_node)


def ray_cluster_with_addresses(spec: Any, addresses: Any) -> dict:
    """See sparkbench.cluster.with_addresses."""
    return _wrap("ray_cluster_with_addresses", cluster.with_addresses, spec, addresses)


def ray_cluster_addresses(results: Any) -> dict:
    """The registered results of ``ip -4 -o addr show dev IF`` looped over nodes → ``{host: first IPv4}``
    (hosts whose interface has none are left out: with_addresses then names the fix)."""
    import re

    out = {}
    for r in results or []:
        found = re.search(r"\binet ([0-9.]+)/", str(r.get("stdout") or ""))
        if found:
            out[r["item"]["host"]] = found.group(1)
    return out


def ray_cluster_restart_plan(spec: Any, results: Any) -> dict:
    """See sparkbench.cluster.restart_plan; ``results`` are docker_container_info's registered
    results looped over the spec's nodes (``item.container``, ``exists``, ``container.State.Running``)."""
    running = {}
    for r in results or []:
        state = ((r.get("container") or {}).get("State") or {}) if r.get("exists") else {}
        running[r["item"]["container"]] = bool(state.get("Running"))
    return cluster.restart_plan((spec or {}).get("nodes") or [], running)


def ray_status_parse(text: Any) -> dict:
    """See sparkbench.cluster.parse_ray_status. Given the exec task's whole registered result, its
    stdout is parsed, and where that is no cluster status the answer is the last line of what the
    head said (stdout, stderr, the module's message)."""
    if not isinstance(text, Mapping):
        return cluster.parse_ray_status(text)
    status = cluster.parse_ray_status(text.get("stdout"))
    if status["format"] is None:
        status["answer"] = cluster.last_line("\n".join(str(text.get(k) or "") for k in ("stdout", "stderr", "msg")))
    return status


def ray_probe_parse(text: Any) -> dict | None:
    """The JSON after ``RAY_PROBE_JSON`` (the last such line); None when there is none."""
    for line in reversed(str(text or "").splitlines()):
        if line.startswith("RAY_PROBE_JSON "):
            return json.loads(line[len("RAY_PROBE_JSON "):])
    return None


def ray_node_probe_parse(text: Any, interface: str) -> dict:
    """See sparkbench.cluster.parse_node_probe."""
    return cluster.parse_node_probe(text, interface)


def ray_link_iperf3(text: Any, note: str) -> dict:
    """See sparkbench.cluster.parse_iperf3."""
    return cluster.parse_iperf3(text, note)


def ray_link_ib_write_bw(text: Any, note: str = "") -> dict:
    """See sparkbench.cluster.parse_ib_write_bw."""
    return cluster.parse_ib_write_bw(text, note)


def _by_host(results: Any) -> dict:
    """A loop's registered results by node host: the loop's item is a node, or a result of a loop
    over the nodes (the log task loops over the container inspection's results)."""
    out = {}
    for r in results or []:
        item = r.get("item")
        if isinstance(item, dict) and "host" not in item and isinstance(item.get("item"), dict):
            item = item["item"]
        if isinstance(item, dict) and "host" in item and not r.get("skipped"):
            out[item["host"]] = r
    return out


def ray_cluster_node_facts(spec: Any, container_info: Any, image_info: Any, node_probe: Any, logs: Any = None,
                           revisions: Any = None, bandwidth: Any = None) -> dict:
    """The registered results of check.yml's per-node loops (docker_container_info, docker_image_info,
    node_probe.sh, docker logs, stat of the model snapshots) → node_facts for sparkbench.cluster.check:
    ``{host: {container: {running, status, exit_code, log_tail}, image_id, image_digest, driver, hostname,
    interface, other_ipv4, link_speed_mbps, tools, model_revisions, bandwidth}}`` (bandwidth on the head)."""
    info, images, probes, tails = _by_host(container_info), _by_host(image_info), _by_host(node_probe), _by_host(logs)
    facts: dict = {}
    for node in (spec or {}).get("nodes") or []:
        host = node["host"]
        c = (info.get(host) or {}).get("container") or {}
        state = c.get("State") or {}
        imgs = (images.get(host) or {}).get("images") or []
        digest = next((d.split("@", 1)[1] for d in (imgs[0].get("RepoDigests") or []) if "@" in d), None) if imgs else None
        probe = probes.get(host) or {}
        text = probe.get("stdout") or ""
        entry = cluster.parse_node_probe(text, node["interface"]) if text else {}
        entry["container"] = {"exists": bool((info.get(host) or {}).get("exists")), "running": bool(state.get("Running")),
                              "status": state.get("Status"), "exit_code": state.get("ExitCode"),
                              "log_tail": "\n".join(t for t in ((tails.get(host) or {}).get("stdout"),
                                                                  (tails.get(host) or {}).get("stderr")) if t)[-2000:]}
        entry["image_id"] = c.get("Image") or (imgs[0].get("Id") if imgs else None)
        entry["image_digest"] = digest
        facts[host] = entry
    for r in revisions or []:
        if r.get("skipped") or not isinstance(r.get("item"), list):
            continue
        node, model = r["item"]
        revs = facts.setdefault(node["host"], {}).setdefault("model_revisions", {})
        revs[model["model"]] = model.get("revision") if (r.get("stat") or {}).get("exists") else None
    head = ((spec or {}).get("nodes") or [{}])[0].get("host")
    if bandwidth and head in facts:
        facts[head]["bandwidth"] = bandwidth
    return facts


def ray_cluster_check(spec: Any, status: Any, probe: Any, node_facts: Any) -> dict:
    """See sparkbench.cluster.check."""
    return _wrap("ray_cluster_check", cluster.check, spec, status, probe, node_facts)


def ray_cluster_failure_message(result: Any) -> str:
    """See sparkbench.cluster.failure_message."""
    return cluster.failure_message(result or {})


def ray_cluster_block(spec: Any, check_result: Any, probe: Any, serving_status: Any = None,
                      tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> dict:
    """See sparkbench.cluster.cluster_block."""
    return _wrap("ray_cluster_block", cluster.cluster_block, spec, check_result, probe, serving_status,
                 tensor_parallel_size=int(tensor_parallel_size), pipeline_parallel_size=int(pipeline_parallel_size))


class FilterModule:
    """ray_cluster filters."""

    def filters(self) -> dict:
        return {f.__name__: f for f in (ray_cluster_spec, ray_cluster_with_addresses, ray_cluster_addresses, ray_cluster_restart_plan, ray_status_parse, ray_probe_parse,
                                        ray_node_probe_parse, ray_cluster_node_facts, ray_link_iperf3, ray_link_ib_write_bw, ray_cluster_check,
                                        ray_cluster_failure_message, ray_cluster_block)}
