"""`cqlstream run --threads`: reading ahead and writing on worker threads or in writer processes
changes nothing a user can see. Dest files are the same bytes at every thread count and chunk size (the benchmark
suite's queries, a multi-dest script over a stream, a relation and a view); a bad source row, an
input the engine rejects and a full disk give the same error at every thread count, with the same
partial output; no worker thread outlives a run. Source files are read in blocks that give the
same batches as pyarrow's streaming CSV reader did (a run takes them cut at instants,
tests/test_source_instants.py) without reading the whole file ahead."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from bench import stream_queries
from cqlstream.engine.batch import Batch
from cqlstream.io.dat_source import SourceReader
from cqlstream.io.errors import ScriptError
from cqlstream.io.line_blocks import line_blocks
from cqlstream.io.prefetch import Prefetch
from cqlstream.io.result_writer import ResultWriter
from cqlstream.io.script_runner import run_script
from tests.child_processes import children
from tests.test_stream_script import CQLSTREAM, S_DDL, _src, write

THREADS = [1, 2, 3]  # 2 and 3: reader threads and writer processes
WRITERS = [(t, "process") for t in THREADS] + [(2, "thread")]  # every way of writing (thread: the default)
# (batch_rows, block_size): tiny rounds and blocks of a few lines, and the defaults
CHUNKS = [(7, 64), (97, 300), (None, None)]


_MINE = ("cqlstream-read-", "cqlstream-writer-", "cqlstream-prefetch")  # the runner's worker threads


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(_MINE)]


def _writer_processes() -> set[int]:
    """Writer processes that are children of this one (running or not yet reaped)."""
    return children(b"cqlstream.io.writer_process")


@pytest.fixture(autouse=True)
def no_thread_left():
    assert _workers() == [] and not _writer_processes()
    yield
    assert _workers() == [], "a worker thread outlived its run"
    assert not _writer_processes(), "a writer process outlived its run"


def _run_all(script: Path, out: Path, dests: list[str], **kw) -> dict[object, dict[str, bytes]]:
    """{threads (or (2, "thread")): {dest name: bytes}} for each thread count and writer kind."""
    got: dict[object, dict[str, bytes]] = {}
    for t, writer in WRITERS:
        folder = out / f"t{t}-{writer}"
        run_script(script, out_dir=folder, threads=t, writer=writer, **kw)
        got[t if writer == "process" else (t, writer)] = {d: (folder / d).read_bytes() for d in dests}
    return got


def _chunk_kw(batch_rows: int | None, block: int | None) -> dict:
    return {k: v for k, v in {"batch_rows": batch_rows, "block_size": block}.items() if v is not None}


@pytest.mark.parametrize("query", list(stream_queries.QUERIES))
def test_suite_queries_same_bytes_at_every_thread_count(query, tmp_path):
    script, dests = stream_queries.write_script(query, 2000)
    names = [d.name for d in dests]
    for batch_rows, block in CHUNKS:
        got = _run_all(script, tmp_path / f"{batch_rows}-{block}", names, **_chunk_kw(batch_rows, block))
        assert sum(len(b) for b in got[1].values()) > 0
        assert got[2] == got[1] and got[3] == got[1] and got[(2, "thread")] == got[1], (query, batch_rows, block)


def _multi_dest(tmp_path: Path, rows: int = 3000) -> tuple[Path, list[str]]:
    """A script with two streams, a relation, a view and five dests (ints, floats, bytes, text)."""
    rng = np.random.default_rng(7)
    ts = np.sort(rng.integers(1, rows // 4, rows))
    s = [
        f"{t},{a},{b:.6g},{c},{d}"
        for t, a, b, c, d in zip(
            ts,
            rng.integers(0, 50, rows),
            rng.normal(0, 1e3, rows),
            rng.choice(list("abc"), rows),
            rng.choice(["x", "yy", "zzz", " w ", "long"], rows),
        )
    ]
    t_ts = np.sort(rng.integers(1, rows // 4, rows // 2))
    t = [f"{x},{a}" for x, a in zip(t_ts, rng.integers(0, 50, rows // 2))]
    r = [f"{k + 1},+,{k},n{k}" for k in range(20)] + [f"{rows // 8 + k},-,{k},n{k}" for k in range(0, 20, 3)]
    write(
        tmp_path,
        {
            "s.dat": "i,i,f,b,c4\n" + "\n".join(s) + "\n",
            "t.dat": "i,i\n" + "\n".join(t),  # no newline after the last row
            "r.dat": "i,b,i,c3\r\n" + "\r\n".join(r) + "\r\n",  # CRLF line ends
            "run.cql": f"""table : {S_DDL};
source : s.dat
table : register stream T (A integer);
source : t.dat
table : register relation R (A integer, N char(3));
source : r.dat
vquery : select A, Sum(B) from S [Range 5] group by A;
vtable : register relation V (A integer, SB float);
query : select * from S where A < 10;
dest : filter
query : select S.A, R.N, S.D from S [Rows 50], R where S.A = R.A;
dest : join
query : select * from V where SB > 0;
dest : view
query : Istream(select T.A, Count(*) from T [Range 3] group by T.A);
dest : counts
query : select C, Max(B), Min(D) from S [Rows 100] group by C;
dest : bytes
""",
        },
    )
    return tmp_path / "run.cql", ["filter", "join", "view", "counts", "bytes"]


def test_multi_dest_script_same_bytes_at_every_thread_count(tmp_path):
    script, dests = _multi_dest(tmp_path)
    for batch_rows, block in CHUNKS:
        got = _run_all(script, tmp_path / f"{batch_rows}-{block}", dests, **_chunk_kw(batch_rows, block))
        assert all(got[1][d] for d in dests), [d for d in dests if not got[1][d]]
        assert got[2] == got[1] and got[3] == got[1] and got[(2, "thread")] == got[1], (batch_rows, block)


# ----------------------------------------------------------------------------- errors


def _errors_and_outputs(script: Path, out: Path, dests: list[str], **kw) -> dict[object, tuple[str, dict]]:
    got: dict[object, tuple[str, dict]] = {}
    for t, writer in WRITERS:
        folder = out / f"t{t}-{writer}"
        with pytest.raises(ScriptError) as ei:
            run_script(script, out_dir=folder, threads=t, writer=writer, **kw)
        got[t if writer == "process" else (t, writer)] = (
            str(ei.value),
            {d: (folder / d).read_bytes() for d in dests},
        )
    return got


# a malformed row of a 3-column source (after rows at ts ~2400) and the error it is reported with
MALFORMED_ROWS = [
    ("2400,7,zz", "'zz' is not an integer"),  # pyarrow rejects the block
    ("2400,7,1,1", "expected 3 comma-separated values"),
    ("3,7,1", "timestamp 3 is smaller than the previous one"),  # found converting the block
]


@pytest.mark.parametrize("bad,needle", MALFORMED_ROWS)
def test_bad_source_row_same_error_and_output(bad, needle, tmp_path):
    rows = [f"{i // 4 + 1},{i % 50},{i % 7}" for i in range(12000)]
    rows[9000] = bad  # far into the file: the reader thread meets it many blocks ahead of the engine
    write(
        tmp_path,
        {
            "s.dat": "i,i,i\n" + "\n".join(rows) + "\n",
            "run.cql": "table : register stream S (A integer, B integer);\nsource : s.dat\n"
            "query : select A, Count(*) from S [Rows 10] group by A;\ndest : agg\n"
            "query : select * from S where B = 3;\ndest : sel\n",
        },
    )
    got = _errors_and_outputs(tmp_path / "run.cql", tmp_path / "out", ["agg", "sel"], batch_rows=500, block_size=2000)
    message, outputs = got[1]
    assert message.startswith(f"{tmp_path / 's.dat'}:9002: ") and needle in message, message
    assert outputs["agg"], "rounds before the bad row were written"
    assert got[2] == got[1] and got[3] == got[1] and got[(2, "thread")] == got[1]


def test_rejected_input_same_error_at_every_thread_count(tmp_path):
    """A relation deleting a tuple it does not hold: the engine refuses the push (main thread)
    while the reader thread is blocks ahead; the error names the same line."""
    rows = [f"{k + 1},+,{k}" for k in range(3000)] + ["3001,-,99999"] + [f"{3002 + k},+,{k}" for k in range(3000)]
    write(
        tmp_path,
        {
            "r.dat": "i,b,i\n" + "\n".join(rows) + "\n",
            "run.cql": "table : register relation R (A integer);\nsource : r.dat\n"
            "query : select * from R where A < 100;\ndest : out\n",
        },
    )
    got = _errors_and_outputs(tmp_path / "run.cql", tmp_path / "o", ["out"], batch_rows=200, block_size=1000)
    assert got[1][0].startswith(f"{tmp_path / 'r.dat'}:3002: "), got[1][0]
    assert got[2] == got[1] and got[3] == got[1] and got[(2, "thread")] == got[1]


@pytest.mark.parametrize("rows", [20, 200_000])  # fails at close (buffered) / mid-run on a worker
def test_full_disk_same_error_at_every_thread_count(rows, tmp_path):
    """Results written to /dev/full: every write fails with ENOSPC, raised as the same OSError and
    reported by the CLI as the same message, whichever thread wrote."""
    if not Path("/dev/full").exists():
        pytest.fail("this test needs /dev/full (Linux)")
    write(
        tmp_path,
        {
            "s.dat": "i,i\n" + "".join(f"{i // 10 + 1},{i}\n" for i in range(rows)),
            "run.cql": "table : register stream S (A integer);\nsource : s.dat\n"
            "query : select * from S;\ndest : /dev/full\nquery : select * from S where A = 5;\ndest : ok\n",
        },
    )
    for t, writer in WRITERS:
        with pytest.raises(OSError) as ei:
            run_script(tmp_path / "run.cql", threads=t, batch_rows=1000, writer=writer)
        assert ei.value.errno == errno.ENOSPC, ei.value
    messages = set()
    for t in THREADS:
        r = subprocess.run(
            [CQLSTREAM, "run", str(tmp_path / "run.cql"), "--threads", str(t)], capture_output=True, text=True
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        messages.add(r.stderr)
    assert messages == {"cannot write: No space left on device\n"}


def test_threads_option_is_checked(tmp_path):
    r = subprocess.run([CQLSTREAM, "run", str(tmp_path / "x.cql"), "--threads", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--threads must be at least 1" in r.stderr
    with pytest.raises(ValueError):
        run_script(tmp_path / "x.cql", threads=0)


# ----------------------------------------------------------------------------- the pieces


def _streaming_batches(path: Path, names: list[str], block: int) -> list[int]:
    """Rows per batch as pyarrow's streaming CSV reader delivers them (empty batches dropped)."""
    ro = pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=block)
    po = pacsv.ParseOptions(ignore_empty_lines=True)
    reader = pacsv.open_csv(path, read_options=ro, parse_options=po)
    return [b.num_rows for b in reader if b.num_rows]


@pytest.mark.parametrize("block", [64, 100, 257, 4096])
@pytest.mark.parametrize("ending", ["\n", "\r\n", "\n\n"])
def test_blocks_give_the_streaming_readers_batches(block, ending, tmp_path):
    rng = np.random.default_rng(block)
    lines = [
        f"{i // 3 + 1},{v},{'x' * int(w)}"
        for i, (v, w) in enumerate(zip(rng.integers(0, 10**6, 700), rng.integers(1, 9, 700)))
    ]
    p = tmp_path / "s.dat"
    for tail in ("", ending):  # with and without a line end after the last row
        p.write_text("i,i,c8" + ending + ending.join(lines) + tail)
        src = _src("register stream S (A integer, B char(8))")
        mine = [len(b) for b in SourceReader(p, src, block_size=block)]
        assert mine == _streaming_batches(p, ["t", "a", "b"], block)
        assert sum(mine) == 700


def test_line_blocks_hold_whole_lines(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"head\n" + b"a\n" + b"b" * 50 + b"\n" + b"c\r\nd")
    blocks = list(line_blocks(p, 5, 8))
    # bytes 5-7 hold "a\n"; the long line ends in the last block, which also takes the unterminated "d"
    assert blocks == [b"a\n", b"b" * 50 + b"\nc\r\nd"]
    assert list(line_blocks(p, p.stat().st_size, 8)) == []
    p.write_bytes(b"h\n" + b"1,2\n" * 4 + b"3,4567")  # 24 bytes: the file ends on a block boundary
    assert list(line_blocks(p, 2, 8)) == [b"1,2\n", b"1,2\n1,2\n", b"1,2\n3,4567"]


def test_reading_does_not_buffer_the_whole_file(tmp_path):
    """Memory held by pyarrow while a reader is consumed slowly stays near one block, whatever the
    file size (pyarrow's own streaming reader read ahead up to 32 blocks)."""
    p = tmp_path / "s.dat"
    p.write_text("i,i,i\n" + "".join(f"{i // 10 + 1},{i % 1000},{i % 100}\n" for i in range(400_000)))
    src = _src("register stream S (A integer, B integer)")
    base = pa.total_allocated_bytes()
    peak = 0
    for _ in SourceReader(p, src, block_size=64 << 10):
        time.sleep(0.002)  # a slow consumer
        peak = max(peak, pa.total_allocated_bytes() - base)
    assert peak < 4 * (64 << 10) * 2, peak  # a few blocks' worth of parsed columns, not the file (~6 MB)


def test_prefetch_keeps_order_and_raises_where_the_source_did():
    def gen():
        yield from range(50)
        raise RuntimeError("bad row")

    got = []
    with pytest.raises(RuntimeError, match="bad row"):
        for x in Prefetch(gen(), depth=3):
            got.append(x)
    assert got == list(range(50))


def test_prefetch_close_stops_a_blocked_worker():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    p = Prefetch(endless(), depth=2)
    assert [next(p), next(p), next(p)] == [0, 1, 2]
    began = time.monotonic()
    p.close()
    assert time.monotonic() - began < 5 and closed.is_set()
    with pytest.raises(StopIteration):
        next(p)


def test_writer_error_surfaces_and_never_blocks(tmp_path):
    """A worker whose file fails keeps taking rounds (the producer never blocks on it) and its
    error is raised at the next hand-over; other dests keep being written."""
    from cqlstream.engine.batch import Batch

    b = Batch(
        [np.arange(5, dtype=np.int64)],
        [None],
        np.arange(5, dtype=np.int64),
        np.ones(5, np.int8),
        np.zeros(5, np.uint64),
    )
    good = open(tmp_path / "good", "wb")  # noqa: SIM115
    full = open("/dev/full", "wb", buffering=0)  # noqa: SIM115
    w = ResultWriter([good, full], workers=2, depth=1)
    w.write([(0, b)])
    w.write([(1, b)])  # fails on worker 1
    deadline = time.monotonic() + 10
    with pytest.raises(OSError) as ei:
        while time.monotonic() < deadline:
            w.write([(0, b), (1, b)])
    assert ei.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        w.close()
    good.close()
    full.close()
    assert (tmp_path / "good").read_bytes().startswith(b"[0]:+:0\n[1]:+:1\n")


def test_reading_never_starts_pyarrows_thread_pool(tmp_path, monkeypatch):
    """Every parse, the slow ones locating a bad line included, runs without pyarrow's thread pool:
    started from a reader thread it sometimes aborted the process at exit (C++ terminate), and its
    threads each hold an allocator heap."""
    import cqlstream.io.dat_source as dat_source

    seen = []
    real = dat_source.pacsv.read_csv

    def spy(*args, **kw):
        seen.append(kw["read_options"].use_threads)
        return real(*args, **kw)

    monkeypatch.setattr(dat_source.pacsv, "read_csv", spy)
    p = tmp_path / "s.dat"
    p.write_text("i,i,f\n" + "".join(f"{i},{i},1.5\n" for i in range(300)) + "301,x,2\n302,1,zz\n")
    with pytest.raises(ScriptError) as ei:
        list(SourceReader(p, _src("register stream S (A integer, B float)"), block_size=512))
    assert ei.value.line == 302 and "'x' is not an integer" in ei.value.reason
    assert len(seen) > 10 and not any(seen)


# ----------------------------------------------------------------------------- writer processes


def _ints(n: int) -> Batch:
    return Batch(
        [np.arange(n, dtype=np.int64)],
        [None],
        np.arange(n, dtype=np.int64),
        np.ones(n, np.int8),
        np.zeros(n, np.uint64),
    )


def test_writer_process_that_dies_is_an_error_not_a_hang(tmp_path):
    """A writer process killed mid-run: the next hand-over (or close) raises an OSError saying
    so, and the process is reaped."""
    from cqlstream.io.writer_process import WriterProcess

    f = open(tmp_path / "out", "wb")  # noqa: SIM115
    w = ResultWriter([f], processes=[p := WriterProcess.spawn()])
    w.write([(0, _ints(10))])
    os.kill(p.proc.pid, signal.SIGKILL)
    p.proc.wait()
    with pytest.raises(OSError, match="writer process ended unexpectedly"):
        for _ in range(100):  # the pipe may take a few rounds before it reports the dead reader
            w.write([(0, _ints(100_000))])
        w.close()
    p.abort()
    f.close()


def test_writer_process_is_reaped_when_the_script_fails_early(tmp_path):
    """Writer processes start before the script is parsed: a script error still ends them."""
    write(tmp_path, {"run.cql": "table : register stream S (A integer;\nsource : s.dat\n"})
    for t in (2, 3):
        with pytest.raises(ScriptError):
            run_script(tmp_path / "run.cql", threads=t)


def test_writer_option_is_checked(tmp_path):
    r = subprocess.run([CQLSTREAM, "run", str(tmp_path / "x.cql"), "--writer", "fork"], capture_output=True, text=True)
    assert r.returncode == 2 and "--writer" in r.stderr
    with pytest.raises(ValueError):
        run_script(tmp_path / "x.cql", threads=2, writer="fork")


def test_writer_process_error_surfaces_at_a_hand_over(tmp_path):
    """A writer process whose file fails reports it at once: the producer's next hand-overs raise
    it (not only the final close), and other processes' dests keep being written."""
    from cqlstream.io.writer_process import WriterProcess

    good = open(tmp_path / "good", "wb")  # noqa: SIM115
    full = open("/dev/full", "wb")  # noqa: SIM115
    procs = [WriterProcess.spawn(), WriterProcess.spawn()]
    w = ResultWriter([good, full], processes=procs)
    w.write([(0, _ints(5))])
    deadline = time.monotonic() + 30
    with pytest.raises(OSError) as ei:
        while time.monotonic() < deadline:
            w.write([(0, _ints(5)), (1, _ints(100_000))])  # more than a file buffer: the write fails
            time.sleep(0.01)
    assert ei.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        w.close()
    for p in procs:
        p.abort()
    good.close()
    full.close()
    assert (tmp_path / "good").read_bytes().startswith(b"[0]:+:0\n[1]:+:1\n")


# ----------------------------------------------------------------------------- overlapped start


def _early_script(tmp_path: Path, first_row: str, later: str) -> Path:
    """A table whose source's first row is `first_row`, then the statements `later`."""
    rows = [first_row] + [f"{i // 4 + 1},{i % 50},{i % 7}" for i in range(4, 6000)]
    write(
        tmp_path,
        {
            "s.dat": "i,i,i\n" + "\n".join(rows) + "\n",
            "run.cql": "table : register stream S (A integer, B integer);\nsource : s.dat\n" + later,
        },
    )
    return tmp_path / "run.cql"


def test_reading_starts_before_the_script_is_registered(tmp_path, monkeypatch):
    """With threads, the source's reader is already running (and has parsed a block) while the
    queries are registered and planned; at one thread nothing runs beside the main thread."""
    from cqlstream.engine.dsms import Dsms

    script = _early_script(tmp_path, "1,1,1", "query : select A, Count(*) from S [Rows 10] group by A;\ndest : agg\n")
    seen: dict[int, list[str]] = {}
    register = Dsms.register_query

    def spy(self, *a, **kw):
        names = [t.name for t in _workers()]
        if any(n.startswith("cqlstream-read-") for n in names):
            deadline = time.monotonic() + 10
            pre = next(f for f in _prefetches if f._thread.name == "cqlstream-read-S")
            while pre._q.empty() and time.monotonic() < deadline:  # it parses the first block meanwhile
                time.sleep(0.01)
            names.append("block ready" if not pre._q.empty() else "no block")
        seen[current] = names
        return register(self, *a, **kw)

    _prefetches: list[Prefetch] = []
    init = Prefetch.__init__

    def track(self, *a, **kw):
        init(self, *a, **kw)
        _prefetches.append(self)

    monkeypatch.setattr(Dsms, "register_query", spy)
    monkeypatch.setattr(Prefetch, "__init__", track)
    outs = {}
    for current in (1, 2):
        run_script(script, out_dir=tmp_path / f"t{current}", threads=current, batch_rows=500, block_size=2000)
        outs[current] = (tmp_path / f"t{current}" / "agg").read_bytes()
    assert seen[1] == []
    assert "cqlstream-read-S" in seen[2] and "block ready" in seen[2], seen[2]
    assert outs[2] == outs[1] and outs[1]
    assert _workers() == []


@pytest.mark.parametrize(
    "later,needle,line",
    [  # an error the check finds after the table, and one only registration into the engine finds
        ("query : select Nope from S;\ndest : x\n", "Nope", 3),
        ("query : select A from S;\ndest : a/x\nquery : select B from S;\ndest : b/x\n", "also written", 6),
    ],
)
def test_a_script_error_wins_over_a_bad_row_the_early_reader_found(later, needle, line, tmp_path):
    """The reader meets a malformed first row while the script is still being checked; the
    script's own error is what every thread count reports (the script is checked and registered
    before any row is taken), and the reader started early is stopped."""
    script = _early_script(tmp_path, "1,1,zz", later)
    for t, writer in WRITERS:
        with pytest.raises(ScriptError) as ei:
            run_script(script, out_dir=tmp_path / f"o{t}{writer}", threads=t, writer=writer, block_size=2000)
        assert str(ei.value).startswith(f"{script}:{line}: ") and needle in str(ei.value), str(ei.value)
        assert _workers() == []


def test_a_bad_first_row_is_reported_once_the_script_is_good(tmp_path):
    script = _early_script(tmp_path, "1,1,zz", "query : select A from S;\ndest : x\n")
    got = _errors_and_outputs(script, tmp_path / "out", ["x"], block_size=2000)
    message, outputs = got[1]
    assert message.startswith(f"{tmp_path / 's.dat'}:2: ") and "'zz' is not an integer" in message, message
    assert outputs == {"x": b""}  # the dest was opened, no row reached it
    assert got[2] == got[1] and got[3] == got[1] and got[(2, "thread")] == got[1]
    assert _workers() == []
