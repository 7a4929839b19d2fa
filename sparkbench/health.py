"""Fleet health by canary: the judgement (pure; no I/O except ``write`` and ``load_unit``).

``playbooks/health.yml`` runs one short fixed variant, the *canary* (inventory variable
``bench_health_canary``, per group), on every unit; this module

* builds the canary's plan variables (``canary_variables``: the bench plan reduced to the canary,
  single stream only, ``bench_health_runs`` ≥ ``verdict.MIN_REQUESTS`` requests, no parallel,
  quality or image phase), and
* judges every unit (``judge``): verdict ``healthy`` | ``slow`` | ``failed``, ``causes``,
  ``remedy``, ``figures`` and one line such as ``spark-sim03: slow — clock 850 of 3003 MHz under
  load``.

Peers
    units whose canary result has the same hardware profile (``profile.hardware.name``), model
    and canary variant. With at least ``MIN_PEERS`` measured peers (the unit included):

    * centre C = median of the peers' canary single-stream medians [tok/s]
    * spread S = 1.4826 × MAD of those medians / C × 100 [%] (MAD = median |x − C|; 1.4826 makes
      it a standard deviation for normal data; one bad unit moves neither C nor S much)
    * deviation D = (x − C) / C × 100 [%] of the unit's median x
    * reference = the pooled requests of the other peers whose median lies within
      max(k × S, ``floor_pct``) of C (the inliers; all other peers when none is), so one bad unit
      never widens its peers' comparisons
    * threshold T = max(k × S, mdd↓, ``floor_pct``), where mdd↓ is the minimum detectable
      difference ``mdd_pct`` that ``verdict.compare_samples`` reports for the unit's requests vs
      the reference, as a decrease (``detectable_fall_pct``, as under History)
    * slow by peers: D < −T **and** compare_samples(peers' requests, the unit's requests) says
      ``differs`` (so three identical units never alarm on noise); a unit with a cause (below)
      is slow when the comparison says ``differs`` with its whole 95 % interval below
      −``floor_pct``: its own telemetry or manifest explains the deviation, so the peers' spread
      does not mask it.

History
    the unit's most recent earlier *healthy* canary with the same configuration hash (the
    history index, :mod:`sparkbench.history`); slow by history: compare_samples(that run's
    requests, this run's) ``differs`` with pct < −max(mdd↓, ``floor_pct``), where mdd↓ = 100 ×
    (1 − 1/(1 + mdd_pct/100)) is the minimum detectable difference as a decrease: compare_samples
    works on log rates, so a rise of mdd_pct and a fall of mdd↓ are the same distance (a noisy
    earlier run, mdd_pct 79 %, still lets a fall of more than 44 % count as slow).

Residents
    a unit with a resident (``playbooks/serve.yml``) measures its deployed service instead of the
    canary variant (``sparkbench.serve.health_canary``); its unit entry carries ``deployment`` (the
    resident's name, variant, ``deployed_at``, the deployment canary's requests as ``samples``).
    The history rule then holds it to its deployment instead of its history: slow by deployment =
    compare_samples(the deployment canary's requests, this canary's) ``differs`` with pct <
    −max(mdd↓, ``floor_pct``) (mdd↓ as under History). Peers still apply (units whose canary is the same variant).

Causes (telemetry and manifests only, never ``VLLM_SIM_*`` or inventory variables)
    ``protocol.clock`` (clock under load below ``CLOCK_CAPPED_SHARE`` of its maximum, the
    ``clock_capped`` flag, or below ``PEER_CLOCK_SHARE`` of the peers' median clock under load),
    power below ``PEER_POWER_SHARE`` of the peers' median (not listed beside a clock cause: a
    capped clock draws less power), temperature ≥ ``HOT_C`` or
    ``HOT_MARGIN_C`` above the peers' median, the protocol flags (host swapped, GPU Xid, OOM
    kill, a bandwidth drop between the probes around the canary: ``sparkbench.bandwidth``), and
    every manifest field of ``MANIFEST_FIELDS`` that differs from the peers' majority.
    A slow unit's causes are its probable causes, telemetry first; a healthy unit's differences
    are reported in its line, not flagged.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, cast

from . import result as result_mod
from . import verdict as verdict_mod
from . import version
from .errors import InputError
from .measure.figures import SINGLE_DECODE
from .paths import write_atomic
from .unit_figures import HOT_C, MANIFEST_FIELDS, number, unit_figures
from .values import dig

if TYPE_CHECKING:
    from .cluster.shapes import HostVars
    from .health_shapes import (
        Cause,
        Comparison,
        DeploymentFigures,
        EarlierCanary,
        HealthInput,
        HistoryFigures,
        Judgement,
        PeerFigures,
        ResidentDeployment,
        ResidentRef,
        UnitFailure,
        UnitRow,
    )
    from .measure.shapes import JSON
    from .result_shapes import StoredResult
    from .unit_figures import CanaryFigures
    from .verdict import SampleVerdict

MIN_PEERS = 3            # units of one peer group needed for a peer judgement
MAD_SCALE = 1.4826       # MAD → standard deviation for normal data
DEFAULT_K = 3.0          # threshold = k × robust spread (at least)
DEFAULT_FLOOR_PCT = 3.0  # threshold floor [%]
CLOCK_CAPPED_SHARE = 0.6  # clock under load / max below this: capped (healthy GB10: ~0.81, PD cap: 0.17–0.28)
PEER_CLOCK_SHARE = 0.85   # unit's clock under load / peers' median below this: a clock cause
PEER_POWER_SHARE = 0.8    # unit's mean power / peers' median below this: a power cause
HOT_MARGIN_C = 10.0       # ...or this much above the peers' median
REMEDY = {
    "clock": "unplug the unit's power brick from the wall and the Spark for about a minute (USB-PD power "
             "negotiation cap), then run health.yml again",
    "power": "check the power brick and cable (the 240 W USB-C PD supply that came with the unit); unplug it "
             "from the wall and the Spark for a minute",
    "temperature": "check the unit's airflow (vents free, nothing stacked on it, room temperature)",
    "host_swapped": "free memory on the host (stop other workloads; drop the page cache before a launch: "
                    "-e bench_drop_caches=true), or lower --gpu-memory-utilization",
    "gpu_xid": "read the GPU Xid lines in the kernel log (dmesg); reboot the unit, and if they recur, check the "
               "driver and the hardware",
    "oom_kill": "the kernel killed a process for memory: lower --gpu-memory-utilization or free memory",
    "bandwidth_drop": "the unit streamed less after the canary than before it (a slow power state): unplug the "
                      "unit's power brick from the wall and the Spark for about a minute, then run health.yml again",
    "driver": "install the peers' driver ({majority}) on this unit and reboot",
    "kernel": "boot the peers' kernel ({majority}) (apt upgrade / the DGX OS update)",
    "firmware": "update the unit's firmware to the peers' version ({majority})",
    "cuda": "install the peers' CUDA version ({majority})",
    "image_digest": "pull the peers' image (digest {majority}) on this unit",
    "image_id": "pull the same image as the peers (image id {majority}) on this unit",
    "vllm_version": "serve the peers' vLLM version ({majority})",
    "model_revision": "download the peers' model revision ({majority})",
    "unexplained": "no telemetry or manifest difference explains it: re-run health.yml, then bench the unit "
                   "(bench.yml -l HOST) and compare its telemetry with a peer's",
}


# --------------------------------------------------------------------------- the canary's plan

def canary_variables(variables: HostVars) -> dict[str, JSON]:
    """The host's variables with the bench plan reduced to the canary (``sparkbench.plan`` input).

    ``bench_select`` = [``bench_health_canary``]; ``llm_bench_runs`` = ``bench_health_runs``
    (default and minimum ``verdict.MIN_REQUESTS``, the requests a verdict needs); single stream
    only (``llm_bench_concurrency`` [], ``llm_bench_context`` [0], no quality or image phase, no
    bracket run, no target precision: the same fixed requests on every unit);
    ``llm_bench_output_tokens`` = ``bench_health_output_tokens`` when set. Bad input raises
    ``InputError`` naming the variable and the fix."""
    name = variables.get("bench_health_canary")
    if not name or not isinstance(name, str):
        raise InputError("bench_health_canary is not set for this host; name its canary variant (e.g. nvidia-bare) "
                         "in the host's group_vars (inventory/group_vars/<group>/main.yml) or -e bench_health_canary=NAME")
    minimum = verdict_mod.MIN_REQUESTS
    given = variables.get("bench_health_runs")
    try:
        if given in (None, ""):
            runs = minimum
        elif isinstance(given, (str, int, float)):
            runs = int(given)
        else:
            raise TypeError(given)  # a list or a mapping
    except (TypeError, ValueError):
        raise InputError(f"bench_health_runs is {given!r}; it must be a whole number >= {minimum} "
                         "(the requests a verdict needs)") from None
    if runs < minimum:
        raise InputError(f"bench_health_runs is {runs}; it must be >= {minimum} (the requests per side a verdict "
                         f"needs, sparkbench.verdict.MIN_REQUESTS): set bench_health_runs: {minimum}")
    out: dict[str, JSON] = dict(variables)
    # A fixed canary: no bracket run, no target precision (the same requests on every unit).
    out.update(bench_select=[name], llm_bench_runs=runs, llm_bench_concurrency=[], llm_bench_context=[0],
               llm_bench_quality=False, llm_bench_image=False, bench_bracket=False,
               llm_bench_target_precision_pct=None, llm_bench_max_runs=None)
    tokens = variables.get("bench_health_output_tokens")
    if tokens not in (None, ""):
        out["llm_bench_output_tokens"] = tokens
    return out


# --------------------------------------------------------------------------- peers and causes

def peer_key(doc: StoredResult) -> tuple[str, str, str]:
    """(hardware profile, model, canary variant) — units with the same key are peers."""
    return (str(dig(doc, "profile", "hardware", "name") or "unknown hardware"),
            str(dig(doc, "variant", "model") or dig(doc, "manifest", "model") or "unknown model"),
            str(dig(doc, "variant", "name") or ""))


def _failure(doc: StoredResult | None, reason: str | None) -> UnitFailure | None:
    """{stage, reason, remedy} when the unit has no usable canary, else None."""
    if doc is None:
        return {"stage": "host", "reason": reason or "no canary result (the host did not reach the canary)",
                "remedy": "fix the host problem named in the reason (connection, provisioning), then run health.yml again"}
    if doc.get("status") != "complete" or SINGLE_DECODE.read(doc) is None:
        fail = doc.get("failure")
        stage, why, remedy = (fail.get("stage"), fail.get("reason"), fail.get("remedy")) if fail else (None, None, None)
        return {"stage": str(stage or "measure"),
                "reason": str(why or reason or f"canary status {doc.get('status')!r}, no single-stream median"),
                "remedy": str(remedy or "read the canary's result file for the errors and the log excerpt")}
    return None


# --------------------------------------------------------------------------- the judgement

def _signed(pct: float) -> str:
    """``+0.4 %`` / ``−61.5 %`` (typographic minus, as the verdict texts write it)."""
    return f"{pct:+.1f} %".replace("-", "−")


def _mad_spread_pct(values: Sequence[float], centre: float) -> float:
    """1.4826 × median |x − centre| / centre × 100 [%]."""
    return MAD_SCALE * median(abs(v - centre) for v in values) / centre * 100.0 if centre else 0.0


def _majority(values: Sequence[str | None]) -> str | None:
    """The most common non-null value; None when there is none or the top is a tie."""
    counts = Counter(str(v) for v in values if v not in (None, "", "unknown")).most_common(2)
    if not counts or (len(counts) == 2 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def _telemetry_causes(fig: CanaryFigures, peers: Sequence[CanaryFigures]) -> list[Cause]:
    causes: list[Cause] = []
    under, top, share = fig["clock_under_load_mhz"], fig["clock_max_mhz"], fig["clock_share_of_max"]
    peer_clock = [p["clock_under_load_mhz"] for p in peers if p["clock_under_load_mhz"] is not None]
    peer_clock_med = median(peer_clock) if peer_clock else None
    flagged = any(f.get("code") == "clock_capped" for f in fig["flags"])
    if under is not None and (flagged or (share is not None and share < CLOCK_CAPPED_SHARE)
                              or (peer_clock_med and under < PEER_CLOCK_SHARE * peer_clock_med)):
        text = (f"clock {under:.0f} of {top:.0f} MHz under load" if top else f"clock {under:.0f} MHz under load")
        if peer_clock_med and not (flagged or (share is not None and share < CLOCK_CAPPED_SHARE)):
            text += f" (peers {peer_clock_med:.0f} MHz)"
        causes.append({"code": "clock", "text": text, "remedy": REMEDY["clock"]})
    power = fig["power_w"]
    peer_power = [p["power_w"] for p in peers if p["power_w"] is not None]
    if power is not None and peer_power and power < PEER_POWER_SHARE * median(peer_power) and not causes:
        causes.append({"code": "power", "text": f"power {power:.0f} W (peers {median(peer_power):.0f} W)",
                       "remedy": REMEDY["power"]})
    temp = fig["temperature_c"]
    peer_temp = [p["temperature_c"] for p in peers if p["temperature_c"] is not None]
    if temp is not None and (temp >= HOT_C or (peer_temp and temp >= median(peer_temp) + HOT_MARGIN_C)):
        text = f"temperature {temp:.0f} °C" + (f" (peers {median(peer_temp):.0f} °C)" if peer_temp else "")
        causes.append({"code": "temperature", "text": text, "remedy": REMEDY["temperature"]})
    for flag in fig["flags"]:
        code = str(flag.get("code"))
        if code == "clock_capped":
            continue  # the clock cause above says it with the figures
        causes.append({"code": code, "text": str(flag.get("reason") or code),
                       "remedy": REMEDY.get(code, "read the flag's reason in the result's protocol block")})
    return causes


def _manifest_causes(fig: CanaryFigures, peers: Sequence[CanaryFigures]) -> list[Cause]:
    causes: list[Cause] = []
    for field in MANIFEST_FIELDS:
        value = fig["manifest"].get(field)
        majority = _majority([p["manifest"].get(field) for p in peers])
        if value in (None, "", "unknown") or majority is None or str(value) == majority:
            continue
        label = field.replace("_", " ")
        causes.append({"code": field, "text": f"{label} {value} (peers {majority})",
                       "remedy": REMEDY[field].format(majority=majority)})
    return causes


def _pooled(docs: Sequence[StoredResult]) -> list[float]:
    return [x for d in docs for x in verdict_mod.samples(d, "single")]


#: The measured units of one peer group, ``(host, document, figures)``, and the groups by ``peer_key``.
_Peers = list[tuple[str, "StoredResult", "CanaryFigures"]]
_PeerGroups = dict[tuple[str, str, str], _Peers]


def _by_peer_group(units: Sequence[HealthInput]) -> tuple[list[UnitRow], _PeerGroups]:
    """One row per unit (``host``, ``figures``, ``failure``) and the measured units by peer key."""
    rows: list[UnitRow] = []
    measured: _PeerGroups = {}
    for u in units:
        host, doc = str(u["host"]), u.get("doc")
        fail = _failure(doc, u.get("reason"))
        canary = unit_figures(doc) if doc else None
        rows.append({"host": host, "figures": {**canary} if canary is not None else {}, "failure": fail})
        if fail is None and doc and canary is not None:  # no failure: the canary measured
            measured.setdefault(peer_key(doc), []).append((host, doc, canary))
    return rows, measured


def _rate(fig: CanaryFigures) -> float:
    """A measured unit's canary median [tok/s] (a unit without one failed: ``_failure``)."""
    rate = fig["decode_tok_s"]
    if rate is None:
        raise ValueError("a measured unit without a single-stream median")
    return rate


def detectable_fall_pct(mdd_pct: float) -> float:
    """The minimum detectable difference ``mdd_pct`` (a rise, as ``verdict.compare_samples``
    reports it on log rates) as a fall [%]: 100 × (1 − 1/(1 + mdd_pct/100)); 5 → 4.76, 79 → 44.1.
    A rise can be any size and a fall at most 100 %, so a fall is held to this, not to mdd_pct."""
    return 100.0 * (1.0 - 1.0 / (1.0 + mdd_pct / 100.0)) if mdd_pct > 0 else 0.0


def _detectable_fall(cmp: SampleVerdict) -> float:
    """``detectable_fall_pct`` of a ``verdict.compare_samples`` result (0 without an MDD)."""
    return detectable_fall_pct(number(cmp.get("mdd_pct")) or 0.0)


def _versus_peers(host: str, doc: StoredResult, fig: CanaryFigures, key: tuple[str, str, str],
                  members: _Peers, *, k: float, floor_pct: float, seed: int,
                  resamples: int) -> tuple[PeerFigures, bool]:
    """``(figures vs the peers, slow by peers)``; with fewer than ``MIN_PEERS`` units the figures
    say why there is no peer judgement."""
    peers_fig: PeerFigures = {"group": {"hardware": key[0], "model": key[1], "variant": key[2]},
                              "units": len(members)}
    if len(members) < MIN_PEERS:
        peers_fig["reason"] = f"{len(members)} unit(s) of this hardware, model and canary: {MIN_PEERS} needed"
        return peers_fig, False
    values = [_rate(f) for _, _, f in members]
    centre = median(values)
    spread = _mad_spread_pct(values, centre)
    band = max(k * spread, floor_pct)
    others = [(d, f) for h, d, f in members if h != host]
    inliers = [d for d, f in others if abs(_rate(f) - centre) / centre * 100.0 <= band]
    cmp = verdict_mod.compare_samples(_pooled(inliers or [d for d, _ in others]),
                                      verdict_mod.samples(doc, "single"), seed=seed, resamples=resamples)
    threshold = max(k * spread, _detectable_fall(cmp), floor_pct)
    deviation = (_rate(fig) - centre) / centre * 100.0
    peers_fig.update({"median_tok_s": centre, "spread_pct": spread, "deviation_pct": deviation,
                      "threshold_pct": threshold, "verdict": cmp["kind"], "pct": cmp.get("pct"), "lo": cmp.get("lo"),
                      "hi": cmp.get("hi"), "mdd_pct": cmp.get("mdd_pct"), "text": verdict_mod.explained(cmp),
                      "reference_units": len(inliers) or len(others)})
    return peers_fig, deviation < -threshold and cmp.get("kind") == "differs"


def _against_earlier(earlier: list[float], doc: StoredResult, *, floor_pct: float, seed: int,
                     resamples: int) -> tuple[Comparison, bool]:
    """``(verdict figures, slow)`` of this canary's requests against an earlier set (the rule under
    History): ``differs`` with pct < −max(``detectable_fall_pct``(mdd_pct), ``floor_pct``)."""
    cmp = verdict_mod.compare_samples(earlier, verdict_mod.samples(doc, "single"), seed=seed, resamples=resamples)
    threshold = max(_detectable_fall(cmp), floor_pct)
    slow = cmp.get("kind") == "differs" and (number(cmp.get("pct")) or 0.0) < -threshold
    return ({"verdict": cmp["kind"], "pct": cmp.get("pct"), "lo": cmp.get("lo"), "hi": cmp.get("hi"),
             "mdd_pct": cmp.get("mdd_pct"), "threshold_pct": threshold, "text": verdict_mod.explained(cmp)}, slow)


def _versus_history(past: EarlierCanary | None, doc: StoredResult, *, floor_pct: float, seed: int,
                    resamples: int) -> tuple[HistoryFigures | None, bool]:
    """``(figures vs the unit's earlier healthy canary, slow by history)``; ``(None, False)`` without one."""
    if not past:
        return None, False
    fig, slow = _against_earlier(verdict_mod.samples(past, "single"), doc, floor_pct=floor_pct, seed=seed,
                                 resamples=resamples)
    return ({"run_id": past.get("_run_id"), "decode_tok_s": SINGLE_DECODE.read(past),
             **fig}, slow)


def _versus_deployment(dep: ResidentDeployment, doc: StoredResult, *, floor_pct: float, seed: int,
                       resamples: int) -> tuple[DeploymentFigures, bool]:
    """``(figures vs the resident's deployment canary, slow by it)``: the history rule with the
    deployment canary's requests (``dep["samples"]``) as the earlier run."""
    fig, slow = _against_earlier([float(x) for x in dep.get("samples") or []], doc, floor_pct=floor_pct, seed=seed,
                                 resamples=resamples)
    return {"deployed_at": dep.get("deployed_at"), **fig}, slow


def _failed(row: UnitRow, fail: UnitFailure) -> None:
    """``row`` (its failure ``fail``) made a failed unit's entry."""
    row.update({"verdict": "failed", "causes": [f"{fail['stage']}: {fail['reason']}"], "remedy": fail["remedy"],
                "notes": [], "line": f"{row['host']}: failed — {fail['stage']}: {fail['reason']}"})


def _slow(row: UnitRow, causes: list[Cause], basis: list[str]) -> None:
    if not causes:
        causes = [{"code": "unexplained", "text": "no telemetry or manifest difference explains it",
                   "remedy": REMEDY["unexplained"]}]
    row.update({"verdict": "slow", "causes": [c["text"] for c in causes], "cause_codes": [c["code"] for c in causes],
                "remedy": "; ".join(dict.fromkeys(c["remedy"] for c in causes)), "notes": [], "basis": basis,
                "line": f"{row['host']}: slow — " + "; ".join(c["text"] for c in causes) + f" ({'; '.join(basis)})"})


def _healthy(row: UnitRow, fig: CanaryFigures, peers_fig: PeerFigures,
             causes: list[Cause]) -> None:
    notes = [c["text"] for c in causes]
    if "deviation_pct" in peers_fig:
        figure = f"{fig['decode_tok_s']:.2f} tok/s, {_signed(peers_fig['deviation_pct'])} vs peers ({peers_fig['text']})"
    else:
        figure = f"{fig['decode_tok_s']:.2f} tok/s ({peers_fig['reason']})"
    line = f"{row['host']}: healthy — {figure}"
    dep = row["figures"].get("deployment")
    if dep is not None:
        line += f"; {_resident_words(row['resident'])}: {dep['text']} vs its deployment"
    if notes:
        line += "; reported, not flagged: " + "; ".join(notes)
    row.update({"verdict": "healthy", "causes": [], "cause_codes": [], "remedy": None, "notes": notes, "basis": [],
                "line": line})


def _resident_words(res: ResidentRef) -> str:
    """``resident NAME (VARIANT, deployed WHEN)``."""
    return f"resident {res['name']} ({res['variant']}, deployed {res['deployed_at']})"


def _slow_with_a_cause(peers_fig: PeerFigures, causes: Sequence[Cause], floor_pct: float) -> bool:
    """A unit whose own telemetry or manifest names a cause is slow when its requests differ from
    its peers' and the whole 95 % interval of the difference lies below −floor: the cause explains
    the deviation, so the peers' spread (three medians on a loaded controller can spread by tens
    of percent) does not raise its threshold."""
    if not causes or peers_fig.get("verdict") != "differs":
        return False
    hi = number(peers_fig.get("hi"))
    return hi is not None and hi < -floor_pct


def judge(units: Sequence[HealthInput], history: Mapping[str, EarlierCanary] | None = None, *,
          k: float = DEFAULT_K, floor_pct: float = DEFAULT_FLOOR_PCT, seed: int = 0,
          resamples: int = 2000) -> Judgement:
    """Judge every unit. ``units``: ``[{"host", "doc": result document or None, "reason": why the
    host failed (or None), "deployment": a resident unit's deployment (or absent)}]``; ``history``:
    per host the earlier healthy canary document to compare with (or absent). Returns ``{"units":
    [...], "lines": [...], "unhealthy": int, "k", "floor_pct", "simulated"}``; each unit: host,
    verdict, causes (texts), remedy, figures, line, notes (differences reported but not flagged);
    a resident unit also ``resident`` (name, variant, deployed_at, run, port) and
    ``figures.deployment`` (the verdict against its deployment, see "Residents" above)."""
    if k <= 0 or floor_pct < 0:
        raise InputError(f"health thresholds: k must be > 0 and floor_pct >= 0 (got k={k}, floor_pct={floor_pct})")
    history = history or {}
    rows, measured = _by_peer_group(units)
    by_host = {h: (key, doc, fig) for key, members in measured.items() for h, doc, fig in members}
    deployments = {str(u["host"]): u["deployment"] for u in units if u.get("deployment")}
    for row in rows:
        host = row["host"]
        dep = deployments.get(host)
        if dep is not None:
            row["resident"] = {"name": dep.get("name"), "variant": dep.get("variant"),
                               "deployed_at": dep.get("deployed_at"), "run": dep.get("run"), "port": dep.get("port")}
        if row["failure"] is not None:
            _failed(row, row["failure"])
            if dep is not None:
                row["line"] += f" ({_resident_words(row['resident'])})"
            continue
        key, doc, fig = by_host[host]
        figs = [f for _, _, f in measured[key]]
        peers_fig, slow_peers = _versus_peers(host, doc, fig, key, measured[key], k=k, floor_pct=floor_pct,
                                              seed=seed, resamples=resamples)
        # A resident unit is held to its deployment, not to its history (sparkbench.serve.health_canary).
        dep_fig, slow_hist = (_versus_deployment(dep, doc, floor_pct=floor_pct, seed=seed, resamples=resamples)
                              if dep is not None else (None, False))
        hist_fig = None
        if dep is None:
            hist_fig, slow_hist = _versus_history(history.get(host), doc, floor_pct=floor_pct, seed=seed,
                                                  resamples=resamples)
        row["figures"] = {**fig, "peers": peers_fig, "history": hist_fig}
        if dep_fig is not None:
            row["figures"]["deployment"] = dep_fig
        causes = _telemetry_causes(fig, figs) + _manifest_causes(fig, figs)
        slow_peers = slow_peers or _slow_with_a_cause(peers_fig, causes, floor_pct)
        basis = []
        if slow_peers:
            basis.append(f"{_signed(peers_fig['deviation_pct'])} vs peers' median {peers_fig['median_tok_s']:.2f} tok/s, "
                         f"{peers_fig['text']}")
        if slow_hist and dep_fig is not None:
            basis.append(f"{_resident_words(row['resident'])} vs its deployment: {dep_fig['text']}")
        elif slow_hist and hist_fig is not None:  # slow by history: there was an earlier canary
            basis.append(f"vs its run {hist_fig['run_id']}: {hist_fig['text']}")
        if slow_peers or slow_hist:
            _slow(row, causes, basis)
        else:
            _healthy(row, fig, peers_fig, causes)
    rows.sort(key=lambda r: r["host"])
    return {"units": rows, "lines": [r["line"] for r in rows],
            "unhealthy": sum(1 for r in rows if r["verdict"] != "healthy"), "k": k, "floor_pct": floor_pct,
            "simulated": any(r["figures"].get("simulated") for r in rows)}


# --------------------------------------------------------------------------- files

def load_unit(path: str | Path) -> StoredResult | None:
    """A canary result document with the probe after it (``sparkbench.result.stored``), or None
    when the file is missing or unreadable."""
    return cast("StoredResult | None", result_mod.stored(path) or None)


def markdown(judgement: Judgement, run_id: str) -> str:
    """``health.md``: the verdict lines, then per unit its figures, causes and remedy."""
    out = [f"# Fleet health — run {run_id}", ""]
    if judgement.get("simulated"):
        out += ["**SIMULATED**: figures come from the vLLM simulator, not from real hardware.", ""]
    bad = judgement["unhealthy"]
    out += [f"{len(judgement['units'])} unit(s), {bad} slow or failed. Threshold: max({judgement['k']:g} × robust "
            f"spread of the peers, minimum detectable difference, {judgement['floor_pct']:g} %).", ""]
    out += [f"- {line}" for line in judgement["lines"]] + [""]
    out += ["| unit | verdict | canary tok/s | peers' median | deviation | verdict vs peers | clock under load / max "
            "| power W | temp °C | history |", "|---|---|---|---|---|---|---|---|---|---|"]

    def f(value: float | None, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, (int, float)) else "—"

    for u in judgement["units"]:
        fig, peers, past = u["figures"], u["figures"].get("peers"), u["figures"].get("history")
        clock = (f"{f(fig.get('clock_under_load_mhz'), '.0f')} / {f(fig.get('clock_max_mhz'), '.0f')} MHz"
                 if fig.get("clock_under_load_mhz") is not None else "—")
        centre, deviation = (peers.get("median_tok_s"), peers.get("deviation_pct")) if peers else (None, None)
        versus = (peers.get("text") or peers.get("reason")) if peers else None
        history_text = past.get("text") if past else None
        if u.get("resident"):
            dep = fig.get("deployment")
            history_text = (f"deployment {u['resident']['deployed_at']}: "
                            f"{(dep.get('text') if dep else None) or '—'}")
        out.append(f"| {u['host']} | {u['verdict']} | {f(fig.get('decode_tok_s'), '.2f')} | "
                   f"{f(centre, '.2f')} | "
                   f"{_signed(deviation) if deviation is not None else '—'} | "
                   f"{versus or '—'} | {clock} | {f(fig.get('power_w'), '.0f')} | "
                   f"{f(fig.get('temperature_c'), '.0f')} | {history_text or '—'} |")
    residents = [u for u in judgement["units"] if u.get("resident")]
    if residents:
        out += ["", "Residents (the unit's canary was its deployed service, judged against its deployment):", ""]
        out += [f"- {u['host']}: {_resident_words(u['resident'])}, from run {u['resident']['run']}, port "
                f"{u['resident']['port']}" for u in residents]
    for u in judgement["units"]:
        if u["verdict"] != "healthy":
            out += ["", f"## {u['host']}: {u['verdict']}", ""]
            out += [f"- cause: {c}" for c in u["causes"]] + [f"- remedy: {u['remedy']}"]
    return "\n".join(out) + "\n"


def write(run_dir: str | Path, judgement: Judgement, run_id: str) -> dict[str, str]:
    """Write ``health.json`` and ``health.md`` into the run folder; returns their paths.

    ``health.json`` is ``judgement`` (``judge``'s) with its ``schema_version``, the run id and
    sparkbench's version and commit, read back through its model
    (:class:`sparkbench.documents.health.HealthDocument`) before it is written: a wrong key or type
    (a bug) raises ``DocumentError`` naming the field, and nothing is written. The model is imported
    here, not with this module: Ansible's workers import this module, and building the models costs
    about 0.1 s."""
    from .documents.health import SCHEMA_VERSION
    from .documents.load import load_health

    run_dir = Path(run_dir)
    paths = {"health.json": run_dir / "health.json", "health.md": run_dir / "health.md"}
    doc = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "sparkbench_version": version.VERSION,
           "sparkbench_commit": version.commit(), **judgement}
    text = json.dumps(doc, indent=2, default=str) + "\n"
    load_health(json.loads(text))  # as it will be read
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(paths["health.json"], text.encode("utf-8"))
    paths["health.md"].write_text(markdown(judgement, run_id), encoding="utf-8")
    return {k: str(v) for k, v in paths.items()}
