"""A selection's conjuncts on positions (engine/adaptive/conjuncts.py `_survivors`): each conjunct
sees only the columns it reads, gathered at the survivors of the ones before it, and the row is
copied once at the end. Against the reference evaluator over a wide stream with NULLs, strings and
floats, conjuncts reading one, several or no columns, at 1, 7 and all events per push, with
adaptation on and off."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import _at
from cqlstream.engine.batch import Batch
from tests.engine_harness import assert_same

DDL = "register stream S (a int, b int, c varchar, d float, e int, f int);"
QUERIES = [
    "select a, f from S where a > 1 and b <> 2",
    "select * from S where e = 0 and c <> 'x' and d < 2.5",
    "select c, d from S where a + b > 2 and f is null and 1 = 1",
    "Istream(select b, c from S [Range 2] where a <> 3 and b >= 1 and c = 'y')",
]

ints = st.one_of(st.integers(0, 4), st.just(None))


@st.composite
def events(draw):
    out, t = [], 0
    for _ in range(draw(st.integers(0, 20))):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        c = draw(st.one_of(st.sampled_from(["x", "y"]), st.just(None)))
        d = draw(st.one_of(st.sampled_from([0.5, 2.0, 3.5]), st.just(None)))
        out.append((t, (draw(ints), draw(ints), c, d, draw(ints), draw(ints))))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(QUERIES), events(), st.booleans(), st.sampled_from(["default", "off", "eager"]))
def test_equals_reference(query, s, compat, adaptive):
    opts = {
        "default": {},
        "off": {"adaptive": AdaptiveConfig(policy="off")},
        "eager": {"adaptive": AdaptiveConfig(probability=0.5, window=8, profile_batch=2)},
    }[adaptive]
    assert_same(DDL, query, {"S": s}, compat=compat, **opts)


def test_at_gathers_only_the_columns_read():
    cols = [np.arange(5), np.arange(5) * 10, np.array(list("abcde"), dtype=object)]
    nulls = [None, np.array([0, 1, 0, 0, 1], bool), None]
    b = Batch(cols, nulls, np.arange(5), np.ones(5, np.int8), np.arange(5, dtype=np.uint64))
    sub = _at(b, np.array([1, 3]), [1])
    assert sub.cols[1].tolist() == [10, 30] and sub.nulls[1].tolist() == [True, False]
    assert len(sub.cols[0]) == 0 and len(sub.cols[2]) == 0 and sub.nulls[0] is None
    # expressions read only the batch's length: ts, sign and id are read-only stand-ins of it
    assert len(sub) == 2 and len(sub.ts) == len(sub.sign) == len(sub.id) == 2
    assert not (sub.ts.flags.writeable or sub.sign.flags.writeable or sub.id.flags.writeable)
