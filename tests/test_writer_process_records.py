"""Writer processes fed change records (io/writer_process.py): a grouped aggregate's result rows go
to the child as the record gathered to the round's changed cells, never laid out by the parent,
and the child's text is the laid-out rows' text — with NULL keys and values, float columns (the
child lays those out), projections that reorder or repeat the record's columns, and rounds the
parent formats itself when the child is behind. The CLI spawns the processes before the engine
is imported; a run that does not take them stops them."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from cqlstream import cli
from cqlstream.engine.deferred_batch import ChangeRows, DeferredBatch, change_batch
from cqlstream.io import writer_process
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_text import format_output
from tests.test_run_threads import _writer_processes
from tests.test_stream_script import write


@pytest.fixture(autouse=True)
def no_child_left():
    assert not _writer_processes()
    yield
    assert not _writer_processes(), "a writer process outlived its run"


def _record(seed: int, k: int, total: int, floats: bool = False) -> ChangeRows:
    """k changed cells at random positions among `total` cells of the operator's value arrays;
    NULLs in a key and in both value columns; some cells without a `−` or a `+` row."""
    rng = np.random.default_rng(seed)
    dels = rng.random(k) < 0.8
    ins = rng.random(k) < 0.8
    ins[~dels & ~ins] = True
    vdt = np.float64 if floats else np.int64

    def values() -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.integers(-999, 99_999, total).astype(vdt), rng.random(total) < 0.1),
            (rng.integers(0, 50, total).astype(vdt), np.zeros(total, bool)),
        ]

    return ChangeRows(
        ts=rng.integers(0, 9, k),
        tmin=1000,
        tmax=1008,
        dels=dels,
        ins=ins,
        keys=[rng.integers(-5, 300, k), rng.integers(0, 7, k).astype(np.int32)],
        key_nulls=[rng.random(k) < 0.2, None],
        cell=rng.choice(total, k, replace=False),
        old=values(),
        new=values(),
        old_id=np.arange(k, dtype=np.uint64),
        new_id=np.arange(k, 2 * k, dtype=np.uint64),
    )


# the record's columns a batch shows: all, swapped, a value repeated, keys only, values only
PICKS = [None, (3, 0, 2, 1), (2, 2, 0), (1, 0), (2, 3)]


def _batch(rec: ChangeRows, picks: tuple[int, ...] | None) -> DeferredBatch:
    b = change_batch(rec)
    p = b if picks is None else b.project(picks)
    assert isinstance(p, DeferredBatch)
    return p


def _shipped(item: tuple) -> tuple:
    """`item` as the child receives it (pickled with its arrays out of band)."""
    bufs: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(item, protocol=5, buffer_callback=bufs.append)
    return pickle.loads(meta, buffers=[bytearray(b.raw()) for b in bufs])


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("picks", PICKS)
def test_a_record_is_shipped_gathered_and_formats_as_its_rows(picks, floats):
    rec = _record(3, 500, 4000, floats)
    want = format_output(_batch(rec, picks))  # formatted in one process, as at --threads 1
    sent = _batch(rec, picks)
    (item,) = writer_process._pack([(0, sent)])
    assert not sent.built, "the parent laid out the rows"
    assert len(item) == 3
    gathered = item[1]
    assert all(len(v) == 500 and (m is None or len(m) == 500) for v, m in gathered.old + gathered.new)
    got = writer_process._unpacked(_shipped(item))
    assert format_output(got) == want and len(want) > 0


@pytest.mark.parametrize("picks", PICKS[:2])
def test_a_round_the_parent_formats_is_the_same_text(picks):
    rec = _record(5, 300, 1000)
    want = format_output(_batch(rec, picks))
    (item,) = writer_process._pack([(0, _batch(rec, picks))], text=True)
    assert b"".join(_shipped(item)[1]) == want


def test_rows_laid_out_go_as_rows():
    rec = _record(7, 200, 300)
    b = _batch(rec, (3, 0))
    want = format_output(b)
    b.build()  # laid out (a writer thread's producer does it): the record is no longer read
    (item,) = writer_process._pack([(0, b)])
    assert len(item) == 5
    assert format_output(writer_process._unpacked(_shipped(item))) == want


# ----------------------------------------------------------------------------- whole runs


def _aggregates(tmp_path: Path, rows: int = 4000) -> tuple[Path, list[str]]:
    """Grouped aggregates into several dests: int and float values, one key or two, the select
    list reordering the record's columns, an aggregate over a view."""
    rng = np.random.default_rng(11)
    ts = np.sort(rng.integers(1, rows // 5, rows))
    lines = [
        f"{t},{a},{b:.4g},{c}"
        for t, a, b, c in zip(ts, rng.integers(-40, 400, rows), rng.normal(0, 50, rows), rng.integers(0, 30, rows))
    ]
    write(
        tmp_path,
        {
            "s.dat": "i,i,f,i\n" + "\n".join(lines) + "\n",
            "run.cql": """table : register stream S (A integer, F float, K integer);
source : s.dat
query : select K, Sum(A), Count(A) from S [Rows 100] group by K;
dest : q2
query : select Sum(A), K from S [Range 10] group by K;
dest : swapped
query : select K, Avg(F), Max(A) from S [Range 7] group by K;
dest : floats
query : select A, K, Count(*) from S [Range 3] group by K, A;
dest : twokeys
""",
        },
    )
    return tmp_path / "run.cql", ["q2", "swapped", "floats", "twokeys"]


def test_records_through_writer_processes_same_bytes_at_every_batch_size(tmp_path, monkeypatch):
    script, dests = _aggregates(tmp_path)
    gathered = 0
    real = writer_process._gathered

    def counting(*a):
        nonlocal gathered
        gathered += 1
        return real(*a)

    monkeypatch.setattr(writer_process, "_gathered", counting)

    def run(out: Path, batch_rows: int, threads: int, writer: str) -> dict[str, bytes]:
        run_script(script, out_dir=out, threads=threads, writer=writer, batch_rows=batch_rows)
        return {d: (out / d).read_bytes() for d in dests}

    for n in (1, 7, 1000, 100_000):
        out = tmp_path / f"b{n}"
        want = run(out / "one", n, 1, "thread")
        assert all(want.values())
        assert run(out / "thread", n, 2, "thread") == want, n
        assert run(out / "process", n, 2, "process") == want, n
        assert run(out / "two-processes", n, 3, "process") == want, n
        for behind in (0, 1):  # rounds formatted by the parent: all of them, most
            monkeypatch.setattr(writer_process, "BEHIND", behind)
            assert run(out / f"behind{behind}", n, 2, "process") == want, (n, behind)
        monkeypatch.setattr(writer_process, "BEHIND", 2)
    assert gathered > 0, "no change record was shipped"


def _spawns(monkeypatch) -> list[writer_process.WriterProcess]:
    made: list[writer_process.WriterProcess] = []
    real = writer_process.WriterProcess.spawn.__func__  # type: ignore[attr-defined]

    def spawn(cls):
        made.append(p := real(cls))
        return p

    monkeypatch.setattr(writer_process.WriterProcess, "spawn", classmethod(spawn))
    return made


def test_the_cli_spawns_the_writer_processes_the_run_takes(tmp_path, monkeypatch):
    script, dests = _aggregates(tmp_path, 500)
    made = _spawns(monkeypatch)
    counts, err = cli._run(script, tmp_path / "out", False, 100, threads=3, writer="process")
    assert err is None and counts is not None
    assert len(made) == 2  # spawned by the CLI before the run, taken by it: none spawned twice
    assert all(p.proc.returncode == 0 for p in made)
    run_script(script, out_dir=tmp_path / "one", threads=1, batch_rows=100)
    assert all((tmp_path / "out" / d).read_bytes() == (tmp_path / "one" / d).read_bytes() for d in dests)


@pytest.mark.parametrize(
    "script",
    [
        "table : register stream S (A integer;\nsource : s.dat\n",  # a syntax error
        "table : register stream S (A integer);\nsource : missing.dat\n",  # a missing source
        "query : select * from Nowhere;\ndest : x\n",  # an unknown stream
    ],
)
def test_the_cli_stops_the_writer_processes_of_a_failed_run(tmp_path, monkeypatch, script):
    write(tmp_path, {"run.cql": script, "s.dat": "i,i\n1,1\n"})
    made = _spawns(monkeypatch)
    counts, err = cli._run(tmp_path / "run.cql", tmp_path / "out", False, 100, threads=3, writer="process")
    assert counts is None and err
    assert len(made) == 2
    assert all(p.proc.returncode is not None for p in made)  # stopped and reaped (the fixture: none left)


def test_no_writer_process_for_a_thread_writer(tmp_path, monkeypatch):
    script, _ = _aggregates(tmp_path, 200)
    made = _spawns(monkeypatch)
    counts, err = cli._run(script, tmp_path / "out", False, 100, threads=2, writer="thread")
    assert err is None and counts is not None and made == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, ImportError])
def test_the_cli_stops_writer_processes_the_run_never_took(tmp_path, monkeypatch, stop):
    """Ctrl-C (or a failure) while the engine is imported, before the run takes the processes."""
    from cqlstream.io import script_runner

    script, _ = _aggregates(tmp_path, 200)
    made = _spawns(monkeypatch)

    def interrupted(*a, **kw):
        raise stop

    monkeypatch.setattr(script_runner, "run_script", interrupted)
    with pytest.raises(stop):
        cli._run(script, tmp_path / "out", False, 100, threads=3, writer="process")
    assert len(made) == 2 and all(p.proc.returncode is not None for p in made)


def _marked(mark: str) -> list[int]:
    """Processes whose environment holds `mark` (a run's writer processes inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ctrl_c_at_start_up_ends_the_run_and_its_writer_processes(tmp_path):
    """A terminal's Ctrl-C goes to the foreground process group: sent again and again from when
    the CLI has spawned its writer processes (they are still starting) until the run ends, the run
    ends, no child is left, and no child prints a traceback of its own."""
    import os
    import signal
    import subprocess
    import time
    import uuid

    from tests.test_stream_script import CQLSTREAM

    script, _ = _aggregates(tmp_path, 4000)
    mark = f"wproc-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [CQLSTREAM, "run", str(script), "--threads", "3", "--writer", "process", "--out-dir", str(tmp_path / "o")],
        stderr=subprocess.PIPE,
        env={**os.environ, "CQLSTREAM_TEST_MARK": mark},
        process_group=0,  # its own group, signalled as a terminal would signal the foreground job
    )
    deadline = time.monotonic() + 60
    while len(_marked(mark)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    deadline = time.monotonic() + 10
    while _marked(mark) and time.monotonic() < deadline:  # (a child's end may lag its parent's)
        time.sleep(0.05)
    assert _marked(mark) == []
    # (a child's traceback runs through runpy or its main; the parent's, through its console script)
    assert b"runpy" not in err and b"_child_main" not in err, err.decode(errors="replace")
