"""Session 16's cheaper DISTINCT and window store: the output ids of a 0/1 multiplicity from one
serial per value (`ValueTable._indicator_ids`: a value's changes alternate) against the general
repeat path, with and without probe intervals; checkpoints of before the mixed value seeds
(`vmix`) keep their ids; the window store's room (appends written after the held rows, never over
rows a reader may hold a view of) against a plain concatenation, with NULLs arriving midway;
`emit` of a store's ts-sorted slices against the stable sort by ts; and
DISTINCT / joins over range and rows windows of 1,500 rows (past the first room) against the
reference evaluator at push sizes 1, 7 and all."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from cqlstream.cql.types import INT
from cqlstream.engine.batch import Batch, combine_ids, concat, from_rows, splitmix64
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.relational import _net_per_interval
from cqlstream.engine.operators.valuecount import ValueTable
from cqlstream.engine.operators.window_logic import emit
from cqlstream.engine.queues import Queue
from cqlstream.engine.window_store import WindowStore
from tests.engine_harness import assert_same
from tests.test_distinct_passes import bag_batches


def _batches(seed: int, n: int = 30):
    """DISTINCT-shaped bag updates (tests/test_distinct_passes.py), each with a few probe instants."""
    rng = np.random.default_rng(seed)
    for batch in bag_batches(rng, n):
        probe = np.unique(rng.integers(batch.ts[0], batch.ts[-1] + 1, int(rng.integers(0, 4)))).astype(np.int64)
        yield batch, probe


@pytest.mark.parametrize("probed", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_indicator_ids_match_the_general_path(seed, probed):
    """DISTINCT's change (−1, 0, +1 per (value, instant), netted per probe interval when probed)
    through `_indicator_ids` and through `_repeat_ids` give the same elements, signs, ids, and
    per-value serials afterwards, batch after batch."""
    a = ValueTable([INT, INT], IdSource())
    b = copy.deepcopy(a)
    for batch, probe in _batches(seed):
        got = []
        for t, general in ((a, False), (b, True)):
            enc = t.encode(batch)
            ch = t.changes(enc, batch.ts, batch.sign.astype(np.int64)[None, :])
            delta = (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0)
            if probed:
                delta = _net_per_interval(ch, delta, probe)
            out = t._repeat_ids(ch, delta) if general else t.output_ids(ch, delta, indicator=True)
            got.append([x.tolist() for x in out])
            t.finish(enc)
        assert got[0] == got[1]
        assert a.n_ins.tolist() == b.n_ins.tolist() and a.n_del.tolist() == b.n_del.tolist()


def test_ids_are_combine_ids_of_the_value_seed_and_serial():
    """The derived ids are combine_ids(vkey, serial) of the fresh id the value took, as before the
    seeds were kept mixed: the first copy of the first value of a fresh table has serial 0."""
    t = ValueTable([INT], IdSource(start=77))
    b = from_rows([(5,)], [INT], [0], [1])
    enc = t.encode(b)
    ch = t.changes(enc, b.ts, b.sign.astype(np.int64)[None, :])
    _, _, ids = t.output_ids(ch, np.ones(1, np.int64), indicator=True)
    assert ids.tolist() == combine_ids(np.array([77], np.uint64), np.zeros(1, np.uint64)).tolist()


def test_checkpoint_of_raw_value_keys_keeps_the_ids():
    """A table pickled before `vmix` (raw `vkey`, no `vmix`) restores to the same output ids."""
    batches = list(_batches(3, 8))
    old = ValueTable([INT, INT], IdSource(start=5))
    for batch, _ in batches[:4]:
        enc = old.encode(batch)
        ch = old.changes(enc, batch.ts, batch.sign.astype(np.int64)[None, :])
        old.output_ids(ch, (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0), indicator=True)
        old.finish(enc)
    live = copy.deepcopy(old)
    state = old.__dict__.copy()
    mixed = state.pop("vmix")
    # the raw keys are not recoverable from the mixed ones; make a table whose raw keys mix to them
    raw = np.arange(len(mixed), dtype=np.uint64) + np.uint64(1000)
    state["vkey"] = raw
    legacy = ValueTable.__new__(ValueTable)
    legacy.__setstate__(pickle.loads(pickle.dumps(state)))
    assert legacy.vmix.tolist() == splitmix64(raw).tolist()
    assert "vkey" not in legacy.__dict__
    live.vmix = splitmix64(raw)
    for batch, _ in batches[4:]:
        outs = []
        for t in (legacy, live):
            enc = t.encode(batch)
            ch = t.changes(enc, batch.ts, batch.sign.astype(np.int64)[None, :])
            d = (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0)
            outs.append([x.tolist() for x in t.output_ids(ch, d, indicator=True)])
            t.finish(enc)
        assert outs[0] == outs[1]


def _rows(rng: np.random.Generator, n: int, t0: int, nulls: bool, first_id: int) -> Batch:
    ts = t0 + np.sort(rng.integers(0, 5, n))
    return Batch(
        [rng.integers(0, 50, n), np.array([f"v{x}" for x in rng.integers(0, 9, n)], dtype=object)],
        [rng.random(n) < 0.3 if nulls else None, None],
        ts.astype(np.int64),
        np.ones(n, np.int8),
        np.arange(first_id, first_id + n, dtype=np.uint64),
    )


def _same(a: Batch, b: Batch) -> None:
    assert a.ts.tolist() == b.ts.tolist() and a.id.tolist() == b.id.tolist() and a.sign.tolist() == b.sign.tolist()
    for i in range(a.width):
        assert a.cols[i].tolist() == b.cols[i].tolist()
        assert a.null_mask(i).tolist() == b.null_mask(i).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_window_store_room_keeps_every_view(seed):
    """Appends of batches of varied sizes (many rooms; NULLs first seen midway): the held rows are
    the concatenation of the appended ones from the purge point on, and every view handed out
    earlier still shows the rows it showed."""
    rng = np.random.default_rng(seed)
    types = [INT, INT]
    q = Queue(types)
    store = WindowStore(q, "range")
    every: list[Batch] = []
    views: list[tuple[Batch, Batch]] = []
    t, nid, dropped = 0, 0, 0
    for step in range(40):
        n = int(rng.choice([0, 3, 200, 1500]))
        b = _rows(rng, n, t, nulls=step >= 15 and step % 3 == 0, first_id=nid)
        nid += n
        t += 5
        q.push(b, watermark=t - 1)
        store.advance(t - 1)
        every.append(b)
        if len(store.buf):
            views.append((store.buf, copy.deepcopy(store.buf)))
        if step % 7 == 6 and len(store.buf) > 10:  # a purge: the oldest rows leave
            k = int(rng.integers(1, len(store.buf)))
            store.buf = store.buf.slice(k, len(store.buf))
            store.first += k
            store.lo += k
            dropped += k
        whole = concat(every, types)
        _same(store.buf, whole.slice(dropped, len(whole)))
        for view, was in views:
            _same(view, was)
    state = pickle.loads(pickle.dumps(store))
    assert state.room is None
    _same(state.buf, store.buf)


DDL = "register stream S (m int, v int, g int); register stream T (v int);"


def _events(n: int, seed: int) -> dict:
    """Car reports (minute, car, segment) every few instants and probes of cars: more rows than
    a window store's first room holds, so it moves to a second."""
    rng = np.random.default_rng(seed)
    s, t, ts = [], [], 0
    for _ in range(n):
        ts += int(rng.integers(0, 2))
        s.append((ts, (ts // 10, int(rng.integers(0, 40)), int(rng.integers(0, 3)))))
        if rng.random() < 0.1:
            t.append((ts, (int(rng.integers(0, 40)),)))
    return {"S": s, "T": t}


@pytest.mark.parametrize(
    "query",
    [
        "select distinct * from S [Range 11]",
        "select m, g, count(*) from (select distinct * from S [Range 7]) as D group by m, g",
        "select distinct v, g from S [Rows 30]",
        "Rstream(select T.v, S.g from T [Now], S [Range 9] where T.v = S.v)",
    ],
)
def test_distinct_and_windows_over_many_rows_match_the_reference(query):
    assert_same(DDL, query, _events(1500, 7), chunks=(1, 7, None))


@pytest.mark.parametrize("seed", range(30))
def test_emit_of_sorted_sides_is_the_stable_ts_order(seed):
    """`emit(..., sorted_sides=True)` (a window store's slices: each side in ts order) decides
    whether to merge from the sides' ends alone: the same batch as concatenating the deletes and
    the inserts and sorting stably by ts — sides apart, touching at one instant, interleaved, or
    one side empty."""
    rng = np.random.default_rng(seed)
    ni, nd = (int(x) for x in rng.integers(0, 40, 2))
    ins = _rows(rng, ni, int(rng.integers(0, 8)), nulls=seed % 2 == 0, first_id=0)
    dels = _rows(rng, nd, 0, nulls=seed % 3 == 0, first_id=1000)
    del_ts = dels.ts + int(rng.choice([0, 2, 4, 9]))
    got = emit(ins, dels, del_ts, sorted_sides=True)
    want = concat([Batch(dels.cols, dels.nulls, del_ts, np.full(nd, -1, np.int8), dels.id), ins], [INT, INT])
    want = want.take(np.argsort(want.ts, kind="stable")) if len(want) else want
    _same(got, want)
