"""The strategy that keeps each module's AnsiballZ payload between runs
(strategy_plugins/sparkbench_linear.py): what names the kept folder, and the link it makes."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore:DSA is deprecated")]


@pytest.fixture()
def strategy():
    spec = importlib.util.spec_from_file_location("sparkbench_linear", REPO / "strategy_plugins" / "sparkbench_linear.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ansible_cfg_names_the_strategy() -> None:
    cfg = (REPO / "ansible.cfg").read_text(encoding="utf-8").splitlines()
    assert "strategy = sparkbench_linear" in cfg and "strategy_plugins = strategy_plugins" in cfg


def test_an_edited_role_module_names_another_folder(strategy, tmp_path: Path, monkeypatch) -> None:
    library = tmp_path / "roles" / "r" / "library"
    library.mkdir(parents=True)
    (library / "m.py").write_text("print(1)\n")
    monkeypatch.setattr(strategy, "PROJECT", tmp_path)
    first = strategy.payload_key()
    assert strategy.payload_key() == first
    (library / "m.py").write_text("print(2)\n")
    assert strategy.payload_key() != first
    assert len(first) == 16


def test_the_runs_cache_folder_links_to_the_kept_one(strategy, tmp_path: Path, monkeypatch) -> None:
    run_tmp = tmp_path / "ansible-local-1"
    run_tmp.mkdir()
    monkeypatch.setattr(strategy.C, "DEFAULT_LOCAL_TMP", str(run_tmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    strategy.share_payload_cache()
    link = run_tmp / "ansiballz_cache"
    assert link.is_symlink()
    assert link.resolve() == (tmp_path / "cache" / "sparkbench" / "ansiballz" / strategy.payload_key()).resolve()
    (link / "x").write_text("payload")
    strategy.share_payload_cache()  # a second call leaves the link as it is
    assert (link / "x").read_text() == "payload"


def test_an_unwritable_cache_leaves_ansibles_own_folder(strategy, tmp_path: Path, monkeypatch) -> None:
    run_tmp = tmp_path / "ansible-local-2"
    run_tmp.mkdir()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setattr(strategy.C, "DEFAULT_LOCAL_TMP", str(run_tmp))
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    strategy.share_payload_cache()
    assert not (run_tmp / "ansiballz_cache").exists()
