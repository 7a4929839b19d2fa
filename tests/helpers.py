"""What many test files share: the repository's paths and how a test runs a playbook.

``REPO`` is the checkout, ``BIN`` the virtualenv's bin folder (ansible-playbook, molecule, the
sparkbench console script). ``playbook_cmd`` spells an ``ansible-playbook`` command line once;
``ansible_env`` is the environment a test runs it in (the repository's ansible.cfg, no colour, no
token or API key inherited from the caller's shell); ``run_playbook`` runs one to the end.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FIXTURES = REPO / "tests" / "fixtures"
#: Variables a test must never inherit from the caller's shell (secrets).
SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SPARKBENCH_API_KEY")


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of a playbook run in a test: the venv first on PATH, the repository's
    ansible.cfg, no colour, no secret from the caller's shell; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARIABLES}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
                "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                # the closing lines' width (bench_report_width): a 100-column terminal
                "COLUMNS": "100"})
    env.update(extra)
    return env


def playbook_cmd(playbook: str | Path, *args: str, inventories: list[str | Path] | None = None,
                 limit: str | None = None, lock: str | None = None) -> list[str]:
    """``ansible-playbook [-i INV ...] [-l LIMIT] PLAYBOOK ARGS`` from the venv; ``lock``: run it
    under ``flock LOCK`` (tests that share the simulated fleet's containers take turns)."""
    cmd = ["flock", lock] if lock else []
    cmd.append(str(BIN / "ansible-playbook"))
    for inv in inventories or []:
        cmd += ["-i", str(inv)]
    if limit:
        cmd += ["-l", limit]
    return cmd + [str(playbook), *args]


def run_playbook(playbook: str | Path, *args: str, inventories: list[str | Path] | None = None,
                 limit: str | None = None, lock: str | None = None, env: dict[str, str] | None = None,
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a playbook from the repository's root to the end; stdout and stderr captured as text."""
    return subprocess.run(playbook_cmd(playbook, *args, inventories=inventories, limit=limit, lock=lock),
                          cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env or ansible_env(),
                          timeout=timeout)


def containers(prefix: str) -> dict[str, dict]:
    """``docker inspect`` of every container whose name starts with ``prefix``, by name."""
    names = subprocess.run(["docker", "ps", "-a", "--filter", f"name={prefix}", "--format", "{{.Names}}"],
                           capture_output=True, text=True, check=True).stdout.split()
    names = [n for n in names if n.startswith(prefix)]
    if not names:
        return {}
    out = json.loads(subprocess.run(["docker", "inspect", *names], capture_output=True, text=True, check=True).stdout)
    return {c["Name"].lstrip("/"): c for c in out}


#: vLLM's own time per output token: a histogram, one per engine, in the server's /metrics.
TPOT = "vllm:request_time_per_output_token_seconds"


def tpot_histogram(base_url: str, timeout: float = 2.0) -> tuple[float, float] | None:
    """(sum, count) of ``TPOT`` over every label set, read with a regex of its own (the oracle does
    not share measure.py's parser); None when /metrics does not answer or has no such histogram."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError:
        return None
    total = {"sum": 0.0, "count": 0.0}
    seen = False
    for m in re.finditer(r"^" + re.escape(TPOT) + r"_(sum|count)(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M):
        total[m.group(1)] += float(m.group(2))
        seen = True
    return (total["sum"], total["count"]) if seen else None


def serve_source_settings(request_timeout_s: float, stall_timeout_s: float) -> dict:
    """The measurement settings of a result serve.yml deploys from in the tests: 5 single-stream runs
    of 32 tokens, nothing else measured (``sparkbench.settings.normalize``)."""
    from sparkbench import settings as settings_mod

    return settings_mod.normalize({**settings_mod.DEFAULTS, "output_tokens": 32, "runs": 5, "warmup": 0,
                                   "concurrency": [], "context": [0], "quality": False, "image": False,
                                   "telemetry": "off", "request_timeout_s": request_timeout_s,
                                   "stall_timeout_s": stall_timeout_s})


def deployable_result(variant: dict, launch: dict, settings: dict, *, host: str, run: str, image_id: str,
                      rates: list[float], median: float, simulated: bool, backend: str, hardware: str,
                      startup: dict) -> dict:
    """A complete result document of ``variant`` as bench.yml records it on ``host`` (the launch
    from ``sparkbench.launch.launch_spec``, the settings from ``sparkbench.settings.normalize``):
    what serve.yml deploys from. ``hardware``: a built-in hardware profile's name."""
    from sparkbench.launch import config_hash

    return {"schema_version": "1", "status": "complete", "simulated": simulated, "host": host, "variant": variant,
            "finished_at": f"2026-12-01T00:00:0{run[-1]}Z",
            "launch": {k: launch[k] for k in ("argv", "command", "env", "secret_env")},
            "launch_command": launch["command"], "config_hash": config_hash(launch, settings),
            "manifest": {"image": variant["image"], "image_id": image_id, "image_digest": None,
                         "model": variant["model"], "model_revision": None, "settings": settings,
                         "simulated": simulated, "backend": backend},
            "single": {"decode_tok_s_median": median, "runs": [{"decode_tok_s": r, "valid": True} for r in rates]},
            "server_startup": startup,
            "profile": {"hardware": json.loads(
                (REPO / f"sparkbench/data/profiles/hardware/{hardware}.json").read_text())}}
