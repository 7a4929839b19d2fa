"""Fault modes for tests (VLLM_SIM_FAULT_*): crash or stall after N generated tokens, HTTP 500s."""
from __future__ import annotations

import os
import random
import signal
import threading
import time

from .vlog import log


class Faults:
    """Decides when the simulated server misbehaves; all decisions are seeded and logged."""

    def __init__(self, knobs) -> None:
        self.knobs = knobs
        self.rng = random.Random(knobs.seed * 7919 + 1)
        self.lock = threading.Lock()
        self.stalled = False

    def http500(self) -> bool:
        """True when this request should get an HTTP 500 (fraction VLLM_SIM_FAULT_HTTP500_FRACTION)."""
        if self.knobs.http500_fraction <= 0:
            return False
        with self.lock:
            return self.rng.random() < self.knobs.http500_fraction

    def after_tokens(self, total_generated: int) -> None:
        """Called by the engine after each step with the process-wide generated-token count.

        Crash: the process dies abruptly (SIGKILL to itself, like an OOM kill or a GPU fault; exit
        status 137 where it runs as a container's PID 1),
        0.2 s after the step so the tokens already produced reach the clients.
        Stall: the engine stops stepping for good; connections stay open, no more tokens.
        """
        k = self.knobs
        if k.crash_after_tokens is not None and total_generated >= k.crash_after_tokens:
            log(f"Engine core proc EngineCore_DP0 died unexpectedly (simulated fault after "
                f"{total_generated} tokens).", level="ERROR", where="core_client.py:564")
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
            # As PID 1 of a container the kernel ignores a SIGKILL sent from inside its own PID
            # namespace, so the line above is a no-op there: leave at once with the status a
            # SIGKILL gives (128 + 9), no cleanup, like the real crash.
            os._exit(137)
        if k.stall_after_tokens is not None and total_generated >= k.stall_after_tokens and not self.stalled:
            self.stalled = True
            log(f"Engine stalled (simulated fault after {total_generated} tokens).", level="WARNING",
                where="core.py:1")
