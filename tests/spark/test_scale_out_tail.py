"""Distributed runs with a global tail (spark_bridge/scale_out.py `merge_tail`) in local[2], one
Spark session for the module: a global aggregate and a grouped aggregate over a join on another
key run as per-bucket partial aggregates in Spark's stateful operator and a merge per micro-batch
on the driver, giving the single-node engine's answer instant by instant (paper and compat), also
across a restart from the checkpoint mid-stream; a TIMESTAMP event-time column becomes the
engine's time (floored to the stream's tick) and Spark's watermark."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cqlstream.spark_bridge.scale_out import merge_tail, plan_query, scale_out
from tests.spark.session import finish, local_session
from tests.spark.test_scale_out import DDL, events, stream_files, through, write_files
from tests.test_global_tail import single_node

WAIT = 180  # seconds: the longest a run may take here (Python workers start per task on 2 busy cores)
GLOBAL = "select count(*), sum(v), avg(v), min(v), max(v) from S [Range 6]"
GROUPED = "select S.v, count(*), max(T.u) from S [Range 5], T [Range 4] where S.k = T.k group by S.v"
SCHEMAS = {"S": ("ts,k,v", "ts LONG, k INT, v INT"), "T": ("ts,k,u", "ts LONG, k INT, u INT")}


@pytest.fixture(scope="module")
def spark():
    with local_session("cqlstream-scale-out-tail-tests") as session:
        yield session


def run(spark, plan, frames, checkpoint: Path, delivered: dict[int, list], **kw) -> None:
    """One availableNow run; each micro-batch's merged results into `delivered[batch id]`."""

    def write(df, batch_id: int) -> None:
        delivered[batch_id] = df.collect()  # keyed by batch id: a replayed batch replaces itself

    q = (
        scale_out(spark, plan, frames, **kw)
        .writeStream.foreachBatch(merge_tail(plan, str(checkpoint / "tail"), write))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finish(q, WAIT)


def csv_frames(spark, dirs: dict[str, Path]):
    return {
        s: spark.readStream.schema(SCHEMAS[s][1]).option("header", True).option("maxFilesPerTrigger", 1).csv(str(p))
        for s, p in dirs.items()
    }


def netted(delivered: dict[int, list], n_cols: int) -> dict[int, Counter]:
    got: dict[int, Counter] = {}
    for rows in delivered.values():
        for r in rows:
            got.setdefault(r[0], Counter())[tuple(r[2 : 2 + n_cols])] += r[1]
    clean = {t: Counter({k: v for k, v in c.items() if v}) for t, c in got.items()}
    return {t: c for t, c in clean.items() if c}


@pytest.mark.parametrize("query,streams,compat", [(GLOBAL, ("S",), False), (GROUPED, ("S", "T"), True)])
def test_partials_merged_on_the_driver_equal_the_single_node_answer(spark, tmp_path, query, streams, compat):
    data = {"S": stream_files(11, 3, 20, keys=4), "T": stream_files(12, 3, 20, keys=4)}
    data["S"] = [[(t + 9 * i, k, v) for t, k, v in rows] for i, rows in enumerate(data["S"])]  # gaps empty windows
    for s in streams:
        write_files(tmp_path / s, SCHEMAS[s][0], data[s])
    plan = plan_query(DDL, query, compat=compat)
    assert plan.tail is not None and plan.keys[0] == (("k", "v") if query == GLOBAL else ("k",))
    delivered: dict[int, list] = {}
    run(spark, plan, csv_frames(spark, {s: tmp_path / s for s in streams}), tmp_path / "ck", delivered)
    last = min(max(r[0] for rows in data[s] for r in rows) for s in streams)
    expected = through(single_node(query, {s: events(data[s]) for s in streams}, compat=compat), last)
    assert len(expected) > 10
    assert netted(delivered, len(plan.output)) == expected


def test_a_restart_from_the_checkpoint_mid_stream_continues_the_merge_exactly(spark, tmp_path):
    files = stream_files(13, n_files=4, per_file=20, keys=5)
    write_files(tmp_path / "S", "ts,k,v", files[:2])
    plan = plan_query(DDL, GLOBAL)
    delivered: dict[int, list] = {}
    run(spark, plan, csv_frames(spark, {"S": tmp_path / "S"}), tmp_path / "ck", delivered)
    half = max(r[0] for rows in files[:2] for r in rows)
    assert netted(delivered, 5) == through(single_node(GLOBAL, {"S": events(files[:2])}), half)
    write_files(tmp_path / "S", "ts,k,v", files[2:], start=2)
    run(spark, plan, csv_frames(spark, {"S": tmp_path / "S"}), tmp_path / "ck", delivered)  # state from the checkpoint
    last = max(r[0] for rows in files for r in rows)
    assert netted(delivered, 5) == through(single_node(GLOBAL, {"S": events(files)}), last)


def test_a_timestamp_event_time_column_is_the_engine_time_and_the_watermark(spark, tmp_path):
    ddl = "register stream S (k int, v int) with (unit = second)"
    base = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    files = stream_files(14, n_files=3, per_file=20, keys=4)
    folder = tmp_path / "S"
    stamped = [[(_iso(base + t, frac=(k * 0.13) % 1), k, v) for t, k, v in rows] for rows in files]
    write_files(folder, "when,k,v", stamped)
    plan = plan_query(ddl, GLOBAL)
    df = spark.readStream.schema("when TIMESTAMP, k INT, v INT").option("header", True)
    df = df.option("maxFilesPerTrigger", 1).csv(str(folder))
    delivered: dict[int, list] = {}
    run(spark, plan, {"S": df}, tmp_path / "ck", delivered, time_columns={"S": "when"})
    rows = [(base + t, (k, v)) for rows in files for t, k, v in rows]  # fractions of a second floored
    expected = through(
        single_node(GLOBAL, {"S": sorted(rows, key=lambda e: e[0])}, ddl=ddl), base + max(e[0] for e in events(files))
    )
    assert len(expected) > 10 and min(expected) >= base
    assert netted(delivered, 5) == expected


def _iso(seconds: int, frac: float) -> str:
    return datetime.fromtimestamp(seconds + frac, tz=UTC).isoformat().replace("+00:00", "Z")


def test_a_static_relation_is_broadcast_to_every_bucket_and_joined_with_the_stream(spark, tmp_path):
    ddl = DDL + " register static relation R (k int, w int);"
    query = "select count(*), sum(R.w), max(S.v) from S [Range 6], R where S.k = R.k"
    files = stream_files(15, n_files=3, per_file=20, keys=6)
    write_files(tmp_path / "S", "ts,k,v", files)
    relation = [(k, w) for k in range(1, 6) for w in (10, 20) if k + w != 21]
    plan = plan_query(ddl, query)
    assert plan.spec.relation_names == ("R",) and plan.tail is not None
    frames = {**csv_frames(spark, {"S": tmp_path / "S"}), "R": spark.createDataFrame(relation, "k INT, w INT")}
    delivered: dict[int, list] = {}
    run(spark, plan, frames, tmp_path / "ck", delivered)
    inputs = {"R": [(0, r) for r in relation], "S": events(files)}
    expected = through(single_node(query, inputs, ddl=ddl), max(r[0] for rows in files for r in rows))
    assert len(expected) > 10
    assert netted(delivered, 3) == expected


def test_cqlstream_spark_run_merges_the_tail_and_writes_each_batch_once(spark, tmp_path, monkeypatch, capsys):
    from cqlstream.cli import main
    from cqlstream.spark_bridge.runtime import SparkRuntime
    from tests.spark.test_scale_out import results

    monkeypatch.setattr(SparkRuntime, "stop", lambda self: None)  # the command would stop the module's session
    files = stream_files(16, n_files=2, per_file=15)
    write_files(tmp_path / "s", "ts,k,v", files)
    query = "select count(*), sum(v) from S [Range 4]"
    argv = ["spark-run", "--ddl", DDL, query, "--source", f"S=csv:{tmp_path / 's'}?maxFilesPerTrigger=1"]
    argv += ["--sink", f"parquet:{tmp_path / 'out'}", "--checkpoint", str(tmp_path / "ck")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "partitioning: none: a global aggregate" in out
    assert "global tail: partial aggregates per bucket (keyed by S.k+v), merged on the driver" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.startswith("batch="))  # one folder a batch
    expected = through(single_node(query, {"S": events(files)}), max(r[0] for rows in files for r in rows))
    assert results(spark, tmp_path / "out", 2) == expected
