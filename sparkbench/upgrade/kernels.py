"""What changed inside an image upgrade: two ``kernels`` blocks (``sparkbench.engine_log``, the
startup log of the current image and of the candidate) compared aspect by aspect.

An aspect is one of :func:`sparkbench.engine_log.summary`'s texts: the attention backend, the MoE
backend (with its quantisation), the NVFP4 GEMM kernel, CUDA graphs, the KV-cache tokens and the
model load (memory and time). Each aspect whose value differs gives one :class:`KernelChange`,
its ``current`` and ``candidate`` the summary's texts (None: not in that log). An aspect neither
log states is no change; a missing block reads as a log that states nothing.

What counts as a difference:

* attention, MoE, GEMM: the names (the summary's texts) differ;
* CUDA graphs: on / off / unknown differ (the capture's seconds and GiB are not compared);
* KV-cache tokens: the numbers differ; the text adds the change in percent;
* model load: the memory (GiB) differs, or the time differs by more than ``LOAD_TIME_TOLERANCE``
  (10 %) of the current's, or one log states the load and the other does not: load times always
  differ a little from one start to the next. The time is ``Model loading took``'s seconds, or
  ``Loading weights took``'s where a log has no ``Model loading`` line (as the summary shows it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from ..engine_log import summary

if TYPE_CHECKING:
    from ..result_shapes import KernelsBlock

#: (aspect: the key of engine_log.summary, label in the texts), in the order the changes are listed
ASPECTS: tuple[tuple[str, str], ...] = (
    ("attention", "attention backend"), ("moe", "MoE backend"), ("gemm", "NVFP4 GEMM kernel"),
    ("cuda_graphs", "CUDA graphs"), ("kv_cache_tokens", "KV-cache tokens"), ("load", "model load"))
#: a load time within this fraction of the current's is no change
LOAD_TIME_TOLERANCE = 0.10
UNKNOWN = "not in the log"
NO_CHANGE = "no change in the startup log's kernels, KV cache or load"


class KernelChange(TypedDict):
    """One aspect that differs: its key and label, both images' texts (None: not in that log), one line."""

    aspect: str
    label: str
    current: str | None
    candidate: str | None
    text: str


def _percent(current: float | None, candidate: float | None) -> str | None:
    """``"+6.6 %"`` / ``"−10.9 %"``: the candidate against the current; None without both or from 0."""
    if current is None or candidate is None or current == 0 or current == candidate:
        return None
    change = (candidate - current) / current * 100
    return f"{'+' if change >= 0 else '−'}{abs(change):.1f} %"


def _load_time(k: KernelsBlock) -> float | None:
    """The load's seconds as the summary shows them: ``model_load_s``, else ``weights_load_s``."""
    if k.get("model_load_gib") is not None or k.get("model_load_s") is not None:
        return k.get("model_load_s")
    return k.get("weights_load_s")


def _load_differs(a: KernelsBlock, b: KernelsBlock) -> bool:
    if a.get("model_load_gib") != b.get("model_load_gib"):
        return True
    ta, tb = _load_time(a), _load_time(b)
    if ta is None or tb is None:
        return (ta is None) != (tb is None)
    return abs(tb - ta) > LOAD_TIME_TOLERANCE * abs(ta)


def _differs(aspect: str, a: KernelsBlock, b: KernelsBlock, ta: str | None, tb: str | None) -> bool:
    """Whether ``aspect`` differs between blocks ``a`` and ``b`` (``ta``, ``tb``: their summary texts)."""
    if aspect == "cuda_graphs":
        return a.get("cuda_graphs") != b.get("cuda_graphs")
    if aspect == "kv_cache_tokens":
        return a.get("kv_cache_tokens") != b.get("kv_cache_tokens")
    if aspect == "load":
        return (ta is not None or tb is not None) and _load_differs(a, b)
    return ta != tb


def _percents(aspect: str, a: KernelsBlock, b: KernelsBlock) -> str:
    """The numeric changes of ``aspect`` in percent, ``" (…)"``, or ``""``."""
    if aspect == "kv_cache_tokens":
        parts = [_percent(a.get("kv_cache_tokens"), b.get("kv_cache_tokens"))]
    elif aspect == "load":
        memory = _percent(a.get("model_load_gib"), b.get("model_load_gib"))
        time = _percent(_load_time(a), _load_time(b))
        parts = [memory and f"memory {memory}", time and f"time {time}"]
    else:
        return ""
    shown = [p for p in parts if p]
    return f" ({', '.join(shown)})" if shown else ""


def _shown(text: str | None) -> str:
    """A summary text in a change's line: ``UNKNOWN`` for None; its ``"; "`` as ``", "`` (the
    changes are joined with ``"; "``)."""
    return UNKNOWN if text is None else text.replace("; ", ", ")


def kernel_changes(current: KernelsBlock | None, candidate: KernelsBlock | None) -> list[KernelChange]:
    """One :class:`KernelChange` per aspect (``ASPECTS``) whose value differs between the current
    image's ``kernels`` block and the candidate's (the rules in the module docstring); None: a log
    that states nothing. Texts read ``"MoE backend: FLASHINFER_CUTLASS (nvfp4) → MARLIN (nvfp4)"``,
    ``"KV-cache tokens: 1,234,567 → 1,100,000 (−10.9 %)"``,
    ``"attention backend: not in the log → FLASH_ATTN"``."""
    a: KernelsBlock = current or {}
    b: KernelsBlock = candidate or {}
    texts_a, texts_b = summary(a), summary(b)
    out: list[KernelChange] = []
    for aspect, label in ASPECTS:
        ta, tb = texts_a.get(aspect), texts_b.get(aspect)
        if not _differs(aspect, a, b, ta, tb):
            continue
        text = f"{label}: {_shown(ta)} → {_shown(tb)}{_percents(aspect, a, b)}"
        out.append({"aspect": aspect, "label": label, "current": ta, "candidate": tb, "text": text})
    return out


def changes_text(changes: list[KernelChange]) -> str:
    """The changes on one line (``"; "`` between them), or ``NO_CHANGE`` when there are none."""
    return "; ".join(c["text"] for c in changes) if changes else NO_CHANGE
