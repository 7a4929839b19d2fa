"""Emulated Spark units reached over SSH: an sshd of the tests' own on 127.0.0.1 and its users.

A real unit is reached as a normal user with sudo, key-only login, its own ``python3``; this
builds the same on this machine (``tests/test_ssh_units.py`` uses it):

- one ``sshd`` (Debian's openssh-server, installed by ``make setup``) started with a configuration,
  host key and pid file of its own, listening on 127.0.0.1 only, key-only login, its own port;
- per unit a Linux user with a home, the tests' public key in ``~/.ssh/authorized_keys``, sudo
  (without a password, or with one to reproduce a sudo prompt) and, by default, the docker group;
- a ``known_hosts`` file written from the sshd's host key (host-key checking stays on) and the
  controller's private key, both under the fixture's folder;
- an inventory whose hosts use that port, user, key and known_hosts.

Ports and user names carry the pytest-xdist worker's number, so several workers can run at once.
Needs root (users, sudoers) and ``/usr/sbin/sshd``; ``skip_reason()`` says what is missing.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def worker_index() -> int:
    """0 for a plain pytest run, N for pytest-xdist's worker gwN."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def skip_reason() -> str | None:
    """Why SSH units cannot be built here, or None."""
    if os.geteuid() != 0:
        return "the SSH test units create users and sudoers entries: run the tests as root"
    missing = [p for p in (SSHD, "/usr/bin/sudo", "/usr/bin/ssh", "/usr/bin/ssh-keygen") if not Path(p).exists()]
    if missing:
        return f"{', '.join(missing)} missing: run make setup (it installs openssh-server and sudo)"
    return None


def _run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=60, **kw)


@dataclass
class Unit:
    """One emulated unit: the inventory host name, its Linux user and the server port it serves on."""
    host: str
    user: str
    vllm_port: int
    docker_group: bool = True
    sudo: str = "nopasswd"  # nopasswd | password | none
    python: str | None = None  # ansible_python_interpreter; None: discovery, as on a real unit
    hostvars: dict = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return Path("/home") / self.user


class SshUnits:
    """The sshd, its users and an inventory; ``start()`` builds it, ``stop()`` removes it all."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.index = worker_index()
        self.port = port or 2220 + self.index
        self.key = root / "id_ed25519"
        self.known_hosts = root / "known_hosts"
        self.host_key = root / "ssh_host_ed25519_key"
        self.config = root / "sshd_config"
        self.log = root / "sshd.log"
        self.units: dict[str, Unit] = {}
        self._proc: subprocess.Popen | None = None

    def user_name(self, tag: str) -> str:
        return f"sbunit{self.index}{tag}"

    # -- users ---------------------------------------------------------------------------------
    def add(self, unit: Unit) -> Unit:
        """Create ``unit.user`` afresh (a leftover of an earlier session is removed first, with
        the unit's work directory: the emulated units share this machine's /tmp, and one left
        by an earlier session's user is not this user's to remove)."""
        self._remove_user(unit.user)
        shutil.rmtree(self.work_dir(unit.host), ignore_errors=True)
        groups = ["-G", "docker"] if unit.docker_group else []
        if unit.docker_group:
            _run("groupadd", "-f", "docker")
        _run("useradd", "--create-home", "--shell", "/bin/bash", *groups, unit.user)
        if unit.sudo == "password":
            _run("chpasswd", input=f"{unit.user}:sparkbench-test-sudo\n")
        else:  # no usable password, yet not locked: sshd refuses a locked account even for a key
            _run("usermod", "-p", "*", unit.user)
        ssh_dir = unit.home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        _run("chown", "-R", f"{unit.user}:{unit.user}", str(ssh_dir))
        if unit.sudo != "none":
            rule = "NOPASSWD: ALL" if unit.sudo == "nopasswd" else "ALL"
            sudoers = self._sudoers(unit.user)
            sudoers.write_text(f"{unit.user} ALL=(ALL) {rule}\n")
            sudoers.chmod(0o440)
        self.units[unit.host] = unit
        return unit

    @staticmethod
    def work_dir(host: str) -> Path:
        """bench.yml's measurement work directory on the unit (llm_bench_remote_dir's default)."""
        return Path(f"/tmp/sparkbench-{host}")

    @staticmethod
    def _sudoers(user: str) -> Path:
        return Path("/etc/sudoers.d") / f"sparkbench-test-{user}"

    def _remove_user(self, user: str) -> None:
        if subprocess.run(["id", user], capture_output=True).returncode == 0:
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            subprocess.run(["userdel", "--remove", "--force", user], capture_output=True)
        self._sudoers(user).unlink(missing_ok=True)
        shutil.rmtree(Path("/home") / user, ignore_errors=True)

    # -- sshd ----------------------------------------------------------------------------------
    def start(self) -> SshUnits:
        self.root.mkdir(parents=True, exist_ok=True)
        for key in (self.key, self.host_key):
            if not key.exists():
                _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkbench-tests", "-f", str(key))
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        return self

    def serve(self) -> None:
        """Start the sshd for the users added so far and wait until it accepts connections."""
        self.config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "PermitRootLogin no", "UsePAM no", "AuthorizedKeysFile .ssh/authorized_keys",
            f"AllowUsers {' '.join(u.user for u in self.units.values())}", f"Subsystem sftp {SFTP_SERVER}",
            "StrictModes yes", "LogLevel VERBOSE", "MaxStartups 50", "MaxSessions 50", ""]))
        _run(SSHD, "-t", "-f", str(self.config))
        self._proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=subprocess.DEVNULL,
                                      stderr=self.log.open("ab"), start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self._proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port}: {self.log.read_text()[-2000:]}")

    def ssh(self, host: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``command`` on a unit as its user, the way Ansible reaches it."""
        unit = self.units[host]
        # stdin from /dev/null: ssh makes its stdin non-blocking, and a shared one would stay so for
        # every later ansible-playbook of this worker (ansible-core refuses a non-blocking stdin)
        return subprocess.run(["ssh", *self.ssh_options(), "-p", str(self.port), f"{unit.user}@127.0.0.1", command],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    def ssh_options(self) -> list[str]:
        return ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-i", str(self.key)]

    def _stop_sshd(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, 15)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, 9)

    def cut(self) -> None:
        """Every unit stops answering, as a unit that lost its network or power does: the sshd stops
        listening and every session of the units' users ends, the connections Ansible keeps open
        (ControlPersist) with them. Containers the units started keep running (Docker's, not the
        users'). ``serve()`` lets them answer again."""
        self._stop_sshd()
        for unit in self.units.values():
            subprocess.run(["pkill", "-KILL", "-u", unit.user], capture_output=True, timeout=30)

    def stop(self) -> None:
        self._stop_sshd()
        for unit in list(self.units.values()):
            self._remove_user(unit.user)
            shutil.rmtree(self.work_dir(unit.host), ignore_errors=True)

    # -- inventory -----------------------------------------------------------------------------
    def inventory(self, path: Path, group: str, group_vars: dict, only: list[str] | None = None,
                  known_hosts: Path | None = None) -> Path:
        """An inventory of the units (``only``: these hosts) in ``group``, a child of ``sparks``,
        reached over SSH; ``known_hosts``: another file than the one written from the host key."""
        hosts = {}
        for unit in self.units.values():
            if only is not None and unit.host not in only:
                continue
            hv = {"ansible_host": "127.0.0.1", "ansible_port": self.port, "ansible_user": unit.user,
                  "vllm_server_port": unit.vllm_port, **unit.hostvars}
            if unit.python:
                hv["ansible_python_interpreter"] = unit.python
            hosts[unit.host] = hv
        connection = {"ansible_connection": "ssh", "ansible_ssh_private_key_file": str(self.key),
                      "ansible_ssh_common_args": (f"-o UserKnownHostsFile={known_hosts or self.known_hosts} "
                                                  "-o IdentitiesOnly=yes")}
        doc = {"all": {"children": {"sparks": {"children": {group: {
            "hosts": hosts, "vars": {**connection, **group_vars}}}}}}}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path
