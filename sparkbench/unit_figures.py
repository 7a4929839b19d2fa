"""The figures of one unit in a result document as it lies: its single-stream median and requests,
clocks, power, temperature, run-protocol flags and manifest fields (``unit_figures``). The fleet
health judgement (``sparkbench.health``) compares them across units; ``protocol.bandwidth``
(``sparkbench.bandwidth.protocol_block``) names a drop's cause from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from . import verdict as verdict_mod
from .measure.figures import SINGLE_DECODE
from .values import dig

if TYPE_CHECKING:
    from .measure.conditions import Flag
    from .result_shapes import StoredResult

HOT_C = 85.0  # max GPU temperature [°C] that is a cause by itself

#: a manifest field compared with the peers' majority (``MANIFEST_FIELDS``)
ManifestField = Literal["driver", "kernel", "firmware", "cuda", "image_digest", "image_id", "vllm_version",
                        "model_revision"]
#: Manifest fields compared with the peers' majority, in the order causes are listed.
MANIFEST_FIELDS: tuple[ManifestField, ...] = ("driver", "kernel", "firmware", "cuda", "image_digest", "image_id",
                                              "vllm_version", "model_revision")


class ManifestFields(TypedDict):
    """The canary's manifest fields compared with the peers' majority (``MANIFEST_FIELDS``); None
    where the result does not record one."""

    driver: str | None
    kernel: str | None
    firmware: str | None
    cuda: str | None
    image_digest: str | None
    image_id: str | None
    vllm_version: str | None
    model_revision: str | None


class CanaryFigures(TypedDict):
    """A unit's canary figures (``unit_figures``)."""

    decode_tok_s: float | None
    n: int
    clock_under_load_mhz: float | None
    clock_max_mhz: float | None
    clock_share_of_max: float | None
    power_w: float | None
    temperature_c: float | None
    flags: list[Flag]
    manifest: ManifestFields
    simulated: bool


def number(value: Any) -> float | None:
    """A number as a float; None for anything else (a bool included)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _phase_stat(doc: StoredResult, new: tuple[str, str], old: str) -> float | None:
    """A single-stream telemetry figure: ``telemetry.phases.single.<new[0]>.<new[1]>`` (measure.py),
    else ``telemetry.single.<old>`` (older documents)."""
    value = number(dig(doc, "telemetry", "phases", "single", *new))
    return value if value is not None else number(dig(doc, "telemetry", "single", old))


def unit_figures(doc: StoredResult) -> CanaryFigures:
    """The canary figures of one result document: ``decode_tok_s`` (single-stream median, tok/s),
    ``n`` (valid requests), ``clock_under_load_mhz`` / ``clock_max_mhz`` / ``clock_share_of_max``
    (``protocol.clock``), ``power_w`` (mean, single stream), ``temperature_c`` (max),
    ``flags`` (``protocol.flags``), ``manifest`` (the fields of ``MANIFEST_FIELDS``)."""
    clock = dig(doc, "protocol", "clock") or {}
    under, top = number(clock.get("under_load_mhz")), number(clock.get("max_mhz"))
    share = number(clock.get("share_of_max"))
    if share is None and under is not None and top:
        share = under / top
    return {
        "decode_tok_s": SINGLE_DECODE.read(doc),
        "n": len(verdict_mod.samples(doc, "single")),
        "clock_under_load_mhz": under, "clock_max_mhz": top, "clock_share_of_max": share,
        "power_w": _phase_stat(doc, ("power_w", "mean"), "power_w_mean"),
        "temperature_c": _phase_stat(doc, ("temperature_c", "max"), "temp_c_max"),
        "flags": cast("list[Flag]", [f for f in (dig(doc, "protocol", "flags") or []) if isinstance(f, Mapping)]),
        "manifest": cast("ManifestFields", {f: dig(doc, "manifest", f) for f in MANIFEST_FIELDS}),
        "simulated": bool(doc.get("simulated")),
    }
