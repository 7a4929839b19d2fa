"""Secrets and exposure, end to end through scripts/sparkbench (ansible-runner, so its artifacts
exist): a gated model with a canary HF token from the environment, a server opted in to listen
on 0.0.0.0 with a canary API key. The canary token reaches the container (the download
stand-in's SHA-256 record), the server refuses requests without the key (401) and measure.py
uses it, and neither canary appears in any log, result, report, manifest, runner artifact,
container log or the captured output."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from reliability import INVENTORY, REPO, base_env, remove_containers

pytestmark = pytest.mark.ansible

HOST = "rel-b"
PORT = 18602
GEMMA = "google/gemma-3-4b-it"


def _inventory(tmp: Path) -> Path:
    """One inventory folder = the project inventory + the fixture fleet (scripts/sparkbench takes one -i)."""
    inv = tmp / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").symlink_to(REPO / "inventory" / "hosts.yml")
    (inv / "reliability.yml").symlink_to(INVENTORY / "hosts.yml")
    for d in (REPO / "inventory" / "group_vars").iterdir():
        (inv / "group_vars" / d.name).symlink_to(d)
    for f in (INVENTORY / "group_vars").iterdir():
        (inv / "group_vars" / f.name).symlink_to(f)
    return inv


class Watcher(threading.Thread):
    """While the server runs: status of /v1/models without and with the key, and its log."""

    def __init__(self, key: str) -> None:
        super().__init__(daemon=True)
        self.key = key
        self.stop = threading.Event()
        self.no_key: int | None = None
        self.with_key: int | None = None
        self.logs = ""

    def _status(self, headers: dict) -> int | None:
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/models", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def run(self) -> None:
        while not self.stop.is_set():
            with_key = self._status({"Authorization": f"Bearer {self.key}"})
            if with_key == 200:
                self.with_key, self.no_key = with_key, self._status({})
                break
            time.sleep(0.2)
        while not self.stop.is_set():  # keep the latest container log until the run ends
            out = subprocess.run(["docker", "logs", f"sparkbench-vllm-{HOST}"], capture_output=True, text=True)
            if out.returncode == 0:
                self.logs = out.stdout + out.stderr
            time.sleep(0.5)


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    token, key = "hf_canary" + secrets.token_hex(12), "sk-canary" + secrets.token_hex(12)
    results, hf = tmp / "results", tmp / "hf"
    hf.mkdir()
    runner_root = tmp / "runner"  # ansible-runner's private data dirs (SPARKBENCH_RUNNER_DIR)
    extra = json.dumps({"bench_extra_variants": [{"name": "gemma", "build": "nvidia", "config": "bare", "model": GEMMA,
                                                  "args": {"quantization": None, "max-num-batched-tokens": None}}],
                        "bench_select": ["gemma"], "vllm_server_host": "0.0.0.0"})
    watcher = Watcher(key)
    watcher.start()
    try:
        proc = subprocess.run([str(REPO / "scripts" / "sparkbench"), "bench", "-i", str(_inventory(tmp)), "-l", HOST,
                               "-e", extra, "--run-id", "relsecrets", "--results-dir", str(results), "--plain"],
                              cwd=REPO, capture_output=True, text=True, timeout=400,
                              env=base_env(results, hf, HF_TOKEN=token, SPARKBENCH_API_KEY=key,
                                           SPARKBENCH_RUNNER_DIR=str(runner_root)))
    finally:
        watcher.stop.set()
        watcher.join(timeout=5)
        subprocess.run(["docker", "rm", "-f", f"sparkbench-vllm-{HOST}"], capture_output=True, timeout=60)
    yield {"proc": proc, "token": token, "key": key, "tmp": tmp, "results": results / "relsecrets",
           "runner": sorted(runner_root.glob("relsecrets-*")), "watcher": watcher, "hf": hf}
    remove_containers([HOST])


def test_bench_completes_with_the_gated_model(secret_run) -> None:
    proc = secret_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads((secret_run["results"] / HOST / "gemma.json").read_text())
    assert doc["status"] == "complete" and doc["single"]["decode_tok_s_median"] > 0


def test_canary_token_reached_the_container(secret_run) -> None:
    records = list(secret_run["hf"].glob("hub/models--google--gemma-3-4b-it/snapshots/*/.sparkbench_token_sha256"))
    assert records, "the download stand-in saw no token"
    assert records[0].read_text().strip() == hashlib.sha256(secret_run["token"].encode()).hexdigest()


def test_wide_listening_requires_the_api_key_and_measure_uses_it(secret_run) -> None:
    w = secret_run["watcher"]
    assert w.with_key == 200 and w.no_key == 401
    doc = json.loads((secret_run["results"] / HOST / "gemma.json").read_text())
    assert "--host 0.0.0.0" in doc["launch_command"]
    assert doc["settings"].get("api_key_set") is True


def test_canaries_appear_nowhere(secret_run) -> None:
    canaries = [secret_run["token"].encode(), secret_run["key"].encode()]
    files = [p for p in secret_run["results"].rglob("*") if p.is_file()]
    for d in secret_run["runner"]:
        files += [p for p in d.rglob("*") if p.is_file()]
    files += [p for p in Path(f"/tmp/sparkbench-{HOST}").rglob("*") if p.is_file()]
    assert secret_run["runner"] and any(p.name == "stdout" for p in files), "no ansible-runner artifacts found"
    leaks = [str(p) for p in files if any(c in p.read_bytes() for c in canaries)]
    assert leaks == []
    proc = secret_run["proc"]
    texts = {"stdout": proc.stdout, "stderr": proc.stderr, "container log": secret_run["watcher"].logs}
    assert secret_run["watcher"].logs, "container log not captured"
    for where, text in texts.items():
        for c in canaries:
            assert c.decode() not in text, f"canary in {where}"
    assert os.environ.get("HF_TOKEN", "") != secret_run["token"]
