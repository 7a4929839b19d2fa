"""Node facts and link figures: the ``ray_cluster`` role's probes (``node_probe.sh``, ``iperf3``,
``ib_write_bw``) → the ``node_facts`` the check reads, and the cluster's link summary."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping

from .cluster_spec import EXPECTED_SPEED_MBPS, LINK_THRESHOLD_GBPS
from .shapes import ClusterSpec, LinkMeasurement, LinkSummary, NodeFacts


def parse_node_probe(text: object, interface: str) -> NodeFacts:
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


def parse_iperf3(text: object, note: str) -> LinkMeasurement:
    """``iperf3 -c … -J`` output → ``{method: iperf3, gbps, note}`` (received bits/s of the sum;
    ``gbps`` None with the error in ``note`` when the JSON says it failed)."""
    try:
        doc = json.loads(str(text or ""))
    except ValueError:
        return {"method": "iperf3", "gbps": None, "note": f"{note}; iperf3 gave no JSON: {str(text or '')[-200:]}"}
    if doc.get("error"):
        return {"method": "iperf3", "gbps": None, "note": f"{note}; iperf3: {doc['error']}"}
    end = doc.get("end") or {}
    bps = (end.get("sum_received") or end.get("sum") or {}).get("bits_per_second")
    return {"method": "iperf3", "gbps": round(float(bps) / 1e9, 3) if bps else None, "note": note}


def parse_ib_write_bw(text: object, note: str = "") -> LinkMeasurement:
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


def link_summary(spec: ClusterSpec, node_facts: Mapping[str, NodeFacts] | None) -> LinkSummary:
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
