"""The cheaper passes of DISTINCT's value table (session 14): the hash map's two probing modes
(one cell a round while many keys probe, a window of cells a round for the few left) against a
dict, in long probe chains and with tombstones; the one-copy output ids (`_unit_ids`) against
the general repeat path; and DISTINCT over range windows (each (value, instant) one row, as in
Linear Road's VolSMV) against the reference evaluator at push sizes 1, 7 and all."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np
import pytest

from cqlstream.cql.types import INT
from cqlstream.engine.batch import Batch, from_rows
from cqlstream.engine.operators import intmap
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.intmap import IntMap
from cqlstream.engine.operators.valuecount import ValueTable
from tests.engine_harness import assert_same


@pytest.mark.parametrize("few", [0, 3, 10**9])  # every round windowed, mixed, one cell a round
@pytest.mark.parametrize("seed", range(3))
def test_int_map_probing_modes_agree_with_a_dict(monkeypatch, few, seed):
    """Keys crowded into a small table (multiples of the table size share a home cell region, so
    probe chains run long), deleted (tombstones) and revived, looked up present and absent."""
    monkeypatch.setattr(intmap, "_FEW", few)
    rng = np.random.default_rng(seed)
    m, ref = IntMap(), {}
    for step in range(60):
        live = np.array(sorted(ref), np.int64)
        if len(live) and rng.random() < 0.4:
            gone = rng.choice(live, size=int(rng.integers(1, len(live) + 1)), replace=False)
            m.delete(gone)
            for k in gone.tolist():
                del ref[k]
        span = [64, 5000, 2**40][step % 3]
        q = np.unique(rng.integers(0, span, size=int(rng.integers(1, 3000))) * [1, 1024, 7][step % 3])
        q = q[~np.isin(q, np.array(sorted(ref), np.int64))]
        v = rng.integers(0, 10**6, len(q))
        m.insert(q, v)
        ref.update(zip(q.tolist(), v.tolist()))
        probe = np.concatenate([rng.integers(0, span, 2000), np.array(sorted(ref), np.int64)])
        assert m.get(probe).tolist() == [ref.get(k, -1) for k in probe.tolist()]
        assert len(m) == len(ref)
    keys, vals = m.items()
    assert dict(zip(keys.tolist(), vals.tolist())) == ref


def bag_batches(rng: np.random.Generator, n: int = 30) -> Iterator[Batch]:
    """Bag updates of few values at few instants (only live rows deleted), ts non-decreasing."""
    live: list[tuple[int, int]] = []
    ts = 0
    for _ in range(n):
        rows, tss, signs = [], [], []
        for _ in range(int(rng.integers(1, 60))):
            ts += int(rng.integers(0, 2))
            if live and rng.random() < 0.45:
                rows.append(live.pop(int(rng.integers(0, len(live)))))
                signs.append(-1)
            else:
                row = (int(rng.integers(0, 4)), int(rng.integers(0, 3)))
                live.append(row)
                rows.append(row)
                signs.append(1)
            tss.append(ts)
        yield from_rows(rows, [INT, INT], tss, signs)


@pytest.mark.parametrize("seed", range(6))
def test_unit_ids_match_the_general_path(seed):
    """Batches of inserts/deletes of few values at few instants: DISTINCT's delta (−1, 0, +1 per
    (value, instant)) through `_unit_ids` and through the general path give the same elements,
    signs, ids and per-value serials afterwards, batch after batch."""
    rng = np.random.default_rng(seed)
    a = ValueTable([INT, INT], IdSource())
    b = copy.deepcopy(a)
    for batch in bag_batches(rng):
        got = []
        for t, general in ((a, False), (b, True)):
            enc = t.encode(batch)
            ch = t.changes(enc, batch.ts, batch.sign.astype(np.int64)[None, :])
            delta = (ch.after[0] > 0).astype(np.int64) - (ch.before[0] > 0)
            out = t._repeat_ids(ch, delta) if general else t.output_ids(ch, delta)
            got.append([x.tolist() for x in out])
            t.finish(enc)
        assert got[0] == got[1]
        assert a.n_ins.tolist() == b.n_ins.tolist() and a.n_del.tolist() == b.n_del.tolist()


def _window_events(n: int, seed: int, values: int) -> list[tuple[int, tuple[int, int, int]]]:
    """A stream of (ts, (minute, car, segment)) reports: each car every few instants, so a value
    recurs within a window and most (value, instant) pairs have one row."""
    rng = np.random.default_rng(seed)
    out, ts = [], 0
    for _ in range(n):
        ts += int(rng.integers(0, 3))
        out.append((ts, (ts // 10, int(rng.integers(0, values)), int(rng.integers(0, 3)))))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("batch", [1, 7, None])
def test_distinct_over_a_range_window_matches_the_reference(seed, batch):
    events = _window_events(300, seed, 12)
    assert_same(
        "register stream S (m int, v int, g int);",
        "select distinct * from S [Range 11]",
        {"S": events},
        chunks=(batch,),
    )


def test_wide_packed_keys_take_the_row_code_path(monkeypatch):
    """Keys of ~60 bits with a batch's positions beside them exceed 63 bits: the packed encode
    declines (row codes, then the packed lookup of the distinct values), with the same result as
    the dict table; narrow keys take the one-sort encode."""
    from tests.test_value_map import run_table

    calls = []
    orig = ValueTable._encode_packed

    def spy(self, b):
        got = orig(self, b)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(ValueTable, "_encode_packed", spy)
    rng = np.random.default_rng(7)
    for hi, want in ((2**19, True), (2**58, False)):
        calls.clear()
        vals = [int(v) for v in rng.integers(0, hi, 12)]
        batches = []
        for k in range(4):
            rows = [(vals[int(j)],) for j in rng.integers(0, len(vals), 40)]
            signs = [1] * 40 if k == 0 else [1, -1] * 20
            batches.append((rows, [k] * 40, signs))
        # deletes only of values held: replay inserts first, then pair each delete with an insert
        live: list[tuple] = []
        fixed = []
        for rows, ts, signs in batches:
            rr = []
            for row, sg in zip(rows, signs):
                if sg < 0:
                    row = live.pop(0)
                else:
                    live.append(row)
                rr.append(row)
            fixed.append((rr, ts, signs))
        got, packed = run_table(fixed, [INT], packed=True)
        assert packed
        assert got == run_table(fixed, [INT], packed=False)[0]
        assert calls and all(c == want for c in calls)
