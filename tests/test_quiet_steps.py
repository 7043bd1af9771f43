"""Operators whose call on inputs with no rows outputs nothing and changes no state
(`quiet_on_empty`: projection, output stage, Istream/Dstream) are not called then: `step` only
advances the output's watermark. Rstream, windows and the others are still called (they emit
at instants where no input arrives)."""

import numpy as np
import pytest

from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.basic import PassOp
from cqlstream.engine.operators.r2s import RelToStreamOp
from cqlstream.engine.queues import Queue
from tests.engine_harness import assert_same

INT = DataType("int")


def _one(ts: int) -> Batch:
    return Batch(
        [np.array([7], np.int64)], [None], np.array([ts], np.int64), np.ones(1, np.int8), np.ones(1, np.uint64)
    )


@pytest.mark.parametrize(
    "make", [lambda i, o: PassOp([i], o, IdSource()), lambda i, o: RelToStreamOp([i], o, IdSource(), "istream")]
)
def test_quiet_operator_is_not_called_without_rows(make, monkeypatch):
    qi, qo = Queue([INT]), Queue([INT])
    op = make(qi, qo)
    calls = []
    real = type(op).process
    monkeypatch.setattr(
        type(op), "process", lambda self, inputs, bound: calls.append(bound) or real(self, inputs, bound)
    )
    qi.push(_one(1), watermark=1)
    assert op.step() == 1 and calls == [1]
    qi.push(None, watermark=5)  # time passes, no rows
    assert op.step() == 1 and calls == [1]  # not called
    assert qo.watermark == 5 and op.done_through == 5 and op.counters.calls == 2
    qi.push(_one(6), watermark=6)
    assert op.step() == 1 and calls == [1, 6]


def test_rstream_is_called_without_rows():
    qi, qo = Queue([INT]), Queue([INT])
    op = RelToStreamOp([qi], qo, IdSource(), "rstream")
    r = qo.reader()
    qi.push(_one(1), watermark=1)
    op.step()
    qi.push(None, watermark=3)
    op.step()
    assert r.take(3).ts.tolist() == [1, 2, 3]  # the live row at every instant


DDL = "register stream S (a int, b int); register stream M (m int)"
# a stream with long silent stretches (heartbeats, a per-minute trigger stream beside it)
_S = [(10 * (i // 4), (i % 5, i % 3)) for i in range(40)] + [(200 + k, None) for k in range(0, 60, 7)]
_M = sorted(
    [(t, (t // 60,)) for t in range(0, 260, 60)] + [(t + 1, None) for t in range(0, 260, 13)], key=lambda e: e[0]
)


@pytest.mark.parametrize(
    "query",
    [
        "istream (select a + b, a from S [range 3])",
        "dstream (select a, b from S [range 15])",
        "select a * 2 from S where b > 0",
        "rstream (select a from S [rows 2])",
        "istream (select m, a from M [now], S [range 25] where a > m)",
    ],
)
def test_engine_equals_reference_over_silent_stretches(query):
    assert_same(DDL, query, {"S": _S, "M": _M})
