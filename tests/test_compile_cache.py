"""vLLM's compile cache mounted from the unit (issue 22, "Launch time on a real unit").

Real layer: real vLLM (the CPU image) started twice by its launch spec's ``docker run`` line
(``sparkbench.launch``: the unit's cache folders mounted at /root/.cache/{huggingface,vllm,
flashinfer}) with one cache folder. Judged by cause and effect, never by speed: the first start
writes its compiled model and Inductor's compiled kernels into the mounted folder; the relaunch
reads that artifact (vLLM's log names the mounted path) and compiles no kernel anew. vLLM 0.32's
CPU build cannot load its AOT-compiled model back ("Compiling model again due to a load failure
…, reason: 'function' object has no attribute 'finalize_loading'"): it traces the model again
against the same folder, whose kernels it reuses; a build that loads it says "Directly load".
Unit layer: the log reader on vLLM 0.32's own lines.
"""
from __future__ import annotations

import sys

import pytest

from sparkbench import launch

from conftest import image_present
from helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
import compile_cache as cc  # noqa: E402

IMAGE = cc.IMAGE
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


@pytest.mark.real
@pytest.mark.skipif(not image_present(IMAGE), reason=f"{IMAGE} missing: run make setup")
def test_a_first_launch_fills_the_mounted_compile_cache_and_the_relaunch_reads_it(tmp_path):
    caches = tmp_path / "caches"
    for c in launch.UNIT_CACHES:
        (caches / c.key).mkdir(parents=True)
    first = cc.start_once(caches, PORT, CONTAINER)
    kernels = cc.compiled_kernels(caches / "vllm_cache")
    # The first start compiled into the mounted folder: its model and Inductor's kernels are there.
    assert first.log["saved"] and first.log["saved_to"].startswith("/root/.cache/vllm/"), first.log
    assert kernels and first.new_kernels == len(kernels), sorted((caches / "vllm_cache").rglob("*"))[:20]
    assert first.new_model_infos == 1  # vLLM's inspection of the model class, cached beside them
    again = cc.start_once(caches, PORT, CONTAINER)
    # The relaunch read the artifact the first start left there (vLLM names the mounted path) ...
    assert again.log["cache"] in ("loaded", "load failure"), again.log
    assert again.log["read_from"].startswith("/root/.cache/vllm/torch_compile_cache/"), again.log
    # ... and compiled no kernel anew: every one came from the mounted folder.
    assert again.new_kernels == 0 and cc.compiled_kernels(caches / "vllm_cache") == kernels
