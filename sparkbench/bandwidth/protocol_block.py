"""``protocol.bandwidth`` of a result document (pure: documents in, documents out).

The block is the probe run last before the variant's launch (its reading's fields: ``gbps``,
``method``, ``spread``, ``when``, ``device``, ``reason``, …), with ``after`` — the probe run
first after the variant's server stopped — and ``drop``::

    {gbps, method, spread, when, device, simulated, reason, image, cost_s, …,
     after: <reading> | null, drop: {share, before_gbps, after_gbps, cause, text} | null}

Only a document whose server served (complete, incomplete, or failed while measuring) gets one:
the figures it qualifies. ``with_before`` puts it in when the document is recorded;
``with_after`` adds the probe after, and when that one read below ``DROP_SHARE`` of the one
before — and, where both probes report quartiles, its upper quartile lies below the lower
quartile of the one before (a drop the probes' own scatter cannot explain: a CPU probe on a
busy small host scatters by tens of percent) — ``drop`` and a ``bandwidth_drop`` flag in ``protocol.flags`` — the variant's figures may
come from a slow state (a capped clock, a hot unit) — with its cause where the document's own
telemetry names one (``sparkbench.unit_figures``: the run-protocol flags, a temperature at or
above ``unit_figures.HOT_C``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, cast

from ..measure.bandwidth import drop_of, drop_text
from ..unit_figures import HOT_C, unit_figures

if TYPE_CHECKING:
    from ..measure.bandwidth import BandwidthDrop, BandwidthProbes, BandwidthReading
    from ..measure.conditions import Flag, ProtocolBlock
    from ..result_shapes import StoredResult

#: The run-protocol flag of such a drop.
FLAG: Final = "bandwidth_drop"


def served(doc: StoredResult) -> bool:
    """Whether the document's server served (its figures exist): complete, incomplete, or failed
    while measuring."""
    if doc.get("status") in ("complete", "incomplete"):
        return True
    return isinstance(doc.get("failure"), Mapping) and doc["failure"].get("stage") == "measure"


def bandwidth_block(before: BandwidthReading) -> BandwidthProbes:
    """The block of a document recorded after the probe ``before``, no probe after it yet."""
    return {**before, "after": None, "drop": None}


def _protocol(doc: StoredResult) -> ProtocolBlock:
    """A copy of the document's ``protocol`` block; one of no flags only where it has none."""
    proto = doc.get("protocol")
    return {**proto} if isinstance(proto, Mapping) else cast("ProtocolBlock", {"flags": []})


def with_before(doc: StoredResult, before: BandwidthReading | None) -> StoredResult:
    """The document with ``protocol.bandwidth`` from the probe ``before`` (as it is when there is
    none, or its server never served)."""
    if not before or not served(doc):
        return doc
    return {**doc, "protocol": {**_protocol(doc), "bandwidth": bandwidth_block(before)}}


def cause(doc: StoredResult) -> str | None:
    """What the document's telemetry names that slows a unit: its run-protocol flags (a capped
    clock, swapping, a GPU Xid, the OOM killer) and a temperature at or above ``HOT_C``."""
    fig = unit_figures(doc)
    named = [f"{f.get('code')}: {f.get('reason')}" for f in fig["flags"] if f.get("code") != FLAG]
    temp = fig["temperature_c"]
    if temp is not None and temp >= HOT_C:
        named.append(f"temperature {temp:.0f} °C")
    return "; ".join(named) or None


def with_after(doc: StoredResult, after: BandwidthReading) -> StoredResult:
    """The document with the probe ``after`` in ``protocol.bandwidth.after`` and, on a drop,
    ``drop`` and the ``bandwidth_drop`` flag (replacing an earlier one). A document without the
    block (its server never served, or no probe ran before it) is returned as it is."""
    proto = _protocol(doc)
    block = proto.get("bandwidth")
    if not isinstance(block, Mapping):
        return doc
    flags: list[Flag] = [f for f in proto.get("flags") or [] if not (isinstance(f, Mapping) and f.get("code") == FLAG)]
    share = drop_of(block, after)
    before_gbps, after_gbps = block.get("gbps"), after.get("gbps")
    drop: BandwidthDrop | None = None
    if share is not None and before_gbps is not None and after_gbps is not None:  # drop_of: both read
        why = cause(doc)
        text = drop_text(share, float(before_gbps), float(after_gbps), why)
        drop = {"share": round(share, 4), "before_gbps": before_gbps, "after_gbps": after_gbps, "cause": why,
                "text": text}
        flags.append({"code": FLAG, "reason": text})
    new_block: BandwidthProbes = {**block, "after": {**after}, "drop": drop}
    return {**doc, "protocol": {**proto, "bandwidth": new_block, "flags": flags}}
