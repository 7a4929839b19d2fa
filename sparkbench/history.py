"""The history index: every stored run's results in one SQLite file (standard library ``sqlite3``).

``results/index.sqlite`` (beside the runs; gitignored with ``results/``) holds one row per
host × variant × run of the result documents ``results/<run>/<host>/<variant>.json`` (bracket
documents ``*.bracket.json`` are not runs of their own and are left out) and, where the run has a
``health.json``, the unit's health verdict. The JSON stays the source of truth: the index is
rebuilt from it whenever it is

* missing, or of another ``SCHEMA`` version,
* stale: a run folder is not indexed (or an indexed one is gone), or a run's *signature* changed —
  (number of its result files + health.json, the newest modification time among them in ns) is
  compared with the one stored when it was indexed; a result file newer than the index therefore
  triggers a rebuild.

The check is one directory scan (``stat`` of every result file, no JSON read); a rebuild reads every
result file and writes a fresh index to a temporary file that replaces the old one atomically
(readers never see a half-written index).

Columns of ``results``: run_id, time (the result's ``started_at``, else the run id), host,
variant, config_hash, status, single_median (tok/s), n (valid single-stream requests),
clock_under_load_mhz, clock_max_mhz, power_w, temperature_c, driver, kernel, image_id,
image_digest, vllm_version, model_revision, simulated (0/1), health (healthy/slow/failed or
NULL), predicted_single (the twin's single-stream tok/s for the result, sparkbench.predict; NULL
when not comparable), prediction_error (predicted / measured - 1), path (the JSON file).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, cast, get_args

from .errors import DocumentError
from .paths import DEFAULT_RESULTS_DIR, UPGRADE_SUFFIX
from .unit_figures import unit_figures
from .values import dig

if TYPE_CHECKING:
    from .result_shapes import StoredResult

SCHEMA = "2"
INDEX_NAME = "index.sqlite"
#: a column of ``results``
IndexColumn = Literal["run_id", "time", "host", "variant", "config_hash", "status", "single_median", "n",
                      "clock_under_load_mhz", "clock_max_mhz", "power_w", "temperature_c", "driver", "kernel",
                      "image_id", "image_digest", "vllm_version", "model_revision", "simulated", "health",
                      "predicted_single", "prediction_error", "path"]
#: the columns of ``results``, in order
COLUMNS: tuple[IndexColumn, ...] = get_args(IndexColumn)


class IndexRow(TypedDict):
    """One row of ``results``: a stored result's figures (the module docstring says each column)."""

    run_id: str
    time: str
    host: str
    variant: str
    config_hash: str | None
    status: str | None
    single_median: float | None
    n: int
    clock_under_load_mhz: float | None
    clock_max_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    driver: str | None
    kernel: str | None
    image_id: str | None
    image_digest: str | None
    vllm_version: str | None
    model_revision: str | None
    simulated: int
    health: str | None
    predicted_single: float | None
    prediction_error: float | None
    path: str


class TrendRow(IndexRow):
    """An index row with its Δ % vs the previous and the first complete run of its variant
    (:func:`trend`; None where there is none)."""

    delta_prev_pct: float | None
    delta_first_pct: float | None


def index_path(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """``<results_dir>/index.sqlite``."""
    return Path(results_dir) / INDEX_NAME


def _result_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.glob("*/*.json") if not p.name.endswith((".bracket.json", UPGRADE_SUFFIX)))


def _run_dirs(results_dir: Path) -> list[Path]:
    if not results_dir.is_dir():
        return []
    return sorted(p for p in results_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def signature(run_dir: Path) -> tuple[int, int]:
    """(files, newest mtime in ns) over the run's result files and its health.json."""
    files = _result_files(run_dir) + ([run_dir / "health.json"] if (run_dir / "health.json").is_file() else [])
    mtimes = []
    for p in files:
        try:
            mtimes.append(p.stat().st_mtime_ns)
        except OSError:
            pass
    return len(mtimes), max(mtimes, default=0)


def staleness(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> str | None:
    """Why the index must be rebuilt (one line), or None when it is up to date."""
    results_dir = Path(results_dir)
    path = index_path(results_dir)
    if not path.is_file():
        return f"no index at {path}"
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            stored = {r: (f, m) for r, f, m in db.execute("SELECT run_id, files, mtime_ns FROM runs")}
    except sqlite3.Error as exc:
        return f"index unreadable ({exc})"
    if not schema or schema[0] != SCHEMA:
        return f"index schema {schema[0] if schema else '?'} (current {SCHEMA})"
    runs = {d.name: d for d in _run_dirs(results_dir) if _result_files(d)}
    for name, d in runs.items():
        if name not in stored:
            return f"run {name} is not indexed"
        if signature(d) != stored[name]:
            return f"run {name} changed since it was indexed (a result file is newer than the index)"
    gone = sorted(set(stored) - set(runs))
    if gone:
        return f"run {gone[0]} is indexed but no longer stored"
    return None


def _row(run_id: str, path: Path, doc: StoredResult, health: dict[str, str]) -> IndexRow:
    from .predict.twin_rate import twin_single

    fig = unit_figures(doc)
    manifest = fig["manifest"]
    complete = doc.get("status") == "complete"
    host = str(doc.get("host") or path.parent.name)
    measured = fig["decode_tok_s"]
    predicted = twin_single(doc) if complete else None
    return {
        "run_id": run_id, "time": str(doc.get("started_at") or run_id), "host": host,
        "variant": str(dig(doc, "variant", "name") or path.stem),
        "config_hash": doc.get("config_hash"), "status": doc.get("status"),
        "single_median": measured, "n": fig["n"] if complete else 0,
        "clock_under_load_mhz": fig["clock_under_load_mhz"], "clock_max_mhz": fig["clock_max_mhz"],
        "power_w": fig["power_w"], "temperature_c": fig["temperature_c"],
        "driver": manifest["driver"], "kernel": manifest["kernel"],
        "image_id": manifest["image_id"], "image_digest": manifest["image_digest"],
        "vllm_version": manifest["vllm_version"], "model_revision": manifest["model_revision"],
        "simulated": 1 if doc.get("simulated") else 0, "health": health.get(host),
        "predicted_single": predicted, "prediction_error": (predicted / measured - 1.0) if predicted and measured else None,
        "path": str(path),
    }


def _health(run_dir: Path) -> dict[str, str]:
    """Per host its verdict in the run's health.json ({} without one). The file is read through its
    model (``sparkbench.documents.load_health``, imported here: Ansible's workers import this
    module); one that is not a health document is named on stderr with the field and left out, so
    that one bad file never stops the index (or the report that reads it)."""
    path = run_dir / "health.json"
    if not path.is_file():
        return {}
    from .documents.load import load_health

    try:
        return {u.host: u.verdict for u in load_health(path).units}
    except DocumentError as exc:
        print(f"history: {exc}; that run's health verdicts are left out", file=sys.stderr)
        return {}


def _fill(db: sqlite3.Connection, results_dir: Path) -> None:
    """Create the tables in ``db`` and index every run under ``results_dir``."""
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, files INTEGER, mtime_ns INTEGER)")
    db.execute(f"CREATE TABLE results ({', '.join(COLUMNS)}, PRIMARY KEY (run_id, host, variant))")
    db.execute("CREATE INDEX results_host ON results (host, variant, time)")
    db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA,))
    for run_dir in _run_dirs(results_dir):
        files = _result_files(run_dir)
        if not files:
            continue
        files_n, mtime = signature(run_dir)
        health = _health(run_dir)
        for path in files:
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
                continue  # not a result document (e.g. a report's results.json in a nested folder)
            row = _row(run_dir.name, path, cast("StoredResult", doc), health)  # a result document, unvalidated
            if any(isinstance(row[c], (dict, list)) for c in COLUMNS):
                continue
            db.execute(f"INSERT OR REPLACE INTO results VALUES ({', '.join('?' * len(COLUMNS))})",
                       [row[c] for c in COLUMNS])
        db.execute("INSERT INTO runs VALUES (?, ?, ?)", (run_dir.name, files_n, mtime))


def rebuild(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """Index every run under ``results_dir`` from its result JSON; returns the index path.
    Unreadable result files are left out (the report names them)."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".sqlite", dir=results_dir)
    os.close(fd)
    try:
        with sqlite3.connect(tmp) as db:
            _fill(db, results_dir)
        os.replace(tmp, index_path(results_dir))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return index_path(results_dir)


def ensure(results_dir: str | Path = DEFAULT_RESULTS_DIR) -> tuple[Path, str | None]:
    """The index, rebuilt first when missing or stale; returns (path, why it was rebuilt or None)."""
    why = staleness(results_dir)
    if why is not None:
        rebuild(results_dir)
    return index_path(results_dir), why


def rows(results_dir: str | Path = DEFAULT_RESULTS_DIR, host: str | None = None, variant: str | None = None,
         persist: bool = True) -> list[IndexRow]:
    """Index rows (oldest first) for a host and/or variant; the index is brought up to date first.
    ``persist=False`` (the report): a missing index is not created; the rows come from an index
    built in memory (a stale existing one is rebuilt on disk as usual)."""
    if persist or index_path(results_dir).is_file():
        path, _ = ensure(results_dir)
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    else:
        db = sqlite3.connect(":memory:")
        _fill(db, Path(results_dir))
    where, args = [], []
    for column, value in (("host", host), ("variant", variant)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    sql = "SELECT * FROM results" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY time, run_id"
    try:
        db.row_factory = sqlite3.Row
        return [cast("IndexRow", dict(r)) for r in db.execute(sql, args)]  # the columns of IndexRow
    finally:
        db.close()


def previous_healthy(results_dir: str | Path, host: str, variant: str, config_hash: str | None,
                     before_run: str) -> IndexRow | None:
    """The unit's most recent complete canary, judged ``healthy`` by its run's health.json, with
    the same configuration hash, from a run other than ``before_run`` (and older in time)."""
    candidates = [r for r in rows(results_dir, host, variant)
                  if r["run_id"] != before_run and r["status"] == "complete" and r["health"] == "healthy"
                  and (config_hash is None or r["config_hash"] == config_hash)]
    return candidates[-1] if candidates else None


def trend(index_rows: Iterable[IndexRow]) -> list[TrendRow]:
    """Per variant, each run's single-stream median with Δ vs the previous run and vs the first
    (Δ % = (x − ref) / ref × 100 over the complete runs of that variant)."""
    out: list[TrendRow] = []
    first: dict[str, float] = {}
    prev: dict[str, float] = {}
    for r in index_rows:
        v, x = r["variant"], r["single_median"]
        row: TrendRow = {**r, "delta_prev_pct": None, "delta_first_pct": None}
        if r["status"] == "complete" and x is not None:
            if v in prev and prev[v]:
                row["delta_prev_pct"] = (x - prev[v]) / prev[v] * 100.0
            if v in first and first[v]:
                row["delta_first_pct"] = (x - first[v]) / first[v] * 100.0
            first.setdefault(v, x)
            prev[v] = x
        out.append(row)
    return out


def format_trend(trend_rows: list[TrendRow], host: str) -> list[str]:
    """One line per run: run id, variant, median, Δ vs previous, Δ vs first, clock, driver, health."""
    if not trend_rows:
        return [f"{host}: no stored results"]

    def pct(x: float | None) -> str:
        return f"{x:+6.1f} %" if x is not None else "     — "

    sim = any(r["simulated"] for r in trend_rows)
    lines = [f"{host}: {len(trend_rows)} result(s)" + (" (SIMULATED figures)" if sim else ""),
             f"{'run':<24} {'variant':<22} {'tok/s':>8} {'Δ prev':>8} {'Δ first':>8}  {'clock MHz':>9}  driver / health"]
    for r in trend_rows:
        med = f"{r['single_median']:8.2f}" if r["single_median"] is not None else f"{r['status'] or '?':>8}"
        clock = f"{r['clock_under_load_mhz']:9.0f}" if r["clock_under_load_mhz"] is not None else f"{'—':>9}"
        lines.append(f"{r['run_id']:<24} {r['variant']:<22} {med} {pct(r['delta_prev_pct'])} "
                     f"{pct(r['delta_first_pct'])}  {clock}  {r['driver'] or '—'}"
                     + (f" / {r['health']}" if r["health"] else ""))
    return lines


def host_trends(results_dir: str | Path, hosts: Iterable[str], variants: Iterable[str] | None = None,
                persist: bool = False) -> dict[str, list[TrendRow]]:
    """Per host, the trend rows of the given variants (all when None) — what the report draws."""
    wanted = set(variants) if variants is not None else None
    every = rows(results_dir, persist=persist)
    return {h: trend(r for r in every if r["host"] == h and (wanted is None or r["variant"] in wanted)) for h in hosts}
