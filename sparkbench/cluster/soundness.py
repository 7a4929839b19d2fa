"""The cluster check: is the cluster sound before a model loads? Every failure carries an id of
``sparkbench/data/known_issues.yml`` (entries with ``cluster_check: true``) with its
reason and remedy."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..measure.shapes import JSON
from .node_facts import link_summary
from .shapes import (
    CheckedNode,
    CheckResult,
    ClusterSpec,
    Failure,
    InterfaceFacts,
    LinkSummary,
    MatchValue,
    NodeFacts,
    RayProbe,
    RayProbeNode,
    RayStatus,
    SpecNode,
)

if TYPE_CHECKING:
    from ..preflight import KnownIssue, KnownIssues

#: The role's facts of every node, by host.
Facts = Mapping[str, NodeFacts]


def _issue_texts(issues: KnownIssues | None) -> dict[str, KnownIssue]:
    if issues is None:
        from ..preflight import load_known_issues
        issues = load_known_issues()
    return {str(i.get("id")): i for i in (issues.get("issues") or []) if isinstance(i, Mapping)}


def _render(text: JSON, values: Mapping[str, MatchValue]) -> str:
    def sub(m: re.Match[str]) -> str:
        value = values.get(m.group(1))
        return "" if value is None else str(value)
    return re.sub(r"\{match\.([A-Za-z0-9_]+)\}", sub, " ".join(str(text or "").split()))


def _same(values: Sequence[JSON]) -> bool:
    known = [v for v in values if v not in (None, "")]
    return len(set(map(str, known))) <= 1


class _Failures:
    """The check's failures in the order found: ``{id, host, reason, remedy}`` with the known
    issue's ``check_reason`` (else ``reason``) and ``remedy``, ``{match.X}`` filled from the values."""

    def __init__(self, spec: ClusterSpec, issues: KnownIssues | None) -> None:
        self.texts = _issue_texts(issues)
        self.cluster = spec.get("name")
        self.entries: list[Failure] = []

    def add(self, issue_id: str, host: str | None, **values: MatchValue) -> None:
        entry = self.texts.get(issue_id) or {}
        values = {"host": host, "cluster": self.cluster, **values}
        self.entries.append({"id": issue_id, "host": host,
                             "reason": _render(entry.get("check_reason") or entry.get("reason") or issue_id, values),
                             "remedy": _render(entry.get("remedy") or "", values)})

    def has(self, issue_id: str) -> bool:
        return any(f["id"] == issue_id for f in self.entries)


def _match_nodes(spec_nodes: Sequence[SpecNode], ray_nodes: Sequence[RayProbeNode],
                 facts: Facts) -> tuple[dict[str, RayProbeNode], list[RayProbeNode]]:
    """``(host → its alive Ray node, the alive Ray nodes of no host)``: matched by registered
    address, then by hostname (the node joined under another address)."""
    matched: dict[str, RayProbeNode] = {}
    used: set[str | None] = set()
    for n in spec_nodes:
        hit = next((r for r in ray_nodes if r.get("address") == n.get("address") and r.get("node_id") not in used), None)
        if hit:
            matched[n["host"]] = hit
            used.add(hit.get("node_id"))
    for n in spec_nodes:
        if n["host"] in matched:
            continue
        names = {n["host"], (facts.get(n["host"]) or {}).get("hostname"), n.get("hostname")} - {None, ""}
        hit = next((r for r in ray_nodes if r.get("hostname") in names and r.get("node_id") not in used), None)
        if hit:
            matched[n["host"]] = hit
            used.add(hit.get("node_id"))
    return matched, [r for r in ray_nodes if r.get("node_id") not in used]


def _absent_state(n: SpecNode, facts: Facts) -> str:
    """Why a node is not in the cluster, from its container's facts."""
    c = facts.get(n["host"], {}).get("container") or {}
    last = ((c.get("log_tail") or "").strip().splitlines() or ["no log"])[-1].strip()
    if c and not c.get("exists", True):
        return f"its container {n.get('container')} does not exist (run tasks_from: start)"
    if c and not c.get("running"):
        return f"its container is not running (status {c.get('status')}, exit code {c.get('exit_code')}): {last}"
    if c.get("log_tail"):
        return f"its container runs but the node is not in the cluster; its log ends: {last}"
    return "its container runs but the node is not in the cluster"


def _judge_membership(failures: _Failures, spec: ClusterSpec, matched: Mapping[str, RayProbeNode],
                      strays: Sequence[RayProbeNode], probe: RayProbe | None,
                      status: RayStatus | None, facts: Facts, alive_count: int) -> None:
    """Every node registered at its own address (ray_host_ip_mismatch), joined (ray_worker_not_joined,
    ray_head_not_running); without a probe only the count of ``ray status`` is judged."""
    spec_nodes = list(spec.get("nodes") or [])
    total = len(spec_nodes)
    for n in spec_nodes:
        host = n["host"]
        if host in matched:
            r = matched[host]
            if r.get("address") != n.get("address"):
                failures.add("ray_host_ip_mismatch", host, vllm_host_ip=n.get("address"), registered=r.get("address"),
                             interface=n.get("interface"))
            continue
        if probe is None:
            continue
        if strays and total - len(matched) == len(strays) == 1:
            failures.add("ray_host_ip_mismatch", host, vllm_host_ip=n.get("address"),
                         registered=strays[0].get("address"), interface=n.get("interface"))
            continue
        failures.add("ray_worker_not_joined" if n["role"] == "worker" else "ray_head_not_running", host,
                     address=n.get("address"), head_address=n.get("join_address") or spec.get("head_address"),
                     alive=alive_count, total=total, timeout=spec.get("join_timeout_s"), state=_absent_state(n, facts),
                     container=n.get("container"))
    if probe is None and status is not None and alive_count < total and not failures.entries:
        _judge_count_only(failures, spec, status, facts, alive_count)


def _judge_count_only(failures: _Failures, spec: ClusterSpec, status: RayStatus, facts: Facts,
                      alive_count: int) -> None:
    """Without a probe: a head whose ``ray status`` answers no cluster status, or lists no active
    node, is not running (ray_head_not_running, with what it said and its container's state), and
    no worker joined it (ray_worker_not_joined, each with its container's state); else the cluster
    has fewer nodes than it should, the workers named (ray_worker_not_joined)."""
    spec_nodes = list(spec.get("nodes") or [])
    head = next((n for n in spec_nodes if n["role"] == "head"), None)
    workers = [n for n in spec_nodes if n["role"] == "worker"]
    if head is not None and (status.get("format") is None or not alive_count):
        if status.get("format") is None:
            said = f"`ray status` in its container answered no cluster status ({status.get('answer') or 'no output'})"
        else:
            recent = "; ".join(status.get("failures") or [])
            said = "`ray status` lists no active node, not even the head's" + (f" (recent failures: {recent})" if recent else "")
        failures.add("ray_head_not_running", head["host"], address=head.get("address"), container=head.get("container"),
                     state=f"{said}; {_absent_state(head, facts)}")
        for n in workers:
            failures.add("ray_worker_not_joined", n["host"], address=n.get("address"), alive=alive_count,
                         total=len(spec_nodes), timeout=spec.get("join_timeout_s"), container=n.get("container"),
                         head_address=n.get("join_address") or spec.get("head_address"),
                         state=f"the head does not answer; {_absent_state(n, facts)}")
        return
    failures.add("ray_worker_not_joined", " or ".join(n["host"] for n in workers) or None, alive=alive_count,
                 total=len(spec_nodes), timeout=spec.get("join_timeout_s"), head_address=spec.get("head_address"),
                 address=", ".join(str(n.get("address")) for n in workers),
                 state="ray status lists fewer nodes than the cluster has")


def _judge_gpus(failures: _Failures, spec_nodes: Sequence[SpecNode], matched: Mapping[str, RayProbeNode],
                ray_nodes: Sequence[RayProbeNode], status: RayStatus | None) -> None:
    """Each node's GPUs as Ray counts them, else the cluster's total (ray_gpu_count)."""
    for n in spec_nodes:
        r = matched.get(n["host"])
        if r is not None and r.get("gpus") is not None and float(r.get("gpus") or 0) != float(n.get("num_gpus") or 1):
            failures.add("ray_gpu_count", n["host"], gpus=r.get("gpus"), expected=n.get("num_gpus"))
    if status and status.get("gpus_total") is not None and not failures.has("ray_gpu_count"):
        expected = sum(float(n.get("num_gpus") or 1) for n in spec_nodes)
        if len(ray_nodes) >= len(spec_nodes) and float(status["gpus_total"]) != expected:
            failures.add("ray_gpu_count", None, gpus=status["gpus_total"], expected=expected)


def _differ(failures: _Failures, hosts: Sequence[str], facts: Facts, issue_id: str,
            value: Callable[[NodeFacts], JSON]) -> None:
    """``issue_id`` when the nodes' known values of ``value(facts)`` differ."""
    values = {h: value(facts.get(h, {})) for h in hosts}
    if not _same(list(values.values())):
        failures.add(issue_id, None, values=", ".join(f"{h}: {v}" for h, v in values.items()))


def _judge_revisions(failures: _Failures, hosts: Sequence[str], facts: Facts) -> None:
    """Every model at one revision on every node (pair_revision_mismatch)."""
    models = sorted({m for h in hosts for m in (facts.get(h, {}).get("model_revisions") or {})})
    for model in models:
        revs = {h: (facts.get(h, {}).get("model_revisions") or {}).get(model) for h in hosts}
        if len(set(map(str, revs.values()))) > 1 or None in revs.values():
            failures.add("pair_revision_mismatch", None, model=model,
                         values=", ".join(f"{h}: {v or 'missing'}" for h, v in revs.items()))


def _shared_subnet(iface: InterfaceFacts, others: Sequence[str]) -> tuple[str, str] | None:
    """``(the interface's subnet, another address of the node in it)``, or None."""
    prefix = iface.get("prefixlen")
    if prefix is None:
        return None
    own = ipaddress.IPv4Network(f"{iface['ipv4']}/{prefix}", strict=False)
    for other in others:
        try:
            other_if = ipaddress.IPv4Interface(str(other).split()[-1])
        except ValueError:
            continue
        if other_if.ip != ipaddress.IPv4Address(iface["ipv4"]) and other_if.ip in own:
            return str(own), str(other)
    return None


def _judge_interfaces(failures: _Failures, spec_nodes: Sequence[SpecNode], facts: Facts) -> None:
    """Each cluster interface up with an IPv4 (pair_interface_down), alone in its subnet (ray_same_subnet)."""
    for n in spec_nodes:
        iface = facts.get(n["host"], {}).get("interface")
        if iface is None:
            continue
        if not iface.get("up") or not iface.get("ipv4"):
            failures.add("pair_interface_down", n["host"], interface=iface.get("name") or n.get("interface"),
                         state="down" if not iface.get("up") else "up without an IPv4 address")
            continue
        shared = _shared_subnet(iface, facts.get(n["host"], {}).get("other_ipv4") or [])
        if shared:
            failures.add("ray_same_subnet", n["host"], interface=iface.get("name") or n.get("interface"),
                         subnet=shared[0], other=shared[1])


def _judge_pair(failures: _Failures, spec_nodes: Sequence[SpecNode], facts: Facts) -> None:
    """The nodes alike: image, model revisions, driver, interfaces, MTU."""
    hosts = [n["host"] for n in spec_nodes]
    _differ(failures, hosts, facts, "pair_image_mismatch", lambda f: f.get("image_digest") or f.get("image_id"))
    _judge_revisions(failures, hosts, facts)
    _differ(failures, hosts, facts, "pair_driver_mismatch", lambda f: f.get("driver"))
    _judge_interfaces(failures, spec_nodes, facts)
    _differ(failures, hosts, facts, "pair_mtu_mismatch", lambda f: (f.get("interface") or {}).get("mtu"))


def _judge_link(failures: _Failures, spec: ClusterSpec, facts: Facts, link: LinkSummary) -> None:
    """The link speed on real Sparks (every node has a GPU, host network) and the ib_write_bw bandwidth."""
    spec_nodes = list(spec.get("nodes") or [])
    real_pair = all(n.get("gpus") for n in spec_nodes) and (spec.get("network") or {}).get("mode") == "host"
    if real_pair:
        for n in spec_nodes:
            speed = facts.get(n["host"], {}).get("link_speed_mbps")
            if speed is not None and int(speed) != int(link["expected_speed_mbps"]):
                failures.add("pair_link_speed", n["host"], speed=speed, expected=link["expected_speed_mbps"],
                             interface=n.get("interface"))
    if link.get("method") == "ib_write_bw" and link.get("gbps") is not None and link["gbps"] < link["threshold_gbps"]:
        failures.add("pair_link_bandwidth", None, gbps=link["gbps"], threshold=link["threshold_gbps"])


def _node_rows(spec_nodes: Sequence[SpecNode], facts: Facts,
               matched: Mapping[str, RayProbeNode]) -> list[CheckedNode]:
    """Per node what the check saw: its Ray registration and its facts."""
    nodes: list[CheckedNode] = []
    for n in spec_nodes:
        f, r = facts.get(n["host"], {}), matched.get(n["host"]) or {}
        iface = f.get("interface") or {}
        nodes.append({"host": n["host"], "role": n["role"], "address": n.get("address"),
                      "registered_address": r.get("address"), "node_id": r.get("node_id"), "alive": bool(r),
                      "gpus": r.get("gpus"), "image": n.get("image"), "image_id": f.get("image_id"),
                      "image_digest": f.get("image_digest"), "driver": f.get("driver"),
                      "interface": n.get("interface"), "mtu": iface.get("mtu"),
                      "link_speed_mbps": f.get("link_speed_mbps")})
    return nodes


def check(spec: ClusterSpec, status: RayStatus | None, probe: RayProbe | None,
          node_facts: Mapping[str, NodeFacts] | None, issues: KnownIssues | None = None) -> CheckResult:
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

    Returns ``{ok, failures: [{id, host, reason, remedy}], nodes, nodes_alive, nodes_total, link}``.
    """
    failures = _Failures(spec, issues)
    facts = {str(k): (v or {}) for k, v in (node_facts or {}).items()}
    spec_nodes = list(spec.get("nodes") or [])
    ray_nodes = [n for n in ((probe or {}).get("nodes") or []) if n.get("alive")]
    matched, strays = _match_nodes(spec_nodes, ray_nodes, facts)
    alive_count = len(ray_nodes) if probe is not None else int((status or {}).get("nodes_active") or 0)
    _judge_membership(failures, spec, matched, strays, probe, status, facts, alive_count)
    _judge_gpus(failures, spec_nodes, matched, ray_nodes, status)
    _judge_pair(failures, spec_nodes, facts)
    link = link_summary(spec, facts)
    _judge_link(failures, spec, facts, link)
    return {"ok": not failures.entries, "failures": failures.entries,
            "nodes": _node_rows(spec_nodes, facts, matched), "nodes_alive": alive_count,
            "nodes_total": len(spec_nodes), "link": link}


def failure_message(result: CheckResult) -> str:
    """One line per failure: ``<id> (<host>): <reason>. Fix: <remedy>`` (the role's fail message)."""
    return "; ".join(f"{f['id']}{' (' + f['host'] + ')' if f.get('host') else ''}: {f['reason']}. Fix: {f['remedy']}"
                     for f in result.get("failures") or [])
