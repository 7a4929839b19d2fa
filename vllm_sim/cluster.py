"""Cluster mode: ``vllm serve ... --distributed-executor-backend ray`` with TP x PP > 1.

The only module of the simulator that imports Ray, and only when cluster mode starts (the rest of
the simulator stays standard-library). It does what vLLM's Ray executor does, on a real Ray cluster
whose nodes each declare one logical GPU (``ray start --num-gpus=1``, no GPU needed):

1. ``ray.init(address=VLLM_SIM_RAY_ADDRESS or "auto")`` (the head container's running cluster);
2. warns when the cluster has fewer GPUs than ``world = TP x PP``; creates a placement group of
   ``world`` bundles ``{"GPU": 1}`` (the first pinned to the driver's node with ``node:<ip>``, as
   vLLM does), strategy PACK; waits for it with vLLM's log line and exponential backoff (10, 20,
   40 ... s) and fails with vLLM's ``ValueError`` after ``VLLM_SIM_PG_TIMEOUT_S`` (default 1800 =
   vLLM's ``PG_WAIT_TIMEOUT``), exit 1;
3. one worker actor per bundle (``num_cpus=0, num_gpus=1``), ranks sorted driver node first;
4. every engine step calls every worker (:meth:`RayWorkers.dispatch` before the step's sleep,
   :meth:`RayWorkers.collect` after it), and an idle engine pings them once a second, so a lost
   worker (``ray stop`` in its container, the container killed) kills the engine: vLLM's
   engine-death lines, then exit 1 (within 60 s: a stopped raylet is seen at once, a
   vanished node after Ray's health check, and a call unanswered for ``COLLECT_TIMEOUT_S``
   counts as lost).

Message texts are copied from vLLM (``vllm/v1/executor/ray_utils.py``: ``initialize_ray_cluster``,
``_wait_until_pg_ready``, ``_verify_bundles``; ``vllm/v1/executor/ray_executor.py``;
``vllm/v1/engine/core.py`` / ``async_llm.py`` / ``entrypoints/launcher.py`` for the death lines).
Lines vLLM logs only at DEBUG (the workers' placement) are printed at INFO in vLLM's format.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from .vlog import fatal, log

#: seconds a step's worker calls may stay unanswered before the workers count as lost (longer than
#: Ray takes to name a lost node dead with the simulated pair's health check, about 36 s)
COLLECT_TIMEOUT_S = 60.0
#: an idle engine pings its workers this often (seconds)
HEARTBEAT_S = 1.0
#: env var prefixes vLLM copies from the driver to its Ray workers (vllm/ray/ray_env.py)
ENV_PREFIXES = ["VLLM_", "NCCL_", "UCX_", "HF_", "HUGGING_FACE_", "LMCACHE_", "FLASH_ATTENTION_"]
WORKER_SPECIFIC_ENV_VARS = {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"}


def _worker_class():
    """The worker actor's class, defined inside a function so that Ray pickles it by value (the
    worker nodes need not import this package)."""

    class RayWorkerWrapper:
        """A simulated vLLM worker: holds one GPU bundle, answers every step."""

        def __init__(self, rpc_rank: int, gpu_state_file: str | None = None) -> None:
            import os as _os  # noqa: PLC0415 (runs on the worker)
            import tempfile  # noqa: PLC0415
            self.rank = rpc_rank
            self.steps = 0
            self.running = -1
            # this node's nvidia-smi stand-in reads the GPU state file (gpustate.py's format); the
            # driver's node has the engine's own, so its worker passes None and writes nothing
            self.state_file = gpu_state_file
            if gpu_state_file == "":
                self.state_file = (_os.environ.get("VLLM_SIM_GPU_STATE_FILE")
                                   or _os.path.join(tempfile.gettempdir(), "sparkbench-sim-gpu.json"))
            self.state = {"pid": _os.getpid(), "started": __import__("time").time(), "running": 0,
                          "requests_started": 0, "first_request": None, "updated": None}

        def get_node_and_ip(self):
            import os as _os  # noqa: PLC0415 (runs on the worker)

            import ray  # noqa: PLC0415
            return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), _os.getpid()

        def execute_model(self, step: int, running: int = 0) -> int:
            self.steps += 1
            if self.state_file and running != self.running:
                import json  # noqa: PLC0415
                import os as _os  # noqa: PLC0415
                import time as _t  # noqa: PLC0415
                if running > self.running > -1 or (running and self.state["first_request"] is None):
                    self.state["requests_started"] += 1
                    self.state["first_request"] = self.state["first_request"] or _t.time()
                self.running = running
                self.state.update(running=running, updated=_t.time())
                tmp = f"{self.state_file}.{_os.getpid()}.tmp"
                try:
                    with open(tmp, "w", encoding="utf-8") as f:
                        json.dump(self.state, f)
                    _os.replace(tmp, self.state_file)
                except OSError:
                    pass
            return step

        def ping(self) -> int:
            return self.rank

    RayWorkerWrapper.__qualname__ = "RayWorkerWrapper"  # what Ray's errors name (class_name: ...)
    return RayWorkerWrapper


class RayWorkers:
    """The placement group and worker actors of one ``vllm serve`` (cluster mode)."""

    def __init__(self, tp: int, pp: int, pg_timeout_s: float, gpus_per_node: int = 1) -> None:
        self.tp, self.pp, self.world = tp, pp, tp * pp
        self.pg_timeout_s = pg_timeout_s
        self.gpus_per_node = gpus_per_node
        self.ray = None
        self.pg = None
        self.workers: list = []
        self.placement: list[dict] = []
        self.heartbeat_s = HEARTBEAT_S
        self._dead = threading.Event()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ start-up
    def start(self) -> None:
        """Connect, place, create the workers; exits 1 with vLLM's lines when that fails."""
        try:
            import ray  # noqa: PLC0415 (cluster mode only)
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        except ImportError as e:
            # ray_utils.assert_ray_available
            fatal(f"ValueError: Failed to import Ray: {e}.Please install Ray with `pip install ray`.")
        self.ray = ray
        if self.world > self.gpus_per_node:
            log(f"Total GPU requirement (world_size={self.world}) exceeds locally visible GPUs ({self.gpus_per_node}). "
                "For multi-node Ray clusters, this may be expected if the total cluster has enough GPUs. "
                f"If running single-node, consider reducing tensor_parallel_size ({self.tp}) or "
                f"pipeline_parallel_size ({self.pp}).", level="WARNING", where="ray_utils.py:322")
        address = os.environ.get("VLLM_SIM_RAY_ADDRESS", "auto") or "auto"
        try:
            import logging  # noqa: PLC0415
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                     configure_logging=True, namespace="vllm")
        except (ConnectionError, RuntimeError, ValueError) as e:
            fatal(f"{type(e).__name__}: {e}")
        log("No current placement group found. Creating a new placement group.", where="ray_utils.py:366")
        in_cluster = ray.cluster_resources().get("GPU", 0)
        if self.world > in_cluster:
            log("The number of required GPUs exceeds the total number of available GPUs in the placement group.",
                level="WARNING", where="ray_utils.py:372")
        specs: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(self.world)]
        node_id = ray.get_runtime_context().get_node_id()
        current_ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
        try:
            from ray._private.state import available_resources_per_node  # noqa: PLC0415
            here = available_resources_per_node().get(node_id, {})
        except Exception:  # noqa: BLE001 (a private API; skip the check when it moved)
            here = {"GPU": 1}
        if here.get("GPU", 0) < 1:
            fatal(f"ValueError: Current node has no GPU available. current_node_resource={here!r}. vLLM engine "
                  f"cannot start without GPU. Make sure you have at least 1 GPU available in a node "
                  f"current_node_id={node_id!r} current_ip={current_ip!r}.")
        specs[0][f"node:{current_ip}"] = 0.001
        self.pg = placement_group(specs, strategy="PACK")
        self._wait_until_pg_ready(specs)
        self._verify_bundles()
        self._env_lines()
        cls = ray.remote(_worker_class())
        table = ray.util.placement_group_table(self.pg)["bundles_to_node_id"]
        self.workers = [
            cls.options(num_cpus=0, num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_capture_child_tasks=True,
                placement_group_bundle_index=i)).remote(rpc_rank=i,
                                                        gpu_state_file=None if table.get(i) == node_id else "")
            for i in range(self.world)]
        try:
            where = ray.get([w.get_node_and_ip.remote() for w in self.workers], timeout=120)
        except Exception as e:  # noqa: BLE001
            fatal(f"RuntimeError: Ray workers did not start: {type(e).__name__}: {e}")
        order = sorted(range(self.world), key=lambda i: (0 if where[i][1] == current_ip else 1, where[i][1]))
        self.workers = [self.workers[i] for i in order]
        where = [where[i] for i in order]
        self.placement = [{"rank": r, "node_id": nid, "node_ip": ip} for r, (nid, ip, _pid) in enumerate(where)]
        ips = {ip for _, ip, _ in where} | {current_ip}
        nodes = {nid for nid, _, _ in where}
        if len(nodes) != len(ips):
            # ray_executor.py _init_workers_ray
            fatal(f"RuntimeError: Every node should have a unique IP address. Got {len(nodes)} nodes with node ids "
                  f"{sorted(nodes)} and {len(ips)} unique IP addresses {ips}. Please check your network "
                  "configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is unique for each node.")
        for r, (nid, ip, pid) in enumerate(where):
            pp_rank, tp_rank = divmod(r, self.tp)
            log(f"RayWorkerWrapper rank={r} (PP{pp_rank} TP{tp_rank}, pid={pid}) placed on node {nid} ip {ip}",
                where="ray_executor.py:250")

    def _wait_until_pg_ready(self, specs: list[dict]) -> None:
        """ray_utils._wait_until_pg_ready, with the timeout from VLLM_SIM_PG_TIMEOUT_S."""
        ray = self.ray
        s = time.time()
        ready_ref = self.pg.ready()
        wait_interval = 10.0
        timeout = self.pg_timeout_s
        while time.time() - s < timeout:
            ready, _ = ray.wait([ready_ref], timeout=min(wait_interval, max(timeout - (time.time() - s), 0.01)))
            if ready:
                break
            wait_interval *= 2  # exponential backoff for the warning print
            log(f"Waiting for creating a placement group of specs for {int(time.time() - s)} seconds. specs={specs}. "
                "Check `ray status` and `ray list nodes` to see if you have enough resources, and make sure the IP "
                "addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each "
                "node if you are running on a multi-node.", where="ray_utils.py:254")
        try:
            ray.get(ready_ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            total = sum(spec.get("GPU", 0) for spec in specs)
            t_shown = int(timeout) if float(timeout).is_integer() else timeout
            if total > 1:
                fatal(f"ValueError: Cannot provide a placement group requiring {total} GPUs "
                      f"(placement_group_specs={specs}) within {t_shown} seconds.\n"
                      "Tensor parallel size may exceed available GPUs in your cluster. Check resources with "
                      "`ray status` and `ray list nodes`.\n"
                      "If running on K8s with limited GPUs, consider reducing --tensor-parallel-size to match "
                      "available GPU resources.")
            fatal(f"ValueError: Cannot provide a placement group of placement_group_specs={specs} within {t_shown} "
                  "seconds. See `ray status` and `ray list nodes` to make sure the cluster has enough resources.")

    def _verify_bundles(self) -> None:
        """ray_utils._verify_bundles: the TP-across-nodes warning; then the placement line."""
        from ray.util import placement_group_table  # noqa: PLC0415
        table = placement_group_table(self.pg)
        per_node: dict[str, int] = {}
        for _idx, nid in table["bundles_to_node_id"].items():
            per_node[nid] = per_node.get(nid, 0) + 1
        for nid, n in per_node.items():
            if n < self.tp:
                log(f"tensor_parallel_size={self.tp} is bigger than a reserved number of GPUs ({n} GPUs) in a node "
                    f"{nid}. Tensor parallel workers can be spread out to 2+ nodes which can degrade the performance "
                    "unless you have fast interconnect across nodes, like Infiniband. To resolve this issue, make "
                    f"sure you have more than {self.tp} GPUs available at each node.", level="WARNING",
                    where="ray_utils.py:205")
        log(f"Placement group {self.pg.id.hex()} is ready (strategy PACK, {self.world} bundles): "
            f"bundles_to_node_id={dict(table['bundles_to_node_id'])}", where="ray_utils.py:274")

    def _env_lines(self) -> None:
        """vllm/ray/ray_env.py get_env_vars_to_copy's two lines."""
        names = sorted(k for k in os.environ if k.startswith(tuple(ENV_PREFIXES)) and k not in WORKER_SPECIFIC_ENV_VARS)
        log(f"RAY_NON_CARRY_OVER_ENV_VARS from config: {set()}", where="ray_env.py:65")
        log(f"Env var prefixes to copy: {ENV_PREFIXES}", where="ray_env.py:67")
        log(f"Copying the following environment variables to workers: {names}", where="ray_env.py:72")

    # ------------------------------------------------------------------ serving
    def info(self) -> dict:
        """The ``cluster`` object of /sim/info."""
        return {"backend": "ray", "tensor_parallel_size": self.tp, "pipeline_parallel_size": self.pp,
                "placement_group_id": self.pg.id.hex() if self.pg is not None else None,
                "workers": list(self.placement)}

    def dispatch(self, step: int, running: int = 0):
        """Start this step on every worker (remote calls; ``running`` sequences, for the workers'
        GPU state); returns the handle :meth:`collect` awaits."""
        try:
            return [w.execute_model.remote(step, running) for w in self.workers]
        except Exception as e:  # noqa: BLE001
            self.die(e)

    def collect(self, refs) -> None:
        """Wait for every worker's answer to this step; a lost worker kills the engine."""
        try:
            self.ray.get(refs, timeout=COLLECT_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 (RayActorError, ActorDiedError, GetTimeoutError, ...)
            self.die(e)

    def heartbeat(self) -> None:
        """An idle engine's check that every worker still answers."""
        self.collect(self.dispatch(-1))

    def die(self, exc: BaseException) -> None:
        """vLLM's engine-death lines (EngineCore's fatal error with the Ray root cause, the API
        server's EngineDeadError, the launcher's termination), then exit 1."""
        with self._lock:
            if self._dead.is_set():
                return
            self._dead.set()
            name = f"{type(exc).__module__}.{type(exc).__name__}".replace("builtins.", "")
            text = str(exc).strip() or repr(exc)
            core = dict(level="ERROR", where="core.py:946", proc="EngineCore")
            log("EngineCore encountered a fatal error.", **core)
            log("Traceback (most recent call last):", **core)
            log('  File "/usr/local/lib/python3/dist-packages/vllm/v1/executor/ray_utils.py", line 152, in result',
                **core)
            log("    outputs = ray.get(self.ref_or_refs, timeout=timeout)", **core)
            lines = text.splitlines()
            log(f"{name}: {lines[0]}", **core)
            for line in lines[1:]:
                log(line, **core)
            api = dict(level="ERROR", where="async_llm.py:538")
            log("AsyncLLM output_handler failed.", **api)
            log("Traceback (most recent call last):", **api)
            log("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
                "for the root cause.", **api)
            log("AsyncLLMEngine has failed, terminating server process", level="CRITICAL", where="launcher.py:116")
            log("Shutting down FastAPI HTTP server.", where="launcher.py:101")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
