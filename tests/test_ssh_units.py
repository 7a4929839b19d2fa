"""The path a Spark owner's first run takes, on every `make test`: SSH, a non-root user, become.

Emulated units (tests/ssh_units.py): an sshd of the tests' own on 127.0.0.1, one Linux user per
unit with key-only login, sudo and the docker group, the simulator image standing in for vLLM,
the unit's own /usr/bin/python3 (Debian's, outside any virtualenv) running Ansible's modules and
measure. The README's first-run walk-through ("On a real Spark", between the first-run markers)
is what ``walk`` runs, line by line, with the example hosts spark01/spark02 mapped to the units
and the tests' inventory, results folder and short settings added to each command.

Also here: what a unit that lacks something gets told (no ``requests`` in its Python, the user
not in the docker group, a sudo that asks a password, an unknown host key).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import image_present
from helpers import REPO, ansible_env
from ssh_units import SshUnits, Unit, skip_reason, worker_index

IMAGE = "sparkbench/vllm-sim:latest"
BIN = Path(sys.executable).parent
#: The README's example hosts → the emulated units.
HOSTS = {"spark01": "spark-ssh01", "spark02": "spark-ssh02"}
_PORT = 8301 + 10 * worker_index()
FAST = {
    "bench_image": IMAGE, "bench_select": ["nvidia-bare"], "bench_bracket": False,
    "vllm_server_env": {"VLLM_SIM_LOAD_SECONDS": "1", "VLLM_SIM_RATE": "1500", "VLLM_SIM_SHORT_THINKING": "1"},
    "llm_bench_output_tokens": 32, "llm_bench_runs": 3, "llm_bench_warmup": 0, "llm_bench_concurrency": [2],
    "llm_bench_quality": False, "llm_bench_image": False, "llm_bench_telemetry": "off",
    "bench_health_runs": 5,
}
GROUP_VARS = {"sparkbench_gpu_less": True, "bench_health_canary": "nvidia-bare"}


def _reason() -> str | None:
    return skip_reason() or (None if image_present(IMAGE) else f"Docker engine or {IMAGE} missing: run make setup")


pytestmark = [pytest.mark.ssh, pytest.mark.skipif(_reason() is not None, reason=str(_reason()))]


def walkthrough() -> list[str]:
    """The README's first-run commands, comments removed."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- first-run:begin -->"):text.index("<!-- first-run:end -->")]
    return [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.splitlines()
            if ln.strip() and not ln.startswith(("```", "<!--"))]


class Fleet:
    """The units, their inventory, the tests' extra variables and a runner of the README's commands."""

    def __init__(self, units: SshUnits, tmp: Path) -> None:
        self.units, self.tmp = units, tmp
        self.results = tmp / "results"
        self.extra = tmp / "extra.yml"
        self.extra.write_text(yaml.safe_dump({**FAST, "bench_results_dir": str(self.results)}))
        self.known_hosts = tmp / "known_hosts"  # what the README's `ssh … accept-new` step records
        self.state: dict[str, dict] = {}  # what the unit held after a step (later steps change it)
        self.inventory = units.inventory(tmp / "ssh_units.yml", "ssh_sparks", GROUP_VARS,
                                         only=list(HOSTS.values()), known_hosts=self.known_hosts)
        self.lacking: Future | None = None  # the lacking units' runs, beside the walk-through

    def env(self) -> dict[str, str]:
        """No .venv on PATH: the README's activation step is what finds ansible-playbook."""
        env = ansible_env()
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != BIN)
        return env

    def command(self, line: str, *more: str, inventory: Path | None = None) -> str:
        """A README line for the emulated units: hosts mapped, the tests' inventory and settings added."""
        argv = shlex.split(line)
        for i, arg in enumerate(argv):
            for name, host in HOSTS.items():
                argv[i] = re.sub(rf"\b{name}\b", host, argv[i])
        at = 2 if argv[0] == "scripts/sparkbench" else 1
        added = ["-i", "inventory/hosts.yml", "-i", str(inventory or self.inventory), "-e", f"@{self.extra}"]
        return shlex.join(argv[:at] + added + argv[at:] + list(more))

    def run(self, line: str, *more: str, timeout: int = 400, env: dict | None = None,
            inventory: Path | None = None) -> subprocess.CompletedProcess:
        script = f". .venv/bin/activate && {self.command(line, *more, inventory=inventory)}"
        # stdin from /dev/null: ansible-core refuses a non-blocking stdin, and ssh (an SSH
        # connection Ansible keeps open with ControlPersist) leaves a stdin it shares non-blocking
        return subprocess.run(["bash", "-c", script], cwd=REPO, env={**self.env(), **(env or {})},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    def accept_host_key(self, line: str) -> subprocess.CompletedProcess:
        """The README's `ssh -o StrictHostKeyChecking=accept-new spark@spark01.local true`, aimed at a unit."""
        argv = shlex.split(line)
        unit = self.units.units[HOSTS["spark01"]]
        target = argv.index("spark@spark01.local")
        argv[target:target + 1] = ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "IdentitiesOnly=yes",
                                   "-o", "BatchMode=yes", "-i", str(self.units.key), "-p", str(self.units.port),
                                   f"{unit.user}@127.0.0.1"]
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    u = SshUnits(tmp_path_factory.mktemp("ssh-units")).start()
    u.add(Unit("spark-ssh01", u.user_name("a"), _PORT))
    u.add(Unit("spark-ssh02", u.user_name("b"), _PORT + 1))
    # Lacks: not in the docker group, and its sudo asks a password.
    u.add(Unit("spark-ssh03", u.user_name("c"), _PORT + 2, docker_group=False, sudo="password"))
    # Lacks: its Python (a virtualenv of Debian's python3 without packages) cannot import requests.
    bare = Unit("spark-ssh04", u.user_name("d"), _PORT + 3)
    u.add(bare)
    venv = bare.home / "bare-python"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run(["chown", "-R", f"{bare.user}:{bare.user}", str(venv)], check=True)
    bare.python = str(venv / "bin" / "python3")
    u.serve()
    yield u
    u.stop()
    subprocess.run("docker ps -aq --filter name=spark-ssh0 | xargs -r docker rm -f", shell=True, capture_output=True)


@pytest.fixture(scope="module")
def fleet(units, tmp_path_factory):
    return Fleet(units, tmp_path_factory.mktemp("ssh-fleet"))


@pytest.fixture(scope="module")
def walk(fleet):
    """Every README line run in order; {line: CompletedProcess} (lines not run map to None). The
    lacking units' provisioning runs beside it (other users, hosts and containers; Ansible's runs
    wait on SSH and Docker far more than on the CPU)."""
    pool = ThreadPoolExecutor(max_workers=1)
    fleet.lacking = pool.submit(_provision_lacking, fleet)
    pool.shutdown(wait=False)
    out: dict[str, subprocess.CompletedProcess | None] = {}
    extra = {"ansible-playbook bench.yml -l spark01": ["-e", "bench_run_id=W1"],
             "scripts/sparkbench bench -l spark01,spark02": ["--run-id", "W2", "--results-dir", str(fleet.results),
                                                             "--plain"],
             "ansible-playbook playbooks/health.yml -l spark01,spark02": ["-e", "bench_run_id=W2"]}
    for line in walkthrough():
        if line.startswith(("make setup", ". .venv/bin/activate", "ssh-copy-id")):
            out[line] = None  # make test did the setup; the fixture installed the key
        elif line.startswith("ssh "):
            out[line] = fleet.accept_host_key(line)
        else:
            out[line] = fleet.run(line, *extra.get(line, []))
        if line.startswith("ansible-playbook playbooks/provision.yml"):
            fleet.state["hf cache after provision"] = _tree(fleet.units.units[HOSTS["spark01"]].home / ".cache")
        if line.startswith("ansible-playbook playbooks/teardown.yml"):
            fleet.state["caches after teardown"] = {
                host: _tree(fleet.units.units[host].home / ".cache") for host in HOSTS.values()}
    return out


def _tree(folder: Path) -> dict[str, int]:
    """Paths under ``folder`` (relative, three levels deep) → owner uid."""
    return {str(p.relative_to(folder)): p.stat().st_uid for p in folder.glob("*/*/*")} if folder.is_dir() else {}


def _step(walk, prefix: str) -> subprocess.CompletedProcess:
    line = next(ln for ln in walk if ln.startswith(prefix))
    proc = walk[line]
    assert proc is not None, line
    return proc


def _why(proc: subprocess.CompletedProcess) -> str:
    return f"rc {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-2000:]}"


def test_the_walkthrough_is_the_readmes(walk):
    lines = list(walk)
    assert lines[:2] == ["make setup", ". .venv/bin/activate"]
    assert any(ln.startswith("ssh-copy-id spark@spark01.local") for ln in lines)
    for prefix in ("ansible-playbook playbooks/provision.yml -l spark01", "ansible-playbook bench.yml -l spark01 --check",
                   "ansible-playbook bench.yml -l spark01", "scripts/sparkbench bench -l spark01,spark02",
                   "ansible-playbook playbooks/health.yml", "ansible-playbook playbooks/teardown.yml"):
        assert any(ln.startswith(prefix) for ln in lines), prefix


def test_the_host_key_step_records_the_units_key(walk, fleet):
    proc = _step(walk, "ssh -o StrictHostKeyChecking=accept-new")
    assert proc.returncode == 0, proc.stderr
    recorded = fleet.known_hosts.read_text().split()
    assert recorded[1:3] == fleet.units.known_hosts.read_text().split()[1:3]


def test_provision_over_ssh_installs_what_the_unit_lacks_with_sudo(walk, units, fleet):
    proc = _step(walk, "ansible-playbook playbooks/provision.yml")
    assert proc.returncode == 0, _why(proc)
    assert "GPU: NVIDIA GB10 (simulated)" in proc.stdout
    # requests is now importable by the unit's own python3 (installed with sudo when it was missing)
    probe = units.ssh("spark-ssh01", "/usr/bin/python3 -c 'import requests; print(requests.__version__)'")
    assert probe.returncode == 0, probe.stderr
    # the models went into the unit user's own cache folder (the download container wrote as root)
    tree = fleet.state["hf cache after provision"]
    assert any(p.startswith("huggingface/hub/models--") for p in tree), tree


def test_dry_run_shows_the_units_own_cache_folders(walk, units):
    proc = _step(walk, "ansible-playbook bench.yml -l spark01 --check")
    assert proc.returncode == 0, _why(proc)
    home = units.units["spark-ssh01"].home
    out = " ".join(proc.stdout.split())  # the YAML callback folds long lines
    commands = re.findall(r"command: docker run .*?(?=preflight:)", out)
    assert commands and all(f"-v {home}/.cache/huggingface:/root/.cache/huggingface" in c for c in commands), commands
    assert "<unit home>" not in out and "-v /root/" not in out


def _docs(run_dir: Path, host: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / host).glob("*.json"))]


def test_bench_over_ssh_measures_on_the_unit_with_its_own_python(walk, fleet, units):
    proc = _step(walk, "ansible-playbook bench.yml -l spark01")
    assert proc.returncode == 0, _why(proc)
    docs = _docs(fleet.results / "W1", "spark-ssh01")
    assert [d["status"] for d in docs] == ["complete"], _why(proc)
    doc = docs[0]
    schema = json.loads((REPO / "schema/result.schema.json").read_text())
    jsonschema.validate(doc, schema)
    unit_python = units.ssh("spark-ssh01", "python3 -c 'import platform; print(platform.python_version())'")
    assert doc["client"]["python"] == unit_python.stdout.strip() != ".".join(map(str, sys.version_info[:3]))
    assert doc["simulated"] is True and doc["single"]["decode_tok_s_median"] > 0
    home = units.units["spark-ssh01"].home
    assert f"-v {home}/.cache/huggingface:/root/.cache/huggingface" in doc["launch_command"]
    assert (fleet.results / "W1" / "report.md").is_file()


def test_the_runner_benches_two_units_in_parallel(walk, fleet):
    proc = _step(walk, "scripts/sparkbench bench -l spark01,spark02")
    assert proc.returncode == 0, _why(proc)
    for host in HOSTS.values():
        docs = _docs(fleet.results / "W2", host)
        assert [d["status"] for d in docs] == ["complete"], host
        assert docs[0]["host"] == host
    assert "spark-ssh01" in proc.stdout and "spark-ssh02" in proc.stdout and "exit code 0" in proc.stdout


def test_health_over_ssh(walk, fleet):
    proc = _step(walk, "ansible-playbook playbooks/health.yml")
    assert (fleet.results / "W2" / "health.json").is_file(), _why(proc)
    health = json.loads((fleet.results / "W2" / "health.json").read_text())
    units = {u["host"]: u for u in health["units"]}
    assert set(units) == set(HOSTS.values()), health
    assert all(u["verdict"] in ("healthy", "slow") for u in units.values()), health
    assert proc.returncode == (0 if all(u["verdict"] == "healthy" for u in units.values()) else 2), _why(proc)


def test_teardown_purges_the_root_owned_caches_with_sudo(walk, units, fleet):
    proc = _step(walk, "ansible-playbook playbooks/teardown.yml")
    assert proc.returncode == 0, _why(proc)
    provisioned = fleet.state["hf cache after provision"]
    assert 0 in provisioned.values(), provisioned  # root-owned files in the user's home: the purge needs sudo
    for host, tree in fleet.state["caches after teardown"].items():
        assert not any(p.startswith(("huggingface/", "vllm/", "flashinfer/")) for p in tree), (host, tree)
        assert not units.work_dir(host).exists()
    left = subprocess.run(["docker", "ps", "-a", "--filter", "name=spark-ssh0", "--format", "{{.Names}}"],
                          capture_output=True, text=True).stdout.split()
    assert not [n for n in left if n.endswith(("spark-ssh01", "spark-ssh02"))], left


# -- what a unit that lacks something gets told --------------------------------------------------

def _provision_lacking(fleet: Fleet) -> dict[str, subprocess.CompletedProcess]:
    """First run: spark-ssh04 as it is (its Python lacks requests) and spark-ssh03 opted in (not in
    the docker group; its sudo asks a password, none given). Second run: spark-ssh03 opted in with
    the sudo password (what -K asks for, given as a file). Their own inventory, the host key file
    the tests wrote."""
    units = fleet.units
    units.units["spark-ssh03"].hostvars["spark_host_install_missing"] = True
    inventory = units.inventory(fleet.tmp / "lacking.yml", "ssh_lacking", GROUP_VARS,
                                only=["spark-ssh03", "spark-ssh04"])
    password = fleet.tmp / "become.yml"
    password.write_text(yaml.safe_dump({"ansible_become_password": "sparkbench-test-sudo"}))
    provision = "ansible-playbook playbooks/provision.yml"
    return {"first": fleet.run(f"{provision} -l spark-ssh03,spark-ssh04", inventory=inventory),
            "groups before": units.ssh("spark-ssh03", "id -nG"),
            "second": fleet.run(f"{provision} -l spark-ssh03", "-e", f"@{password}", inventory=inventory),
            "groups after": units.ssh("spark-ssh03", "id -nG")}


@pytest.fixture(scope="module")
def lacking(fleet, walk):
    """The lacking units' two provisioning runs (started beside the walk-through)."""
    return fleet.lacking.result(timeout=900)


def _flat(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def test_a_unit_python_without_requests_is_told_so_and_the_fix(lacking, units):
    proc = lacking["first"]
    assert proc.returncode != 0
    out = _flat(proc)
    python = units.units["spark-ssh04"].python
    assert f"spark-ssh04: the unit's Python ({python}), which runs Ansible's Docker modules there, cannot import " \
           "'requests'" in out, out[-3000:]
    assert f"install requests into {python}" in out
    ssh04 = [ln for ln in proc.stdout.splitlines() if "spark-ssh04" in ln]
    assert not any("docker group" in ln or "install Docker" in ln for ln in ssh04), ssh04


def test_opting_in_needs_sudo_and_a_missing_password_names_minus_k(lacking):
    proc = lacking["first"]
    out = _flat(proc)
    assert "Spark host | add the remote user to the docker group (opted in)" in out
    assert "Missing sudo password" in out and "add -K (--ask-become-pass)" in out, out[-3000:]
    assert "docker" not in lacking["groups before"].stdout.split()


def test_opting_in_with_sudo_adds_the_group_and_reconnects(lacking):
    """The same run adds the group and then drives Docker as that user: only a new SSH connection
    (ansible.cfg keeps one alive 120 s) carries the new group."""
    proc = lacking["second"]
    assert proc.returncode == 0, _why(proc)
    assert "docker" in lacking["groups after"].stdout.split()
    assert "GPU: NVIDIA GB10 (simulated)" in proc.stdout
    assert "reset_connection" not in proc.stderr  # no warning: the reconnect is included when needed


def test_an_unknown_host_key_stops_the_unit_with_the_fix(fleet, lacking):
    """Host-key checking stays on: a unit whose key is not recorded is not reached; bench.yml names
    the fault and how to record the key, and exits non-zero."""
    fleet.known_hosts.write_text("")
    fresh = fleet.tmp / "control-paths"  # no SSH connection kept alive from the runs before
    fresh.mkdir()
    try:
        proc = fleet.run("ansible-playbook bench.yml -l spark02", "-e", "bench_run_id=HK",
                         env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(fresh)})
        health = fleet.run("ansible-playbook playbooks/health.yml -l spark02", "-e", "bench_run_id=HK",
                           env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(fresh)})
    finally:
        fleet.known_hosts.write_text(fleet.units.known_hosts.read_text())
    assert proc.returncode != 0
    out = _flat(proc)
    assert "spark-ssh02" in out and "Host key verification failed" in out, out[-3000:]
    assert "'ssh -o StrictHostKeyChecking=accept-new USER@ADDRESS true'" in out
    assert not list((fleet.results / "HK").glob("spark-ssh02/*.json"))  # nothing ran there
    # fleet health judges the unit failed, with the same reason and fix
    assert health.returncode != 0
    [unit] = json.loads((fleet.results / "HK" / "health.json").read_text())["units"]
    assert unit["verdict"] == "failed" and "Host key verification failed" in " ".join(unit["causes"]), unit
    assert "StrictHostKeyChecking=accept-new" in " ".join(unit["causes"]) + str(unit.get("remedy"))
