"""Sandbox for model-generated code (docs/RELIABILITY.md), through measure.py's Sandbox: a network
attempt and a write outside the sandbox's temp dir fail inside it (Docker sandbox, and the
unshare fallback where it works here); with no sandbox available the code is never run and the
check is `skipped`. Complements tests/test_measure_units.py (pass/fail of the asserts, /etc)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkbench import measure as M
from sparkbench.measure import sandbox as measure_sandbox

from reliability import REPO

QUALITY = json.loads((REPO / "sparkbench/data/prompts/quality.json").read_text(encoding="utf-8"))
CODE_Q = next(q for q in QUALITY["questions"] if q["id"] == "code")
IMAGE = "sparkbench/debian-base:bookworm"


def _probe_code(target: Path) -> str:
    """Python that reports whether it could reach the network and write outside its temp dir."""
    return (
        "import socket, os\n"
        "r = {}\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=3).close(); r['net'] = 'open'\n"
        "except OSError as e:\n"
        "    r['net'] = 'blocked:' + type(e).__name__\n"
        f"for p in ({str(target)!r}, '/etc/sparkbench-escape', '/var/tmp/sparkbench-escape'):\n"
        "    try:\n"
        "        open(p, 'w').write('x'); r[p] = 'written'\n"
        "    except OSError as e:\n"
        "        r[p] = 'blocked:' + type(e).__name__\n"
        "print('RESULT', r)\n"
    )


def _result(out: str) -> dict:
    line = next(l for l in out.splitlines() if l.startswith("RESULT "))
    import ast
    return ast.literal_eval(line[len("RESULT "):])


def _assert_contained(sb, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    ok, out = sb.run(_probe_code(target))
    assert ok, out
    r = _result(out)
    assert r["net"].startswith("blocked"), r
    for key, value in r.items():
        if key != "net":
            assert value.startswith("blocked"), (key, value)
    assert not target.exists() and not Path("/etc/sparkbench-escape").exists()
    assert not Path("/var/tmp/sparkbench-escape").exists()


def _have_image() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0


@pytest.mark.sim
@pytest.mark.skipif(not _have_image(), reason=f"docker or {IMAGE} missing (make setup builds it)")
def test_docker_sandbox_blocks_network_and_writes_outside(tmp_path: Path) -> None:
    sb = M.Sandbox(IMAGE)
    assert sb.kind == "docker"
    _assert_contained(sb, tmp_path)


@pytest.mark.sim
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare not installed")
def test_unshare_fallback_blocks_network_and_writes_outside(tmp_path: Path) -> None:
    sb = M.Sandbox(None)  # no image: the unshare fallback
    if sb.kind != "unshare":
        pytest.skip(f"unshare sandbox does not work on this machine: {sb.reason}")
    _assert_contained(sb, tmp_path)


@pytest.mark.unit
def test_no_sandbox_means_the_code_is_not_run_and_skipped(tmp_path: Path, monkeypatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(measure_sandbox.shutil, "which", lambda name, *a, **k: None if name in ("docker", "unshare")
                        else real_which(name, *a, **k))
    sb = M.Sandbox(IMAGE)
    assert sb.kind == "none" and sb.reason
    marker = tmp_path / "ran.txt"
    answer = ("```python\nopen(%r, 'w').write('ran')\n"
              "def is_prime(n):\n    return n > 1 and all(n %% d for d in range(2, int(n ** 0.5) + 1))\n```\n") % str(marker)
    res = M.StreamResult(t_start=0.0, status=200)
    res.content, res.finish_reason = answer, "stop"
    status, details = M.check_quality(CODE_Q, res, 4096, sb)
    assert status == "skipped" and details["sandbox"]["kind"] == "none"
    assert not marker.exists(), "the code ran without a sandbox"
