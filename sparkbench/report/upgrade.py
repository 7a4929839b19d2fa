"""The upgrade report: ``results/<run>/upgrade.md`` and the lines the run ends with, from the run's
``<host>/<variant>.upgrade.json`` documents (``sparkbench.upgrade.document``). It leads with the
decision per resident, then the gated figures with their verdicts, the drift of the current image
across the run, what changed inside (the startup logs) and the flags the candidate refused."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from ..paths import write_atomic
from .terminal import REAL_LABEL, SIMULATED_LABEL

FILE = "upgrade.md"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def decision_line(doc: dict) -> str:
    """``spark01 nvidia-mtp3: PASSED (image a → b): why``."""
    image = doc["change"]["image"]
    rev = doc["change"]["model_revision"]
    what = f"image {image[0]} → {image[1]}" if image[0] != image[1] else f"model revision {rev[0]} → {rev[1]}"
    return f"{doc['host']} {doc['variant']}: {doc['state'].upper()} ({what}): {doc['reason']}"


def lines(docs: Sequence[dict]) -> list[str]:
    """The closing lines: the label, then one decision per resident."""
    label = SIMULATED_LABEL if any(d.get("simulated") for d in docs) else REAL_LABEL
    return [label] + [decision_line(d) for d in docs]


def _figures(doc: dict) -> str:
    rows = [[f["figure"], f["unit"], _num(f["current_median"]), _num(f["candidate_median"]),
             (f["verdict"] or {}).get("text", "—") + ((f["verdict"] or {}).get("tolerance_text") or ""), f["outcome"]]
            for f in doc["figures"]]
    if not rows:
        return "No figure to compare: " + doc["reason"]
    return tabulate(rows, ["figure", "unit", "current", "candidate", "verdict (candidate vs current)", "gate"],
                    tablefmt="github")


def markdown(docs: Sequence[dict]) -> str:
    """upgrade.md."""
    out = [f"# Upgrade — run {docs[0]['run']}" if docs else "# Upgrade", "",
           f"> **{lines(docs)[0]}**", ""]
    out += [f"- **{decision_line(d)}**" for d in docs] + [""]
    for d in docs:
        out += [f"## {d['host']} — {d['variant']}", "",
                f"Candidate's vLLM (as its image reports it): {d.get('candidate_vllm_version') or 'unknown'}; "
                f"tolerance {d['tolerance_pct']:g} %; {d['rounds']} measurement round(s)"
                + ("; the unresolved verdict was accepted (upgrade_accept_unresolved)" if d["accepted_unresolved"]
                   else "") + ".", "", _figures(d), ""]
        drift = d.get("drift")
        if drift:
            out += [f"Drift: the current image measured {drift['first_median']:.2f} tok/s first and "
                    f"{drift['bracket_median']:.2f} at the end of the sequence ({drift['pct']:+.2f} %).", ""]
        out += [f"What changed inside (the startup logs): {d['kernels_text']}.", ""]
        for f in d.get("flags") or []:
            out += [f"- Flag refused by the candidate's parser: {f['reason']} — {f['remedy']}"]
        if d.get("flags"):
            out.append("")
    return "\n".join(out)


def write(run_dir: Path, docs: Sequence[dict]) -> Path:
    """``<run_dir>/upgrade.md``."""
    return write_atomic(Path(run_dir) / FILE, markdown(docs).encode())
