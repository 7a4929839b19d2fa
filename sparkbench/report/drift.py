"""Drift by bracketing (pure): the reference variant measured again at the end of a host's sequence.

bench.yml measures each host's reference variant (the first variant of its plan that the run
measures, ``sparkbench.plan``) once more after the host's last variant, single stream only, into
``<variant>.bracket.json``. If the host changed while the sequence ran (warmed up, throttled,
another job, page cache), the two measurements of the same configuration differ, and so may every
comparison between the variants measured in between: they would show the drift, not the variants.

Per host, :func:`host_drift` compares the reference's main single-stream requests (the reference
side) with the bracket's (the other side) through :func:`sparkbench.verdict.compare_samples`:
drift = (median(bracket) / median(reference) − 1) × 100 %, with its 95 % interval. A "differs"
verdict — a drift beyond the noise of these requests — marks the host's comparisons unreliable.
"no difference detectable above Y %" means the host held still to within Y %; "not enough
requests" (fewer than ``MIN_REQUESTS`` per side, a failed bracket or reference) says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkbench.measure.figures import SINGLE_DECODE
from sparkbench.verdict import compare_samples, explained, samples

from . import numbers as n


def _latest(brackets: Iterable[dict]) -> dict[str, dict]:
    """One bracket document per host: the one that finished last (a resumed run may hold an older
    bracket of another reference), ties by variant name."""
    out: dict[str, dict] = {}
    for doc in sorted(brackets, key=lambda d: (str(d.get("finished_at") or ""), n.variant_name(d))):
        out[n.host_of(doc)] = doc
    return out


def host_drift(results: list[dict], brackets: list[dict], *, seed: int = 0) -> dict[str, dict]:
    """``{host: {"variant", "verdict", "unreliable", "text", "reason", "reference_median", "bracket_median",
    "n_reference", "n_bracket", "bracket_status", "simulated"}}`` for each host with a bracket
    document (``results``: the run's main results; ``brackets``: ``Run.brackets``).

    ``verdict`` is :func:`~sparkbench.verdict.compare_samples` (reference = the main result's
    valid ``single.runs[].decode_tok_s``, other = the bracket's), seeded by ``seed``;
    ``unreliable`` is True when its kind is ``differs``; ``text`` is one line, e.g. "nvidia-bare
    measured again at the end: differs by −3.1 % [−4.0, −2.2]" (a verdict not reached says why:
    :func:`sparkbench.verdict.explained`); ``reason`` is the verdict's words alone, or why there is
    no verdict at all (a failed bracket, no main result). Medians in tok/s."""
    main = {(n.host_of(r), n.variant_name(r)): r for r in results}
    out: dict[str, dict] = {}
    for host, br in sorted(_latest(brackets).items()):
        of = str((br.get("bracket") or {}).get("of") or n.variant_name(br))
        ref = main.get((host, of))
        ref_values = samples(ref, "single") if ref else []
        br_values = samples(br, "single") if br.get("status") != "failed" else []
        verdict = compare_samples(ref_values, br_values, seed=seed, remedy="llm_bench_runs: 5 or more")
        unreliable = verdict["kind"] == "differs"
        if ref is None:
            why = f"no main result of {of} in this run to compare with"
        elif br.get("status") == "failed":
            fail = br.get("failure") or {}
            why = f"the bracket run failed at {fail.get('stage') or '?'}: {fail.get('reason') or 'no reason recorded'}"
        else:
            why = verdict["text"]
        compared = ref is not None and br.get("status") != "failed"
        text = f"{of} measured again at the end: {explained(verdict) if compared else why}"
        out[host] = {"variant": of, "verdict": verdict, "unreliable": unreliable, "text": text, "reason": why,
                     "reference_median": SINGLE_DECODE.read(ref) if ref else None,
                     "bracket_median": SINGLE_DECODE.read(br),
                     "n_reference": len(ref_values), "n_bracket": len(br_values),
                     "bracket_status": br.get("status"),
                     "simulated": n.is_simulated(br) or bool(ref and n.is_simulated(ref))}
    return out
