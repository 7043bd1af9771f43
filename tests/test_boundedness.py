"""Bounded-memory verdicts (engine/boundedness.py), one case per line: query → verdict."""

from __future__ import annotations

import pytest

from cqlstream.engine.dsms import Dsms

DDL = "register stream S (A int, B int); register stream T (A int, B int); register relation R (A int, B int)"

CASES = [
    ("select * from S where A > 1", True),  # implicit Istream over an Unbounded window: stateless
    ("Istream(select * from S [Rows 10])", True),
    ("select A, Count(*) from S [Rows 100] group by A", True),
    ("select Count(*), Sum(A) from S", True),  # scalar count/sum: O(1) state
    ("select Max(A) from S", True),  # Theorem 8.5: one running maximum (this engine's plan keeps more)
    ("select A, Count(*) from S group by A", False),  # one group per distinct A
    ("select distinct A from S", False),
    ("select * from S [Range 10 Seconds]", None),  # what arrives in 10 s
    ("Istream(select S.A, T.B from S [Range 5], T [Rows 5] where S.A = T.A)", None),
    ("Istream(select S.A, T.B from S [Rows 5], T [Rows 5] where S.A = T.A)", True),
    ("select S.A from S [Rows 5], T where S.A = T.A", False),  # T's Unbounded window in a join
    ("select * from S [Partition By A Rows 2]", False),  # partitions grow with distinct A
    ("select R.B, S.B from R, S [Now] where R.A = S.A", None),
    ("select * from R", True),  # a registered relation's size is the user's
]


@pytest.mark.parametrize("query,expected", CASES, ids=[q for q, _ in CASES])
def test_verdict(query, expected):
    d = Dsms()
    d.execute(DDL)
    h = d.register_query(query)
    assert h.bounded_memory is expected, h.bounded_memory_note
    word = {True: "bounded", None: "bounded for a bounded arrival rate", False: "grows with the input"}[expected]
    assert h.bounded_memory_note.startswith(word)
