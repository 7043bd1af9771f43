"""Deferred result rows (engine/deferred_batch.py): the grouped aggregate hands over a compact
change record, laid out into rows by whoever reads it first (the writer thread of `cqlstream run
--threads 2`, or the producer when the writer is behind).

Checked: rows read long after they were produced (the operator's state has moved on: groups
released, ids reused, state compacted) are the rows read at once, element for element, ids
included, at 1, 7 and all events per push, and they match the reference evaluator; every `−`
retracts the live row of its group with that row's id, a group has at most one live row, and the
`−` of a group comes before its `+` at an instant; a projection of column references stays
deferred and equals the evaluated one; two threads reading at once lay the rows out once; a
pickle is the plain batch; `cqlstream run` writes the same bytes at 1 and 2 threads as with the
rows laid out at once on the engine's thread; an error laying out rows on the writer thread is
raised to the run, the same at every thread count, and leaves no thread behind.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.deferred_batch import ChangeRows, DeferredBatch, change_batch
from cqlstream.engine.operators import aggregate as agg_mod
from cqlstream.engine.operators.aggregate import AggregateOp
from cqlstream.io import stream_text
from cqlstream.io.result_writer import ResultWriter
from cqlstream.io.script_runner import run_script
from tests.engine_harness import _merge_events, _start, feed, net_by_instant, round_floats, run_reference

DDL = "register stream S (a int, b int, f float, s varchar(4)); register relation R (a int, b int, f float, s varchar(4));"

# (query, positions of the group key in its rows; None: a stream)
QUERIES = [
    ("select b, count(*), sum(a) from S [Range 3] group by b", (0,)),
    ("select b, s, max(f), avg(a), min(s) from S [Rows 4] group by b, s", (0, 1)),
    ("select b, sum(a), count(a) from R group by b", (0,)),
    ("select b, count(*) from S [Range 2] group by b having count(*) > 1", (0,)),
    ("select count(*), sum(f), max(s) from S [Range 2]", ()),
    ("select sum(a), b from S [Now] group by b", (1,)),  # a projection reordering its columns
    ("Istream(select b, count(distinct a) from S [Rows 3] group by b)", None),
]


def _inputs(n: int = 160, seed: int = 3) -> dict[str, list]:
    """A stream with NULL keys and values, gaps (empty instants) and a heartbeat; a relation with
    updates (deletes of earlier inserts)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(1, n // 2, n)) * 2  # even instants only: every odd one is empty

    def val(v, p=0.15):
        return None if rng.random() < p else v

    s = [
        (
            int(t),
            (
                val(int(rng.integers(-3, 6))),
                val(int(rng.integers(0, 9))),
                val(float(rng.integers(-4, 4)) / 4),
                val(str(rng.choice(["x", "yy", ""]))),
            ),
        )
        for t in ts
    ]
    s.append((n + 10, None))  # a heartbeat past the last row
    r, live = [], []
    for t in range(1, n, 3):
        if live and rng.random() < 0.4:
            r.append((t, -1, live.pop(int(rng.integers(0, len(live))))))
        else:
            row = (int(rng.integers(0, 5)), val(int(rng.integers(0, 6))), 0.5, "r")
            live.append(row)
            r.append((t, 1, row))
    return {"S": s, "R": r}


def _raw(query: str, inputs: dict[str, list], chunk: int | None, late: bool) -> list[Batch]:
    """The query's output batches, polled after every chunk; `late`: none of them is read
    before the run ended (else each is laid out as soon as it is polled)."""
    d, _, sub = _start(DDL, query, False, None, recent_tails=False)  # (a kept tail would read every batch)
    out: list[Batch] = []

    def poll(_: int) -> None:
        b = sub.poll()
        if not late:
            b.elements()
        out.append(b)

    feed(d, _merge_events(inputs), chunk, after=poll)
    d.end()
    out.append(sub.poll())
    return out


def _sources(query: str) -> dict[str, list]:
    ins = _inputs()
    return {"R": ins["R"]} if " R " in query + " " else {"S": ins["S"]}


def _elements(batches: list[Batch]) -> list[tuple]:
    return [
        (t, s, i, r) for b in batches for t, s, i, r in zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), b.rows())
    ]


def _check_relation_deltas(els: list[tuple], keys: tuple[int, ...]) -> None:
    """Every `−` retracts a live row with its id; a group (the columns at `keys`) has at most
    one live row; instants never go back."""
    live: dict[int, tuple] = {}
    groups: Counter = Counter()
    last = None
    for t, s, i, row in els:
        assert last is None or t >= last
        last = t
        g = tuple(row[k] for k in keys)
        if s < 0:
            assert live.pop(i) == row, (t, i, row)
            groups[g] -= 1
        else:
            assert i not in live
            live[i] = row
            groups[g] += 1
            assert groups[g] == 1, f"group {g} has two live rows at {t}: its − came after its +"


@pytest.fixture(autouse=True)
def _small_compaction(monkeypatch):
    """Group ids are released, reused and renumbered within these short inputs."""
    monkeypatch.setattr(AggregateOp, "COMPACT_MIN", 4)


@pytest.mark.parametrize(("query", "keys"), QUERIES)
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_rows_read_late_are_the_rows_read_at_once(query, keys, chunk):
    ins = _sources(query)
    late = _raw(query, ins, chunk, late=True)
    assert any(isinstance(b, DeferredBatch) and not b.built for b in late) == (keys is not None)
    for b in reversed(late):  # laid out last first: nothing depends on the order of reading
        b.elements()
    now = _raw(query, ins, chunk, late=False)
    assert _elements(late) == _elements(now)
    if keys is not None:
        _check_relation_deltas(_elements(late), keys)
    got: dict[int, Counter] = {}
    for b in late:
        for t, c in net_by_instant(b).items():
            got.setdefault(t, Counter()).update(c)
    got = {t: Counter({k: v for k, v in c.items() if v}) for t, c in got.items()}
    got = {t: c for t, c in got.items() if c}
    assert round_floats(got) == round_floats(run_reference(DDL, query, ins))


def _record(n_cells: int = 5, seed: int = 1) -> ChangeRows:
    rng = np.random.default_rng(seed)
    ts = rng.integers(0, 3, n_cells)
    dels = rng.random(n_cells) < 0.7
    ins = ~dels | (rng.random(n_cells) < 0.7)
    vals = rng.integers(0, 100, 2 * n_cells)
    nulls = rng.random(2 * n_cells) < 0.3
    return ChangeRows(
        ts=ts,
        tmin=10,
        tmax=12,
        dels=dels,
        ins=ins,
        keys=[rng.integers(0, 4, n_cells)],
        key_nulls=[None],
        cell=rng.permutation(2 * n_cells)[:n_cells],
        old=[(vals, nulls)],
        new=[(vals + 1, ~nulls)],
        old_id=np.arange(n_cells, dtype=np.uint64),
        new_id=np.arange(n_cells, dtype=np.uint64) + 100,
    )


def test_rows_of_a_change_record():
    """Per cell in ts order (stable), its `−` old row then its `+` new row; the instants given
    before the rows are the rows' own."""
    rec = _record()
    b = change_batch(rec)
    want = []
    for j in sorted(range(len(rec.ts)), key=lambda j: rec.ts[j]):
        c = int(rec.cell[j])
        for keep, sign, (v, m), ids in ((rec.dels, -1, rec.old[0], rec.old_id), (rec.ins, 1, rec.new[0], rec.new_id)):
            if keep[j]:
                want.append(
                    (int(rec.ts[j]) + 10, sign, int(ids[j]), (int(rec.keys[0][j]), None if m[c] else int(v[c])))
                )
    ts_before = b.ts.copy()
    assert _elements([b]) == want
    assert ts_before.tolist() == [w[0] for w in want]
    wide = dataclasses.replace(rec, tmax=10 + 10**9, ts=rec.ts * 10**8)  # sparse instants
    assert change_batch(wide).ts.tolist() == sorted(change_batch(wide).ts.tolist())
    assert len(change_batch(wide)) == len(b)


def test_projection_stays_deferred_and_equals_the_evaluated_one():
    rec = _record(8)
    b = change_batch(rec)
    p = b.project([1, 0, 1])
    assert isinstance(p, DeferredBatch) and not b.built and not p.built
    assert p.width == 3 and len(p) == len(b)
    full = change_batch(rec)
    want = [(t, s, (r[1], r[0], r[1])) for t, s, r in zip(full.ts.tolist(), full.sign.tolist(), full.rows())]
    assert p.elements() == want
    assert all(m is None or m.any() for m in p.nulls)
    assert p.id.tolist() == full.id.tolist()


def test_formatting_in_chunks_never_lays_out_the_ids(monkeypatch):
    """A writer slices a large batch into chunks: the slices stay deferred and the ids, which no
    text shows, are never laid out."""
    monkeypatch.setattr(stream_text, "_CHUNK", 3)
    rec = _record(8)

    def no_ids():
        raise AssertionError("ids laid out")

    b = DeferredBatch(rec.rows_ts(), 2, rec.expand, no_ids)
    part = b.slice(2, 6)
    assert isinstance(part, DeferredBatch) and part.ts.tolist() == b.ts[2:6].tolist()
    full = change_batch(rec)
    assert stream_text.format_output(b) == stream_text.format_output(
        Batch(full.cols, full.nulls, full.ts, full.sign, full.id)
    )
    assert part.rows() == full.rows()[2:6] and part.sign.tolist() == full.sign[2:6].tolist()


def test_two_threads_reading_at_once_lay_out_once():
    calls = []
    gate = threading.Event()

    def fill():
        calls.append(threading.current_thread().name)
        gate.wait(5)
        return [np.arange(3)], [None], np.ones(3, np.int8)

    b = DeferredBatch(np.arange(3), 1, fill, lambda: np.zeros(3, np.uint64))
    got = []
    ts = [threading.Thread(target=lambda: got.append(b.cols[0].tolist())) for _ in range(2)]
    for t in ts:
        t.start()
    gate.set()
    for t in ts:
        t.join(5)
    assert calls and len(calls) == 1 and got == [[0, 1, 2], [0, 1, 2]]


def test_pickled_as_the_plain_batch():
    b = change_batch(_record())
    back = pickle.loads(pickle.dumps(b))
    assert type(back) is Batch and back.elements() == b.elements() and back.id.tolist() == b.id.tolist()
    assert (
        concat([b, change_batch(_record(seed=2))]).elements() == b.elements() + change_batch(_record(seed=2)).elements()
    )


def relation_updates(rng: np.random.Generator, n: int, span: int, low: int = 0) -> list[str]:
    """Source lines `t,±,A,B` of a relation over the odd instants below `n`: each inserts a row
    (A in 0..8, B in low..span-1) or, with probability 0.4, deletes a live one."""
    r: list[str] = []
    live: list[str] = []
    for t in range(1, n, 2):
        if live and rng.random() < 0.4:
            r.append(f"{t},-,{live.pop(int(rng.integers(0, len(live))))}")
        else:
            row = f"{int(rng.integers(0, 9))},{int(rng.integers(low, span))}"
            live.append(row)
            r.append(f"{t},+,{row}")
    return r


def write_script(tmp_path: Path, lines: list[str], queries: list[str]) -> tuple[Path, list[str]]:
    """`run.cql` in `tmp_path`: `lines` (tables, sources, views), then each query with its dest
    `out<i>`; returns the script's path and the dests' names."""
    for i, q in enumerate(queries):
        lines += [f"query : {q};", f"dest : out{i}"]
    (tmp_path / "run.cql").write_text("\n".join(lines) + "\n")
    return tmp_path / "run.cql", [f"out{i}" for i in range(len(queries))]


def _script(tmp_path: Path) -> tuple[Path, list[str]]:
    """Aggregates over a stream (NULL keys and values through a view: x / 0 is NULL; empty
    instants) and over a relation with updates."""
    rng = np.random.default_rng(11)
    n = 4000
    ts = np.sort(rng.integers(1, n // 3, n)) * 2  # even instants only
    s = [f"{t},{int(rng.integers(0, 50))},{int(rng.integers(0, 30))}" for t in ts]
    r = relation_updates(rng, n, 20)
    (tmp_path / "s.dat").write_text("i,i,i\n" + "\n".join(s) + "\n")
    (tmp_path / "r.dat").write_text("i,b,i,i\n" + "\n".join(r) + "\n")
    queries = [
        "select B, Sum(A), Count(A) from S [Rows 100] group by B",
        "select B, Sum(A), Count(A) from S [Range 10] group by B",
        "select B, Sum(A), Count(A), Max(A) from V [Range 6] group by B",
        "select A, Count(*), Max(B) from R group by A",
        "select B, Count(*) from S [Range 7] group by B having Count(*) > 3",
        "Istream(select B, Avg(A) from S [Range 5] group by B)",
        "select Count(*), Min(A) from V [Range 3]",
    ]
    lines = [
        "table : register stream S (A integer, B integer);",
        "source : s.dat",
        "table : register relation R (A integer, B integer);",
        "source : r.dat",
        "vquery : select case when A > 40 then A / 0 else A end as A, case when B > 25 then B / 0 else B end as B from S;",
        "vtable : register stream V (A integer, B integer);",
    ]
    return write_script(tmp_path, lines, queries)


def _eager(monkeypatch) -> None:
    """The rows laid out at once, on the operator's thread (what the deferral must not change)."""
    monkeypatch.setattr(agg_mod, "change_batch", lambda rec: Batch(*_parts_of(rec)))


def _parts_of(rec: ChangeRows):
    cols, nulls, sign = rec.expand()
    return cols, nulls, rec.rows_ts(), sign, rec.ids()


@pytest.mark.parametrize("batch_rows", [7, 300, None])
def test_same_bytes_at_every_thread_count_and_as_laid_out_at_once(batch_rows, tmp_path, monkeypatch):
    script, dests = _script(tmp_path)
    kw = {} if batch_rows is None else {"batch_rows": batch_rows}
    got = {}
    for t in (1, 2):
        run_script(script, out_dir=tmp_path / f"t{t}", threads=t, **kw)
        got[t] = [(tmp_path / f"t{t}" / d).read_bytes() for d in dests]
    with monkeypatch.context() as mp:
        _eager(mp)
        run_script(script, out_dir=tmp_path / "eager", threads=1, **kw)
    eager = [(tmp_path / "eager" / d).read_bytes() for d in dests]
    assert all(eager) and b"null" in eager[2] and b"null" in eager[6]
    assert got[1] == eager and got[2] == eager


@pytest.mark.parametrize("threads", [1, 2])
def test_an_error_laying_out_rows_is_the_runs_error(threads, tmp_path, monkeypatch):
    """At every thread count the run raises the error (on the writer thread it is raised to the
    producer at its next hand-over or at the end), and no writer thread is left."""
    script, _ = _script(tmp_path)

    def broken(self):
        raise MemoryError("laying out the rows")

    monkeypatch.setattr(ChangeRows, "expand", broken)
    assert_run_fails(script, tmp_path / "out", threads, "laying out the rows")


def assert_run_fails(script: Path, out: Path, threads: int, message: str) -> None:
    """Running `script` raises the MemoryError saying `message`, and leaves no runner thread."""
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(MemoryError, match=message):
        run_script(script, out_dir=out, threads=threads, batch_rows=300)
    left = [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("cqlstream-")]
    assert left == []


def test_close_stops_the_writer_when_laying_out_a_queued_round_fails():
    """`ResultWriter.close` lays out the rounds still queued for a writer thread; when that
    fails, the thread is stopped all the same and the error raised (no thread left blocked)."""
    entered, gate = threading.Event(), threading.Event()

    class Slow:  # a dest whose first write waits until the failing layout has been tried
        name = "slow"

        def writelines(self, chunks):
            entered.set()
            gate.wait(10)
            for _ in chunks:
                pass

    def fill():
        gate.set()
        raise RuntimeError("layout failed")

    w = ResultWriter([Slow()], workers=1, depth=1)  # type: ignore[list-item]
    w.write([(0, Batch([np.arange(2)], [None], np.arange(2), np.ones(2, np.int8), np.zeros(2, np.uint64)))])
    assert entered.wait(10)
    w.write(
        [(0, DeferredBatch(np.arange(2), 1, fill, lambda: np.zeros(2, np.uint64)))]
    )  # queued: the worker is busy with the first
    with pytest.raises(RuntimeError, match="layout failed"):
        w.close()
    assert not w._workers[0].thread.is_alive()
