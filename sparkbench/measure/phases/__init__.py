"""The phases of a run, in the order they run, each enabled by its options.

A phase is one module with ``run(session)``; ``PHASES`` registers it by name with the rule that
turns it on. ``run`` returns None, or a status that ends the run (``failed``: no single-stream
request succeeded). Adding a phase: a module here, a row in ``PHASES``, its options in
``options.OPTIONS``, its block in ``document.new_document``, and docs/MEASUREMENT.md."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import (
    context,
    image,
    multi_turn,
    parallel,
    prefix_cache,
    quality,
    rates,
    single,
    tools,
    warmup,
)

if TYPE_CHECKING:
    from ..session import Session


@dataclass(frozen=True)
class Phase:
    name: str
    enabled: Callable[[argparse.Namespace], bool]
    run: Callable[["Session"], "str | None"]


def _rates_on(a: argparse.Namespace) -> bool:
    return bool(a.rate or a.replay or (a.rate_search is not None and a.search_by == "concurrency"))


PHASES: tuple[Phase, ...] = (
    Phase("warmup", lambda a: a.warmup > 0, warmup.run),
    Phase("single", lambda a: True, single.run),
    Phase("parallel", lambda a: bool(a.concurrency), parallel.run),
    Phase("context", lambda a: any(d > 0 for d in a.context), context.run),
    Phase("prefix_cache", lambda a: a.prefix_tokens > 0, prefix_cache.run),
    Phase("multi_turn", lambda a: a.turns > 0, multi_turn.run),
    Phase("rates", _rates_on, rates.run),
    Phase("tools", lambda a: a.tools, tools.run),
    Phase("quality", lambda a: a.quality, quality.run),
    Phase("image", lambda a: a.image, image.run),
)
BY_NAME = {p.name: p for p in PHASES}
