"""The simulator image: builds with scripts/build_sim_image.sh, `docker run` serves like vllm/vllm-openai.

These need a Docker engine. They skip (with the reason) only when none answers; CI has one.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import time
import urllib.request
import uuid

import pytest

from conftest import REPO_ROOT, docker_available, free_port

OK, WHY = docker_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)
pytestmark = [pytestmark, pytest.mark.sim]
IMAGE = "sparkbench/vllm-sim:latest"
N35 = "nvidia/Qwen3.6-35B-A3B-NVFP4"
DONE_WHEN = [N35, "--quantization", "modelopt", "--max-num-batched-tokens", "4096", "--speculative-config",
             '{"method":"mtp","num_speculative_tokens":3}', "--reasoning-parser", "qwen3"]


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


@pytest.fixture(scope="module")
def images():
    """Build (or confirm up to date) the default image set."""
    p = subprocess.run([str(REPO_ROOT / "scripts" / "build_sim_image.sh"), "0.25.0"], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def container():
    """Start containers with unique names; remove them all at teardown."""
    names: list[str] = []

    def start(*args: str, env: dict | None = None, port: int | None = None, image: str = IMAGE,
              volumes: list[str] | None = None) -> str:
        name = f"sparkbench-simtest-{uuid.uuid4().hex[:10]}"
        names.append(name)
        cmd = ["run", "-d", "--name", name, "-e", "VLLM_SIM_LOAD_SECONDS=0.3"]
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        for vol in volumes or []:
            cmd += ["-v", vol]
        if port:
            cmd += ["-p", f"127.0.0.1:{port}:8000"]
        docker(*cmd, image, *args)
        return name

    yield start
    for n in names:
        docker("rm", "-f", n, check=False)


def wait_health(port: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("container did not become healthy")


def test_build_is_idempotent_and_labelled(images):
    again = subprocess.run([str(REPO_ROOT / "scripts" / "build_sim_image.sh"), "0.25.0"], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "up to date" in again.stderr and "building" not in again.stderr
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", IMAGE).stdout)
    assert labels["org.sparkbench.sim.version"] == "0.25.0" and labels["org.sparkbench.sim.inputs"]
    cfg = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", "sparkbench/vllm-sim:v0.24.0").stdout)
    assert cfg["Entrypoint"] == ["vllm", "serve"] and "VLLM_SIM_VERSION=0.24.0" in cfg["Env"]


def test_done_when_command_serves(images, container):
    port = free_port()
    name = container(*DONE_WHEN, port=port, env={"VLLM_SIM_RATE": "500"})
    wait_health(port)
    assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/version").read()) == \
        {"version": "0.25.0", "simulated": True}
    body = json.dumps({"model": N35, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=30).read())
    assert out["usage"]["completion_tokens"] == 20
    logs = docker("logs", name).stdout
    assert "Starting vLLM server on http://0.0.0.0:8000" in logs       # listens on all interfaces in the container
    # SIGTERM handled as PID 1: a clean exit and vLLM's shutdown line (a SIGKILL after the grace
    # period would leave exit code 137 and no line).
    docker("stop", "-t", "60", name)
    assert docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    assert "Shutting down FastAPI HTTP server." in docker("logs", name).stdout


def test_done_when_with_2048_exits_with_the_mamba_assertion(images):
    args = [a if a != "4096" else "2048" for a in DONE_WHEN]
    p = docker("run", "--rm", IMAGE, *args, check=False, timeout=60)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == ("AssertionError: In Mamba cache align mode, block_size (2096) "
                                                 "must be <= max_num_batched_tokens (2048).")
    assert "Traceback" not in p.stderr


def test_version_bridge_image(images):
    p = docker("run", "--rm", "--entrypoint", "vllm", "sparkbench/vllm-sim:v0.24.0", "--version")
    assert p.stdout.strip() == "0.24.0"


def test_hf_download_stand_in_and_token_canary(images, tmp_path):
    cache = tmp_path / "hf"
    cache.mkdir()
    canary = "hf_canary_" + uuid.uuid4().hex
    gated = "google/gemma-3-4b-it"
    no_token = docker("run", "--rm", "--entrypoint", "hf", "-v", f"{cache}:/root/.cache/huggingface", IMAGE,
                      "download", gated, check=False)
    assert no_token.returncode == 1 and "GatedRepoError: 401" in no_token.stderr and "HF_TOKEN" in no_token.stderr
    prof = json.loads((REPO_ROOT / "sparkbench/data/profiles/models" / "google__gemma-3-4b-it.json").read_text())
    ok = docker("run", "--rm", "--entrypoint", "hf", "-e", f"HF_TOKEN={canary}", "-v",
                f"{cache}:/root/.cache/huggingface", IMAGE, "download", gated, "--revision", prof["revision"])
    assert canary not in ok.stdout + ok.stderr
    snap = cache / "hub" / "models--google--gemma-3-4b-it" / "snapshots" / prof["revision"]
    assert (snap / "config.json").is_file()
    assert (cache / "hub" / "models--google--gemma-3-4b-it" / "refs" / "main").read_text() == prof["revision"]
    assert (snap / ".sparkbench_token_sha256").read_text().strip() == hashlib.sha256(canary.encode()).hexdigest()
    docker("run", "--rm", "--entrypoint", "sh", "-v", f"{cache}:/c", IMAGE, "-c", "rm -rf /c/hub")


def test_nvidia_smi_stand_in(images):
    p = docker("run", "--rm", "--entrypoint", "nvidia-smi", "-e", "VLLM_SIM_DRIVER_VERSION=570.86.10", IMAGE,
               "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits")
    assert p.stdout.strip() == "NVIDIA GB10, 570.86.10, [N/A]"
    plain = docker("run", "--rm", "--entrypoint", "nvidia-smi", IMAGE)
    assert "SIMULATED" in plain.stdout.splitlines()[0]
