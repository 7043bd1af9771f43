"""bench/bytecode.py: the benchmarks time cqlstream as an install starts it, with its .pyc files
written, even where PYTHONDONTWRITEBYTECODE is set."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from bench import bytecode
from bench.stream_queries import default_cqlstream


def test_interpreter_of_reads_both_console_script_forms(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("#!/opt/venv/bin/python3 -E\nimport sys\n")
    assert bytecode.interpreter_of(str(plain)) == "/opt/venv/bin/python3"
    # pip's form when the interpreter's path is too long for a #! line
    long = tmp_path / "long"
    long.write_text("#!/bin/sh\n'''exec' \"/very/long/venv/bin/python\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert bytecode.interpreter_of(str(long)) == "/very/long/venv/bin/python"
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    with pytest.raises(SystemExit, match="no #! line"):
        bytecode.interpreter_of(str(data))


def test_compile_for_writes_current_pyc_of_the_package_it_runs():
    exe = default_cqlstream()
    spec = importlib.util.find_spec("cqlstream.engine.batch")
    assert spec is not None and spec.origin is not None
    cached = Path(importlib.util.cache_from_source(spec.origin))
    cached.unlink(missing_ok=True)
    bytecode.compile_for(exe)
    assert cached.is_file()
    assert os.stat(cached).st_mtime >= os.stat(spec.origin).st_mtime
    # the interpreter it used is the console script's own, the one running these tests
    assert Path(bytecode.interpreter_of(exe)).resolve() == Path(sys.executable).resolve()
