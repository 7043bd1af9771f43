"""The dataclasses' compiled methods kept between processes (cqlstream/dataclass_code.py).

A process that finds no cache compiles the methods and saves them; the next compiles none; and in
both the classes' generated methods are the same code, with the same annotations, defaults and
closures, as plain `dataclasses` builds (fingerprinted in fresh interpreters). A damaged file is
ignored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# Fingerprints every method dataclasses generated ("<string>" code) for the classes the CLI and a
# script run define, then prints them with the count of texts this process compiled.
_PROBE = textwrap.dedent("""
    import dataclasses, json, sys
    from types import CodeType, FunctionType
    import cqlstream
    from cqlstream import dataclass_code
    if {plain}:
        del dataclasses.exec  # plain dataclasses: the builtin exec compiles every method
    import cqlstream.cli, cqlstream.io.script_runner

    def code(co):
        consts = [code(c) if isinstance(c, CodeType) else repr(c) for c in co.co_consts]
        return [co.co_name, co.co_code.hex(), consts, co.co_names, co.co_varnames, co.co_freevars,
                co.co_cellvars, co.co_flags, co.co_filename, co.co_argcount, co.co_kwonlyargcount]

    def value(v):
        if isinstance(v, type):
            return "class " + v.__module__ + "." + v.__qualname__
        if isinstance(v, (int, float, str, bool, tuple, type(None))):
            return repr(v)
        return "a " + type(v).__module__ + "." + type(v).__qualname__

    seen = {{}}
    for mod in list(sys.modules.values()):
        for cls in list(vars(mod).values()) if mod is not None else ():
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                continue
            for name, f in vars(cls).items():
                if isinstance(f, FunctionType) and f.__code__.co_filename == "<string>":
                    seen[cls.__module__ + "." + cls.__qualname__ + "." + name] = [
                        code(f.__code__),
                        {{k: value(a) for k, a in f.__annotations__.items()}},
                        [value(d) for d in f.__defaults__ or ()],
                        {{k: value(d) for k, d in (f.__kwdefaults__ or {{}}).items()}},
                        [value(c.cell_contents) for c in f.__closure__ or ()],
                    ]
    print(json.dumps({{"compiled": dataclass_code.compiled, "methods": seen}}))
""")


def _probe(cache: Path, plain: bool = False) -> dict:
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache)}
    r = subprocess.run(
        [sys.executable, "-c", _PROBE.format(plain=plain)], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _the_file(cache: Path) -> Path:
    files = sorted(cache.glob("dataclass-code-*.marshal"))
    assert len(files) == 1, files
    return files[0]


def test_compiled_once_then_loaded_and_the_same_as_plain_dataclasses(tmp_path: Path):
    cache = tmp_path / "cache"
    plain = _probe(cache, plain=True)
    assert plain["compiled"] == 0 and not cache.exists()  # the builtin exec did the work, nothing saved
    # the AST, plan nodes, ... (every generated method of the modules a run imports; ~490 since
    # session 15 made optional features' modules load when used)
    assert len(plain["methods"]) > 300

    first = _probe(cache)
    assert first["compiled"] >= len(plain["methods"])
    assert _the_file(cache).stat().st_size > 0

    second = _probe(cache)
    assert second["compiled"] == 0  # every method's code came from the file

    assert first["methods"] == plain["methods"]
    assert second["methods"] == plain["methods"]


def test_a_damaged_file_is_ignored_and_rewritten(tmp_path: Path):
    cache = tmp_path / "cache"
    first = _probe(cache)
    path = _the_file(cache)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated: the checksum no longer matches

    again = _probe(cache)
    assert again["compiled"] == first["compiled"] and again["methods"] == first["methods"]
    assert _probe(cache)["compiled"] == 0  # the rewritten file is whole

    path.chmod(0o622)  # writable by others: never loaded
    assert _probe(cache)["compiled"] == first["compiled"]


def test_other_packages_classes_are_compiled_as_usual_and_never_saved(tmp_path: Path):
    """Only cqlstream's own classes go through the table: a class of another module (the user's,
    a library's) is compiled by the builtin exec and its text never reaches the file."""
    cache = tmp_path / "cache"
    probe = textwrap.dedent("""
        import dataclasses, json
        import cqlstream
        from cqlstream import dataclass_code

        @dataclasses.dataclass(frozen=True)
        class UsersOwnRecordType:
            a: int
            b: str = "x"

        r = UsersOwnRecordType(1)
        assert r == UsersOwnRecordType(1, "x") and hash(r) == hash(UsersOwnRecordType(1))
        user = dataclass_code.compiled
        import cqlstream.cql.ast  # cqlstream's own: compiled through the table
        dataclass_code.save()
        saved = dataclass_code._read()
        print(json.dumps({"user": user, "ours": dataclass_code.compiled,
                          "leaked": sum("UsersOwnRecordType" in t or "'x'" in t for t in saved),
                          "saved": len(saved)}))
    """)
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["user"] == 0  # the user's class: the builtin exec, nothing counted
    assert out["ours"] > 0 and out["saved"] >= out["ours"]  # cql.ast's methods went through the table
    assert out["leaked"] == 0


def test_a_process_unmarshals_only_the_methods_it_creates(tmp_path: Path):
    """The file holds every method any process compiled (here: the CLI's and a script run's); a
    process defining fewer classes unmarshals the index and the code of the texts it executes."""
    cache = tmp_path / "cache"
    assert _probe(cache)["compiled"] > 500
    probe = textwrap.dedent("""
        import json, marshal
        import cqlstream
        from cqlstream import dataclass_code
        calls = []

        class Counting:  # the module's marshal, counting what it loads
            dumps = staticmethod(marshal.dumps)

            @staticmethod
            def loads(data):
                calls.append(len(data))
                return marshal.loads(data)

        dataclass_code.marshal = Counting
        import cqlstream.cql.ast
        print(json.dumps({"compiled": dataclass_code.compiled, "loads": len(calls),
                          "used": len(dataclass_code._used), "kept": len(dataclass_code._entries())}))
    """)
    env = {**os.environ, "CQLSTREAM_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["compiled"] == 0 and 0 < out["used"] < out["kept"] // 2
    assert out["loads"] <= 1 + out["used"]


def test_a_damaged_entry_is_compiled_and_replaced(tmp_path: Path):
    """An entry that is not a code object's marshal (in a file otherwise whole and ours) is
    compiled as if absent, and the save at exit replaces it."""
    import marshal

    from cqlstream import dataclass_code
    from cqlstream.cql.cache_files import read_private, write_atomic

    cache = tmp_path / "cache"
    first = _probe(cache)
    path = _the_file(cache)
    head = dataclass_code._head()
    table = marshal.loads(read_private(path, head) or b"")
    bad = sorted(t for t in table if "__init__" in t)[:3]
    assert len(bad) == 3
    table[bad[0]] = b"\xffnot marshal"
    table[bad[1]] = marshal.dumps("a string, not code")
    table[bad[2]] = b""
    write_atomic(path, head, marshal.dumps(table))

    again = _probe(cache)
    assert again["compiled"] == 3 and again["methods"] == first["methods"]
    table = marshal.loads(read_private(path, head) or b"")
    assert all(isinstance(marshal.loads(table[t]), type(_the_file.__code__)) for t in bad)
    assert _probe(cache)["compiled"] == 0
