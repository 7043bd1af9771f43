"""Sources parsed in a reader process (`cqlstream run --reader process`, io/reader_process.py).

Nothing a user sees changes: dests are the same bytes as at one thread and with reader threads
(several sources, a relation, text columns, block and round sizes from a few lines to the
defaults); a malformed row is the same error at the same file line with the same partial output;
a bad script stops the child before any output; a child that dies is an error naming it, never a
hang; read-ahead stays bounded as the thread readers' is; no child outlives its run (nor its parent)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cqlstream.cli import main as cli_main
from cqlstream.io import early_readers, reader_process
from cqlstream.io.early_readers import start_early_readers
from cqlstream.io.errors import ScriptError
from cqlstream.io.reader_process import ProcessReaders, RemoteSource
from cqlstream.io.run_settings import READ_AHEAD, READ_AHEAD_EARLY
from cqlstream.io.script_runner import run_script
from tests.child_processes import children
from tests.test_run_threads import MALFORMED_ROWS
from tests.test_stream_script import write


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("cqlstream-read", "cqlstream-writer"))]


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[set[int]]:
    """Yields the children the test process had before: a reader process, forked (no marker on its
    command line) or spawned, is any child beyond them."""
    assert _threads() == []
    before = children()
    yield before
    assert not children() - before, "a reader process outlived its run"
    assert _threads() == [], "a reader thread outlived its run"


def _rows(n: int, bad: dict[int, str] | None = None, start: int = 1) -> str:
    rows = [f"{i // 4 + start},{i % 50},{i % 7}" for i in range(n)]
    for k, text in (bad or {}).items():
        rows[k] = text
    return "i,i,i\n" + "\n".join(rows) + "\n"


def _relation(n: int) -> str:
    """Inserts, then deletes of every third tuple, with a text column (strings travel in band)."""
    rows = [f"{k // 3 + 1},+,{k % 40},name{k % 13}" for k in range(n)]
    rows += [f"{n // 3 + 2 + k // 5},-,{k % 40},name{k % 13}" for k in range(0, n, 3)]
    return "i,b,i,c8\n" + "\n".join(rows) + "\n"


SCRIPT = (
    "table : register stream S (A integer, B integer);\nsource : s.dat\n"
    "table : register stream T (A integer, B integer);\nsource : t.dat\n"
    "table : register relation R (K integer, N char(8));\nsource : r.dat\n"
    "query : select A, Count(*) from S [Rows 10] group by A;\ndest : agg\n"
    "query : Istream(select S.A, T.B from S [Range 3], T [Range 2] where S.A = T.A);\ndest : join\n"
    "query : select N, Count(*) from R group by N;\ndest : rel\n"
    "query : Rstream(select * from T [Now] where B = 3);\ndest : sel\n"
)
DESTS = ["agg", "join", "rel", "sel"]


@pytest.fixture
def three_sources(tmp_path: Path) -> Path:
    # S and T share a schema and instants (a swapped source changes the results), T starts later
    write(tmp_path, {"s.dat": _rows(3000), "t.dat": _rows(2600, start=40), "r.dat": _relation(900), "run.cql": SCRIPT})
    return tmp_path / "run.cql"


def _bounded(run: Callable[[], object], seconds: float = 120) -> None:
    """Call `run` on a daemon thread: a run that hangs (a lost block, a missing credit) fails the
    test instead of hanging it; an exception is raised here."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            run()
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=call, name="test-run", daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the run hangs"
    if errors:
        raise errors[0]


def _outputs(folder: Path) -> dict[str, bytes]:
    return {d: (folder / d).read_bytes() for d in DESTS}


@pytest.mark.parametrize("batch_rows,block", [(1, 64), (7, 300), (97, 1000), (100_000, None)])
def test_same_bytes_as_one_thread_and_reader_threads(batch_rows, block, three_sources, monkeypatch):
    out = three_sources.parent
    run_script(three_sources, out_dir=out / "one", threads=1, batch_rows=batch_rows, block_size=block)
    want = _outputs(out / "one")
    assert all(want.values())
    run_script(three_sources, out_dir=out / "thr", threads=2, batch_rows=batch_rows, block_size=block)
    assert _outputs(out / "thr") == want

    # every source is read by the child: no reader thread starts in this process
    def no_thread(*a, **kw):
        raise AssertionError("a reader thread was started")

    monkeypatch.setattr(early_readers, "start_reader", no_thread)
    import cqlstream.io.script_runner as runner

    monkeypatch.setattr(runner, "start_reader", no_thread)
    for writer, fork in (("thread", True), ("process", True), ("thread", False)):
        monkeypatch.setattr(reader_process, "_can_fork", lambda fork=fork: fork)  # forked / a fresh interpreter
        folder = out / f"proc-{writer}-{fork}"
        _bounded(
            lambda folder=folder, writer=writer: run_script(
                three_sources,
                out_dir=folder,
                threads=2,
                batch_rows=batch_rows,
                block_size=block,
                reader="process",
                writer=writer,
            )
        )
        assert _outputs(folder) == want, (writer, fork)


def test_the_cli_spawns_the_child_before_numpy_and_never_imports_pyarrow(three_sources, capsys):
    """In a fresh `cqlstream run --reader process`, the child is forked before the parent imports
    numpy, and the parent never imports pyarrow (here: no text column written, which formatting
    would use it for); the dests are those of one thread."""
    out = three_sources.parent
    lines = SCRIPT.splitlines(keepends=True)
    three_sources.write_text("".join(x for k, x in enumerate(lines) if k not in (4, 5, 10, 11)))
    code = textwrap.dedent(f"""
        import json, os, subprocess, sys
        events = []
        fork = os.fork
        def spy_fork():
            events.append("fork")
            return fork()
        os.fork = spy_fork
        class Spy:
            def find_spec(self, name, path=None, target=None):
                if name in ("numpy", "pyarrow", "cqlstream.engine.dsms"):
                    events.append("import " + name)
                return None
        sys.meta_path.insert(0, Spy())
        popen = subprocess.Popen.__init__
        def spy(self, args, *a, **kw):
            events.append("spawn " + args[2])
            popen(self, args, *a, **kw)
        subprocess.Popen.__init__ = spy
        from cqlstream.cli import main
        rc = main(["run", {str(three_sources)!r}, "--threads", "2", "--reader", "process",
                   "--out-dir", {str(out / "cli")!r}])
        print(json.dumps([rc, events, "pyarrow" in sys.modules]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rc, events, pyarrow = json.loads(r.stdout.strip().splitlines()[-1])
    assert rc == 0 and not pyarrow, events
    assert events.index("fork") < events.index("import numpy"), events  # (no other thread yet: forked)
    run_script(three_sources, out_dir=out / "one", threads=1)
    assert not (out / "cli" / "rel").exists()
    for d in ("agg", "join", "sel"):
        assert (out / "cli" / d).read_bytes() == (out / "one" / d).read_bytes() != b""


@pytest.mark.parametrize("bad,needle", MALFORMED_ROWS)
def test_a_malformed_row_is_the_same_error_at_the_same_block(bad, needle, tmp_path):
    """The child meets the row many blocks ahead of the engine: the error is raised where the feed
    takes that block, with the rounds before it written, as at one thread."""
    script = SCRIPT.split("table : register relation")[0] + "query : select A, Count(*) from S [Rows 10] group by A;\n"
    write(tmp_path, {"s.dat": _rows(12000, {9000: bad}), "t.dat": _rows(50), "run.cql": script + "dest : agg\n"})
    got = {}
    for t, reader in ((1, "thread"), (2, "thread"), (2, "process")):
        folder = tmp_path / f"o{t}{reader}"
        with pytest.raises(ScriptError) as ei:
            run_script(tmp_path / "run.cql", out_dir=folder, threads=t, batch_rows=500, block_size=2000, reader=reader)
        got[t, reader] = (str(ei.value), (folder / "agg").read_bytes())
    message, partial = got[1, "thread"]
    assert message.startswith(f"{tmp_path / 's.dat'}:9002: ") and needle in message, message
    assert partial, "the rounds before the bad row were written"
    assert got[2, "process"] == got[1, "thread"] == got[2, "thread"]


def test_a_malformed_row_through_the_cli(tmp_path, capsys):
    write(tmp_path, {"s.dat": _rows(200_000, {180_000: "45000,7,zz"}), "t.dat": _rows(10), "run.cql": SCRIPT})
    write(tmp_path, {"r.dat": _relation(30)})
    got = {}
    for reader in ("thread", "process"):
        out = tmp_path / reader
        argv = ["run", str(tmp_path / "run.cql"), "--reader", reader, "--out-dir", str(out), "--batch-rows", "5000"]
        assert cli_main(argv) == 2
        got[reader] = (capsys.readouterr().err, _outputs(out))
    assert got["process"][0].startswith(f"{tmp_path / 's.dat'}:180002: column 3 (B): 'zz' is not an integer"), got[
        "process"
    ][0]
    assert got["process"] == got["thread"]


@pytest.mark.parametrize(
    "later,needle,line",
    [
        ("query : select Nope from S;\ndest : x\n", "Nope", 7),
        ("table : register stream S (A integer);\nsource : s.dat\n", "'S'", 7),
    ],
)
def test_a_bad_script_stops_the_child_before_any_output(later, needle, line, tmp_path, capsys, nothing_left):
    write(
        tmp_path,
        {
            "s.dat": _rows(6000, {50: "1,1,zz"}),
            "t.dat": _rows(30),
            "r.dat": _relation(30),
            "run.cql": SCRIPT.split("query")[0] + later,
        },
    )
    script = tmp_path / "run.cql"
    for reader in ("thread", "process"):
        assert cli_main(["run", str(script), "--reader", reader, "--out-dir", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{script}:{line}: ") and needle in err, err
        assert not children() - nothing_left


def test_a_child_that_dies_is_an_error_naming_it_not_a_hang(three_sources):
    """Killed once the script is registered: the run raises a ScriptError naming the reader
    process and its exit code at the next block it wants, and reaps it."""
    early = start_early_readers(three_sources, None, 300, "process")
    assert isinstance(early, ProcessReaders)

    def kill() -> None:
        early.kill()
        early.proc.wait()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_script(three_sources, out_dir=three_sources.parent / "o", threads=2, batch_rows=50, early=early,
                       block_size=300, on_registered=kill)  # fmt: skip
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run, name="test-run", daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the run hangs on a dead reader process"
    assert len(errors) == 1 and isinstance(errors[0], ScriptError), errors
    assert "source reader process" in str(errors[0]) and f"exit code {-signal.SIGKILL}" in str(errors[0])


def test_read_ahead_is_bounded_as_the_threads_is(tmp_path):
    """Before its first block is taken a source sends READ_AHEAD_EARLY blocks; once taken, no more
    than READ_AHEAD are under way (sent and not taken)."""
    write(tmp_path, {"s.dat": _rows(20000), "run.cql": SCRIPT.split("table : register stream T")[0]})
    early = start_early_readers(tmp_path / "run.cql", None, 200, "process")
    assert isinstance(early, ProcessReaders)
    try:
        assert early.names() == ["S"]
        got = early.take(tmp_path / "s.dat", early._sources[0][1], 200)
        assert got is not None and isinstance(got[0], RemoteSource)
        blocks = got[1]
        assert isinstance(blocks, reader_process.RemoteBlocks)

        def settled(want: int) -> int:
            deadline = time.monotonic() + 20
            while blocks.q.qsize() < want and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # room for any block sent beyond the bound to arrive
            return blocks.q.qsize()

        assert settled(READ_AHEAD_EARLY) == READ_AHEAD_EARLY
        first = [next(blocks) for _ in range(READ_AHEAD_EARLY)]
        assert settled(READ_AHEAD) == READ_AHEAD
        rest = list(blocks)
        rows = sum(len(b) for b, _ in first + rest)
        assert rows == 20000
        for (b, nxt), (c, _) in zip(first + rest, (first + rest)[1:]):
            assert nxt == int(c.ts[0]) and int(b.ts[-1]) < nxt  # whole instants, none lost
        blocks.close()
    finally:
        early.close()


def test_no_child_outlives_its_parent(tmp_path):
    """A parent that dies without closing anything: the child sees its stdin end and exits."""
    write(tmp_path, {"s.dat": _rows(50000), "run.cql": SCRIPT.split("table : register stream T")[0]})
    code = textwrap.dedent(f"""
        import os
        from cqlstream.io.early_readers import start_early_readers
        early = start_early_readers({str(tmp_path / "run.cql")!r}, None, 300, "process")
        early.names()  # the child has started its sources (and is blocked on credits)
        print(early.proc.pid, flush=True)
        os._exit(0)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return  # gone
        if state == "Z":
            return  # ended, waiting for whoever adopted it
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the reader process outlived its parent")


def test_reader_option_is_checked(tmp_path):
    with pytest.raises(ValueError):
        run_script(tmp_path / "x.cql", threads=2, reader="fork")
    with pytest.raises(SystemExit):
        cli_main(["run", str(tmp_path / "x.cql"), "--reader", "fork"])


@pytest.mark.parametrize(
    "script",
    [
        None,  # no script
        SCRIPT.replace("source : t.dat", "source : missing.dat"),  # stops at the missing file
        SCRIPT.replace("register stream T (A integer, B integer)", "register stream T (A integer)"),  # type line
        SCRIPT.replace("register stream T", "register stream S"),  # S twice
        SCRIPT,
    ],
)
def test_the_first_pass_hands_the_child_what_the_threads_would_read(script, tmp_path):
    write(tmp_path, {"s.dat": _rows(300), "t.dat": _rows(300), "r.dat": _relation(30)})
    if script is not None:
        write(tmp_path, {"run.cql": script})
    names = {}
    for reader in ("thread", "process"):
        early = start_early_readers(tmp_path / "run.cql", None, 1000, reader)
        try:
            names[reader] = early.names()
        finally:
            early.close()
    assert names["process"] == names["thread"]
    assert names["thread"] == (["S", "T", "R"] if script == SCRIPT else [] if script is None else ["S"])
