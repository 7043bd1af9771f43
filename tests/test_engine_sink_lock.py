"""Spark sources into one engine share its lock: two streaming queries apply their micro-batches
from two driver threads, and a `Dsms` is not thread-safe. A lock per sink once let both run the
engine at once (a window store's buffer changed under a reader: IndexError, seen in CI)."""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa

from cqlstream.engine.dsms import Dsms
from cqlstream.spark_bridge.prepare import Prepared
from cqlstream.spark_bridge.sinks import EngineSink, engine_lock
from tests.engine_harness import net_by_instant, run_reference

DDL = "register stream Orders (item int, qty int); register stream Clicks (item int, uid int);"
JOIN = "select O.item, O.qty, C.uid from Orders [Range 4] as O, Clicks [Range 3] as C where O.item = C.item"


def test_sinks_into_one_engine_share_its_lock():
    d, other = Dsms(), Dsms()
    a, b = EngineSink(d), EngineSink(d)
    assert a.lock is b.lock is engine_lock(d)
    assert EngineSink(other).lock is not a.lock
    mine = threading.RLock()
    assert EngineSink(d, mine).lock is mine  # a caller's own lock is kept


def _batches(stream: str, n: int, seed: int) -> list[tuple[int, list[tuple]]]:
    """`n` micro-batches of one row per instant: (batch id, rows (ts, item, value))."""
    return [(k, [(k, (k * seed) % 3, k)]) for k in range(n)]


def test_two_threads_applying_batches_equal_the_reference():
    d = Dsms()
    d.execute(DDL)
    q = d.register_query(JOIN)
    sub = d.subscribe(q.id)
    feeds = {"Orders": _batches("Orders", 150, 1), "Clicks": _batches("Clicks", 150, 2)}
    fields = {"Orders": ("item", "qty"), "Clicks": ("item", "uid")}
    errors: list[BaseException] = []

    def apply_all(stream: str) -> None:
        sink = EngineSink(d)  # each source its own sink, as SparkSource makes them
        try:
            for bid, rows in feeds[stream]:
                cols = {"ts": [r[0] for r in rows]} | {
                    f: [r[1 + i] for r in rows] for i, f in enumerate(fields[stream])
                }
                table = pa.table({k: pa.array(v, pa.int64() if k == "ts" else pa.int32()) for k, v in cols.items()})
                sink.apply(stream, "run", Prepared(bid, table, rows[-1][0]))
        except BaseException as e:  # (reported below, with the thread's stream)
            errors.append(e)

    threads = [threading.Thread(target=apply_all, args=(s,)) for s in feeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    d.end()
    inputs = {s: [(r[0], tuple(r[1:])) for _, rows in b for r in rows] for s, b in feeds.items()}
    expected = run_reference(DDL, JOIN, inputs)
    assert expected
    got: dict[int, Counter] = net_by_instant(sub.poll())
    assert got == expected
