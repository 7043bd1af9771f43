"""`cqlstream run` with writer threads empties an existing dest on a writer thread instead of at
open (io/result_writer.py): what a dest holds afterwards must not depend on that. An old, longer
dest is replaced by exactly the run's bytes at every thread count, on success and when the run
fails part-way or before anything was written; a device dest is written, never truncated; a
failed truncation is an error raised to the run, with the CLI's message, never a hang."""

from __future__ import annotations

import errno
import os
import subprocess
import threading

import pytest

from cqlstream.io.errors import ScriptError
from cqlstream.io.script_runner import run_script
from tests.test_stream_script import CQLSTREAM, write

# (threads, writer): inline, writer threads (deferred truncation), writer processes (truncated at open)
RUNS = [(1, "thread"), (2, "thread"), (3, "thread"), (2, "process")]
OLD = b"old contents that are longer than any result line of these runs\n" * 5000


def _script(tmp_path, rows: int, bad_row: int | None = None):
    lines = [f"{i // 4 + 1},{i % 50},{i % 7}" for i in range(rows)]
    if bad_row is not None:
        lines[bad_row] = f"{bad_row // 4 + 1},zz,1"
    write(
        tmp_path,
        {
            "s.dat": "i,i,i\n" + "\n".join(lines) + "\n",
            "run.cql": "table : register stream S (A integer, B integer);\nsource : s.dat\n"
            "query : select B, Count(*) from S [Rows 10] group by B;\ndest : agg\n"
            "query : select * from S where B = 3;\ndest : sel\n",
        },
    )
    return tmp_path / "run.cql"


def _run(script, folder, threads, writer, old: bool, **kw):
    """The run's error (or None) and its dests' bytes, the dests holding OLD beforehand if `old`."""
    folder.mkdir(parents=True)
    if old:
        for d in ("agg", "sel"):
            (folder / d).write_bytes(OLD)
    err = None
    try:
        run_script(script, out_dir=folder, threads=threads, writer=writer, batch_rows=300, block_size=900, **kw)
    except ScriptError as e:
        err = str(e)
    return err, {d: (folder / d).read_bytes() for d in ("agg", "sel")}


@pytest.mark.parametrize("bad_row", [None, 2500])  # a whole run; one that fails many rounds in
def test_old_dest_is_replaced_by_exactly_the_runs_bytes(bad_row, tmp_path):
    script = _script(tmp_path, 4000, bad_row)
    fresh = _run(script, tmp_path / "fresh", 1, "thread", old=False)
    assert fresh[1]["agg"] and fresh[1]["sel"]
    assert (fresh[0] is None) == (bad_row is None)
    for t, writer in RUNS:
        got = _run(script, tmp_path / f"t{t}-{writer}", t, writer, old=True)
        assert got == fresh, (t, writer)


def test_dests_are_emptied_when_the_run_fails_before_writing(tmp_path):
    """The second dest cannot be opened (a folder): the first, opened already, is left empty at
    every thread count, as opening it with "wb" leaves it."""
    write(
        tmp_path,
        {
            "s.dat": "i,i,i\n1,2,3\n",
            "run.cql": "table : register stream S (A integer, B integer);\nsource : s.dat\n"
            "query : select * from S;\ndest : out/a\nquery : select * from S;\ndest : out/b\n",
        },
    )
    for t, writer in RUNS:
        out = tmp_path / f"t{t}-{writer}"
        (out / "b").mkdir(parents=True)
        (out / "a").write_bytes(OLD)
        with pytest.raises(ScriptError, match="cannot write dest"):
            run_script(tmp_path / "run.cql", out_dir=out, threads=t, writer=writer)
        assert (out / "a").read_bytes() == b"", (t, writer)


def test_writer_threads_empty_the_dests_and_the_main_thread_does_not(tmp_path, monkeypatch):
    script = _script(tmp_path, 400)
    seen: list[str] = []
    real = os.ftruncate

    def spy(fd, size):
        seen.append(threading.current_thread().name)
        return real(fd, size)

    monkeypatch.setattr(os, "ftruncate", spy)
    got = _run(script, tmp_path / "t2", 2, "thread", old=True)
    assert sorted(seen) == ["cqlstream-writer-0", "cqlstream-writer-0"]
    assert got == _run(script, tmp_path / "t1", 1, "thread", old=True)


def test_device_dest_is_written_not_truncated(tmp_path):
    """A character device (/dev/null) as dest: ftruncate would fail on it; it is only written."""
    write(
        tmp_path,
        {
            "s.dat": "i,i,i\n" + "".join(f"{i + 1},{i},{i}\n" for i in range(50)),
            "run.cql": "table : register stream S (A integer, B integer);\nsource : s.dat\n"
            "query : select * from S;\ndest : /dev/null\n",
        },
    )
    for t, writer in RUNS:
        assert run_script(tmp_path / "run.cql", threads=t, writer=writer) == {"/dev/null": 50}


def test_a_failed_truncation_is_the_runs_error_not_a_hang(tmp_path, monkeypatch):
    script = _script(tmp_path, 4000)

    def broken(fd, size):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", broken)
    before = set(threading.enumerate())  # an earlier test's engine may have left its clock
    for t in (2, 3):
        (tmp_path / f"t{t}").mkdir()
        with pytest.raises(OSError) as ei:
            run_script(script, out_dir=tmp_path / f"t{t}", threads=t, batch_rows=300)
        assert ei.value.errno == errno.EIO
    assert not [x for x in set(threading.enumerate()) - before if x.name.startswith("cqlstream-")]


def test_cli_reports_a_failed_truncation(tmp_path):
    """Through the CLI, in its own process (os.ftruncate broken there by a sitecustomize): the
    usual one-line message, exit code 2, no traceback."""
    script = _script(tmp_path, 400)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import errno, os\n"
        "def _broken(fd, size):\n"
        "    raise OSError(errno.EIO, os.strerror(errno.EIO))\n"
        "os.ftruncate = _broken\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run(
        [CQLSTREAM, "run", str(script), "--threads", "2", "--out-dir", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr == "cannot write: Input/output error\n", r.stderr
