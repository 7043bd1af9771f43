"""The CQL parser's LALR tables cached in the user's cache folder (cql/grammar_cache.py): a good
copy is loaded instead of rebuilding; a corrupt, truncated, stale (other grammar or lark
version), foreign or group-writable file is never loaded (the parser is built and, where
allowed, saved again); a location that cannot be written only means building every time; the
file is written whole or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import lark
import pytest

from cqlstream.cql import grammar_cache
from cqlstream.cql.grammar_cache import cache_path, cached_lark
from cqlstream.cql.parser import _grammar_path

OPTIONS = {"parser": "lalr", "start": ["script", "single"], "propagate_positions": True, "maybe_placeholders": False}
TEXT = "select A, Sum(B) from S [Range 5 seconds] where A > 1 group by A;"


@pytest.fixture
def grammar() -> str:
    return _grammar_path().read_text()


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def builds(monkeypatch) -> list[int]:
    """Counts the parsers built from the grammar (a load from the cache builds none)."""
    count: list[int] = []
    real = grammar_cache.Lark

    class Counting(real):  # type: ignore[misc,valid-type]
        def __init__(self, *a, **kw):
            count.append(1)
            super().__init__(*a, **kw)

    monkeypatch.setattr(grammar_cache, "Lark", Counting)
    return count


def _parse(p: lark.Lark) -> lark.Tree:
    return p.parse(TEXT, start="script")


def test_built_once_then_loaded(grammar, builds, cache_in_tmp):
    first = cached_lark(grammar, **OPTIONS)
    path = cache_path(grammar, OPTIONS)
    assert builds == [1] and path.is_file() and path.parent == cache_in_tmp
    assert (path.stat().st_mode & 0o777) == 0o600 and (cache_in_tmp.stat().st_mode & 0o077) == 0
    assert [p.name for p in cache_in_tmp.iterdir()] == [path.name]  # no temporary file left
    again = cached_lark(grammar, **OPTIONS)
    assert builds == [1], "the second parser was built, not loaded"
    assert _parse(again) == _parse(first)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated (a writer cut off)
        lambda b: b[:-10] + bytes(x ^ 0xFF for x in b[-10:]),  # payload bytes changed
        lambda b: b"garbage",
        lambda b: b"",
    ],
)
def test_a_corrupt_file_is_rebuilt_and_replaced(grammar, builds, damage):
    cached_lark(grammar, **OPTIONS)
    path = cache_path(grammar, OPTIONS)
    good = path.read_bytes()
    damaged = damage(good)
    path.write_bytes(damaged)
    p = cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1]
    assert _parse(p) == _parse(lark.Lark(grammar, **OPTIONS))
    assert path.read_bytes() != damaged
    cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1]  # the replaced file loads


def test_another_grammar_or_lark_version_never_loads_old_tables(grammar, builds, monkeypatch):
    cached_lark(grammar, **OPTIONS)
    old = cache_path(grammar, OPTIONS)
    monkeypatch.setattr(lark, "__version__", lark.__version__ + ".post1")
    new = cache_path(grammar, OPTIONS)
    assert new != old
    # an old file put where the new version looks (renamed by hand, or a hash prefix collision)
    new.write_bytes(old.read_bytes())
    cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1]
    changed = grammar + "\n// a comment changes the key\n"
    assert cache_path(changed, OPTIONS) != new
    assert cache_path(grammar, {**OPTIONS, "propagate_positions": False}) != new


def test_a_file_others_can_write_is_not_trusted(grammar, builds, cache_in_tmp):
    cached_lark(grammar, **OPTIONS)
    path = cache_path(grammar, OPTIONS)
    path.chmod(0o666)
    cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1]
    cache_in_tmp.chmod(0o777)  # a shared folder: nothing is loaded from it or saved in it
    path.unlink()
    cached_lark(grammar, **OPTIONS)
    cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1, 1, 1] and not path.exists()


def test_an_unwritable_location_only_means_building(grammar, builds, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    assert _parse(cached_lark(grammar, **OPTIONS)) == _parse(cached_lark(grammar, **OPTIONS))
    assert builds == [1, 1]

    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(tmp_path / "ro"))

    def read_only(*a, **kw):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    cached_lark(grammar, **OPTIONS)
    assert builds == [1, 1, 1] and list((tmp_path / "ro").iterdir()) == []

    monkeypatch.undo()
    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(tmp_path / "ro"))
    monkeypatch.setattr(os, "replace", read_only)  # fails after the temp file exists
    cached_lark(grammar, **OPTIONS)
    assert list((tmp_path / "ro").iterdir()) == []  # the temporary file is removed


def test_a_new_process_parses_from_the_cache(cache_in_tmp):
    """What `cqlstream run` does: the first process saves the tables, the next loads them (its
    grammar analysis would fail here) and parses the same."""
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache_in_tmp)}
    code = "from cqlstream.cql.parser import parse_query; print(repr(parse_query({!r})))"
    first = subprocess.run([sys.executable, "-c", code.format(TEXT)], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert len(list(cache_in_tmp.glob("cql-lalr-*"))) == 1  # (beside the dataclass code)
    no_build = "import lark.load_grammar as g\ndef refuse(*a, **k): raise SystemExit('grammar analysed')\n"
    no_build += "g.load_grammar = refuse\n" + code.format(TEXT)
    second = subprocess.run([sys.executable, "-c", no_build], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
