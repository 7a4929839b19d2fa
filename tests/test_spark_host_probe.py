"""The spark_host role's probe module (roles/spark_host/library/spark_host_probe.py), run by Ansible on
this machine and held against the tools its figures would otherwise come from: ``id -nG`` (groups),
``df -P -B1`` (free disk), ``nproc`` (cores), and huggingface_hub's cache layout (cached models)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO, ansible_env

pytestmark = pytest.mark.ansible


def _run_probe(hf_cache, models=()) -> dict:
    args = json.dumps({"hf_cache": str(hf_cache), "cpu": True, "models": list(models)})
    env = {**ansible_env(), "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    proc = subprocess.run([str(REPO / ".venv/bin/ansible"), "localhost", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", "-M", str(REPO / "roles/spark_host/library"),
                           "-m", "spark_host_probe", "-a", args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_the_probe_module_reads_what_id_df_nproc_and_hf_download_would(tmp_path):
    cache = tmp_path / "home" / ".cache" / "huggingface"
    # huggingface_hub's cache layout: hub/models--<org>--<name>/snapshots/<revision>/
    (cache / "hub" / "models--org--here" / "snapshots" / "abc123").mkdir(parents=True)
    models = [{"model": "org/here", "revision": "abc123", "image": "i"},
              {"model": "org/here", "revision": "other"}, {"model": "org/gone", "revision": "abc123"}]
    got = _run_probe(cache, models)
    assert got["changed"] is False and got["requests_rc"] == 0
    assert got["groups"] == subprocess.run(["id", "-nG"], capture_output=True, text=True, check=True).stdout.split()
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    assert got["cpu"].endswith(f", {nproc} cores")
    assert [m["cached"] for m in got["models"]] == [True, False, False]
    assert [(m["model"], m["revision"]) for m in got["missing_models"]] == [("org/here", "other"), ("org/gone", "abc123")]
    assert got["models"][0]["image"] == "i"  # every key of an item comes back with it
    df = subprocess.run(["df", "-P", "-B1", str(cache)], capture_output=True, text=True, check=True)
    assert got["hf_cache_free_path"] == str(cache)
    assert abs(got["hf_cache_free_bytes"] - int(df.stdout.splitlines()[-1].split()[3])) <= 64 * 2**20  # other writers
    # A cache folder that does not exist yet (a first run, or --check) is read at its nearest existing folder.
    assert _run_probe(tmp_path / "new" / "huggingface")["hf_cache_free_path"] == str(tmp_path)
