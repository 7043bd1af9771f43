"""The Spark data source `cqlstream` against a real server (uvicorn on 127.0.0.1, in a thread) and a
real local Spark session (local[2], one per module): a relation-valued windowed aggregate and a
stream-valued Istream query are written by Spark into Parquet, and the Parquet rows equal, as a
multiset, what an NDJSON subscription opened at the same point received. The reader's offsets,
replays, per-trigger limit and ends are checked directly; unknown queries and unreachable servers
fail `load()` quickly, naming the url and the query. Every wait is bounded."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter

import httpx
import pyarrow as pa
import pytest
from pyspark.sql import types as T

from cqlstream.spark_bridge.result_schema import results_schema, spark_type
from cqlstream.spark_bridge.results_source import CqlResultsSource, ResultsOptions, ResultsSourceError, register
from cqlstream.spark_bridge.results_subscription import ResultsSubscription, decode_elements
from tests.server.conftest import ServerThread
from tests.spark.session import local_session

WAIT = 40  # seconds: the longest any wait here may take
DDL = "register stream Orders (item int, qty int, price float, tag varchar(8), ok boolean)"
TOTALS = "select item, sum(qty) as total, count(*) as n from Orders [Range 5] group by item"
BIG = "select istream(item, price, tag, ok) from Orders [Now] where price > 2.0"


@pytest.fixture(scope="module")
def spark():
    with local_session("cqlstream-results-source-tests") as session:
        register(session)
        yield session


@pytest.fixture(scope="module")
def server():
    s = ServerThread().start()
    yield s
    s.stop()


@pytest.fixture
def http(server):
    with server.client(timeout=10.0) as c:
        yield c


def setup_queries(http: httpx.Client, suffix: str) -> tuple[str, int, int]:
    """A fresh stream and the two queries over it: (stream name, aggregate id, Istream id)."""
    stream = f"Orders{suffix}"
    r = http.post("/streams", content=DDL.replace("Orders", stream).encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 201, r.text
    totals = http.post("/queries", json={"cql": TOTALS.replace("Orders", stream), "name": f"totals{suffix}"})
    big = http.post("/queries", json={"cql": BIG.replace("Orders", stream), "name": f"big_orders{suffix}"})
    assert totals.status_code == 201 and big.status_code == 201, (totals.text, big.text)
    assert totals.json()["kind"] == "relation" and big.json()["kind"] == "stream"
    return stream, totals.json()["id"], big.json()["id"]


def orders(rnd: random.Random, t0: int, t1: int) -> list[dict]:
    tags = ["a", "b,c", 'q"x', None, "é"]
    return [
        {
            "ts": t,
            "item": rnd.randrange(4),
            "qty": rnd.randrange(1, 9),
            "price": rnd.choice([0.5, 1.25, 2.5, 7.0, 3.75]),
            "tag": rnd.choice(tags),
            "ok": rnd.choice([True, False, None]),
        }
        for t in range(t0, t1)
        for _ in range(rnd.randrange(0, 3))
    ]


def push(http: httpx.Client, stream: str, rows: list[dict], heartbeat: int) -> None:
    if rows:
        body = "".join(json.dumps(r) + "\n" for r in rows).encode()
        r = http.post(f"/streams/{stream}/tuples", content=body, headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 200, r.text
    assert http.post(f"/streams/{stream}/heartbeat", json={"ts": heartbeat}).status_code == 200


class Reference(threading.Thread):
    """An NDJSON subscription (snapshot, then changes) read until results are final through `until`."""

    def __init__(self, url: str, qid: int, until: int) -> None:
        super().__init__(daemon=True)
        self.url, self.qid, self.until = url, qid, until
        self.elements: list[tuple] = []
        self.opened = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            params = {"snapshot": "true", "until": str(self.until)}
            with httpx.Client(base_url=self.url, timeout=httpx.Timeout(10.0, read=WAIT)) as c:
                with c.stream("GET", f"/queries/{self.qid}/results", params=params) as r:
                    assert r.status_code == 200
                    self.opened.set()
                    for line in r.iter_lines():
                        if line:
                            obj = json.loads(line)
                            assert "event" not in obj, obj
                            self.elements.append((obj["ts"], obj["sign"], *obj["row"]))
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.opened.set()


def wait_for(predicate, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.1)


def subscribers(http: httpx.Client, qid: int) -> int:
    return http.get(f"/queries/{qid}").json()["subscribers"]


def rows_read(query) -> int:
    return sum(p.numInputRows for p in query.recentProgress)


def stop_query(query) -> None:
    stopper = threading.Thread(target=query.stop, daemon=True)
    stopper.start()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "the streaming query did not stop"


def to_parquet(df, folder, qid: int):
    return (
        df.writeStream.format("parquet")
        .option("path", str(folder / f"out{qid}"))
        .option("checkpointLocation", str(folder / f"ckpt{qid}"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def parquet_rows(spark, folder, qid: int) -> Counter:
    return Counter(tuple(r) for r in spark.read.parquet(str(folder / f"out{qid}")).collect())


def test_results_into_parquet_equal_the_http_results(spark, server, http, tmp_path):
    rnd = random.Random(7)
    stream, totals_id, big_id = setup_queries(http, "P")
    end = 40
    push(http, stream, orders(rnd, 1, 12), 12)  # the aggregate's snapshot holds these
    refs = [Reference(server.url, qid, end) for qid in (totals_id, big_id)]
    for ref in refs:
        ref.start()
        assert ref.opened.wait(10) and ref.error is None, ref.error

    queries = {}
    for query, qid in ((str(totals_id), totals_id), ("big_ordersP", big_id)):  # by id, by name
        df = spark.readStream.format("cqlstream").option("url", server.url).option("query", query).load()
        want = results_schema(
            [("item", "INTEGER"), ("total", "INTEGER"), ("n", "INTEGER")]
            if qid == totals_id
            else [("item", "INTEGER"), ("price", "FLOAT"), ("tag", "VARCHAR(8)"), ("ok", "BOOLEAN")]
        )
        assert df.schema == want
        queries[qid] = to_parquet(df, tmp_path, qid)
    # both subscriptions of each query are open before anything else is pushed: same starting point
    for qid in queries:
        wait_for(lambda qid=qid: subscribers(http, qid) == 2, f"the Spark subscription of query {qid}")
    for t in range(12, end + 1, 7):
        push(http, stream, orders(rnd, t, min(t + 7, end + 1)), min(t + 7, end + 1))
    push(http, stream, [], end + 1)  # results are final through `end`
    for ref in refs:
        ref.join(WAIT)
        assert not ref.is_alive() and ref.error is None, ref.error

    for ref, (qid, query) in zip(refs, queries.items()):
        assert ref.elements, "the reference subscription received nothing"
        n = len(ref.elements)
        wait_for(lambda q=query, n=n: rows_read(q) >= n or q.exception() is not None, f"Spark to read query {qid}")
        assert query.exception() is None, query.exception()
    time.sleep(1.0)  # a few more triggers: nothing beyond the reference may arrive
    for query in queries.values():
        stop_query(query)

    for ref, qid in zip(refs, queries):
        assert parquet_rows(spark, tmp_path, qid) == Counter(ref.elements), f"query {qid}: Parquet != HTTP results"
    totals = refs[0].elements
    snapshot = [e for e in totals if e[0] == totals[0][0]]
    assert snapshot and all(e[1] == 1 for e in snapshot) and totals[0][0] == 11  # final through 11
    assert any(e[1] == -1 for e in totals) and len({e[0] for e in totals}) > 3  # then changes
    # the Spark subscriptions went away with their streaming queries
    push(http, stream, [], end + 2)
    for qid in queries:
        wait_for(lambda qid=qid: subscribers(http, qid) == 0, f"query {qid}'s subscribers to leave", 20)

    # restarted from its checkpoint, the aggregate's Spark query subscribes anew: the relation's
    # current snapshot, then its changes, follow what it wrote before (docs/spark.md, Restarts)
    end2 = end + 15
    again = Reference(server.url, totals_id, end2)
    again.start()
    assert again.opened.wait(10) and again.error is None, again.error
    df = spark.readStream.format("cqlstream").option("url", server.url).option("query", "totalsP").load()
    query = to_parquet(df, tmp_path, totals_id)
    wait_for(lambda: subscribers(http, totals_id) == 2, "the restarted Spark subscription")
    push(http, stream, orders(rnd, end + 2, end2 + 1), end2 + 1)
    again.join(WAIT)
    assert not again.is_alive() and again.error is None and again.elements[0][0] == end + 1, again.error
    n = len(again.elements)
    wait_for(lambda: rows_read(query) >= n or query.exception() is not None, "the restarted Spark query")
    assert query.exception() is None, query.exception()
    stop_query(query)
    assert parquet_rows(spark, tmp_path, totals_id) == Counter(totals) + Counter(again.elements)

    # a batch read gives the relation's current contents: the snapshot the server sends
    snap = http.get(f"/queries/{totals_id}/results", params={"snapshot": "true", "follow": "false"})
    want = Counter((o["ts"], o["sign"], *o["row"]) for o in map(json.loads, snap.text.splitlines()))
    batch = spark.read.format("cqlstream").option("url", server.url).option("query", "totalsP").load()
    assert want and Counter(tuple(r) for r in batch.collect()) == want


def test_reader_offsets_limits_replays_and_end(server, http):
    """The reader on its own (as Spark's driver calls it): positions as offsets, a per-trigger limit,
    replays from the buffer, commits, an offset of an earlier run, and a deregistered query's end."""
    rnd = random.Random(11)
    stream, totals_id, big_id = setup_queries(http, "R")
    src = CqlResultsSource({"url": server.url, "query": "big_ordersR", "maxRowsPerTrigger": "3"})
    reader = src.simpleStreamReader(src.schema())
    start = reader.initialOffset()
    assert start["n"] == 0
    rows, off = reader.read(start)
    assert list(rows) == [] and off == start  # nothing yet: the offset stays
    ref = Reference(server.url, big_id, 19)
    ref.start()
    assert ref.opened.wait(10) and ref.error is None, ref.error
    pushed = orders(rnd, 1, 20)
    push(http, stream, pushed, 20)
    ref.join(WAIT)
    assert not ref.is_alive() and ref.error is None and len(ref.elements) > 6, ref.error
    wait_for(lambda: reader.subscription().available() == len(ref.elements), "the reader's buffer")
    got, offsets = [], [start]
    while True:
        batches, off = reader.read(offsets[-1])
        batches = list(batches)
        if off == offsets[-1]:
            break
        assert sum(b.num_rows for b in batches) <= 3 and all(isinstance(b, pa.RecordBatch) for b in batches)
        got += [tuple(r.values()) for b in batches for r in b.to_pylist()]
        offsets.append(off)
    assert Counter(got) == Counter(ref.elements)
    # a batch replayed from the buffer is the same batch; committed ones are gone
    again = [tuple(r.values()) for b in reader.readBetweenOffsets(offsets[1], offsets[2]) for r in b.to_pylist()]
    assert again == got[3:6] and len(again) == 3
    reader.commit(offsets[2])
    with pytest.raises(ResultsSourceError):
        list(reader.readBetweenOffsets(offsets[0], offsets[1]))
    # an offset of an earlier subscription (a restarted Spark query) stands at the first uncommitted element
    batches, off = reader.read({"run": "earlier", "n": 99})
    assert (
        off == {"run": offsets[0]["run"], "n": 9} and [tuple(r.values()) for r in next(batches).to_pylist()] == got[6:9]
    )
    # a fresh reader (what Spark builds on an executor to replay) has nothing to replay
    assert list(src.simpleStreamReader(src.schema()).readBetweenOffsets(offsets[0], offsets[1])) == []
    # a deregistered query ends the stream: what arrived is read, then the reader says why it ended
    assert http.delete(f"/queries/{big_id}").status_code == 204
    wait_for(lambda: reader.subscription().ended() is not None, "the end message")
    with pytest.raises(ResultsSourceError, match="ended"):
        reader.read(offsets[-1])
    # the aggregate's snapshot: its current relation first (one instant), then changes
    snap = CqlResultsSource({"url": server.url, "query": str(totals_id), "snapshot": "true"})
    r2 = snap.simpleStreamReader(snap.schema())
    wait_for(lambda: r2.subscription().available() > 0, "the snapshot")
    first, _ = r2.read(r2.initialOffset())
    table = pa.Table.from_batches(list(first))
    assert set(table.column("sign").to_pylist()) == {1} and len(set(table.column("ts").to_pylist())) == 1
    assert 0 < table.num_rows <= 4 and set(table.column("item").to_pylist()) <= {r["item"] for r in pushed}

    # a batch read: the same snapshot, read once; a stream-valued query has none
    assert [b.to_pylist() for b in snap.reader(snap.schema()).read(None)] == [table.to_pylist()]
    again = http.post("/queries", json={"cql": BIG.replace("Orders", stream)})
    assert again.status_code == 201, again.text
    stream_src = CqlResultsSource({"url": server.url, "query": str(again.json()["id"])})
    with pytest.raises(ResultsSourceError, match="stream-valued"):
        stream_src.reader(stream_src.schema())

    # an inactive query's results cannot be subscribed to: the first offset asked for says so
    assert http.patch(f"/queries/{totals_id}", json={"active": False}).status_code == 200
    inactive = CqlResultsSource({"url": server.url, "query": "totalsR"})
    with pytest.raises(ResultsSourceError, match=f"query_inactive.*{server.url}|{server.url}.*query_inactive"):
        inactive.simpleStreamReader(inactive.schema()).initialOffset()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"query": "no_such_query"}, ["no_such_query", "no registered query"]),
        ({"query": "987654"}, ["987654", "no query with id"]),
        ({"query": "x", "url": f"http://127.0.0.1:{closed_port()}"}, ["cannot reach", "127.0.0.1"]),
        ({"query": "x", "snapshot": "maybe"}, ["option", "snapshot", "maybe"]),
        ({"query": "x", "url": ""}, ["option", "needs the option 'url'"]),
    ],
)
def test_load_fails_clearly_and_quickly(spark, server, options, words):
    options = {"url": server.url, "timeout": "3", **options}
    t0 = time.monotonic()
    reader = spark.readStream.format("cqlstream")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load()
    assert time.monotonic() - t0 < 15
    text = str(info.value)
    if words[0] != "option":  # a query that cannot be read: the error names the server too
        words = [*words, options["url"]]
    for w in words:
        assert w in text, f"{w!r} not in the error: {text[:2000]}"


def test_schema_mapping_and_decoding():
    assert [spark_type(t) for t in ("INTEGER", "FLOAT", "CHAR(8)", "VARCHAR", "BOOLEAN", "TIMESTAMP", "BYTE")] == [
        T.LongType(),
        T.DoubleType(),
        T.StringType(),
        T.StringType(),
        T.BooleanType(),
        T.LongType(),
        T.StringType(),
    ]
    with pytest.raises(ValueError, match="GEOMETRY"):
        spark_type("GEOMETRY")
    with pytest.raises(ValueError, match="tsColumn"):
        results_schema([("ts", "INTEGER")])
    schema = results_schema([("ts", "INTEGER"), ("s", "VARCHAR")], ts_column="t")
    assert schema.fieldNames() == ["t", "sign", "ts", "s"]
    arrow = pa.schema([("ts", pa.int64(), False), ("sign", pa.int32(), False), ("a", pa.int64()), ("s", pa.string())])
    block = (
        b'{"ts":1,"sign":1,"row":[3,"x\\"event\\""]}\n{"ts":2,"sign":-1,"row":[null,null]}\n'
        b'{"event":"end","detail":"query deregistered"}\n'
    )
    batch, events = decode_elements(block, arrow)
    assert batch.to_pylist() == [
        {"ts": 1, "sign": 1, "a": 3, "s": 'x"event"'},
        {"ts": 2, "sign": -1, "a": None, "s": None},
    ]
    assert events == [{"event": "end", "detail": "query deregistered"}]
    with pytest.raises(ValueError, match="unknown option"):
        ResultsOptions.parse({"url": "http://x", "query": "q", "maxRows": "3"})
    assert ResultsOptions.parse({"URL": "http://x/", "Query": "q", "maxRowsPerTrigger": "5"}).max_rows_per_trigger == 5


SMALL = pa.schema([("ts", pa.int64(), False), ("sign", pa.int32(), False), ("a", pa.int64())])


def mock_subscription(handler, **kw) -> ResultsSubscription:
    client = httpx.Client(base_url="http://cql.test", transport=httpx.MockTransport(handler))
    params = {"format": "ndjson", "snapshot": "true"}
    return ResultsSubscription(client, "http://cql.test", 5, params, SMALL, open_timeout=5, **kw)


def test_subscription_snapshot_fallback_and_backpressure():
    """Served by a mock transport: a refused snapshot is retried without one only when asked
    (`if_available`), and the reading thread stops taking elements while `max_buffered` wait."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["snapshot"])
        if request.url.params["snapshot"] == "true":
            return httpx.Response(409, json={"code": "snapshot_unavailable", "detail": "no snapshot for this plan"})
        lines = [b'{"ts":%d,"sign":1,"row":[%d]}\n' % (t, t) for t in range(3)]
        return httpx.Response(200, content=iter([*lines, b'{"event":"end","detail":"query deregistered"}\n']))

    with pytest.raises(ResultsSourceError, match=r"snapshot_unavailable.*no snapshot for this plan"):
        mock_subscription(handler, max_buffered=10).start()
    assert asked == ["true"]
    sub = mock_subscription(handler, max_buffered=1, fallback_params={"format": "ndjson", "snapshot": "false"})
    sub.start()
    wait_for(lambda: sub.available() == 1, "the first element", 5)
    time.sleep(0.3)
    assert sub.available() == 1 and sub.ended() is None  # waiting for Spark to commit
    sub.release(1)
    wait_for(lambda: sub.available() == 2, "the second element", 5)
    sub.release(2)
    wait_for(lambda: sub.ended() is not None, "the end", 5)
    assert sub.available() == 3 and "query deregistered" in sub.ended()
    assert asked == ["true", "true", "false"]
    assert sub.slice(2, 3)[0].to_pylist() == [{"ts": 2, "sign": 1, "a": 2}]
    with pytest.raises(ResultsSourceError, match="not held"):
        sub.slice(0, 1)
