"""The stream–relation join's conjuncts over both sides (engine/operators/stream_join.py): they
are evaluated on the candidate pairs with only the columns they read gathered. Queries whose
non-equi conjuncts read columns at every position of either side (first, middle, last; S first
or second; with an expression and a NULL-able column), against the reference evaluator at 1, 7
and all events per push, paper and compat mode."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine_harness import assert_same

DDL = "register stream S (a int, b int, c int); register stream T (a int, b int, c int); register relation R (a int, b int, c int);"
QUERIES = [
    "Rstream(select S.a, S.c, R.b from S [Now], R where S.a = R.a and S.c <> R.c)",
    "Rstream(select * from R, S [Now] where S.b = R.b and S.a < R.c)",
    "Rstream(select S.b, R.a from S [Now], R where S.c + R.b > S.a)",
    "Rstream(select I.a, P.c from S [Now] as I, S [Range 2] as P where I.a = P.a and I.c <> P.b)",
    "Rstream(select T.c, S.b from T [Rows 3], S [Now] where S.a = T.a and T.c >= S.c and S.b <> T.b)",
]


def _stream(rng: np.random.Generator, n: int) -> list:
    t, out = 0, []
    for _ in range(n):
        t += int(rng.choice([0, 0, 1, 2]))
        row = tuple(None if rng.random() < 0.1 else int(rng.integers(0, 3)) for _ in range(3))
        out.append((t, row))
    return out


def _relation(rng: np.random.Generator, n: int) -> list:
    t, out, held = 0, [], []
    for _ in range(n):
        t += int(rng.choice([0, 1, 1, 2]))
        if held and rng.random() < 0.4:
            out.append((t, -1, held.pop(int(rng.integers(0, len(held))))))
            if rng.random() < 0.5:
                continue
        row = tuple(int(rng.integers(0, 3)) for _ in range(3))
        held.append(row)
        out.append((t, 1, row))
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), st.integers(0, 2**31), st.booleans())
def test_conjuncts_over_both_sides_equal_reference(query, seed, compat):
    rng = np.random.default_rng(seed)
    inputs = {"S": _stream(rng, 30), "T": _stream(rng, 20), "R": _relation(rng, 25)}
    assert_same(DDL, query, inputs, compat=compat)
