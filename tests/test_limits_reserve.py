"""A memory limit bounds the peak within one operator call: a join about to materialize a result
that would put every query using it over its limit is stopped before the allocation
(engine/limits.py `reserve`), not after; a join shared with a query within its limit goes on."""

from __future__ import annotations

import tracemalloc

from cqlstream.engine.dsms import Dsms

DDL = "register stream S (A integer, B integer); register stream T (C integer, D integer)"
CROSS = "select * from S [Range Unbounded], T [Range Unbounded]"
N = 1500  # one push of N rows meets N rows: N * N result rows of ~49 bytes (110 MB)


def _feed(d: Dsms) -> None:
    d.push("S", [(i, i) for i in range(N)], [1] * N)
    d.push("T", [(i, i) for i in range(N)], [2] * N)
    d.heartbeat("S", 3)
    d.heartbeat("T", 3)


def test_cross_product_suspended_before_its_result_is_allocated():
    d = Dsms(query_memory_limit=4 << 20)
    d.execute(DDL)
    q = d.register_query(CROSS)
    d.subscribe(q.id)  # its results are kept for a reader (counted as the query's)
    tracemalloc.start()
    try:
        _feed(d)
        d.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert q.state == "suspended" and "would hold" in q.suspended and "about to allocate" in q.suspended, q.suspended
    assert peak < 120 << 20, peak  # the pairs' index arrays (~70 MiB) only: 277 MiB when the columns are gathered


def test_shared_join_with_an_unlimited_query_goes_on():
    d = Dsms()
    d.execute(DDL)
    limited, free = d.register_query(CROSS), d.register_query(CROSS)
    d.set_knob(f"query:{limited.id}", "memory_limit", 4 << 20)
    sub = d.subscribe(free.id)
    _feed(d)
    d.run()
    assert limited.state == "suspended" and "would hold" not in limited.suspended  # the check after the call
    assert free.state == "active" and len(sub.poll()) == N * N
