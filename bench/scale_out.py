"""`python -m bench.scale_out [--rows N] [--quick] [--json F]`: a partitioned query on Spark
(spark_bridge/scale_out.py) at local[1] and local[2], beside the single-process engine on the same
data, for the grouped windowed aggregate, the equi-join of two windowed streams and a global
aggregate (partial aggregates per bucket, merged on the driver: the global tail).

The data are Parquet files (one micro-batch each: `maxFilesPerTrigger=1`) of (ts, k, value) rows
with `--keys` distinct keys, event time advancing by one tick every `rows / instants` rows. Every
Spark run reads them with `availableNow` into a `noop` sink; its time is the sum of Spark's own
micro-batch durations (session start-up and the first batch, which starts the Python workers, are
reported apart). Beside each query, a `shuffle` run does the same shuffle into
`applyInPandasWithState` with a function that only counts its rows: Spark's fixed cost per row
(read, hash, shuffle, Arrow to pandas and back, state store) without the engine. The engine alone
is the single process: the same rows pushed file by file into one `Dsms`, plus the cost of
serializing its state once per file (what a bucket pays in Spark).

Each Spark master runs in its own child process (a session's master cannot change).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DDL = "register stream S (k int, v int); register stream T (k int, u int);"
QUERIES = {
    "aggregate": "select k, sum(v), count(*) from S [Range 100] group by k",
    "join": "select S.k, S.v, T.u from S [Range 20], T [Range 20] where S.k = T.k",
    # no key: per-bucket partial aggregates, merged per micro-batch on the driver (the global tail)
    "global": "select count(*), sum(v), avg(v), max(v) from S [Range 100]",
}
STREAMS = {"aggregate": ("S",), "join": ("S", "T"), "global": ("S",)}
FIELD = {"S": "v", "T": "u"}


def write_data(root: Path, rows: int, files: int, keys: int, instants: int) -> None:
    """S and T: `files` Parquet files each of rows/files rows, ts non-decreasing, keys uniform."""
    rng = np.random.default_rng(7)
    for stream in ("S", "T"):
        folder = root / stream
        folder.mkdir(parents=True)
        ts = np.arange(rows, dtype=np.int64) * instants // rows
        k = rng.integers(0, keys, rows, dtype=np.int64)
        val = rng.integers(0, 100, rows, dtype=np.int64)
        base = time.time() - 1000
        for i, part in enumerate(np.array_split(np.arange(rows), files)):
            path = folder / f"part-{i:04d}.parquet"
            pq.write_table(pa.table({"ts": ts[part], "k": k[part], FIELD[stream]: val[part]}), path)
            os.utime(path, (base + i, base + i))


# ---------------------------------------------------------------- the single process
def single_process(root: Path, query: str, streams: tuple[str, ...]) -> dict[str, Any]:
    """One Dsms over the same files, file by file (as Spark's micro-batches), results polled per file."""
    from cqlstream.engine.dsms import Dsms
    from cqlstream.io.decoders import ArrowStream, Target
    from cqlstream.spark_bridge.keyed_engine import GroupEngine, QuerySpec

    tables = {s: [pq.read_table(p) for p in sorted((root / s).glob("*.parquet"))] for s in streams}
    d = Dsms(sys_stream=False)
    d.execute(DDL)
    sub = d.subscribe(d.register_query(query).id)
    targets = {s: Target.of(d.catalog.get(s)) for s in streams}  # type: ignore[arg-type]
    out = 0
    t0 = time.perf_counter()
    for i in range(len(tables[streams[0]])):
        for s in streams:
            d.push_batch(s, ArrowStream().decode_table(tables[s][i], targets[s]).batch())
        d.run()
        out += len(sub.poll())
    d.end()
    d.run()
    out += len(sub.poll())
    engine_s = time.perf_counter() - t0
    # what a bucket adds in Spark: its engine pickled and unpickled once per micro-batch
    g = GroupEngine(QuerySpec(DDL, query, streams))
    for i in range(len(tables[streams[0]]) // 2):
        for s in streams:
            g.push(s, tables[s][i])
        g.drain()
    data = g.dumps()
    t1 = time.perf_counter()
    for _ in range(5):
        GroupEngine.loads(g.dumps())
    serde_s = (time.perf_counter() - t1) / 5
    rows = sum(t.num_rows for ts in tables.values() for t in ts)
    return {
        "rows": rows,
        "output_rows": out,
        "seconds": engine_s,
        "rows_per_s": rows / engine_s,
        "state_bytes": len(data),
        "serde_seconds_per_batch": serde_s,
    }


# ---------------------------------------------------------------- one Spark master (a child process)
def _count_rows(key: Any, frames: Any, state: Any) -> Any:
    import pandas as pd

    n = sum(len(f) for f in frames)
    total = (state.get[0] if state.exists else 0) + n
    state.update((total,))
    yield pd.DataFrame({"n": [n]})


def _write_noop(df: Any, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()


def spark_child(master: str, root: Path, buckets: int) -> list[dict[str, Any]]:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    from cqlstream.spark_bridge.scale_out import BUCKET, ROCKSDB, keyed_input, merge_tail, plan_query, scale_out

    os.environ["PYSPARK_PYTHON"] = sys.executable
    t = time.perf_counter()
    spark = (
        SparkSession.builder.master(master)
        .appName("cqlstream-bench-scale-out")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(buckets))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t
    runs = []
    # the first run pays the JVM's warm-up (JIT, RocksDB, Python workers): one unmeasured run first
    cases = [("join", "shuffle", False)] + [(n, m, True) for n in QUERIES for m in ("shuffle", "engine")]
    try:
        for name, mode, measured in cases:
            plan = plan_query(DDL, QUERIES[name])
            frames = {
                s: spark.readStream.schema(f"ts LONG, k LONG, {FIELD[s]} LONG")
                .option("maxFilesPerTrigger", 1)
                .parquet(str(root / s))
                for s in plan.spec.streams
            }
            if mode == "engine":
                out = scale_out(spark, plan, frames, buckets=buckets)
            else:
                out = (
                    keyed_input(plan, frames, buckets)
                    .groupBy(BUCKET)
                    .applyInPandasWithState(_count_rows, "n LONG", "total LONG", "append", GroupStateTimeout.NoTimeout)
                )
            ck = tempfile.mkdtemp(prefix="cqlstream-bench-ck-")
            w0 = time.perf_counter()
            if mode == "engine" and plan.tail is not None:
                merge = merge_tail(plan, os.path.join(ck, "tail"), _write_noop)
                writer = out.writeStream.foreachBatch(merge)
            else:
                writer = out.writeStream.format("noop")
            q = writer.option("checkpointLocation", ck).trigger(availableNow=True).start()
            if not q.awaitTermination(900):
                q.stop()
                raise SystemExit(f"{name}/{mode} on {master} did not finish in 900 s")
            wall = time.perf_counter() - w0
            progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
            durations = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in q.recentProgress]
            if not measured:
                continue
            rows = sum(p["numInputRows"] for p in progress)
            first = progress[0]["durationMs"].get("triggerExecution", 0) / 1000 if progress else 0.0
            later_rows = rows - (progress[0]["numInputRows"] if progress else 0)
            spark_s = sum(durations)
            runs.append(
                {
                    "master": master,
                    "query": name,
                    "mode": mode,
                    "rows": rows,
                    "batches": len(progress),
                    "wall_seconds": wall,
                    "spark_seconds": spark_s,
                    "first_batch_seconds": first,
                    "rows_per_s": rows / spark_s if spark_s else 0.0,
                    "steady_rows_per_s": later_rows / (spark_s - first) if spark_s > first else 0.0,
                    "startup_seconds": startup,
                    "batch_seconds": durations,
                    "output_rows": sum(max(0, p["sink"].get("numOutputRows") or 0) for p in q.recentProgress),
                }
            )
            print(
                f"  {master:9} {name:9} {mode:7} {rows:>9,} rows  {runs[-1]['rows_per_s']:>10,.0f} rows/s",
                flush=True,
            )
    finally:
        spark.stop()
    return runs


def table(single: dict[str, dict[str, Any]], spark_runs: list[dict[str, Any]]) -> str:
    lines = [
        "| query | run | rows | seconds | rows/s | rows/s after the first batch |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in QUERIES:
        s = single[name]
        lines.append(f"| {name} | single process | {s['rows']:,} | {s['seconds']:.2f} | {s['rows_per_s']:,.0f} | |")
        for r in spark_runs:
            if r["query"] == name:
                lines.append(
                    f"| {name} | {r['master']} {r['mode']} | {r['rows']:,} | {r['spark_seconds']:.2f} | "
                    f"{r['rows_per_s']:,.0f} | {r['steady_rows_per_s']:,.0f} |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000, help="rows per stream (default 200,000)")
    p.add_argument("--files", type=int, default=10, help="files (micro-batches) per stream (default 10)")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys (default 1000)")
    p.add_argument("--instants", type=int, default=2000, help="distinct event times (default 2000)")
    p.add_argument("--masters", default="local[1],local[2]", help="Spark masters, comma-separated")
    p.add_argument("--buckets", type=int, default=2, help="key buckets = shuffle partitions (default 2)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 3,000 rows, 3 files, local[1] only")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--child", help=argparse.SUPPRESS)  # MASTER: run the Spark part in this process
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        runs = spark_child(args.child, Path(args.data), args.buckets)
        Path(args.json).write_text(json.dumps(runs))
        return 0
    if args.quick:
        args.rows, args.files, args.instants, args.masters = 3000, 3, 300, "local[1]"
    with tempfile.TemporaryDirectory(prefix="cqlstream-bench-scale-out-") as tmp:
        root = Path(tmp)
        write_data(root / "data", args.rows, args.files, args.keys, args.instants)
        single = {name: single_process(root / "data", q, STREAMS[name]) for name, q in QUERIES.items()}
        for name, s in single.items():
            print(f"  single    {name:9} engine  {s['rows']:>9,} rows  {s['rows_per_s']:>10,.0f} rows/s", flush=True)
        spark_runs: list[dict[str, Any]] = []
        for master in args.masters.split(","):
            out = root / f"{master}.json"
            cmd = [sys.executable, "-m", "bench.scale_out", "--child", master, "--data", str(root / "data")]
            cmd += ["--buckets", str(args.buckets), "--json", str(out)]
            if subprocess.run(cmd).returncode:
                return 1
            spark_runs += json.loads(out.read_text())
    report = {"rows_per_stream": args.rows, "files": args.files, "keys": args.keys, "instants": args.instants}
    report.update({"buckets": args.buckets, "single_process": single, "spark": spark_runs})
    print(table(single, spark_runs))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
