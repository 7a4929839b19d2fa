"""``ray status`` [``-v``] output → figures, in both formats (``shared/reference/multispark.md`` §8)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .shapes import RayNodeUsage, RayStatus, ResourceUsage

_USAGE_RE = re.compile(r"^\s*([\d.]+)([A-Za-z]*)/([\d.]+)([A-Za-z]*)\s+(\S+)(?:\s+\((.*)\))?\s*$")
_NODE_LINE_RE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")
_SECTIONS = ("Active:", "Healthy:", "Idle:", "Pending:", "Recent failures:", "Total Usage:", "Usage:",
             "From request_resources:", "Total Constraints:", "Pending Demands:", "Demands:", "Total Demands:")


def _usage(lines: Sequence[str]) -> dict[str, ResourceUsage]:
    out: dict[str, ResourceUsage] = {}
    for line in lines:
        m = _USAGE_RE.match(line)
        if not m:
            continue
        used, used_unit, total, total_unit, resource, note = m.groups()
        entry: ResourceUsage = {"used": float(used), "total": float(total)}
        if used_unit or total_unit:
            entry.update(used=f"{used}{used_unit}", total=f"{total}{total_unit}")
        if note:
            entry["note"] = note
        out[resource] = entry
    return out


def _none_line(line: str) -> bool:
    return line.strip().startswith("(") and line.strip().endswith(")") and line.strip()[1:3] in ("no", "no ")


def _sections(lines: Sequence[str]) -> dict[str, list[str]]:
    """The lines under each heading of ``_SECTIONS`` (a heading line is not indented)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
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
    return sections


def _alive_nodes(node_lines: Sequence[str]) -> tuple[int, list[str], list[str]]:
    """``(count, node ids, node types)`` of the lines `` 1 node_<id>`` / `` 1 <type>``."""
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
    return nodes_active, node_ids, node_types


def _per_node(lines: Sequence[str]) -> dict[str, RayNodeUsage]:
    """The blocks of ``-v``: ``Node: <id> (<type>)`` [`` Id: <id>``] then usage lines → per node id
    ``{name, usage, gpus_used, gpus_total, cpus_used, cpus_total}`` (+ ``instance_id``)."""
    per_node: dict[str, RayNodeUsage] = {}
    current_node = None
    for line in lines:
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
    return per_node


def _listed(lines: Sequence[str]) -> list[str]:
    """The entries of a section, ``(no …)`` lines left out."""
    return [line.strip() for line in lines if not _none_line(line)]


def last_line(text: object) -> str | None:
    """The last non-empty line of ``text``, stripped (what a command said last), or None."""
    return next((line.strip() for line in reversed(str(text or "").splitlines()) if line.strip()), None)


def parse_ray_status(text: object) -> RayStatus:
    """``ray status`` (or ``ray status -v``) output → figures.

    Formats (reference §8): Ray 2.x prints ``Active:`` (and ``Idle:`` with the v2 autoscaler:
    idle nodes are alive too) with lines `` 1 node_<id>`` and ``Total Usage:`` with lines
    `` 0.0/2.0 GPU [(… reserved in placement groups)]``; older Ray (2022) ``Healthy:`` and
    ``Usage:`` (then ``Demands:``). ``-v`` adds per-node blocks ``Node: <id> (<type>)`` [`` Id: <id>``]
    `` Usage:`` ``  0.0/1.0 GPU``. Returns ``{format, nodes_active, node_ids, node_types,
    gpus_used, gpus_total, cpus_used, cpus_total, pending_nodes, failures, pending_demands,
    resources, per_node, answer}`` (counts as numbers; None where the text does not say; ``format``
    None when the text is not ``ray status`` output, and then ``answer`` is its last non-empty line:
    what the head said instead, e.g. that no Ray instance runs).
    """
    raw = str(text or "").replace("\r\n", "\n")
    lines = raw.split("\n")
    # The per-node blocks of -v start at the first line "Node: ..." after the resources.
    per_node_at = next((i for i, line in enumerate(lines) if line.startswith("Node: ")), len(lines))
    sections = _sections(lines[:per_node_at])
    fmt = "2.x-active" if "Active:" in sections else "legacy-healthy" if "Healthy:" in sections else None
    nodes_active, node_ids, node_types = _alive_nodes(
        sections.get("Active:", []) + sections.get("Healthy:", []) + sections.get("Idle:", []))
    usage = _usage(sections.get("Total Usage:") or sections.get("Usage:") or [])
    gpu, cpu = usage.get("GPU") or {}, usage.get("CPU") or {}
    per_node = _per_node(lines[per_node_at:])
    return {
        "format": fmt,
        "nodes_active": nodes_active if fmt else 0,
        "node_ids": node_ids, "node_types": node_types,
        "gpus_used": gpu.get("used"), "gpus_total": gpu.get("total"),
        "cpus_used": cpu.get("used"), "cpus_total": cpu.get("total"),
        "pending_nodes": _listed(sections.get("Pending:", [])),
        "failures": _listed(sections.get("Recent failures:", [])),
        "pending_demands": _listed(sections.get("Pending Demands:", []) + sections.get("Demands:", [])),
        "resources": usage,
        "per_node": per_node,
        "answer": None if fmt else last_line(raw),
    }
