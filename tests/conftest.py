"""Shared pytest fixtures: ``REPO_ROOT``, ``sim_factory`` (the simulator as a real process), the
session's real vLLM (``real_vllm``), and the test layers. The suite's real parts, each started once
per run, and which tests read each: tests/shared_runs.py (its docstring is the map). ``make test``
fails a test that skips or xfails (``SPARKBENCH_SKIP_IS_FAILURE``).

Every test carries one layer marker (registered in pyproject.toml; a test without one is a
collection error): ``unit`` (no subprocess, server or Docker: a unit test that starts a process or
opens a connection fails), ``sim`` (the simulator, as a process or its image), ``ansible``
(ansible-playbook, ansible-runner or Molecule), ``real`` (real vLLM, the CPU image), ``ssh``
(units reached over SSH). ``pytest -m unit`` runs the fast layer alone.

Usage::

    def test_x(sim_factory):
        sim = sim_factory(model="nvidia/Qwen3.6-35B-A3B-NVFP4",
                          args=["--reasoning-parser", "qwen3"],
                          env={"VLLM_SIM_RATE": "400"})
        requests.get(sim.base_url + "/health")

Every simulator started through the factory is stopped at teardown (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("unit", "sim", "ansible", "real", "ssh")
SIM_DIR = REPO_ROOT / "scripts" / "vllm_sim"
DEFAULT_MODEL = "nvidia/Qwen3.6-35B-A3B-NVFP4"
# Fast defaults for tests: short simulated load, no jitter unless a test asks for it.
TEST_ENV_DEFAULTS = {"VLLM_SIM_LOAD_SECONDS": "0.3", "VLLM_SIM_JITTER": "0"}


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bind to port 0 and read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in(lo: int, hi: int) -> int:
    """A free TCP port on 127.0.0.1 in [lo, hi) (a test file's own range, so files that run
    servers at the same time never collide), starting at a per-process offset; skips the test
    when the whole range is taken."""
    span = hi - lo
    start = os.getpid() % span
    for i in range(span):
        port = lo + (start + i) % span
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip(f"no free port in {lo}-{hi - 1}")


def run_measure(args: list[str], out: Path, timeout: float = 60) -> tuple[int, dict | None, str]:
    """Run scripts/measure.py with ``args`` and ``--out out`` (no API key from the environment);
    returns (exit status, the document — validated against schema/result.schema.json — or None
    when none was written, stderr). A traceback on stderr fails the test."""
    import json

    import jsonschema

    env = {k: v for k, v in os.environ.items() if k != "SPARKBENCH_API_KEY"}
    p = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "measure.py"), *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=timeout, env=env)
    doc = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    if doc is not None:
        schema = json.loads((REPO_ROOT / "schema" / "result.schema.json").read_text(encoding="utf-8"))
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
        assert not errors, "schema: " + "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, doc, p.stderr


def docker_available() -> tuple[bool, str]:
    """(True, "") when a Docker engine answers; else (False, why)."""
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"docker CLI not usable: {e}"
    if out.returncode != 0:
        return False, "no Docker engine answers (run scripts/setup_docker_engine.sh): " + out.stderr.strip()[:200]
    return True, ""


def image_present(image: str) -> bool:
    """True when the Docker engine answers and has ``image`` (tests skip with a reason otherwise)."""
    try:
        return subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def health_ok(base_url: str, timeout: float = 2.0) -> bool:
    """True when GET <base_url>/health answers 200 (False while the server is not up yet)."""
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


@dataclass
class Sim:
    """A running simulator process."""

    base_url: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    model: str

    def log(self) -> str:
        """stdout + stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 5.0) -> int | None:
        """Terminate the process (SIGTERM, then SIGKILL); returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        return self.proc.returncode


def start_sim(tmp_dir: Path, model: str = DEFAULT_MODEL, args: list[str] | None = None,
              env: dict[str, str] | None = None, wait: bool = True, timeout: float = 30.0,
              port: int | None = None) -> Sim:
    """Start ``python3 scripts/vllm_sim serve MODEL --host 127.0.0.1 --port P [args]``.

    With ``wait`` (default), blocks until ``/health`` answers 200, raising RuntimeError with the
    log if the process exits or ``timeout`` seconds pass.
    """
    port = port or free_port()
    log_path = Path(tmp_dir) / f"vllm_sim_{port}.log"
    full_env = {**os.environ, **TEST_ENV_DEFAULTS, **(env or {})}
    full_env["PYTHONUNBUFFERED"] = "1"
    cmd = [sys.executable, str(SIM_DIR), "serve", model, "--host", "127.0.0.1", "--port", str(port), *(args or [])]
    logf = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=full_env, cwd=str(REPO_ROOT))
    logf.close()
    sim = Sim(base_url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log_path, model=model)
    if wait:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"simulator exited with status {proc.returncode} before /health answered:\n{sim.log()}")
            if health_ok(sim.base_url, timeout=2):
                break
            if time.monotonic() > deadline:
                sim.stop()
                raise RuntimeError(f"simulator did not answer /health within {timeout} s:\n{sim.log()}")
            time.sleep(0.05)
    return sim


@pytest.fixture
def sim_factory(tmp_path):
    """Factory fixture: ``sim_factory(model=..., args=[...], env={...}, wait=True, timeout=30)``.

    Returns a :class:`Sim` (``.base_url``, ``.port``, ``.proc``, ``.log_path``, ``.stop()``);
    all simulators it started are stopped at teardown.
    """
    started: list[Sim] = []

    def factory(model: str = DEFAULT_MODEL, args: list[str] | None = None, env: dict[str, str] | None = None,
                wait: bool = True, timeout: float = 30.0, port: int | None = None) -> Sim:
        sim = start_sim(tmp_path, model=model, args=args, env=env, wait=wait, timeout=timeout, port=port)
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


# --------------------------------------------------------------------------- real vLLM (CPU)
REAL_VLLM_IMAGE = "sparkbench/vllm-cpu:latest"
REAL_VLLM_MODEL = "sparkbench/tiny-llama"
REAL_VLLM_MAX_MODEL_LEN = 2048
# A wait, not a speed check: a start on a loaded 2-core machine can take several minutes.
REAL_VLLM_READY_TIMEOUT_S = float(os.environ.get("SPARKBENCH_VLLM_CPU_READY_TIMEOUT", "900"))


@dataclass
class RealVllm:
    """A running real-vLLM container (``sparkbench/vllm-cpu``)."""

    name: str
    port: int
    base_url: str
    ready_s: float
    caches: Path | None = None

    def logs(self, lines: int = 400) -> str:
        out = subprocess.run(["docker", "logs", "--tail", str(lines), self.name], capture_output=True, text=True,
                             timeout=60)
        return out.stdout + out.stderr


def real_vllm_skip_reason() -> str | None:
    """Why real vLLM cannot run here (no Docker engine, no image), or None."""
    ok, why = docker_available()
    if not ok:
        return why
    if subprocess.run(["docker", "image", "inspect", REAL_VLLM_IMAGE], capture_output=True, timeout=30).returncode:
        return f"image {REAL_VLLM_IMAGE} is missing; build it with `make setup` (scripts/build_vllm_cpu_image.sh)"
    return None


def real_vllm_argv(name: str, port: int, caches: Path) -> list[str]:
    """``docker run -d`` of the session's real vLLM: the plain command a user would type
    (``docker run -p 127.0.0.1:P:8000 sparkbench/vllm-cpu:latest sparkbench/tiny-llama
    --max-model-len 2048``: no other flag or variable) with the unit's cache folders under
    ``caches`` mounted where bench.yml mounts them (``sparkbench.launch.UNIT_CACHES``), so that
    its first start fills a compile cache a relaunch can read (tests/test_compile_cache.py)."""
    from sparkbench import launch

    mounts = [a for c in launch.UNIT_CACHES for a in ("-v", f"{caches / c.key}:{c.container}")]
    return ["docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", *mounts, REAL_VLLM_IMAGE,
            REAL_VLLM_MODEL, "--max-model-len", str(REAL_VLLM_MAX_MODEL_LEN)]


@pytest.fixture(scope="session")
def real_vllm(tmp_path_factory):
    """Real vLLM 0.32 started ONCE per session with the plain command a user would type and the
    unit's cache folders mounted (``real_vllm_argv``), shared by the image, conformance and
    compile-cache tests (its start takes 1-3 minutes on 2 cores; idle it uses about 1 % of a
    core). Removed at the end; ``.caches`` is the folder its cache mounts live in."""
    why = real_vllm_skip_reason()
    if why:
        pytest.skip(why)
    from sparkbench import launch

    name, port = f"sparkbench-test-realvllm-{os.getpid()}", free_port()
    caches = tmp_path_factory.mktemp("real-vllm-caches")
    for c in launch.UNIT_CACHES:
        (caches / c.key).mkdir()
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    t0 = time.monotonic()
    run = subprocess.run(real_vllm_argv(name, port, caches), capture_output=True, text=True, timeout=120)
    server = RealVllm(name, port, f"http://127.0.0.1:{port}", 0.0, caches)
    try:
        if run.returncode != 0:
            pytest.fail(f"docker run failed: {run.stderr.strip()}")
        while True:
            if health_ok(server.base_url, timeout=3):
                break
            state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", name],
                                   capture_output=True, text=True, timeout=30).stdout.strip()
            if not state.startswith("true"):
                pytest.fail(f"real vLLM exited before /health answered ({state}):\n{server.logs(60)}")
            if time.monotonic() - t0 > REAL_VLLM_READY_TIMEOUT_S:
                pytest.fail(f"real vLLM: /health did not answer within {REAL_VLLM_READY_TIMEOUT_S:.0f} s:\n"
                            f"{server.logs(60)}")
            time.sleep(1.0)
        server.ready_s = time.monotonic() - t0
        yield server
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


# The session's other shared real parts (the map of which run feeds which tests: its docstring).
from shared_runs import real_residents  # noqa: E402,F401

#: Test files that share one server run in one pytest-xdist group (one worker): a session fixture
#: is set up once per worker, so every file that reads it is in its group. Two real-vLLM lanes, each
#: starting its servers one after the other: the session's real vLLM (the ``real_vllm`` fixture,
#: the plain command) with the files that read it and the e2e bench.yml run; and serve.yml's real
#: residents (tests/shared_runs.py ``real_residents``) with the files that read them.
SHARED_GROUPS = {
    "test_vllm_cpu_image": "real_vllm",
    "test_sim_conformance": "real_vllm",
    "test_real_vllm_e2e": "real_vllm",
    "test_compile_cache": "real_vllm",
    "test_tpot_truth": "real_vllm",
    "test_serve_real": "real_residents",
    "test_real_vllm_serving": "real_residents",
}
#: Groups handed to the workers first, longest first (serial minutes measured on 2 cores; make test passes
#: --no-loadscope-reorder so that pytest-xdist keeps this order), so that no
#: long group is the last to start; every other file follows in collection order.
LONG_FIRST = (
    "real_vllm",                # the session's server (image, conformance, TPOT truth), its relaunch
                                # over the compile cache, bench.yml's real run (4-5 min)
    "real_residents",           # serve.yml's residents, canary, refused candidate; serving phases (3-4 min)
    "test_ssh_units",           # the README walk-through over SSH (4-6 min)
    "test_sim_pair_playbook",   # two simulated Sparks over Ray (3-5 min)
    "test_playbook_failures",
    "test_reliability_faults",
    "test_playbook_bench",
    "test_serve_sim",           # serve.yml on a simulated unit (4-5 min)
    "test_unit_paths",
    "test_playbook_serving",
    "test_runner_sim",
    "test_reliability_secrets",
    "test_serve_ssh",
)


def xdist_group(item) -> str:
    """The pytest-xdist group of a test: its file's shared group, else its file (a file's module
    fixtures are set up once, on one worker)."""
    module = Path(str(item.fspath)).stem
    return SHARED_GROUPS.get(module, module)


def pytest_itemcollected(item) -> None:
    """Every test gets its pytest-xdist group (``--dist loadgroup``: make test) as it is collected,
    before pytest-xdist reads the groups."""
    if item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))


def pytest_collection_modifyitems(config, items) -> None:
    """Every test has a layer marker (docs/ARCHITECTURE.md, "Tests"); the long groups go first."""
    missing = [item.nodeid for item in items if not any(item.get_closest_marker(m) for m in LAYERS)]
    if missing:
        raise pytest.UsageError(f"{len(missing)} test(s) without a layer marker ({', '.join(LAYERS)}); mark the "
                                "module (pytestmark = pytest.mark.unit) or the test: " + ", ".join(missing[:10]))
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(xdist_group(item), len(rank)))


#: Lines tests hand to the suite's closing summary (``record_property("summary_line", ...)``): the
#: TPOT truth check's two figures. Collected from every worker's reports on the controller.
_SUMMARY_LINES: list[str] = []


def pytest_runtest_logreport(report) -> None:
    if report.when == "call":
        _SUMMARY_LINES.extend(v for k, v in report.user_properties if k == "summary_line")


def pytest_terminal_summary(terminalreporter) -> None:
    for line in _SUMMARY_LINES:
        terminalreporter.write_line(line)


#: ``make test`` sets it: a test that skips or xfails there fails instead, with its reason (a check
#: that skips is a check that did not run; the fix is the machine's, named in the reason).
SKIP_IS_FAILURE = os.environ.get("SPARKBENCH_SKIP_IS_FAILURE") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if SKIP_IS_FAILURE and (report.skipped or hasattr(report, "wasxfail")):
        why = getattr(report, "wasxfail", "") or (report.longrepr[2] if isinstance(report.longrepr, tuple)
                                                   else str(report.longrepr))
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} would have been skipped in make test ({why}); a check that skips did "
                           "not run: fix what the reason names (make setup builds every image and tool)")


def _warm_font_cache() -> None:
    """matplotlib lists the system's fonts with fc-list once per machine: before any unit test runs."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


_warm_font_cache()


#: Programs libraries run to look something up (ctypes.util.find_library, matplotlib's font list):
#: not a process a test starts.
LIBRARY_PROBES = ("ldconfig", "fc-list")


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request, monkeypatch):
    """A ``unit`` test that starts a process or connects a socket fails, naming what it did (even
    when the code under test caught the error)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    seen: list[str] = []
    popen_init = subprocess.Popen.__init__

    def no_process(self, args, *a, **k):
        argv0 = args if isinstance(args, str) else str(list(args)[0]) if args else ""
        if os.path.basename(argv0.split()[0] if argv0 else "") in LIBRARY_PROBES:
            return popen_init(self, args, *a, **k)
        seen.append(f"started a process ({args!r})")
        raise OSError(f"a unit test started a process ({args!r}): mark it sim, ansible or real")

    def no_connection(self, address):
        seen.append(f"connected to {address!r}")
        raise OSError(f"a unit test connected to {address!r}: mark it sim, ansible or real")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(socket.socket, "connect", no_connection)
    yield
    if seen:
        pytest.fail(f"a unit test {seen[0]}: mark it sim, ansible or real", pytrace=False)
