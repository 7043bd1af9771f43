"""Spark sources with a real local Spark session (local[2], one per module): CSV directories and the
rate source feed engine queries whose results equal the reference evaluator's on the rows Spark
delivered; a batch re-delivered after a failure is not applied twice; schema mismatches name the
columns. Every wait is bounded."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from cqlstream.engine.dsms import Dsms
from cqlstream.spark_bridge import SparkSource, SparkSourceConfig, SparkSourceError
from tests.engine_harness import net_by_instant, run_reference
from tests.spark.session import local_session

WAIT = 60  # seconds: the longest any streaming query may take here

DDL = "register stream Orders (item int, qty int, price float); register stream Clicks (item int, uid int);"
AGGREGATE = "select item, sum(qty), count(*) from Orders [Range 5] where price > 2.0 group by item"
JOIN = "select O.item, O.qty, C.uid from Orders [Range 4] as O, Clicks [Range 3] as C where O.item = C.item"
ORDERS_SCHEMA = "t LONG, item INT, qty INT, price DOUBLE"
CLICKS_SCHEMA = "t LONG, item INT, uid INT"


@pytest.fixture(scope="module")
def spark():
    with local_session("cqlstream-spark-tests") as session:
        yield session


def write_files(folder: Path, header: str, files: list[list[tuple]]) -> None:
    """One CSV file per list of rows, modification times increasing in list order (Spark reads the
    oldest first, one file per micro-batch with maxFilesPerTrigger=1)."""
    folder.mkdir(parents=True)
    base = time.time() - 100
    for k, rows in enumerate(files):
        path = folder / f"part-{k:03d}.csv"
        path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
        os.utime(path, (base + k, base + k))


def order_files(seed: int, n_files: int = 3, per_file: int = 12) -> list[list[tuple]]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n_files):
        rows = []
        for _ in range(per_file):
            t += rnd.randint(0, 2)
            rows.append((t, rnd.randint(1, 4), rnd.randint(1, 9), round(rnd.uniform(0.5, 5.0), 2)))
        rnd.shuffle(rows)  # within a file any order: the bridge sorts each micro-batch by event time
        out.append(rows)
    return out


def click_files(seed: int, n_files: int = 3, per_file: int = 10) -> list[list[tuple]]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n_files):
        rows = []
        for _ in range(per_file):
            t += rnd.randint(0, 3)
            rows.append((t, rnd.randint(1, 4), rnd.randint(100, 105)))
        out.append(rows)
    return out


def events(files: list[list[tuple]]) -> list[tuple]:
    """Reference input: (ts, tuple) in ts order (stable: the order within an instant is irrelevant to bags)."""
    return sorted(((r[0], tuple(r[1:])) for rows in files for r in rows), key=lambda e: e[0])


def csv_source(spark, d: Dsms, folder: Path, schema: str, stream: str, checkpoint: Path, **kw) -> SparkSource:
    df = spark.readStream.schema(schema).option("header", True).option("maxFilesPerTrigger", 1).csv(str(folder))
    cfg = SparkSourceConfig(stream=stream, time_column="t", checkpoint=str(checkpoint), available_now=True)
    return SparkSource(d, df, cfg, **kw)


def results(sub) -> dict[int, Counter]:
    return net_by_instant(sub.poll())


def run_to_end(*sources: SparkSource) -> None:
    for s in sources:
        s.start()
    for s in sources:
        assert s.await_termination(WAIT), f"the Spark source of {s.config.stream} did not finish in {WAIT} s"


def test_csv_directories_feed_an_aggregate_and_a_join(spark, tmp_path):
    orders, clicks = order_files(1), click_files(2)
    write_files(tmp_path / "orders", "t,item,qty,price", orders)
    write_files(tmp_path / "clicks", "t,item,uid", clicks)
    d = Dsms()
    d.execute(DDL)
    agg, join = d.register_query(AGGREGATE), d.register_query(JOIN)
    subs = {AGGREGATE: d.subscribe(agg.id), JOIN: d.subscribe(join.id)}
    src_o = csv_source(spark, d, tmp_path / "orders", ORDERS_SCHEMA, "Orders", tmp_path / "ck-o")
    src_c = csv_source(spark, d, tmp_path / "clicks", CLICKS_SCHEMA, "Clicks", tmp_path / "ck-c")
    run_to_end(src_o, src_c)  # both queries run at once: their callbacks share the Dsms lock
    d.end()
    inputs = {"Orders": events(orders), "Clicks": events(clicks)}
    for q, sub in subs.items():
        expected = run_reference(DDL, q, inputs)
        assert expected, q  # the data makes the query say something
        assert results(sub) == expected, q
    for src, files in ((src_o, orders), (src_c, clicks)):
        c = src.counters()
        assert c["batches"] == len(files) and c["last_batch_id"] == len(files) - 1
        assert c["rows"] == sum(map(len, files)) and c["late_rows"] == 0 and c["skipped_replays"] == 0
        assert c["last_batch_seconds"] > 0


def test_rate_source_feeds_a_windowed_count(spark, tmp_path):
    ddl = "register stream R (value int);"
    query = "select count(*), sum(value) from R [Range 300]"
    d = Dsms()
    d.execute(ddl)
    sub = d.subscribe(d.register_query(query).id)
    delivered: list[pa.Table] = []
    df = spark.readStream.format("rate").option("rowsPerSecond", 40).load()
    cfg = SparkSourceConfig(
        stream="R",
        time_column="timestamp",
        tick_micros=1000,  # milliseconds
        checkpoint=str(tmp_path / "ck"),
        trigger_interval="300 milliseconds",
    )
    src = SparkSource(d, df, cfg, on_applied=lambda _, table: delivered.append(table))
    src.start()
    deadline = time.monotonic() + WAIT
    while src.counters()["rows"] < 60 or src.counters()["batches"] < 3:
        assert time.monotonic() < deadline, f"the rate source delivered too little: {src.counters()}"
        assert src.query is not None and src.query.exception() is None
        time.sleep(0.1)
    src.stop()
    assert src.query is not None and not src.query.isActive
    d.end()
    rows = [r for t in delivered for r in t.to_pylist()]
    # the test's own conversion of Spark timestamps (aware datetimes) to milliseconds
    inputs = {"R": sorted((round(r["timestamp"].timestamp() * 1e6) // 1000, (r["value"],)) for r in rows)}
    assert len(rows) == src.counters()["rows"] >= 60
    assert src.counters()["late_rows"] == 0
    assert results(sub) == run_reference(ddl, query, inputs)


def test_a_batch_replayed_after_a_failure_is_not_applied_twice(spark, tmp_path):
    orders = order_files(3)
    write_files(tmp_path / "orders", "t,item,qty,price", orders)
    d = Dsms()
    d.execute(DDL)
    sub = d.subscribe(d.register_query(AGGREGATE).id)
    seen: list[int] = []

    def crash_once(batch_id: int, _: pa.Table) -> None:
        seen.append(batch_id)
        if batch_id == 1 and seen.count(1) == 1:
            raise RuntimeError("forced failure after the engine applied batch 1")

    src = csv_source(spark, d, tmp_path / "orders", ORDERS_SCHEMA, "Orders", tmp_path / "ck", on_applied=crash_once)
    src.start()
    with pytest.raises(Exception, match="forced failure"):
        src.await_termination(WAIT)
    assert src.counters()["last_batch_id"] == 1 and src.counters()["skipped_replays"] == 0
    src.start()  # same checkpoint: Spark had not committed batch 1 and delivers it again
    assert src.await_termination(WAIT)
    c = src.counters()
    assert c["skipped_replays"] == 1 and c["batches"] == len(orders) and c["last_batch_id"] == len(orders) - 1
    assert c["rows"] == sum(map(len, orders))
    assert seen == [0, 1, 2]  # batch 1 reached the engine once
    d.end()
    assert results(sub) == run_reference(DDL, AGGREGATE, {"Orders": events(orders), "Clicks": []})


def test_a_schema_mismatch_names_the_columns(spark, tmp_path):
    (tmp_path / "in").mkdir()
    d = Dsms()
    d.execute(DDL)
    df = spark.readStream.schema("t LONG, item STRING, price DOUBLE").csv(str(tmp_path / "in"))
    src = SparkSource(d, df, SparkSourceConfig(stream="Orders", time_column="t", checkpoint=str(tmp_path / "ck")))
    with pytest.raises(SparkSourceError) as e:
        src.start()
    assert e.value.missing == ("qty",) and [m.split()[0] for m in e.value.mistyped] == ["item"]
    assert "missing column(s): qty" in str(e.value) and "item (string, expected int)" in str(e.value)
    assert src.query is None  # nothing started
    src2 = SparkSource(d, df, SparkSourceConfig(stream="Orders", time_column="when", checkpoint=str(tmp_path / "k2")))
    with pytest.raises(SparkSourceError, match="missing column\\(s\\): when, qty"):
        src2.check()
    with pytest.raises(SparkSourceError, match="no stream or relation named 'Nope'"):
        SparkSource(d, df, SparkSourceConfig(stream="Nope", time_column="t", checkpoint="x")).check()


def bound_source(spark, tmp_path: Path, d: Dsms, stream: str, **kw) -> SparkSource:
    """A source checked against its DataFrame's schema, fed by `apply` directly (no streaming query)."""
    (tmp_path / "in").mkdir(exist_ok=True)
    df = spark.readStream.schema("t LONG, a INT").csv(str(tmp_path / "in"))
    src = SparkSource(d, df, SparkSourceConfig(stream=stream, time_column="t", checkpoint=str(tmp_path / "ck"), **kw))
    src.check()
    return src


def test_rows_older_than_the_stream_are_counted_late_not_fatal(spark, tmp_path):
    d = Dsms()
    d.execute("register stream S (a int);")
    sub = d.subscribe(d.register_query("Istream(select * from S)").id)
    src = bound_source(spark, tmp_path, d, "S")
    src.apply(0, pa.table({"t": [6, 5, 4], "a": [3, 2, 1]}))  # sorted by event time in the bridge
    src.apply(1, pa.table({"t": [8, 3, 6], "a": [6, 4, 5]}))  # 3 is older than the stream's time (6)
    src.apply(1, pa.table({"t": [9], "a": [7]}))  # batch 1 again: a replay, skipped
    d.end()
    c = src.counters()
    assert {k: c[k] for k in ("batches", "rows", "accepted", "last_batch_id", "late_rows", "skipped_replays")} == {
        "batches": 2,
        "rows": 6,
        "accepted": 5,
        "last_batch_id": 1,
        "late_rows": 1,
        "skipped_replays": 1,
    }
    assert sub.poll().elements() == [(4, 1, (1,)), (5, 1, (2,)), (6, 1, (3,)), (6, 1, (5,)), (8, 1, (6,))]


def test_the_watermark_releases_what_a_slack_holds_back(spark, tmp_path):
    d = Dsms()
    d.execute("register stream S (a int) with (slack = 5);")
    sub = d.subscribe(d.register_query("Istream(select * from S)").id)
    src = bound_source(spark, tmp_path, d, "S", watermark_delay=1)
    src.apply(0, pa.table({"t": [12, 10], "a": [2, 1]}))
    # the slack alone would hold both rows back (released through 12 − 5 − 1 = 6); the watermark
    # 12 − 1 completes the stream through 10
    assert sub.poll().elements() == [(10, 1, (1,))]
    src.apply(1, pa.table({"t": [9, 11, 13], "a": [0, 3, 4]}))  # 9 is below the watermark: late
    assert src.counters()["late_rows"] == 1
    d.end()
    assert sub.poll().elements() == [(11, 1, (3,)), (12, 1, (2,)), (13, 1, (4,))]


def test_spark_timestamps_become_ticks(spark, tmp_path):
    (tmp_path / "in").mkdir()
    df = spark.readStream.schema("t TIMESTAMP, a INT").csv(str(tmp_path / "in"))
    stamps = pa.array([1_700_000_000_123_456, 1_700_000_000_124_999], pa.timestamp("us", "UTC"))
    for stream, micros, expected in [
        ("S", None, 1_700_000_000_124),  # the stream's unit: milliseconds, floored
        ("M", None, 1_700_000_000 // 60),  # minutes
        ("M", 1_000_000, 1_700_000_000),  # an explicit tick overrides the unit
    ]:
        d2 = Dsms()
        d2.execute(f"register stream {stream} (a int) with (unit = {'millisecond' if stream == 'S' else 'minute'});")
        cfg = SparkSourceConfig(stream=stream, time_column="t", checkpoint=str(tmp_path / "ck"), tick_micros=micros)
        src = SparkSource(d2, df, cfg)
        src.check()
        src.apply(0, pa.table({"t": stamps, "a": [1, 2]}))
        assert d2.inputs[stream.lower()].max_ts == expected
    with pytest.raises(SparkSourceError, match="must be positive"):
        SparkSourceConfig(stream="S", time_column="t", checkpoint="x", tick_micros=0)
