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


def pythons_get_filename():
    """zipimport's own ``get_filename`` (this virtualenv's Python starts with ``located`` in place)."""
    return getattr(zipimport.zipimporter.get_filename, "original", zipimport.zipimporter.get_filename)


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


def test_file_name_comes_from_the_table_of_contents_without_a_compile(tmp_path, cached):
    """The name ``located`` gives is the one zipimport's own ``get_filename`` gives (module and
    package), and asking for it compiles nothing: the import then compiles once, not twice."""
    path = archive(tmp_path / "a.zip")
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("zc_pkg/__init__.py", "X = 1\n")
    importer = zipimport.zipimporter(path)
    own = pythons_get_filename()
    expected = {name: own(importer, name) for name in ("zc_probe", "zc_pkg")}
    assert len(cached) == 2, "Python's own get_filename compiles the module"
    fast = zipcache.located(own)
    assert {name: fast(importer, name) for name in expected} == expected
    assert len(cached) == 2, "the table of contents names the file without compiling it"
    assert expected["zc_probe"] == os.path.join(path, "zc_probe.py")
    with pytest.raises(zipimport.ZipImportError):
        fast(importer, "zc_absent")


def test_byte_code_entries_keep_pythons_own_lookup(tmp_path):
    """An archive entry of byte code is Python's own business (its header decides whether it is
    used): ``located`` hands it to the original."""
    path = str(tmp_path / "b.zip")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("zc_bc.pyc", b"not byte code")
        z.writestr("zc_bc.py", "Y = 2\n")
    asked = []

    def original(importer, fullname):
        asked.append(fullname)
        return "from the original"

    assert zipcache.located(original)(zipimport.zipimporter(path), "zc_bc") == "from the original"
    assert asked == ["zc_bc"]


def test_install_puts_the_table_of_contents_lookup_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport, "_compile_source", uncached())
    monkeypatch.setattr(zipimport.zipimporter, "get_filename", pythons_get_filename())
    monkeypatch.setenv(zipcache.ENV, str(tmp_path / "cache"))
    assert zipcache.install() is True
    assert hasattr(zipimport.zipimporter.get_filename, "original")
    first = zipimport.zipimporter.get_filename
    assert zipcache.install() is False and zipimport.zipimporter.get_filename is first
    assert load(archive(tmp_path / "c.zip")).K().f() == 42
