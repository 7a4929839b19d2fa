"""sparkbench.zipcache: zip-imported modules compile once, keep their archive's file name, and a
broken or missing cache never breaks an import. The oracle is Python's own ``zipimport`` (the
importer AnsiballZ's payload goes through), run against temporary archives."""
from __future__ import annotations

import os
import sys
import traceback
import zipfile
import zipimport

import pytest

from sparkbench import zipcache

pytestmark = pytest.mark.unit

SOURCE = "def boom():\n    raise ValueError('from the zip')\n\nclass K:\n    def f(self):\n        return 41 + 1\n"


def uncached():
    """zipimport's own compiler (this virtualenv's Python starts with the cache installed)."""
    return getattr(zipimport._compile_source, "uncached", zipimport._compile_source)


def archive(path, name="zc_probe", source=SOURCE) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", source)
    return str(path)


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """zipimport's compiler behind a cache in tmp_path/cache, counting the real compiles."""
    calls = []
    original = uncached()

    def counting(pathname, source):
        calls.append(pathname)
        return original(pathname, source)

    monkeypatch.setattr(zipimport, "_compile_source", zipcache.cached_compile(counting, str(tmp_path / "cache")))
    return calls


def load(path: str, name: str = "zc_probe"):
    """The module ``name`` executed from the archive at ``path`` (a fresh importer each time)."""
    importer = zipimport.zipimporter(path)
    spec = importer.find_spec(name)
    module = type(sys)(name)
    module.__spec__, module.__loader__ = spec, importer
    importer.exec_module(module)
    return module


def test_second_archive_with_the_same_source_is_not_compiled_again(tmp_path, cached):
    first = load(archive(tmp_path / "a.zip"))
    second = load(archive(tmp_path / "b.zip"))
    assert len(cached) == 1, cached
    assert first.K().f() == second.K().f() == 42
    assert len(os.listdir(tmp_path / "cache")) == 1


def test_cached_code_names_the_archive_that_ran_it(tmp_path, cached):
    load(archive(tmp_path / "a.zip"))
    module = load(archive(tmp_path / "b.zip"))
    assert len(cached) == 1
    with pytest.raises(ValueError) as err:
        module.boom()
    frames = traceback.extract_tb(err.value.__traceback__)
    assert frames[-1].filename == str(tmp_path / "b.zip" / "zc_probe.py")
    assert module.K.f.__code__.co_filename == str(tmp_path / "b.zip" / "zc_probe.py")


def test_changed_source_compiles_again(tmp_path, cached):
    load(archive(tmp_path / "a.zip"))
    module = load(archive(tmp_path / "b.zip", source=SOURCE.replace("41 + 1", "40 + 3")))
    assert len(cached) == 2
    assert module.K().f() == 43


def test_truncated_entry_falls_back_to_compiling_and_is_rewritten(tmp_path, cached):
    load(archive(tmp_path / "a.zip"))
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_bytes(entry.read_bytes()[:20])
    assert load(archive(tmp_path / "b.zip")).K().f() == 42
    assert len(cached) == 2
    assert load(archive(tmp_path / "c.zip")).K().f() == 42
    assert len(cached) == 2, "the rewritten entry serves the third archive"


def test_unwritable_cache_still_imports(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setattr(zipimport, "_compile_source",
                        zipcache.cached_compile(uncached(), str(blocker / "cache")))
    assert load(archive(tmp_path / "a.zip")).K().f() == 42


def test_cache_directory_setting():
    assert zipcache.cache_dir({zipcache.ENV: "off"}) is None
    assert zipcache.cache_dir({zipcache.ENV: "/srv/zc"}) == "/srv/zc"
    assert zipcache.cache_dir({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "sparkbench", "zipimport")


def test_install_is_idempotent_and_off_leaves_zipimport_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport, "_compile_source", uncached())
    monkeypatch.setenv(zipcache.ENV, "off")
    assert zipcache.install() is False
    assert not hasattr(zipimport._compile_source, "uncached")
    monkeypatch.setenv(zipcache.ENV, str(tmp_path / "cache"))
    assert zipcache.install() is True
    assert zipcache.install() is False, "installed once"
    assert hasattr(zipimport._compile_source, "uncached")
