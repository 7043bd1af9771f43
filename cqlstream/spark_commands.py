"""The command line's Spark parts: the source options of `cqlstream serve`, `cqlstream feed` (a
Spark job pushing to a server over HTTP: the remote mode) and `cqlstream sources` (a server's
Spark sources with their states and counters)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

SOURCE_HELP = (
    "feed a stream from Spark Structured Streaming: STREAM=FORMAT[:PATH][?key=value&...], e.g. "
    "'Orders=csv:/data/orders?maxFilesPerTrigger=1' or 'Ticks=rate?rowsPerSecond=50'; keys time, delay, "
    "schema, sign, trigger, checkpoint and col.FIELD=COLUMN are the bridge's, the rest Spark reader "
    "options (repeatable)"
)
SOURCES_HELP = "a TOML file of [[source]] tables (stream, format, path, options, time_column, ...)"


def add_source_options(p: argparse.ArgumentParser, master_default: str = "local[*]") -> None:
    """--source, --sources, --spark-master, --checkpoint-dir (serve and feed)."""
    p.add_argument("--source", action="append", default=[], metavar="SPEC", help=SOURCE_HELP)
    p.add_argument("--sources", metavar="FILE", help=SOURCES_HELP)
    p.add_argument(
        "--spark-master", default=master_default, metavar="URL", help=f"Spark master (default {master_default})"
    )
    p.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="Spark checkpoints, one folder per source (serve: default DATA_DIR/spark-checkpoints, else a temp dir)",
    )


def specs_of(args: argparse.Namespace) -> tuple[Any, ...]:
    """The source definitions of --source and --sources (a `SparkSourceError` names the bad one)."""
    from cqlstream.spark_bridge.spec import SourceFile, SourceSpec

    specs = [SourceSpec.parse(s) for s in args.source]
    if args.sources:
        specs += SourceFile.load(args.sources).specs
    return tuple(specs)


# ---------------------------------------------------------------- cqlstream feed
def cmd_feed(args: argparse.Namespace) -> int:
    """Run Spark sources here and push their micro-batches to a server (Arrow IPC, exactly once)."""
    import tempfile

    import httpx

    from cqlstream.client import Client, CqlstreamError
    from cqlstream.engine.errors import EngineError

    try:
        specs = specs_of(args)
    except EngineError as e:
        print(f"cqlstream feed: {e}", file=sys.stderr)
        return 2
    if not specs:
        print("cqlstream feed: give at least one --source or --sources", file=sys.stderr)
        return 2
    with Client(args.url, api_key=args.api_key) as client:
        if not _wait_for(client, args.wait):
            print(f"cqlstream feed: no server answers at {args.url} after {args.wait:g} s", file=sys.stderr)
            return 1
        for ddl in args.ddl:
            try:
                client.register_stream(ddl)
            except CqlstreamError as e:
                if e.status != 409:  # registered already (a restarted producer): fine
                    print(f"cqlstream feed: {e}", file=sys.stderr)
                    return 1
    from cqlstream.spark_bridge.manager import SparkSources
    from cqlstream.spark_bridge.runtime import SparkRuntime
    from cqlstream.spark_bridge.sinks import HttpSink

    sink = HttpSink(args.url, api_key=args.api_key)
    runtime = SparkRuntime(args.spark_master, app_name="cqlstream-feed", say=lambda s: print(s, flush=True))
    root = args.checkpoint_dir or tempfile.mkdtemp(prefix="cqlstream-feed-")
    sources = SparkSources(sink, runtime, root)
    import signal  # here: every other command's start does without it

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rc = 0
    try:
        for spec in specs:
            src = sources.add(spec)
            print(f"feeding {spec.stream} on {args.url} from {src.label}", flush=True)
        while not stop.wait(1.0):
            states = {s.config.stream: s.state() for s in sources.all()}
            failed = [s for s in sources.all() if states[s.config.stream] == "failed"]
            if failed:
                for s in failed:
                    print(f"cqlstream feed: the source of {s.config.stream} failed: {s.error}", file=sys.stderr)
                rc = 1
                break
            if all(v in ("finished", "stopped") for v in states.values()):
                break
    except KeyboardInterrupt:
        pass
    except (EngineError, httpx.HTTPError) as e:
        print(f"cqlstream feed: {e}", file=sys.stderr)
        rc = 1
    finally:
        for problem in sources.stop_all():
            print(f"cqlstream feed: {problem}", file=sys.stderr)
        for s in sources.all():
            n = s.counters()
            print(f"{s.config.stream}: {n['batches']} batches, {n['rows']} rows, {n['late_rows']} late", flush=True)
        runtime.stop()
        sink.close()
    return rc


def _wait_for(c: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        try:
            c.health()
            return True
        except Exception:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


# ---------------------------------------------------------------- cqlstream sources
def cmd_sources(args: argparse.Namespace) -> int:
    """A running server's Spark sources: state, counters, and the error of a failed one."""
    import httpx

    from cqlstream.client import Client, CqlstreamError

    try:
        with Client(args.url, api_key=args.api_key) as c:
            if args.add:
                c.add_spark_source(args.add)
            if args.remove:
                c.remove_spark_source(args.remove)
            rows: list[dict[str, Any]] = c.spark_sources()
    except CqlstreamError as e:
        print(f"cqlstream sources: {e}", file=sys.stderr)
        return 1
    except httpx.HTTPError as e:
        print(f"cqlstream sources: cannot reach {args.url}: {e}", file=sys.stderr)
        return 1
    if args.json:
        import json

        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no Spark sources")
    for r in rows:
        k = r["counters"]

        print(
            f"{r['stream']:<16} {r['state']:<9} {r['source']}  batches {k['batches']}  rows {k['rows']}  "
            f"late {k['late_rows']}  last batch {k['last_batch_id']}  spark {k.get('spark_batch_ms')} ms"
        )
        if r.get("error"):
            print(f"{'':<16} error: {r['error']}")
    return 0


def add_parsers(sub: Any, url_default: str) -> None:
    fd = sub.add_parser(
        "feed",
        help="run Spark sources here and push them to a server (remote mode)",
        description="A Spark Structured Streaming job that feeds streams of a running cqlstream server: "
        "each micro-batch goes over HTTP as one Arrow IPC push with its watermark heartbeat and "
        "an idempotency key (Spark's query id and batch id), so a batch Spark replays after a "
        "failure is applied once. Runs until every source has finished (available-now) or "
        "Ctrl-C / SIGTERM; exits 1 if a source fails.",
    )
    fd.add_argument("--url", default=url_default, help=f"server URL (default {url_default})")
    fd.add_argument("--api-key", help="API key for a server started with --api-key")
    fd.add_argument(
        "--ddl", action="append", default=[], metavar="DDL", help="register this stream first (kept if it exists)"
    )
    fd.add_argument("--wait", type=float, default=60.0, metavar="S", help="wait this long for the server (default 60)")
    add_source_options(fd)
    fd.set_defaults(func=cmd_feed)

    so = sub.add_parser(
        "sources",
        help="list (add, remove) the Spark sources of a running server",
        description="Print each Spark source of a running server: the stream it feeds, its state "
        "(starting, running, finished, stopped, failed), what it reads, its counters, and "
        "why it failed.",
    )
    so.add_argument("--url", default=url_default, help=f"server URL (default {url_default})")
    so.add_argument("--api-key", help="API key for a server started with --api-key")
    so.add_argument("--add", metavar="SPEC", help="start this source first: " + SOURCE_HELP.split(": ", 1)[1])
    so.add_argument("--remove", metavar="STREAM", help="stop and remove the source of STREAM first")
    so.add_argument("--json", action="store_true", help="print JSON")
    so.set_defaults(func=cmd_sources)
