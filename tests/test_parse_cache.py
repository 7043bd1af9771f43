"""Statements kept between `cqlstream run`s (cql/parse_cache.py).

Every statement of the tests' corpora (Linear Road's two scripts, the papers' corpus, the EXPLAIN
goldens and the rewrite fixtures, their DDL included) parsed in one process and taken from the
cache in the next is the same AST, positions included, as a fresh parse; the second process
parses nothing, does not load the parser's tables and does not import lark. A bad statement is
never kept (it raises the same error every time), the cache is off unless enabled, a changed
grammar or tree-building module starts a new file, and a run unpickles only the entries it uses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.linear_road.bench import SCRIPTS
from cqlstream.cql import parse_cache
from cqlstream.cql.errors import CqlError
from cqlstream.io.script_items import _read_items
from tests.test_corpus import _blocks
from tests.test_explain_golden import CASES as GOLDEN
from tests.test_explain_golden import load as load_golden
from tests.test_rewrite_fixtures import CASES as REWRITES


def corpus() -> list[str]:
    """Every statement text of the tests' corpora (deduplicated, in order)."""
    texts: list[str] = []
    for path, _ in SCRIPTS.values():
        text = path.read_text()
        texts += [body for kw, body, _, _ in _read_items(path, text) if kw in ("table", "vtable", "vquery", "query")]
    texts += [text for _, _, text in _blocks()]
    for p in GOLDEN:
        case = load_golden(p)
        texts += [case.query, *(d for d in case.ddl.split(";\n") if d)]
    for fixture, case in REWRITES:
        texts += [case.query, *(d for d in fixture.ddl.split(";\n") if d)]
    return list(dict.fromkeys(texts))


def full(node: object) -> object:
    """A node as nested lists, every field (positions too) and every value's type."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [type(node).__name__, [[f.name, full(getattr(node, f.name))] for f in dataclasses.fields(node)]]
    if isinstance(node, (tuple, list)):
        return [type(node).__name__, [full(x) for x in node]]
    return [type(node).__name__, repr(node)]


_RUN = textwrap.dedent("""
    import json, sys
    from cqlstream.cql import parse_cache, parser
    from cqlstream.cql.errors import CqlError
    sys.path.insert(0, {tests!r})
    from test_parse_cache import full
    parse_cache.enable()
    texts = json.loads(sys.stdin.read())
    out = []
    for t in texts:
        try:
            out.append(full(parser.parse_statement(t)))
        except CqlError as e:
            out.append(["error", e.code, str(e)])
    lark = "lark" in sys.modules  # imported only to parse
    # what a fresh parse gives, for comparison (the parser's own path, never the cache)
    fresh = [full(parser._parse(t, "single")) if o[0] != "error" else o for t, o in zip(texts, out)]
    print(json.dumps({{"parsed": parse_cache.parsed, "tables": parser._lark.cache_info().currsize, "lark": lark,
                       "out": out, "fresh": fresh}}))
""")


def _run(cache: Path, texts: list[str], fresh: bool = True) -> dict:
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache)}
    code = _RUN.format(tests=str(Path(__file__).resolve().parent))
    if not fresh:
        code = code.replace('fresh = [full(parser._parse(t, "single"))', "fresh = [o")
    r = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_kept_statements_are_the_asts_a_fresh_parse_gives(tmp_path: Path):
    texts = corpus()
    assert len(texts) > 200
    cache = tmp_path / "cache"
    first = _run(cache, texts)
    assert first["parsed"] == len(texts) and all(o[0] != "error" for o in first["out"])
    assert first["out"] == first["fresh"]
    assert len(list(cache.glob("cql-parsed-*.pickle"))) == 1

    second = _run(cache, texts, fresh=False)
    assert first["lark"]
    assert second["parsed"] == 0 and second["tables"] == 0  # nothing parsed, no parser tables loaded
    assert not second["lark"]  # nor lark imported
    assert second["out"] == first["fresh"]  # field by field, positions and value types included


def test_bad_statements_are_never_kept(tmp_path: Path):
    cache = tmp_path / "cache"
    bad = ["select from S", "select a from S [Range 5 secnds]", "register stream (a int)"]
    first = _run(cache, ["select a from S", *bad])
    second = _run(cache, ["select a from S", *bad])
    assert first["parsed"] == 1 and second["parsed"] == 0
    assert [o for o in first["out"] if o[0] == "error"] == [o for o in second["out"] if o[0] == "error"]
    assert len([o for o in second["out"] if o[0] == "error"]) == 3


def test_off_unless_enabled_and_keyed_by_the_grammar_and_code(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(parse_cache, "_enabled", False)  # (a test running the CLI in-process enables it)
    monkeypatch.setattr(parse_cache, "_table", {"select a from S": parse_cache.ast.TableQuery("X")})
    assert parse_cache.lookup("select a from S") is None  # not enabled: never consulted
    key = parse_cache.cache_key()
    monkeypatch.setattr(parse_cache, "_SOURCES", (*parse_cache._SOURCES, "printer.py"))
    assert parse_cache.cache_key() != key  # another module's text: another file
    monkeypatch.setattr(parse_cache, "_MAGIC", b"other\n")
    assert parse_cache.cache_path(parse_cache.cache_key()) != parse_cache.cache_path(key)


def test_a_damaged_file_is_ignored(tmp_path: Path):
    cache = tmp_path / "cache"
    texts = ["select a, Sum(b) from S [Range 5] group by a", "register stream S (a int, b int)"]
    _run(cache, texts)
    (kept,) = cache.glob("cql-parsed-*.pickle")
    kept.write_bytes(kept.read_bytes()[:-10])
    again = _run(cache, texts)
    assert again["parsed"] == 2 and again["out"] == again["fresh"]


def test_errors_are_the_same_in_process():
    with pytest.raises(CqlError) as e:
        from cqlstream.cql.parser import parse_statement

        parse_statement("select from S")
    assert e.value.code == "syntax"


def test_cqlstream_run_keeps_its_statements(tmp_path: Path):
    """The CLI enables the cache: a second run of a script parses nothing and writes the same."""
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{i + 1},{i % 3},{i}\n" for i in range(20)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "query : select A, Sum(B) from S [Range 5] group by A;\ndest : out\n"
    )
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(tmp_path / "cache")}
    outs = []
    for _ in range(2):
        cmd = [sys.executable, "-m", "cqlstream", "run", "run.cql", "--out-dir", "o", "--threads", "1"]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append((tmp_path / "o" / "out").read_text())
        assert len(list((tmp_path / "cache").glob("cql-parsed-*.pickle"))) == 1
    assert outs[0] == outs[1] and outs[0].count("\n") > 5


_LOOKUPS = textwrap.dedent("""
    import json, pickle, sys
    from cqlstream.cql import parse_cache, parser
    calls = []

    class Counting:  # the module's pickle, counting what it unpickles
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
        dumps = staticmethod(pickle.dumps)

        @staticmethod
        def loads(data):
            calls.append(len(data))
            return pickle.loads(data)

    parse_cache.pickle = Counting
    parse_cache.enable()
    for t in json.loads(sys.stdin.read()):
        parser.parse_statement(t)
    print(json.dumps({"parsed": parse_cache.parsed, "unpickled": len(calls)}))
""")


def _lookups(cache: Path, texts: list[str]) -> dict:
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache)}
    r = subprocess.run(
        [sys.executable, "-c", _LOOKUPS], input=json.dumps(texts), capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_run_unpickles_only_the_statements_it_looks_up(tmp_path: Path):
    """The file holds every text parsed so far; a run needing three unpickles the index and those three."""
    cache = tmp_path / "cache"
    texts = corpus()
    assert _lookups(cache, texts)["parsed"] == len(texts)
    few = [texts[0], texts[len(texts) // 2], texts[-1]]
    again = _lookups(cache, few)
    assert again == {"parsed": 0, "unpickled": 1 + len(few)}
    assert _lookups(cache, few * 2) == again  # a text looked up twice is unpickled once


def test_a_damaged_entry_is_parsed_afresh_and_replaced(tmp_path: Path, monkeypatch):
    """One entry that is not an AST pickle (in a file that is otherwise whole and ours) costs a
    parse of that text alone; the save at exit replaces it, and the other entries stay as they were."""
    import pickle

    from cqlstream.cql.cache_files import read_private, write_atomic

    cache = tmp_path / "cache"
    texts = ["select a, Sum(b) from S [Range 5] group by a", "register stream S (a int, b int)", "select * from S"]
    first = _run(cache, texts)
    monkeypatch.setenv("CQLSTREAM_CACHE_DIR", str(cache))
    key = parse_cache.cache_key()
    head = parse_cache._MAGIC + key.encode() + b"\n"
    path = parse_cache.cache_path(key)
    table = pickle.loads(read_private(path, head) or b"")
    kept = table[texts[2]]
    table[texts[0]] = b"\x80\x05garbage"
    table[texts[1]] = pickle.dumps("not an AST")
    write_atomic(path, head, pickle.dumps(table))

    second = _run(cache, texts)
    assert second["parsed"] == 2 and second["out"] == second["fresh"] == first["fresh"]
    table = pickle.loads(read_private(path, head) or b"")
    assert table[texts[2]] == kept  # copied as it was
    assert all(isinstance(pickle.loads(table[t]), parse_cache.ast.Node) for t in texts)
    assert _run(cache, texts, fresh=False)["parsed"] == 0
