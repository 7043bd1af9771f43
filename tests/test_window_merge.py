"""A window's output: its deletes and inserts merged by ts (engine/operators/window_logic.py
`emit`) — the scatter merge of two ts-sorted sides against a stable sort of deletes + inserts,
with ties, NULLs on one side only, strings, and sides out of order (the sort path)."""

from __future__ import annotations

import numpy as np
import pytest

from cqlstream.cql.types import INT, VARCHAR
from cqlstream.engine.batch import Batch, concat, from_rows
from cqlstream.engine.operators.window_logic import emit


def _side(rng: np.random.Generator, n: int, sort: bool, nulls: bool) -> Batch:
    ts = rng.integers(0, 12, n)
    if sort:
        ts = np.sort(ts)
    rows = [(None if nulls and rng.random() < 0.3 else int(rng.integers(0, 5)), f"s{rng.integers(0, 9)}") for _ in range(n)]
    b = from_rows(rows, [INT, VARCHAR], ts)
    b.id = rng.integers(0, 2**63, n).astype(np.uint64)
    return b


def _want(ins: Batch, dels: Batch, del_ts: np.ndarray) -> Batch:
    d = Batch(dels.cols, dels.nulls, del_ts.astype(np.int64), -np.ones(len(dels), np.int8), dels.id)
    out = concat([d, ins], [INT, VARCHAR])
    return out.take(np.argsort(out.ts, kind="stable"))


@pytest.mark.parametrize("seed", range(40))
def test_emit_merges_like_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    sort = seed % 5 != 0  # every fifth case: a side out of ts order (the sort path)
    ins = _side(rng, int(rng.integers(0, 30)), sort, nulls=seed % 2 == 0)
    dels = _side(rng, int(rng.integers(0, 30)), True, nulls=seed % 3 == 0)
    del_ts = dels.ts + int(rng.integers(0, 4))
    got, want = emit(ins, dels, del_ts), _want(ins, dels, del_ts)
    assert got.elements() == want.elements()
    assert got.id.tolist() == want.id.tolist()
