"""What the simulated GPU is doing, shared between the engine and the image's stand-ins.

The engine (one per container) writes a small JSON file whenever the number of running
sequences changes; ``nvidia-smi`` and ``dmesg`` (the stand-ins, run with ``docker exec`` in the
same container) read it. File: ``VLLM_SIM_GPU_STATE_FILE``, default
``/tmp/sparkbench-sim-gpu.json`` (the container's own ``/tmp``; ``/dev/shm`` is the host's under
``--ipc host``, so every container would share one file). Fields: ``pid`` (the
server process), ``started`` (epoch seconds the server started), ``running`` (sequences in the
engine now), ``requests_started`` (requests scheduled so far), ``first_request`` (epoch seconds of
the first one, or null), ``updated``. A missing file, or one whose ``pid`` is gone, reads idle.
"""
from __future__ import annotations

import json
import os
import threading
import time


class GpuState:
    """Writer side (the engine): atomic rewrite (temporary file + rename) on every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.state = {"pid": os.getpid(), "started": time.time(), "running": 0, "requests_started": 0,
                      "first_request": None, "updated": time.time()}
        self._write()

    def _write(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.state, f)
            os.replace(tmp, self.path)
        except OSError:  # an unwritable directory must not stop the server: the stand-ins then read idle
            pass

    def update(self, running: int, new_requests: int = 0) -> None:
        with self.lock:
            if running == self.state["running"] and not new_requests:
                return
            self.state["running"] = running
            if new_requests:
                self.state["requests_started"] += new_requests
                if self.state["first_request"] is None:
                    self.state["first_request"] = time.time()
            self.state["updated"] = time.time()
            self._write()


def read(path: str) -> dict:
    """Reader side (the stand-ins): the state, or an idle one when there is no live server."""
    idle = {"pid": None, "started": None, "running": 0, "requests_started": 0, "first_request": None}
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return idle
    pid = state.get("pid")
    try:
        if not isinstance(pid, int):
            return idle
        os.kill(pid, 0)
    except ProcessLookupError:
        return {**idle, "requests_started": state.get("requests_started", 0),
                "first_request": state.get("first_request"), "started": state.get("started")}
    except PermissionError:
        pass
    return state
