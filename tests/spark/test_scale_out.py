"""Distributed runs (spark_bridge/scale_out.py) in local[2], one Spark session for the module: a
grouped windowed aggregate and an equi-join of two windowed streams, partitioned by their key
across Spark's tasks with the RocksDB state store, give the single-node answers instant by instant
(the reference evaluator's, as tests/spark/test_source.py compares), also across a restart from
Spark's checkpoint mid-stream; a query that does not partition is refused with the reason."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.scale_out import plan_query, scale_out
from tests.engine_harness import run_reference
from tests.spark.session import finish, local_session

WAIT = 120  # seconds: the longest a run may take here (Python workers start per task on 2 busy cores)

DDL = "register stream S (k int, v int); register stream T (k int, u int);"
AGGREGATE = "select k, sum(v), count(*) from S [Range 10] group by k"
JOIN = "select S.k, S.v, T.u from S [Range 5], T [Range 4] where S.k = T.k"


@pytest.fixture(scope="module")
def spark():
    with local_session("cqlstream-scale-out-tests") as session:
        yield session


def stream_files(seed: int, n_files: int, per_file: int, keys: int = 6) -> list[list[tuple[int, int, int]]]:
    """(ts, k, value) rows, ts non-decreasing across files (an instant may span two files)."""
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n_files):
        rows = []
        for _ in range(per_file):
            t += rnd.randint(0, 2)
            rows.append((t, rnd.randint(1, keys), rnd.randint(1, 9)))
        rnd.shuffle(rows)  # any order within a file: each bucket sorts what it gets
        out.append(rows)
    return out


def write_files(folder: Path, header: str, files: list[list[tuple]], start: int = 0) -> None:
    """One CSV file per list, modification times in list order (read one per micro-batch)."""
    folder.mkdir(parents=True, exist_ok=True)
    base = time.time() - 1000
    for k, rows in enumerate(files, start):
        path = folder / f"part-{k:03d}.csv"
        path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
        os.utime(path, (base + k, base + k))


def events(files: list[list[tuple]]) -> list[tuple]:
    return sorted(((r[0], tuple(r[1:])) for rows in files for r in rows), key=lambda e: e[0])


def run(spark, plan, dirs: dict[str, tuple[Path, str]], out: Path, checkpoint: Path) -> None:
    """One availableNow run of the distributed query over CSV directories into a Parquet sink."""
    frames = {
        s: spark.readStream.schema(schema).option("header", True).option("maxFilesPerTrigger", 1).csv(str(path))
        for s, (path, schema) in dirs.items()
    }
    q = (
        scale_out(spark, plan, frames)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finish(q, WAIT)


def results(spark, out: Path, n_cols: int) -> dict[int, Counter]:
    """The Parquet sink's rows (ts, sign, columns) as {instant: Counter(row → net count)}."""
    got: dict[int, Counter] = {}
    for r in spark.read.parquet(str(out)).collect():
        got.setdefault(r[0], Counter())[tuple(r[2 : 2 + n_cols])] += r[1]
    clean = {t: Counter({k: v for k, v in c.items() if v}) for t, c in got.items()}
    return {t: c for t, c in clean.items() if c}


def through(result: dict[int, Counter], last: int) -> dict[int, Counter]:
    return {t: c for t, c in result.items() if t <= last}


def test_grouped_windowed_aggregate_equals_the_single_node_answer(spark, tmp_path):
    files = stream_files(1, n_files=3, per_file=30)
    write_files(tmp_path / "s", "ts,k,v", files)
    plan = plan_query(DDL, AGGREGATE)
    assert plan.keys == (("k",),) and plan.spec.streams == ("S",)
    run(spark, plan, {"S": (tmp_path / "s", "ts LONG, k INT, v INT")}, tmp_path / "out", tmp_path / "ck")
    expected = run_reference(DDL, AGGREGATE, {"S": events(files), "T": []})
    last = max(r[0] for rows in files for r in rows)  # final: Spark's last watermark passed it
    got = results(spark, tmp_path / "out", 3)
    assert len(expected) > 20  # the data makes the query say something at many instants
    assert got == through(expected, last)
    # the state lived in RocksDB: its checkpoint files are under the operator's state folder
    assert list((tmp_path / "ck" / "state").rglob("*.zip")), "no RocksDB snapshot in the checkpoint"


def test_equi_join_of_two_windowed_streams_equals_the_single_node_answer(spark, tmp_path):
    s_files, t_files = stream_files(2, 3, 20, keys=4), stream_files(3, 3, 20, keys=4)
    write_files(tmp_path / "s", "ts,k,v", s_files)
    write_files(tmp_path / "t", "ts,k,u", t_files)
    plan = plan_query(DDL, JOIN)
    assert plan.spec.streams == ("S", "T") and plan.keys == (("k",), ("k",))
    dirs = {"S": (tmp_path / "s", "ts LONG, k INT, v INT"), "T": (tmp_path / "t", "ts LONG, k INT, u INT")}
    run(spark, plan, dirs, tmp_path / "out", tmp_path / "ck")
    expected = run_reference(DDL, JOIN, {"S": events(s_files), "T": events(t_files)})
    # final through the slower stream's last instant (Spark's watermark is the streams' minimum)
    last = min(max(r[0] for rows in fs for r in rows) for fs in (s_files, t_files))
    got = results(spark, tmp_path / "out", 3)
    assert len(through(expected, last)) > 10
    assert got == through(expected, last)


def test_a_restart_from_the_checkpoint_mid_stream_continues_exactly(spark, tmp_path):
    files = stream_files(4, n_files=4, per_file=25)
    write_files(tmp_path / "s", "ts,k,v", files[:2])
    plan = plan_query(DDL, AGGREGATE)
    dirs = {"S": (tmp_path / "s", "ts LONG, k INT, v INT")}
    run(spark, plan, dirs, tmp_path / "out", tmp_path / "ck")  # stops with windows still open
    first = results(spark, tmp_path / "out", 3)
    write_files(tmp_path / "s", "ts,k,v", files[2:], start=2)
    run(spark, plan, dirs, tmp_path / "out", tmp_path / "ck")  # a new run: state from Spark's checkpoint
    expected = run_reference(DDL, AGGREGATE, {"S": events(files), "T": []})
    half = max(r[0] for rows in files[:2] for r in rows)
    assert first == through(expected, half)
    assert results(spark, tmp_path / "out", 3) == through(expected, max(r[0] for rows in files for r in rows))


def test_a_batch_that_failed_is_replayed_from_the_checkpoint_with_the_state_before_it(spark, tmp_path):
    files = stream_files(6, n_files=3, per_file=20)
    write_files(tmp_path / "s", "ts,k,v", files)
    plan = plan_query(DDL, AGGREGATE)
    delivered: dict[int, list] = {}
    failures: list[int] = []

    def sink(df, batch_id: int) -> None:
        rows = df.collect()
        if batch_id == 1 and not failures:
            failures.append(batch_id)
            raise RuntimeError("forced failure in micro-batch 1")
        delivered[batch_id] = rows  # keyed by batch id: a replayed batch replaces its first delivery

    def start():
        df = spark.readStream.schema("ts LONG, k INT, v INT").option("header", True)
        df = df.option("maxFilesPerTrigger", 1).csv(str(tmp_path / "s"))
        out = scale_out(spark, plan, {"S": df}).writeStream.foreachBatch(sink)
        return out.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()

    q = start()
    with pytest.raises(Exception, match="forced failure"):
        q.awaitTermination(WAIT)
    assert failures == [1] and 1 not in delivered
    q = start()  # Spark re-runs batch 1 on the buckets' state as of batch 0
    try:
        assert q.awaitTermination(WAIT), f"the restarted run did not finish in {WAIT} s"
    finally:
        q.stop()
    got: dict[int, Counter] = {}
    for rows in delivered.values():
        for r in rows:
            got.setdefault(r[0], Counter())[tuple(r[2:5])] += r[1]
    got = {t: c for t, c in ((t, Counter({k: v for k, v in c.items() if v})) for t, c in got.items()) if c}
    expected = run_reference(DDL, AGGREGATE, {"S": events(files), "T": []})
    assert 1 in delivered and got == through(expected, max(r[0] for rows in files for r in rows))


def test_cqlstream_spark_run_writes_the_results_to_a_spark_sink(spark, tmp_path, monkeypatch, capsys):
    from cqlstream.cli import main
    from cqlstream.spark_bridge.runtime import SparkRuntime

    monkeypatch.setattr(SparkRuntime, "stop", lambda self: None)  # the command would stop the module's session
    files = stream_files(5, n_files=2, per_file=15)
    write_files(tmp_path / "s", "when,k,v", files)
    argv = ["spark-run", "--ddl", DDL, AGGREGATE, "--source", f"S=csv:{tmp_path / 's'}?time=when&maxFilesPerTrigger=1"]
    argv += ["--sink", f"parquet:{tmp_path / 'out'}", "--checkpoint", str(tmp_path / "ck"), "--buckets", "3"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("partitioning: by S.k\n")
    expected = run_reference(DDL, AGGREGATE, {"S": events(files), "T": []})
    assert results(spark, tmp_path / "out", 3) == through(expected, max(r[0] for rows in files for r in rows))


@pytest.mark.parametrize("query,n_cols,streams", [(AGGREGATE, 3, ("S",)), (JOIN, 3, ("S", "T"))])
def test_stream_compat_runs_give_the_compat_reference_answers_not_the_paper_ones(
    spark, tmp_path, query, n_cols, streams
):
    data = {"S": stream_files(7, 3, 20, keys=4), "T": stream_files(8, 3, 20, keys=4)}
    schemas = {"S": ("ts,k,v", "ts LONG, k INT, v INT"), "T": ("ts,k,u", "ts LONG, k INT, u INT")}
    for s in streams:
        write_files(tmp_path / s, schemas[s][0], data[s])
    plan = plan_query(DDL, query, compat=True)
    assert plan.spec.compat
    run(spark, plan, {s: (tmp_path / s, schemas[s][1]) for s in streams}, tmp_path / "out", tmp_path / "ck")
    inputs = {s: events(data[s]) if s in streams else [] for s in ("S", "T")}
    last = min(max(r[0] for rows in data[s] for r in rows) for s in streams)
    compat = through(run_reference(DDL, query, inputs, compat=True), last)
    paper = through(run_reference(DDL, query, inputs), last)
    assert len(compat) > 10 and compat != paper  # (t-N, t] windows: the data tells the two apart
    assert results(spark, tmp_path / "out", n_cols) == compat


def test_spark_run_pushes_the_results_into_a_stream_of_a_server_exactly_once(spark, tmp_path, monkeypatch, capsys):
    from cqlstream.cli import main
    from cqlstream.client import Client
    from cqlstream.spark_bridge.runtime import SparkRuntime
    from tests.server.conftest import ServerThread

    monkeypatch.setattr(SparkRuntime, "stop", lambda self: None)  # the command would stop the module's session
    files = stream_files(9, n_files=3, per_file=15)
    write_files(tmp_path / "s", "ts,k,v", files)
    server = ServerThread().start()
    try:
        with Client(server.url) as c:
            argv = ["spark-run", "--ddl", DDL, AGGREGATE, "--source", f"S=csv:{tmp_path / 's'}?maxFilesPerTrigger=1"]
            argv += ["--sink", f"server:{server.url}/Totals", "--checkpoint", str(tmp_path / "ck")]
            assert main(argv) == 2  # no such stream yet: refused before Spark starts
            assert "no stream or relation named 'Totals'" in capsys.readouterr().err
            c.register_stream("register stream Totals (k int, sum_v int, count int)")
            assert main(argv) == 2  # the aggregate is relation-valued: its -1 elements need a sign column
            assert "declare an int column 'sign'" in capsys.readouterr().err
            c.drop_stream("Totals")
            c.register_stream("register stream Totals (sign int, k int, sum_v int, count int)")
            qid = c.register_query("select * from Totals")["id"]
            assert main(argv) == 0
            last = max(r[0] for rows in files for r in rows)
            first = list(c.subscribe(qid, after=-1, until=last))
            assert main(argv) == 0  # a second run from the same checkpoint pushes nothing twice
            again = list(c.subscribe(qid, after=-1, until=last))
            assert c.stream("Totals")["name"] == "Totals"
    finally:
        server.stop()
    got: dict[int, Counter] = {}
    for e in first:
        sign, *row = e.row
        got.setdefault(e.ts, Counter())[tuple(row)] += sign
    got = {t: c for t, c in ((t, Counter({k: v for k, v in c.items() if v})) for t, c in got.items()) if c}
    expected = through(run_reference(DDL, AGGREGATE, {"S": events(files), "T": []}), last)
    assert len(expected) > 10 and got == expected
    assert again == first


@pytest.mark.parametrize(
    "query,reason",
    [
        ("select k, count(*) from S [Rows 10] group by k", "a Rows 10 window over the whole stream needs"),
        (
            "select count(distinct v) from S [Range 10]",
            "a global aggregate (no group-by) needs every row; its global tail does not merge from partials",
        ),
        ("select * from S [Range 3], T [Range 3] where S.v < T.u", "the join has no equi-join key common"),
    ],
)
def test_a_query_that_does_not_partition_is_refused_with_the_reason(query, reason):
    with pytest.raises(SparkSourceError) as e:
        plan_query(DDL, query)
    assert e.value.code == "not_partitionable"
    assert str(e.value).startswith(f"this query cannot run partitioned: {reason}")
    assert e.value.details["partitioning"]["partitioned"] is False
