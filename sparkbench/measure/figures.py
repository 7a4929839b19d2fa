"""The figures sparkbench reports, each declared once: where measure writes it in a result
document, its unit, its header, which direction is better, the names it goes by in the report's
rows and CSV and in comparisons, and how it is computed from the request records.

Everything above measure (the report's tables and CSV, comparisons and verdicts, health, history,
predict, serve, interference) reads a figure through its declaration: :meth:`Figure.read` for the
recorded figure, :meth:`Figure.samples` for the per-request values a verdict compares, and the
declaration's names instead of spelling a key. Standard library only: measure runs on a bare unit.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _num(value: Any) -> float | None:
    """``value`` as a float when it is a finite or infinite real number (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _positive(values: Any) -> list[float]:
    """The positive finite numbers of ``values`` (others — None, errors — are not requests)."""
    return [x for x in map(_num, values or []) if x is not None and math.isfinite(x) and x > 0]


@dataclass(frozen=True)
class Figure:
    """One figure: ``block``/``field`` is where measure writes it (``single.decode_tok_s_median``;
    for a per-concurrency figure ``block`` is the list of entries keyed by ``concurrency``);
    ``column`` is its key in the report's rows, ``results.csv`` and ``results.json``; ``metric``
    its name in comparisons and verdicts (None where it is not compared); ``low``/``high`` the
    fields of its range where measure records one (``low_column``/``high_column`` in the rows);
    ``digits`` the decimals a table shows."""

    block: str
    field: str
    column: str
    unit: str
    header: str
    larger_is_better: bool
    computed: str
    metric: str | None = None
    low: str | None = None
    high: str | None = None
    low_column: str | None = None
    high_column: str | None = None
    per_concurrency: bool = False
    digits: int = 1

    def entry(self, doc: Any, concurrency: int | None = None) -> Mapping | None:
        """The mapping that holds the figure: the block, or the block's entry at ``concurrency``."""
        block = doc.get(self.block) if isinstance(doc, Mapping) else None
        if not self.per_concurrency:
            return block if isinstance(block, Mapping) else None
        for e in block if isinstance(block, list) else []:
            if isinstance(e, Mapping) and e.get("concurrency") == concurrency:
                return e
        return None

    def read(self, doc: Any, concurrency: int | None = None) -> float | None:
        """The recorded figure in ``doc`` (a result document), None where it is not there."""
        entry = self.entry(doc, concurrency)
        return _num(entry.get(self.field)) if entry is not None else None

    def spread(self, doc: Any) -> tuple[float | None, float | None, float | None]:
        """(figure, low, high) where the declaration has a range; the range is None otherwise."""
        entry = self.entry(doc) or {}
        return (_num(entry.get(self.field)), _num(entry.get(self.low)) if self.low else None,
                _num(entry.get(self.high)) if self.high else None)

    def metric_at(self, concurrency: int) -> str:
        """The comparison name of a per-concurrency figure at ``concurrency`` (``combined_8``)."""
        return f"{self.metric}_{concurrency}"

    def column_at(self, concurrency: int) -> str:
        """The row and CSV key of a per-concurrency figure at ``concurrency`` (``combined_8``)."""
        return f"{self.column}_{concurrency}"

    def header_at(self, concurrency: int) -> str:
        """The table header of a per-concurrency figure at ``concurrency`` (``8 par``)."""
        return f"{concurrency} {self.header}"


SINGLE_DECODE = Figure(
    block="single", field="decode_tok_s_median", low="decode_tok_s_min", high="decode_tok_s_max",
    column="single_tok_s", low_column="single_min", high_column="single_max", metric="single", unit="tok/s",
    header="single tok/s median (min–max)", larger_is_better=True, digits=2,
    computed="median over the valid single-stream runs of each request's decode rate: (completion "
             "tokens − 1) / (last token − first token), timed at recv(); min and max over the same runs")

COMBINED = Figure(
    block="parallel", field="combined_tok_s", per_concurrency=True, column="combined", metric="combined",
    unit="tok/s", header="par", larger_is_better=True,
    computed="N streams at once: the sum of their completion tokens / (last token of any stream − first "
             "send); its verdict compares the streams' own decode rates")

PER_STREAM_DECODE = Figure(
    block="parallel", field="per_stream_decode_tok_s_median", per_concurrency=True,
    column="per_stream_decode_tok_s", unit="tok/s", header="per-stream tok/s", larger_is_better=True,
    computed="median of the N parallel streams' decode rates (each as in the single-stream figure)")

TTFT = Figure(
    block="single", field="ttft_s_median", column="ttft_p50_s", unit="s", header="TTFT p50 s",
    larger_is_better=False, digits=3,
    computed="median over the single-stream runs of first token − send, timed at recv()")

TIME_TO_READY = Figure(
    block="server_startup", field="time_to_ready_s", column="time_to_ready_s", unit="s", header="ready s",
    larger_is_better=False, digits=0, computed="container start to the server's first healthy /health answer")

MODEL_MEMORY = Figure(
    block="server_startup", field="model_memory_gib", column="model_memory_gib", unit="GiB",
    header="model GiB", larger_is_better=False, computed="the weights' memory, from the server's startup log")

MEAN_ACCEPTANCE_LENGTH = Figure(
    block="spec_decode", field="mean_acceptance_length", column="mean_acceptance_length", unit="tok/step",
    header="mean acc. len", larger_is_better=True, digits=2,
    computed="tokens per verify step: 1 + the sum of the per-position acceptance rates, from the "
             "server's speculative-decoding counters over the measurement")

FIGURES: tuple[Figure, ...] = (SINGLE_DECODE, COMBINED, PER_STREAM_DECODE, TTFT, TIME_TO_READY, MODEL_MEMORY,
                               MEAN_ACCEPTANCE_LENGTH)


def compared(metric: str) -> tuple[Figure, int | None]:
    """The figure and concurrency a comparison name stands for: ``single`` → (SINGLE_DECODE, None),
    ``combined_8`` → (COMBINED, 8). ValueError for any other name."""
    if metric == SINGLE_DECODE.metric:
        return SINGLE_DECODE, None
    prefix = f"{COMBINED.metric}_"
    if metric.startswith(prefix) and metric[len(prefix):].isdigit():
        return COMBINED, int(metric[len(prefix):])
    raise ValueError(f"metric {metric!r}: use '{SINGLE_DECODE.metric}' or '{prefix}N' "
                     f"(N = a concurrency, e.g. {prefix}8)")


def samples(doc: Any, metric: str) -> list[float]:
    """The per-request values behind a compared figure (tok/s), what a verdict compares.

    ``single``: ``single.runs[].decode_tok_s`` of the valid runs (``valid`` not False, a positive
    rate). ``combined_N``: the decode rates of the N streams at concurrency N
    (``parallel[].per_stream[].decode_tok_s``, else ``per_stream_decode_tok_s``): the combined
    figure is measured once per concurrency, so its verdict compares the per-stream rates that
    make it up. [] where the document holds no per-request data. ValueError for an unknown name."""
    figure, concurrency = compared(metric)
    entry = figure.entry(doc, concurrency)
    if entry is None:
        return []
    if figure is SINGLE_DECODE:
        runs = entry.get("runs")
        return _positive(r.get("decode_tok_s") for r in runs if isinstance(r, Mapping) and r.get("valid") is not False) \
            if isinstance(runs, list) else []
    streams = entry.get("per_stream")
    if isinstance(streams, list) and streams:
        return _positive(s.get("decode_tok_s") for s in streams if isinstance(s, Mapping))
    return _positive(entry.get("per_stream_decode_tok_s"))
