"""How a join's per-call table matches deletes to the inserts they retract (`Table._match` in
engine/operators/join.py): the k-th delete of an id retracts the k-th insert of it. Windows
retract in insertion order, and then one comparison pass pairs them (the FIFO path); any other
order (relation deletes, Partition By windows, unmatched deletes, re-used ids) takes the general
binary-search path.

- the table's instances, lifetimes, survivors and unmatched deletes against a plain Python model,
  for FIFO and non-FIFO delete orders, repeated ids and deletes without an insert;
- stream–relation joins and general joins whose relations are windows (FIFO deletes) and stored
  relations with deletes out of insertion order, against the reference evaluator at 1, 7 and all
  events per push.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.join import INF, Table
from tests.engine_harness import assert_same

INT = DataType("int")


def _batch(ids: list[int], signs: list[int]) -> Batch:
    n = len(ids)
    return Batch(
        [np.arange(n, dtype=np.int64)],
        [None],
        np.zeros(n, np.int64),
        np.array(signs, np.int8),
        np.array(ids, np.uint64),
    )


def _model(n_state: int, ids: list[int], signs: list[int], seq: list[int]):
    """(instances as {row: (lo, hi)}, unmatched deletes): the k-th delete of an id retracts the
    k-th insert of it; an instance deleted at or before its insert is empty and dropped."""
    ins: dict[int, list[int]] = defaultdict(list)
    dels: dict[int, list[int]] = defaultdict(list)
    for r, (i, s) in enumerate(zip(ids, signs)):
        (ins if s > 0 or r < n_state else dels)[i].append(r)
    life = {r: [seq[r], INF] for rows in ins.values() for r in rows}
    unmatched = 0
    for i, ds in dels.items():
        unmatched += max(len(ds) - len(ins[i]), 0)
        for r_ins, r_del in zip(ins[i], ds):
            life[r_ins][1] = seq[r_del]
    return {r: tuple(v) for r, v in life.items() if v[1] > v[0]}, unmatched


@st.composite
def tables(draw):
    """Carried state rows (inserts), then the call's events in seq order: FIFO retractions
    (windows), or deletes of random held rows, repeated ids and deletes of unknown ids."""
    fifo = draw(st.booleans())
    n_state = draw(st.integers(0, 5))
    ids = list(range(n_state))
    held = list(ids)
    signs = [1] * n_state
    nxt = n_state
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["insert", "insert", "delete", "reuse", "unknown"]))
        if kind == "delete" and held:
            k = 0 if fifo else draw(st.integers(0, len(held) - 1))
            ids.append(held.pop(k))
            signs.append(-1)
        elif kind == "reuse" and not fifo and ids:
            i = draw(st.sampled_from(ids))  # an id inserted again (or deleted again)
            ids.append(i)
            signs.append(draw(st.sampled_from([1, -1])))
        elif kind == "unknown" and not fifo:
            ids.append(10_000 + nxt)
            signs.append(-1)
            nxt += 1
        else:
            ids.append(nxt)
            held.append(nxt)
            signs.append(1)
            nxt += 1
    seq = [-1] * n_state
    s = 1
    for _ in range(len(ids) - n_state):
        s += draw(st.sampled_from([0, 2]))  # several events of one instant share a seq
        seq.append(s)
    return n_state, ids, signs, seq


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_table_matches_deletes_like_the_model(case):
    n_state, ids, signs, seq = case
    state = _batch(ids[:n_state], signs[:n_state])
    events = _batch(ids[n_state:], signs[n_state:])
    t = Table(state, events, np.array(seq[n_state:], np.int64), [INT])
    want, unmatched = _model(n_state, ids, signs, seq)
    got = {int(r): (int(lo), int(hi)) for r, lo, hi in zip(t.inst, t.lo, t.hi)}
    assert got == want
    assert t.unmatched_deletes == unmatched
    assert t.survivors.tolist() == sorted(r for r, (_, hi) in want.items() if hi == INF)


def test_window_retractions_take_the_fifo_path(monkeypatch):
    """A Range window's deletes are its oldest inserts in order: the one-pass path pairs them."""
    calls = []
    orig = np.searchsorted
    monkeypatch.setattr(np, "searchsorted", lambda *a, **k: calls.append(1) or orig(*a, **k))
    ids = [0, 1, 2, 3, 0, 1, 4, 2]
    signs = [1, 1, 1, 1, -1, -1, 1, -1]
    t = Table(_batch(ids[:2], signs[:2]), _batch(ids[2:], signs[2:]), np.array([1, 1, 3, 3, 5, 5]), [INT])
    assert not calls
    assert dict(zip(t.inst.tolist(), zip(t.lo.tolist(), t.hi.tolist()))) == {
        0: (-1, 3),
        1: (-1, 3),
        2: (1, 5),
        3: (1, INF),
        6: (5, INF),
    }


DDL = "register stream S (a int, b int); register stream T (a int, b int); register relation R (a int, b int);"
QUERIES = [
    "Rstream(select I.a, P.b from S [Now] as I, S [Range 2] as P where I.a = P.a and I.b <> P.b)",
    "Rstream(select S.b, T.b from S [Now], T [Rows 2] where S.a = T.a)",
    "Rstream(select S.b, T.b from S [Now], T [Partition By T.a Rows 1] where S.a = T.a)",
    "Rstream(select S.b, R.b from S [Now], R where S.a = R.a)",
    "Istream(select S.b, T.b from S [Range 2], T [Rows 3] where S.a = T.a)",
    "select S.b, R.a from S [Range 3], R where S.a = R.a",
]


def _stream(rng: np.random.Generator, n: int) -> list:
    t, out = 0, []
    for _ in range(n):
        t += int(rng.choice([0, 0, 1, 2]))
        out.append((t, (int(rng.integers(0, 3)), int(rng.integers(0, 3)))))
    return out


def _relation(rng: np.random.Generator, n: int) -> list:
    """Inserts, and deletes of random held rows (not the oldest first), updates at one instant."""
    t, out, held = 0, [], []
    for _ in range(n):
        t += int(rng.choice([0, 1, 1, 2]))
        if held and rng.random() < 0.45:
            out.append((t, -1, held.pop(int(rng.integers(0, len(held))))))
            if rng.random() < 0.5:
                continue
        row = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
        held.append(row)
        out.append((t, 1, row))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), st.integers(0, 2**31), st.booleans())
def test_joins_over_windows_and_relations_equal_reference(query, seed, compat):
    rng = np.random.default_rng(seed)
    inputs = {"S": _stream(rng, 30), "T": _stream(rng, 20), "R": _relation(rng, 25)}
    assert_same(DDL, query, inputs, compat=compat)
