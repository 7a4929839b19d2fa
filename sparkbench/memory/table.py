"""The unit's memory plan as a readable table (what ``--check`` prints): one row per tenant or
engine with its GB, how its share is reckoned, the running total and the free margin left. Rows
stay under 72 characters so that Ansible's YAML output does not fold them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import MemoryRow
    from .unit import MemoryPlan

HEAD = f"  {'tenant/engine':<24} {'GB':>6}  {'share':<20} {'total':>6} {'free':>6}"


def _gb(value: Any) -> str:
    return "?" if value is None else f"{float(value):.1f}"


def _rows(p: MemoryPlan) -> list[str]:
    out, running = [], 0.0
    total = p.get("total_gb")
    for r in p["rows"]:
        running += float(r["gb"] or 0.0)
        label = f"{r['kind']} {r.get('variant') or r['name']}"
        free = None if total is None else float(total) - running
        out.append(f"  {label[:24]:<24} {_gb(r.get('gb')):>6}  {str(r.get('share_short') or '')[:20]:<20} "
                   f"{_gb(running):>6} {_gb(free):>6}")
    return out


def _verdict(p: MemoryPlan) -> str:
    total, used = p.get("total_gb"), float(p["used_gb"])
    if total is None:
        state = "refused" if p["fits"] is False else "each engine checked alone"
        return f"  → {state}: {used:.1f} GB planned; the unit's total is unknown ({p['total_source']})"
    if p["fits"]:
        return f"  → fits: {used:.1f} of {total:g} GB, {total - used:.1f} GB free"
    over = f"{used - total:.1f} GB over" if used > total else f"{total - used:.1f} GB free"
    return f"  → refused: {used:.1f} of {total:g} GB, {over}"


def _inside(engine: MemoryRow) -> str:
    c = engine["contents"]
    left = "" if c.get("left_gb") is None else f", {c['left_gb']:.1f} GB left for more sequences"
    return (f"  inside {engine['name']}'s share: weights {c['weights_gb']:.1f} GB ({c['weights_source']}), KV cache "
            f"{c['kv_gb']:.2f} GB for one sequence of {engine['context']:,} tokens ({c['kv_cache_dtype']}), "
            f"activations {c['activations_gb']:g} GB, CUDA graphs {c['cuda_graphs_gb']:g} GB ({c['basis']}){left}"
            + (f"; per unit of {engine['units']}" if engine.get("units", 1) > 1 else ""))


def lines(p: MemoryPlan) -> list[str]:
    """The plan's table, its verdict, what lies inside the new engine's share and the reserve's
    note (the problems are said where the plan is refused: the preflight verdict, serve's refusal)."""
    total = "unknown" if p.get("total_gb") is None else f"{p['total_gb']:g} GB"
    engine = p["rows"][-1]
    out = [f"memory plan of {p['host']}: {total} ({p['total_source']}); residents from {p['residents_from']}",
           HEAD, *_rows(p), _verdict(p), _inside(engine), f"  reserve {p['reserve_gb']:g} GB: {p['reserve_note']}"]
    return out
