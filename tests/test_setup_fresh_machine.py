"""The setup on a machine where a Docker engine already answers but a Debian package the setup
uses is missing: ``scripts/build_base_image.sh`` checks for debootstrap itself (not only when the
engine had to be installed), installs it as root or names the ``apt-get install`` line otherwise,
and builds the image.

The machine is left as it is: debootstrap is hidden from ``PATH`` by a shim folder (every other
program of the folders that hold it stays reachable), ``apt-get`` is a shim that records its
arguments and "installs" debootstrap by putting a stand-in into that folder, and the image gets a
throw-away name that is removed at the end. The stand-in records how the script calls it and
fills the target folder with the root file system of the base image ``make setup`` built with the
real debootstrap (every fresh machine runs that build before the suite; running it again here
took 40 CPU-s and two minutes on 2 cores), so the image the script imports is a real Debian.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.sim

SCRIPT = REPO_ROOT / "scripts" / "build_base_image.sh"

APT_SHIM = """#!/bin/sh
# apt-get as the test sees it: records each call; "install ... debootstrap" puts debootstrap on PATH.
echo "$*" >> "{log}"
case " $* " in
  *" install "*" debootstrap "*|*" install "*" debootstrap") cp "{standin}" "{shim}/debootstrap" ;;
esac
exit 0
"""
#: The root file system every fresh machine's ``make setup`` made with the real debootstrap.
BASE_IMAGE = "sparkbench/debian-base:bookworm"
#: debootstrap as the test installs it: records its arguments, then unpacks BASE_IMAGE's file
#: system into its target folder (the argument after the suite).
DEBOOTSTRAP_STANDIN = """#!/bin/sh
echo "$*" >> "{log}"
target=""; prev=""
for a in "$@"; do
  case "$a" in -*) ;; *) [ -n "$prev" ] && [ -z "$target" ] && target="$a"; prev="$a" ;; esac
done
[ -d "$target" ] || {{ echo "debootstrap stand-in: no target folder in: $*" >&2; exit 2; }}
id=$(docker create {image} true) || exit 1
docker export "$id" | tar -x -C "$target"; rc=$?
docker rm "$id" >/dev/null
exit $rc
"""


def _docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True).returncode == 0


def _hidden_path(tmp_path: Path, hide: str) -> tuple[Path, str]:
    """A shim folder and a PATH on which ``hide`` is not found: the PATH folders that hold it are
    replaced by the shim folder, which links every other program of theirs."""
    shim = tmp_path / "bin"
    shim.mkdir()
    kept: list[str] = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and (Path(d) / hide).exists():
            for prog in Path(d).iterdir():
                if prog.name != hide and not (shim / prog.name).exists():
                    (shim / prog.name).symlink_to(prog)
        elif d:
            kept.append(d)
    return shim, os.pathsep.join([str(shim), *kept])


@pytest.fixture
def no_debootstrap(tmp_path: Path):
    """(env, shim folder, apt-get log, debootstrap log): debootstrap is off PATH, apt-get is the
    recording shim that installs the stand-in."""
    if subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
        pytest.fail(f"{BASE_IMAGE} is missing: `make setup` builds it (scripts/build_base_image.sh); run it first")
    shim, path = _hidden_path(tmp_path, "debootstrap")
    log, dlog = tmp_path / "apt-get.log", tmp_path / "debootstrap.log"
    standin = tmp_path / "debootstrap-standin"
    standin.write_text(DEBOOTSTRAP_STANDIN.format(log=dlog, image=BASE_IMAGE))
    standin.chmod(0o755)
    (shim / "apt-get").unlink(missing_ok=True)
    (shim / "apt-get").write_text(APT_SHIM.format(log=log, standin=standin, shim=shim))
    (shim / "apt-get").chmod(0o755)
    env = {**os.environ, "PATH": path}
    assert subprocess.run(["sh", "-c", "command -v debootstrap"], env=env, capture_output=True).returncode != 0
    return env, shim, log, dlog


@pytest.fixture
def throwaway_image():
    name = f"sparkbench-test/debian-base:fresh-{secrets.token_hex(4)}"
    yield name
    subprocess.run(["docker", "image", "rm", "-f", name], capture_output=True)


def test_base_image_builds_where_docker_runs_and_debootstrap_is_missing(no_debootstrap, throwaway_image) -> None:
    """As root with the engine answering: the script asks apt-get for debootstrap, then builds."""
    if os.geteuid() != 0:
        pytest.fail("make test runs as root (it installs the setup's Debian packages); run it as root")
    assert _docker_answers(), "no Docker engine answers: make test starts one (scripts/setup_docker_engine.sh)"
    env, shim, log, dlog = no_debootstrap
    out = subprocess.run([str(SCRIPT), throwaway_image], env=env, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    calls = log.read_text().splitlines()
    assert any(c.split()[:1] != ["update"] and "install" in c.split() and "debootstrap" in c.split() for c in calls), \
        calls
    assert "installing debootstrap" in out.stderr and "installed debootstrap" in out.stderr, out.stderr
    # debootstrap, once installed, is called for a minimal bookworm with python3 from an http(s)
    # mirror of this machine's apt sources.
    (boot,) = [c.split() for c in dlog.read_text().splitlines()]
    assert "--variant=minbase" in boot and "--include=python3,ca-certificates" in boot, boot
    suite_at = boot.index(os.environ.get("SPARKBENCH_DEBIAN_SUITE") or "bookworm")
    assert boot[suite_at + 2].startswith(("http://", "https://")), boot
    inspect = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", throwaway_image],
                             capture_output=True, text=True)
    assert inspect.returncode == 0, f"{throwaway_image} was not built: {inspect.stderr}"
    # The image is the Debian root file system it claims: python3 runs in it.
    ran = subprocess.run(["docker", "run", "--rm", "--network", "none", throwaway_image, "python3", "-c",
                          "import sys; print(sys.version_info[0])"], capture_output=True, text=True, timeout=120)
    assert ran.stdout.strip() == "3", ran.stderr


def test_not_root_names_the_apt_get_line_and_builds_nothing(no_debootstrap, throwaway_image, tmp_path: Path) -> None:
    """Not root: nothing is installed, the message names the package and the line, exit 1."""
    env, shim, log, _ = no_debootstrap
    (shim / "id").unlink(missing_ok=True)
    (shim / "id").write_text('#!/bin/sh\n[ "$1" = "-u" ] && { echo 1000; exit 0; }\nexec /usr/bin/id "$@"\n')
    (shim / "id").chmod(0o755)
    out = subprocess.run([str(SCRIPT), throwaway_image], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "sudo apt-get install -y debootstrap" in out.stderr, out.stderr
    assert not log.exists(), "apt-get ran although the script was not root"
    assert subprocess.run(["docker", "image", "inspect", throwaway_image], capture_output=True).returncode != 0


def test_a_python_without_venv_names_its_debian_package(tmp_path: Path) -> None:
    """make venv's check: a python3 that cannot create a venv (Debian's without python3-venv)
    gets the package named for its version, before any venv is made (not root here)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    real = shutil.which("python3")
    (shim / "python3").write_text(f'#!/bin/sh\ncase "$*" in *ensurepip*) exit 1 ;; esac\nexec {real} "$@"\n')
    (shim / "id").write_text('#!/bin/sh\n[ "$1" = "-u" ] && { echo 1000; exit 0; }\nexec /usr/bin/id "$@"\n')
    for f in shim.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run([str(REPO_ROOT / "scripts" / "setup_python.sh"), "python3"], env=env, capture_output=True,
                         text=True, timeout=60)
    minor = subprocess.run([real, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                           text=True).stdout.strip()
    assert out.returncode == 1, out.stderr
    assert f"sudo apt-get install -y python{minor}-venv" in out.stderr, out.stderr
    assert subprocess.run([str(REPO_ROOT / "scripts" / "setup_python.sh"), real], capture_output=True).returncode == 0


def test_need_packages_finds_a_data_file_and_installs_nothing_present(tmp_path: Path) -> None:
    """A package checked by a file it ships (a font) counts as present when the file exists, even
    though it is not a program; nothing present reaches apt-get."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "apt.log"}\nexit 1\n')
    (shim / "apt-get").chmod(0o755)
    font = tmp_path / "DejaVuSans.ttf"
    font.write_text("not a program")
    script = (f'. {REPO_ROOT / "scripts" / "lib" / "packages.sh"}; say() {{ echo "$*" >&2; }}; '
              f'need_packages say {font}:fonts-dejavu-core sh:dash')
    out = subprocess.run(["bash", "-c", script], env={**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert not (tmp_path / "apt.log").exists()
