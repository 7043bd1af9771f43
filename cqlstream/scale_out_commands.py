"""`cqlstream spark-run`: one CQL query as a Spark Structured Streaming job, partitioned by the key
its state partitions on (spark_bridge/scale_out.py), from Spark sources to any Spark sink. The query
and its catalog come from the command line or from a running server (a registered query by name
or id). A query that does not partition is refused with the reason (exit 2)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cqlstream.spark_commands import SOURCE_HELP, SOURCES_HELP


def _from_server(args: argparse.Namespace) -> tuple[str, str]:
    """(DDL of the server's streams, the CQL of the registered query named or numbered `args.query`)."""
    from cqlstream.client import Client

    with Client(args.url, api_key=args.api_key) as c:
        want = args.query.strip().lower()
        found = [q for q in c.queries() if str(q["id"]) == want or (q.get("name") or "").lower() == want]
        if not found:
            raise SystemExit(f"cqlstream spark-run: no query '{args.query}' on {args.url}")
        ddl = [_stream_ddl(s) for s in c.streams() if s["kind"] == "stream"]
        return ";\n".join(ddl), str(found[0]["cql"])


def _stream_ddl(s: dict[str, Any]) -> str:
    cols = ", ".join(f"{a['name']} {a['type']}" for a in s["attrs"])
    unit = "" if s.get("time_unit", "second") == "second" else f" with (unit = {s['time_unit']})"
    return f"register stream {s['name']} ({cols}){unit}"


def cmd_spark_run(args: argparse.Namespace) -> int:
    from cqlstream.cql.errors import CqlError
    from cqlstream.engine.errors import EngineError

    if args.url:
        ddl, cql = _from_server(args)
    else:
        ddl, cql = ";\n".join(args.ddl), args.query
    try:
        from cqlstream.spark_bridge.scale_out import plan_query

        plan = plan_query(ddl, cql, compat=args.stream_compat)
    except (EngineError, CqlError) as e:
        print(f"cqlstream spark-run: {e}", file=sys.stderr)
        return 2
    print(f"partitioning: {plan.partitioning.describe()}", flush=True)
    if plan.tail is not None:
        key = ", ".join(f"{s}.{'+'.join(k)}" for s, k in zip(plan.spec.streams, plan.keys))
        print(f"global tail: partial aggregates per bucket (keyed by {key}), merged on the driver", flush=True)
    if args.explain:
        return 0
    if plan.spec.relation_names:
        names = ", ".join(plan.spec.relation_names)
        print(
            f"cqlstream spark-run: the query reads the static relation(s) {names}, broadcast from a batch "
            "DataFrame: run it from Python (spark_bridge.scale_out.scale_out)",
            file=sys.stderr,
        )
        return 2
    from cqlstream.spark_commands import specs_of

    try:
        specs = {s.stream.lower(): s for s in specs_of(args)}
    except EngineError as e:
        print(f"cqlstream spark-run: {e}", file=sys.stderr)
        return 2
    missing = [s for s in plan.spec.streams if s.lower() not in specs]
    if missing:
        print(f"cqlstream spark-run: give a --source for {', '.join(missing)}", file=sys.stderr)
        return 2
    return _run(args, plan, [specs[s.lower()] for s in plan.spec.streams])


def _run(args: argparse.Namespace, plan: Any, specs: list[Any]) -> int:
    from cqlstream.engine.errors import EngineError
    from cqlstream.spark_bridge.readers import dataframe
    from cqlstream.spark_bridge.runtime import SparkRuntime
    from cqlstream.spark_bridge.scale_out import scale_out
    from cqlstream.spark_bridge.sinks import StreamInfo

    results = None
    if args.sink.startswith("server:"):  # before Spark starts: the server answers and has the stream
        from cqlstream.spark_bridge.server_sink import ServerResultSink, ServerTarget

        try:
            results = ServerResultSink(plan, ServerTarget.parse(args.sink), api_key=args.api_key)
        except EngineError as e:
            print(f"cqlstream spark-run: {e}", file=sys.stderr)
            return 2
    runtime = SparkRuntime(args.spark_master, app_name="cqlstream-spark-run", say=lambda s: print(s, flush=True))
    import signal  # here: every other command's start does without it
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        spark = runtime.session()
        frames, times = {}, {}
        for spec, target, tick in zip(specs, plan.targets, plan.tick_micros):
            spec, df = dataframe(spark, spec, StreamInfo(target, tick))
            for field, column in spec.columns:
                df = df.withColumnRenamed(column, field)
            frames[spec.stream], times[spec.stream] = df, spec.time_column
        out = scale_out(spark, plan, frames, buckets=args.buckets, time_columns=times, delay=args.delay)
        import tempfile  # here: every command imports this module (tempfile brings shutil, random, ...)

        checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="cqlstream-run-")
        if plan.tail is not None:  # the buckets give partials: merged on the driver, per micro-batch
            from cqlstream.spark_bridge.scale_out import merge_tail

            write = results if results is not None else _batch_sink(args.sink)
            merge = merge_tail(plan, os.path.join(checkpoint, "cqlstream-tail"), write)
            writer = out.writeStream.foreachBatch(merge).outputMode("append")
        elif results is not None:
            writer = out.writeStream.foreachBatch(results).outputMode("append")
        else:
            fmt, _, path = args.sink.partition(":")
            writer = out.writeStream.format(fmt).outputMode("append")
            if path:
                writer = writer.option("path", path)
        writer = writer.option("checkpointLocation", checkpoint)
        if args.trigger == "available-now":
            writer = writer.trigger(availableNow=True)
        elif args.trigger:
            writer = writer.trigger(processingTime=args.trigger)
        q = writer.start()
        if results is not None:
            results.started(q)
        print(f"running {plan.spec.query!r} partitioned in Spark, results to {args.sink}", flush=True)
        while q.isActive and not stop.wait(1.0):
            pass
        q.stop()
        if q.exception() is not None:
            print(f"cqlstream spark-run: the Spark query failed: {q.exception()}", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt:
        return 0
    except EngineError as e:
        print(f"cqlstream spark-run: {e}", file=sys.stderr)
        return 2
    finally:
        runtime.stop()
        if results is not None:
            results.close()


def _batch_sink(sink: str) -> Any:
    """A Spark sink written batch by batch (a run with a global tail writes from `foreachBatch`):
    `console` shows each batch, a format with a path writes batch b to PATH/batch=b (overwritten
    when Spark replays b, so each result is there once), one without a path is written as is."""
    fmt, _, path = sink.partition(":")

    def write(df: Any, batch_id: int) -> None:
        if fmt == "console":
            df.show(truncate=False)
        elif path:
            df.write.format(fmt).mode("overwrite").save(os.path.join(path, f"batch={batch_id}"))
        else:
            df.write.format(fmt).mode("overwrite").save()

    return write


def add_parsers(sub: Any, url_default: str) -> None:
    sr = sub.add_parser(
        "spark-run",
        help="run one query partitioned across Spark executors (its state in Spark's state store)",
        description="Run a CQL query as a Spark Structured Streaming job: input rows shuffled by the key "
        "its state partitions on, the engine's operators per key bucket inside Spark's stateful Python "
        "API, state and recovery in Spark's checkpoint (RocksDB), each result element written once its "
        "instant is final (columns ts, sign, then the query's). Queries that do not partition are "
        "refused with the reason (see the Partitioning line of `cqlstream explain`).",
    )
    sr.add_argument("query", help="the CQL query (with --url: the name or id of a query registered there)")
    sr.add_argument("--ddl", action="append", default=[], metavar="DDL", help="registrations of the streams it reads")
    sr.add_argument("--url", help=f"take the query and the streams from this server (e.g. {url_default})")
    sr.add_argument("--api-key", help="API key for a server started with --api-key")
    sr.add_argument("--source", action="append", default=[], metavar="SPEC", help=SOURCE_HELP)
    sr.add_argument("--sources", metavar="FILE", help=SOURCES_HELP)
    sr.add_argument(
        "--sink",
        default="console",
        metavar="FORMAT[:PATH]",
        help="a Spark sink (default console), or server:URL/STREAM: into a stream registered on a cqlstream server",
    )
    sr.add_argument("--checkpoint", metavar="DIR", help="Spark's checkpoint (state, offsets): reuse it to resume")
    sr.add_argument("--buckets", type=int, metavar="N", help="key buckets (default: Spark's shuffle partitions)")
    sr.add_argument("--delay", type=int, default=0, metavar="TICKS", help="watermark delay in ticks (default 0)")
    sr.add_argument("--trigger", default="available-now", help="available-now (default), or e.g. '1 second'")
    sr.add_argument("--spark-master", default="local[*]", metavar="URL", help="Spark master (default local[*])")
    sr.add_argument("--stream-compat", action="store_true", help="STREAM 0.6 semantics")
    sr.add_argument("--explain", action="store_true", help="print the partitioning and exit (no Spark)")
    sr.set_defaults(func=cmd_spark_run)
