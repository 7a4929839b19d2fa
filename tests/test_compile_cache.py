"""vLLM's compile cache mounted from the unit (issue 22, "Launch time on a real unit").

Real layer: real vLLM (the CPU image) started twice with the unit's cache folders mounted where
the launch spec mounts them (``sparkbench.launch.UNIT_CACHES``: /root/.cache/{huggingface,vllm,
flashinfer}) over one cache folder: the session's server (tests/conftest.py ``real_vllm``) is the
first start, a second container of the same command the relaunch. Judged by cause and effect, never by speed: the first start
writes its compiled model and Inductor's compiled kernels into the mounted folder; the relaunch
reads that artifact (vLLM's log names the mounted path) and compiles no kernel anew. vLLM 0.32's
CPU build cannot load its AOT-compiled model back ("Compiling model again due to a load failure
…, reason: 'function' object has no attribute 'finalize_loading'"): it traces the model again
against the same folder, whose kernels it reuses; a build that loads it says "Directly load".
Unit layer: the log reader on vLLM 0.32's own lines.
"""
from __future__ import annotations

import subprocess
import time

import pytest

from perf import compile_cache as cc
from sparkbench import launch

from conftest import REAL_VLLM_READY_TIMEOUT_S, free_port, health_ok, real_vllm_argv

PORT = 8252
CONTAINER = "cc-bench-test-vllm"

# Lines of vLLM 0.32 (CPU) as `docker logs -t` prints them for a first start and a relaunch (paths shortened).
FIRST_LOG = """\
2026-12-02T13:09:38.623877915Z (APIServer pid=1) INFO 12-02 13:09:38 [api_utils.py:286] non-default args: {'port': 8261}
2026-12-02T13:10:08.866619225Z (APIServer pid=1) INFO 12-02 13:10:08 [model.py:733] Resolved architecture: LlamaForCausalLM
2026-12-02T13:10:59.74008Z (Worker pid=41) INFO 12-02 13:10:59 [cpu_model_runner.py:87] Warming up model for the compilation...
2026-12-02T13:12:11.953461209Z (Worker pid=41) INFO 12-02 13:12:11 [decorators.py:743] [backbone] saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ff8a/rank_0_0/model
2026-12-02T13:12:11.953461209Z (Worker pid=41) INFO 12-02 13:12:11 [cpu_model_runner.py:91] Warming up done.
2026-12-02T13:12:12.941454868Z (EngineCore pid=28) INFO 12-02 13:12:12 [core.py:402] init engine (profile, create kv cache, warmup model) took 73.23 s
"""
# Without Docker's stamps vLLM's own time of day is read (here across midnight).
RELAUNCH_LOG = """\
(APIServer pid=1) INFO 12-02 23:59:50 [api_utils.py:286] non-default args: {'port': 8261}
(APIServer pid=1) INFO 12-02 23:59:50 [model.py:733] Resolved architecture: LlamaForCausalLM
(Worker pid=34) INFO 12-02 23:59:56 [cpu_model_runner.py:87] Warming up model for the compilation...
(Worker pid=34) WARNING 12-02 23:59:58 [decorators.py:333] [backbone] Compiling model again due to a load failure from /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ff8a/rank_0_0/model, reason: 'function' object has no attribute 'finalize_loading'
(Worker pid=34) INFO 12-03 00:00:28 [decorators.py:743] [backbone] saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ff8a/rank_0_0/model
(Worker pid=34) INFO 12-03 00:00:38 [cpu_model_runner.py:91] Warming up done.
"""


@pytest.mark.unit
def test_the_log_reader_tells_a_saved_a_failed_and_a_loaded_cache():
    first = cc.read_log(FIRST_LOG)
    assert first == {"inspect_s": 30.243, "compile_s": 72.213, "init_engine_s": 73.23, "cache": "none read",
                     "read_from": None, "failure_reason": None, "saved": True,
                     "saved_to": "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/ff8a/rank_0_0/model"}
    again = cc.read_log(RELAUNCH_LOG)
    assert again["cache"] == "load failure" and again["compile_s"] == 42 and again["inspect_s"] == 0
    assert again["read_from"].startswith("/root/.cache/vllm/")
    assert again["failure_reason"] == "'function' object has no attribute 'finalize_loading'"
    hit = cc.read_log("INFO 12-02 12:15:34 [decorators.py:320] [backbone] Directly load AOT compilation from path "
                      "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/9c4c/rank_0_0/model\n")
    assert hit["cache"] == "loaded" and hit["read_from"].startswith("/root/.cache/vllm/")
    assert hit["compile_s"] is None and hit["inspect_s"] is None


@pytest.mark.unit
def test_the_benchmark_starts_vllm_with_the_launch_specs_mounts(tmp_path):
    argv = cc.launch_argv(tmp_path, PORT, CONTAINER)
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert mounts == [f"{tmp_path / c.key}:{c.container}" for c in launch.UNIT_CACHES]
    assert "/root/.cache/vllm" in [c.container for c in launch.UNIT_CACHES]


def _relaunch(server, caches, name: str) -> dict:
    """The session server's own command again (a second container, its own port, the same cache
    folders): waits for /health, returns its log read by ``cc.read_log``, removes it."""
    port = free_port()
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    run = subprocess.run(real_vllm_argv(name, port, caches), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    try:
        t0 = time.monotonic()
        while not health_ok(f"http://127.0.0.1:{port}", timeout=3):
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True,
                                   text=True, timeout=30).stdout.strip()
            assert state == "true", subprocess.run(["docker", "logs", "--tail", "40", name], capture_output=True,
                                                   text=True, timeout=60).stderr
            assert time.monotonic() - t0 < REAL_VLLM_READY_TIMEOUT_S, "the relaunch never answered /health"
            time.sleep(1.0)
        logs = subprocess.run(["docker", "logs", "-t", name], capture_output=True, text=True, timeout=60)
        return cc.read_log(logs.stdout + logs.stderr)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


@pytest.mark.real
def test_a_first_launch_fills_the_mounted_compile_cache_and_the_relaunch_reads_it(real_vllm):
    """The first launch is the session's real vLLM (tests/conftest.py ``real_vllm``: the plain
    command with the unit's cache folders mounted, empty at its start); the relaunch is the same
    command in a second container over the same folders."""
    caches = real_vllm.caches
    vllm_cache = caches / "vllm_cache"
    logs = subprocess.run(["docker", "logs", "-t", real_vllm.name], capture_output=True, text=True, timeout=60)
    first = cc.read_log(logs.stdout + logs.stderr)
    kernels = cc.compiled_kernels(vllm_cache)
    # The first start compiled into the mounted folder: its model and Inductor's kernels are there,
    # and vLLM's inspection of the model class beside them.
    assert first["saved"] and first["saved_to"].startswith("/root/.cache/vllm/"), first
    assert first["cache"] == "none read", first
    assert kernels, sorted(vllm_cache.rglob("*"))[:20]
    assert len(cc.model_infos(vllm_cache)) == 1
    again = _relaunch(real_vllm, caches, f"{real_vllm.name}-relaunch")
    # The relaunch read the artifact the first start left there (vLLM names the mounted path) ...
    assert again["cache"] in ("loaded", "load failure"), again
    assert again["read_from"].startswith("/root/.cache/vllm/torch_compile_cache/"), again
    # ... and compiled no kernel anew: every one came from the mounted folder.
    assert cc.compiled_kernels(vllm_cache) == kernels
