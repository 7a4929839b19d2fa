"""The reliability suite's runs (imported by tests/test_reliability_*.py): run bench.yml on the
reliability fixture fleet with real ansible-playbook and a real Docker engine, read its per-host
messages, list the containers it created, and clean up.

The fixture inventory (tests/fixtures/reliability/inventory/) is added to the project inventory,
so the project's matrix and sim_sparks settings apply; results and the model cache go to the
test's tmp_path (SPARKBENCH_TEST_RESULTS / SPARKBENCH_TEST_HF_CACHE).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import REPO, ansible_env, playbook_cmd

FIXTURES = REPO / "tests" / "fixtures" / "reliability"
INVENTORY = FIXTURES / "inventory"
CONTAINER_PREFIXES = ("sparkbench-vllm-", "sparkbench-probe-", "sparkbench-download-")


@dataclass
class PlaybookRun:
    """One ansible-playbook run: exit status, combined output, the containers it created."""

    rc: int
    output: str
    created: list[str]
    results: Path
    run_id: str

    def fatal(self, host: str) -> str:
        """Every failure block of the output for ``host`` (``fatal: [host]: FAILED! =>``, a loop's
        ``failed: [host] (item=...) =>``, ``UNREACHABLE!``), joined into one string."""
        blocks = re.findall(r"^(?:fatal|failed): \[" + re.escape(host) + r"(?: -> \S+)?\]"
                            r"(?:: (?:FAILED|UNREACHABLE)!| \(item=[^\n]*\)) =>.*?(?=^\S|\Z)",
                            self.output, flags=re.M | re.S)
        # YAML output doubles single quotes inside quoted strings: undo that for matching.
        return " ".join(" ".join(b.split()) for b in blocks).replace("''", "'")

    def result(self, host: str, variant: str) -> dict:
        """The result file results/<run>/<host>/<variant>.json."""
        return json.loads((self.results / self.run_id / host / f"{variant}.json").read_text(encoding="utf-8"))

    def created_for(self, host: str) -> list[str]:
        """Containers created during the run for ``host`` (any sparkbench container kind)."""
        return [n for n in self.created if n.endswith("-" + host)]


class ContainerCreations:
    """Names of the containers created while the ``with`` block runs, read from a ``docker events``
    stream opened before it (the engine keeps only its last 256 events, so a query afterwards
    misses the early ones when other tests create containers beside a long run).
    A container created and removed again inside the block is still seen."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "ContainerCreations":
        since = time.time() - 1
        self._proc = subprocess.Popen(["docker", "events", "--since", f"{since:.3f}", "--filter", "type=container",
                                       "--filter", "event=create", "--format", "{{.Actor.Attributes.name}}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            if line.strip():
                self.names.append(line.strip())

    def __exit__(self, *exc) -> None:
        time.sleep(1.0)  # the engine's last events reach the stream
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._reader.join(timeout=10)


def remove_containers(hosts: list[str]) -> None:
    """Test teardown: force-remove every sparkbench container of these hosts and their work
    directories (/tmp/sparkbench-<host>, llm_bench_remote_dir of the local simulated hosts)."""
    names = [p + h for h in hosts for p in CONTAINER_PREFIXES]
    subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=60)
    for h in hosts:
        shutil.rmtree(f"/tmp/sparkbench-{h}", ignore_errors=True)


def base_env(results: Path, hf_cache: Path, **extra: str) -> dict[str, str]:
    """The environment of a test run (``helpers.ansible_env``) with the fixture paths."""
    return ansible_env(SPARKBENCH_TEST_RESULTS=str(results), SPARKBENCH_TEST_HF_CACHE=str(hf_cache), **extra)


def bench_cmd(limit: str, run_id: str, *extra_args: str) -> list[str]:
    """ansible-playbook bench.yml on the project + fixture inventories."""
    return playbook_cmd(REPO / "bench.yml", "-e", f"bench_run_id={run_id}", *extra_args,
                        inventories=[REPO / "inventory", INVENTORY], limit=limit)


def run_playbook(tmp: Path, limit: str, run_id: str, *extra_args: str, env_extra: dict | None = None,
                 timeout: float = 1200) -> PlaybookRun:
    """Run bench.yml to the end and collect what the tests assert on."""
    results, hf = tmp / "results", tmp / "hf"
    results.mkdir(exist_ok=True)
    hf.mkdir(exist_ok=True)
    with ContainerCreations() as created:
        proc = subprocess.run(bench_cmd(limit, run_id, *extra_args), cwd=REPO, capture_output=True, text=True,
                              env=base_env(results, hf, **(env_extra or {})), timeout=timeout)
    return PlaybookRun(rc=proc.returncode, output=proc.stdout + proc.stderr,
                       created=created.names, results=results, run_id=run_id)
