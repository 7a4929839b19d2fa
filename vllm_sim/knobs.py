"""The simulator's knobs: environment variables prefixed ``VLLM_SIM_`` (table in README.md)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


class KnobError(ValueError):
    """A VLLM_SIM_* variable has a value the simulator cannot use."""


def _float(env: dict, name: str, default: float, lo: float | None = None) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r} is not a number; set it to e.g. {default}") from None
    if lo is not None and val < lo:
        raise KnobError(f"{name}={raw!r} must be >= {lo}")
    return val


def _int(env: dict, name: str, default: int | None) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r} is not an integer") from None


def _ids(env: dict, name: str) -> frozenset[str]:
    raw = env.get(name, "").strip()
    if not raw:
        return frozenset()
    return frozenset(x.strip() for x in raw.split(",") if x.strip())


def default_gpu_state_file() -> str:
    """Where the engine tells the nvidia-smi and dmesg stand-ins what runs (one simulator per
    container): ``<tempdir>/sparkbench-sim-gpu.json`` (``/tmp`` in the image: the container's own
    filesystem; not ``/dev/shm``, which sparkbench's launch shares with the host, ``--ipc host``)."""
    import tempfile
    return os.path.join(tempfile.gettempdir(), "sparkbench-sim-gpu.json")


@dataclass(frozen=True)
class Knobs:
    """All VLLM_SIM_* settings, read once at start.

    Units: seconds for times, tokens/s for rates, GB/s for bandwidth, fractions for jitter and
    efficiency multipliers.
    """

    version: str = "0.25.0"
    flavor: str = "official"
    load_seconds: float = 3.0
    rate: float | None = None
    speedup: float = 1.0
    jitter: float = 0.01
    request_noise: float = 0.0
    seed: int = 0
    efficiency: float = 1.0
    bandwidth_gbps: float | None = None
    hardware: str = "dgx-spark"
    driver_version: str | None = None
    log_interval: float = 10.0
    profiles_dir: str | None = None
    short_thinking: bool = False
    thinking_scale: float = 1.0
    wrong: frozenset[str] = field(default_factory=frozenset)
    overthink: frozenset[str] = field(default_factory=frozenset)
    crash_at_start: bool = False
    crash_after_tokens: int | None = None
    stall_after_tokens: int | None = None
    http500_fraction: float = 0.0
    slow_load_seconds: float = 0.0
    slow_health_seconds: float = 0.0
    clock_cap_mhz: float | None = None
    fault_xid: int | None = None
    gpu_state_file: str = ""
    pg_timeout_s: float = 1800.0
    gpus_per_node: int | None = None
    unit_dir: str | None = None
    unit_memory_gb: float | None = None
    unit_lease_s: float = 3.0

    @classmethod
    def from_env(cls, env: dict | None = None) -> "Knobs":
        """Read the knobs from ``env`` (default ``os.environ``); raise KnobError on a bad value."""
        env = dict(os.environ if env is None else env)
        rate = _float(env, "VLLM_SIM_RATE", 0.0, 0.0) or None
        bw = _float(env, "VLLM_SIM_BANDWIDTH_GBPS", 0.0, 0.0) or None
        frac = _float(env, "VLLM_SIM_FAULT_HTTP500_FRACTION", 0.0, 0.0)
        if frac > 1.0:
            raise KnobError("VLLM_SIM_FAULT_HTTP500_FRACTION must be between 0 and 1")
        flavor = env.get("VLLM_SIM_FLAVOR", "official").strip().lower() or "official"
        if flavor not in ("official", "community"):
            raise KnobError(f"VLLM_SIM_FLAVOR={flavor!r}: use 'official' or 'community'")
        version = env.get("VLLM_SIM_VERSION", "0.25.0").strip() or "0.25.0"
        parts = version.split(".")
        if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
            raise KnobError(f"VLLM_SIM_VERSION={version!r}: use a version like 0.25.0")
        return cls(
            version=version,
            flavor=flavor,
            load_seconds=_float(env, "VLLM_SIM_LOAD_SECONDS", 3.0, 0.0),
            rate=rate,
            speedup=_float(env, "VLLM_SIM_SPEEDUP", 1.0, 0.001),
            jitter=_float(env, "VLLM_SIM_JITTER", 0.01, 0.0),
            request_noise=_float(env, "VLLM_SIM_REQUEST_NOISE", 0.0, 0.0),
            seed=_int(env, "VLLM_SIM_SEED", 0) or 0,
            efficiency=_float(env, "VLLM_SIM_EFFICIENCY", 1.0, 0.01),
            bandwidth_gbps=bw,
            hardware=env.get("VLLM_SIM_HARDWARE", "dgx-spark") or "dgx-spark",
            driver_version=env.get("VLLM_SIM_DRIVER_VERSION") or None,
            log_interval=_float(env, "VLLM_SIM_LOG_INTERVAL", 10.0, 0.05),
            profiles_dir=env.get("VLLM_SIM_PROFILES_DIR") or None,
            short_thinking=env.get("VLLM_SIM_SHORT_THINKING", "0").strip().lower() in ("1", "true", "yes", "on"),
            thinking_scale=_float(env, "VLLM_SIM_THINKING_SCALE", 1.0, 0.0),
            wrong=_ids(env, "VLLM_SIM_WRONG"),
            overthink=_ids(env, "VLLM_SIM_OVERTHINK"),
            crash_at_start=env.get("VLLM_SIM_FAULT_CRASH_AT_START", "0").strip().lower() in ("1", "true", "yes", "on"),
            crash_after_tokens=_int(env, "VLLM_SIM_FAULT_CRASH_AFTER_TOKENS", None),
            stall_after_tokens=_int(env, "VLLM_SIM_FAULT_STALL_AFTER_TOKENS", None),
            http500_fraction=frac,
            slow_load_seconds=_float(env, "VLLM_SIM_FAULT_SLOW_LOAD_SECONDS", 0.0, 0.0),
            slow_health_seconds=_float(env, "VLLM_SIM_FAULT_SLOW_HEALTH_SECONDS", 0.0, 0.0),
            clock_cap_mhz=_float(env, "VLLM_SIM_CLOCK_CAP_MHZ", 0.0, 0.0) or None,
            fault_xid=_int(env, "VLLM_SIM_FAULT_XID", None),
            gpu_state_file=env.get("VLLM_SIM_GPU_STATE_FILE") or default_gpu_state_file(),
            # cluster mode: vLLM's PG_WAIT_TIMEOUT (vllm/v1/executor/ray_utils.py) is 1800 s
            pg_timeout_s=_float(env, "VLLM_SIM_PG_TIMEOUT_S", 1800.0, 0.1),
            # GPUs this node has (default: the hardware profile's gpus_per_node, 1 on a Spark)
            gpus_per_node=_int(env, "VLLM_SIM_GPUS_PER_NODE", None),
            # the simulated unit's shared memory account and bus (unit_account.py, unit_traffic.py)
            unit_dir=env.get("VLLM_SIM_UNIT_DIR") or None,
            unit_memory_gb=_float(env, "VLLM_SIM_UNIT_MEMORY_GB", 0.0, 0.0) or None,
            unit_lease_s=_float(env, "VLLM_SIM_UNIT_LEASE_S", 3.0, 0.1),
        )

    @property
    def version_tuple(self) -> tuple[int, int]:
        """(major, minor) of the emulated vLLM version."""
        a, b = self.version.split(".")[:2]
        return int(a), int(b)

    def as_dict(self) -> dict:
        """JSON-friendly view (for /sim/info)."""
        out = {}
        for k, v in self.__dict__.items():
            out[k] = sorted(v) if isinstance(v, frozenset) else v
        return out
