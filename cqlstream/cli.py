"""The `cqlstream` command line: one subcommand per job; user errors print a message, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqlstream.catalog_commands import add_parsers as add_catalog_parsers
from cqlstream.scale_out_commands import add_parsers as add_scale_out_parsers
from cqlstream.spark_commands import add_parsers as add_spark_parsers
from cqlstream.spark_commands import add_source_options

if TYPE_CHECKING:
    from cqlstream.client import Client


def _read_ddl(args: argparse.Namespace) -> str:
    parts = []
    for path in args.ddl_file or []:
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
        except OSError as e:
            raise SystemExit(f"cqlstream: cannot read DDL file {path}: {e.strerror}") from None
    parts.extend(args.ddl or [])
    return ";\n".join(parts)


def cmd_explain(args: argparse.Namespace) -> int:
    # the compiler is imported by the commands that use it: `--help` and `run` need none of this
    import json

    from cqlstream.cql.analyzer import AnalyzeOptions
    from cqlstream.cql.catalog import Catalog
    from cqlstream.cql.ddl import catalog_from_ddl
    from cqlstream.cql.errors import CqlError
    from cqlstream.cql.frontend import compile_query
    from cqlstream.cql.logical.explain import explain_partitioning
    from cqlstream.cql.logical.partitioning import partitioning
    from cqlstream.engine.boundedness import decide
    from cqlstream.engine.boundedness import explain as explain_with_verdict

    ddl = _read_ddl(args)
    try:
        catalog = catalog_from_ddl(ddl) if ddl.strip() else Catalog()
    except CqlError as e:
        print(f"error in DDL: {e}", file=sys.stderr)
        return 2
    try:
        compiled = compile_query(args.query, catalog, options=AnalyzeOptions(stream_compat=args.stream_compat))
    except CqlError as e:
        if args.json:
            print(json.dumps({"error": e.to_dict()}, indent=2))
        else:
            print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "kind": compiled.kind,
                    "schema": [{"name": a.name, "type": str(a.type)} for a in compiled.schema],
                    "explain": explain_with_verdict(compiled),
                    "bounded_memory": decide(compiled.plan).to_dict(),
                    "partitioning": partitioning(compiled.plan).to_dict(),
                },
                indent=2,
            )
        )
    else:
        print(explain_with_verdict(compiled))
        print(explain_partitioning(compiled.plan))
    return 0


_COMPAT_HELP = (
    "STREAM 0.6 behaviour: [Range N] holds (t-N, t] (a tuple leaves at t+N), no implicit "
    "top-level Istream, no row for a scalar aggregate over no input, no Istream/Dstream/Rstream "
    "output at the last instant"
)


def _run(
    script: str | Path,
    out_dir: str | Path | None,
    compat: bool,
    batch_rows: int,
    source_dir: str | None = None,
    threads: int | None = None,
    approximate: str | None = None,
    synopsis_joins: bool = True,
    writer: str = "thread",
    engine_threads: int | None = None,
    column_pruning: bool = True,
    reader: str = "thread",
) -> tuple[dict[str, int] | None, str | None]:
    """run_script with user errors turned into (message, exit code 2).

    With threads, the sources' readers start before the engine is imported (io/early_readers.py):
    they parse while the main thread imports, checks and plans (`reader` "process": in one child
    process, started before numpy is imported here, io/reader_process.py); writer processes
    (`writer` "process") are spawned then too, so their interpreters start on the other core."""
    from cqlstream import run_process
    from cqlstream.cql import parse_cache
    from cqlstream.io import run_settings
    from cqlstream.io.early_readers import EarlyReaders, start_early_readers
    from cqlstream.io.errors import ScriptError

    parse_cache.enable()  # the script's statements parsed by an earlier run are not parsed again
    early: EarlyReaders | None = None
    spawned: Any = None  # SpawnedWriters (io/writer_process.py), imported only to write in processes
    try:
        n = run_settings.default_threads() if threads is None else threads
        if n > 1 and batch_rows >= 1:
            run_settings.tune_malloc()  # before the readers' first blocks
            early = start_early_readers(script, source_dir, run_settings.block_bytes(batch_rows), reader)
            if writer == "process":  # right after: a reader process is forked before any other child
                from cqlstream.io.writer_process import SpawnedWriters

                spawned = SpawnedWriters(n - 1)
        from cqlstream.io.script_runner import run_script  # the engine: imported while they read

        return (
            run_script(
                script,
                out_dir=out_dir,
                compat=compat,
                batch_rows=batch_rows,
                source_dir=source_dir,
                threads=threads,
                approximate=approximate,
                synopsis_joins=synopsis_joins,
                writer=writer,
                engine_threads=engine_threads,
                on_registered=run_process.resume_gc,  # after `main`'s pause_gc (a no-op without it)
                column_pruning=column_pruning,
                early=early,
                spawned=spawned,
                reader=reader,
            ),
            None,
        )
    except ScriptError as e:
        return None, str(e)
    except OSError as e:  # writing results: disk full, permissions
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        return None, f"cannot write{where}: {e.strerror or e}"
    finally:
        if early is not None:
            early.close()  # (run_script stopped them already, unless it was never reached)
        if spawned is not None:
            spawned.close()  # the writer processes the run did not take (a run that failed early)
        run_process.resume_gc()  # a run that failed before its script was registered


def _one_malloc_arena() -> None:
    """One glibc heap for every thread of a run, set before numpy starts its own threads (set
    later, a thread created meanwhile has its own arena and the engine's worker shares it: Q2 at
    1M rows peaked at 267 MB against 187 MB with the engine's work on one thread). What else
    `cqlstream run` tunes in malloc is io/run_settings.py `tune_malloc`."""
    import os

    if os.environ.get("CQLSTREAM_MALLOC_TUNE", "1") == "0":
        return
    try:
        import ctypes

        # the process's own symbols, libc's among them: ctypes.util.find_library would import
        # subprocess and run ldconfig (~5 ms of every start)
        ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError, TypeError):  # not glibc
        pass


# OpenBLAS reads these (in this order) when numpy loads it
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def _one_blas_thread() -> None:
    """One BLAS thread for a run, unless the user chose a count: OpenBLAS (numpy's BLAS) starts a
    thread per core when numpy is imported, and their spin-up was ~40 ms of CPU of every start
    (`import numpy` 0.16 → 0.12 s on two cores). The engine's matrix products are tiny (the step
    cost fit, the boundedness closure) and its threads are its own (engine/parallel.py), so no
    result and no measured time depends on BLAS's threads. Set before numpy is imported; writer
    processes inherit it."""
    import os

    if not any(os.environ.get(v) for v in _BLAS_THREAD_VARS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def cmd_run(args: argparse.Namespace) -> int:
    _one_malloc_arena()
    _one_blas_thread()
    from cqlstream.io.run_settings import DEFAULT_BATCH_ROWS  # (the engine is imported once reading started)

    if args.batch_rows is None:
        args.batch_rows = DEFAULT_BATCH_ROWS
    if args.batch_rows < 1:
        print("cqlstream run: --batch-rows must be at least 1", file=sys.stderr)
        return 2
    if args.threads is not None and args.threads < 1:
        print("cqlstream run: --threads must be at least 1", file=sys.stderr)
        return 2
    if args.engine_threads is not None and args.engine_threads < 1:
        print("cqlstream run: --engine-threads must be at least 1", file=sys.stderr)
        return 2
    approx = None if args.approximate == "exact" else args.approximate
    counts, err = _run(
        args.script,
        args.out_dir,
        args.stream_compat,
        args.batch_rows,
        args.source_dir,
        args.threads,
        approx,
        args.synopsis_joins == "on",
        args.writer,
        args.engine_threads,
        args.column_pruning == "on",
        args.reader,
    )
    if counts is None:
        print(err, file=sys.stderr)
        return 2
    for dest, n in counts.items():
        print(f"{dest}: {n} line{'s' if n != 1 else ''}", file=sys.stderr)
    return 0


# demo/ beside the package in a source checkout; cqlstream/demo inside an installed one (package data)
_CHECKOUT_DEMO = Path(__file__).resolve().parent.parent / "demo"
DEMO_DIR = _CHECKOUT_DEMO if (_CHECKOUT_DEMO / "shop.cql").is_file() else Path(__file__).resolve().parent / "demo"
DEMO_SCRIPT = DEMO_DIR / "shop.cql"
# where results go without --out-dir: demo/out in a checkout, never inside site-packages
DEMO_OUT = DEMO_DIR / "out" if DEMO_DIR == _CHECKOUT_DEMO else Path("cqlstream-demo-out")


def cmd_demo(args: argparse.Namespace) -> int:
    if not DEMO_SCRIPT.is_file():
        print(f"cqlstream demo: the demo script {DEMO_SCRIPT} is missing (a broken install?)", file=sys.stderr)
        return 2
    out_dir = Path(args.out_dir) if args.out_dir else DEMO_OUT
    print(f"Running {DEMO_SCRIPT} (results in {out_dir})\n")
    print(_demo_queries(DEMO_SCRIPT))
    counts, err = _run(DEMO_SCRIPT, out_dir, args.stream_compat, 100_000)
    if counts is None:
        print(err, file=sys.stderr)
        return 2
    for dest, n in counts.items():
        print(f"== {dest} ({n} line{'s' if n != 1 else ''})")
        with open(dest, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= args.lines:
                    print("   ...")
                    break
                print("   " + line.rstrip("\n"))
        print()
    return 0


def _demo_queries(path: Path) -> str:
    """The demo's query statements, for the printout."""
    from cqlstream.io.stream_script import parse_script

    script = parse_script(path)
    out = []
    for s in script.steps:
        if s.kind == "query":
            text = " ".join(s.text.split())
            out.append(f"  {s.paired_file.name}: {text}")
        elif s.kind == "view":
            name = s.ddl.split("(")[0].split()[-1]
            out.append(f"  {name} (a view): {' '.join(s.text.split())}")
    return "Queries:\n" + "\n".join(out) + "\n"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def add_durability_options(sv: argparse.ArgumentParser) -> None:
    """`serve` options of the write-ahead log under --data-dir (docs/durability.md)."""
    g = sv.add_argument_group("durability (with --data-dir)")
    g.add_argument(
        "--fsync",
        choices=["always", "interval", "off"],
        default="interval",
        help="when the log reaches the disk: before every reply (always), every --fsync-interval-ms "
        "(interval, the default), or when the OS writes it (off); a killed process loses no "
        "acknowledged push under any of them, a machine crash up to the interval (off: what the OS had not written)",
    )
    g.add_argument(
        "--fsync-interval-ms",
        type=float,
        default=100.0,
        metavar="MS",
        help="the interval policy's period (default 100)",
    )
    g.add_argument(
        "--checkpoint-every",
        default="10000",
        metavar="N|Ns",
        help="checkpoint the engine's state every N log records, or every N seconds with an 's' "
        "(default 10000; 0: only at shutdown); older log segments are then deleted",
    )
    g.add_argument(
        "--retain-log",
        action="store_true",
        help="keep the log segments a checkpoint covers (an archive of every change)",
    )


def durability_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings fields of the durability options."""
    every = str(args.checkpoint_every).strip().lower()
    seconds = every.endswith("s")
    try:
        n = float(every[:-1]) if seconds else int(every)
    except ValueError:
        raise SystemExit(
            f"cqlstream serve: --checkpoint-every takes N (records) or Ns (seconds), not {every!r}"
        ) from None
    return {
        "fsync": args.fsync,
        "fsync_interval_ms": args.fsync_interval_ms,
        "checkpoint_records": None if seconds or not n else int(n),
        "checkpoint_seconds": n if seconds and n else None,
        "retain_log": args.retain_log,
    }


def tick_seconds(text: str) -> float:
    """`serve --tick`: seconds within the settings' bounds."""
    from cqlstream.server.settings import check_tick

    try:
        return check_tick(float(text))
    except ValueError as e:
        msg = str(e) if "between" in str(e) else f"not a number of seconds: {text!r}"
        raise argparse.ArgumentTypeError(msg.replace("tick_interval", "the tick")) from None


ENGINE_THREADS_ENV = "CQLSTREAM_ENGINE_THREADS"  # `serve --engine-threads` when the option is not given


def serve_engine_threads(args: argparse.Namespace) -> int:
    """`serve --engine-threads`, else $CQLSTREAM_ENGINE_THREADS, else 1; a ValueError naming
    where a bad value came from."""
    import os

    if args.engine_threads is not None:
        n, where = args.engine_threads, "--engine-threads"
    else:
        text = os.environ.get(ENGINE_THREADS_ENV, "").strip()
        if not text:
            return 1
        where = f"${ENGINE_THREADS_ENV}"
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"{where} must be a whole number of at least 1, not {text!r}") from None
    if n < 1:
        raise ValueError(f"{where} must be at least 1, not {n}")
    return n


def cmd_serve(args: argparse.Namespace) -> int:
    import logging
    import os
    import signal

    from cqlstream.cql.errors import CqlError
    from cqlstream.engine.errors import EngineError
    from cqlstream.limit_options import limit_settings
    from cqlstream.server.app import create_app
    from cqlstream.server.problems import ProblemError
    from cqlstream.server.settings import Settings
    from cqlstream.spark_commands import specs_of

    if args.data_dir:
        try:
            os.makedirs(args.data_dir, exist_ok=True)
        except OSError as e:
            print(f"cqlstream serve: cannot use --data-dir {args.data_dir}: {e.strerror}", file=sys.stderr)
            return 2
    try:
        sources = specs_of(args)
    except EngineError as e:
        print(f"cqlstream serve: {e}", file=sys.stderr)
        return 2
    try:
        engine_threads = serve_engine_threads(args)
    except ValueError as e:
        print(f"cqlstream serve: {e}", file=sys.stderr)
        return 2
    settings = Settings(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        api_key=args.api_key or os.environ.get("CQLSTREAM_API_KEY") or None,
        max_body_bytes=args.max_body_mb << 20,
        subscriber_buffer=args.subscriber_buffer,
        result_history=args.result_history,
        compat=args.stream_compat,
        ddl=tuple(args.ddl),
        silence_timeout=args.silence_timeout,
        tick_interval=args.tick,
        sources=sources,
        spark_master=args.spark_master,
        checkpoint_dir=args.checkpoint_dir,
        synopsis_joins=args.synopsis_joins == "on",
        engine_threads=engine_threads,
        **durability_settings(args),
        **limit_settings(args),
    )
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the demo's own client calls are not news
    try:
        app = create_app(settings)
    except (EngineError, CqlError, ProblemError, ValueError, OSError) as e:  # a corrupt plan file, bad --ddl
        print(f"cqlstream serve: cannot start: {e}", file=sys.stderr)
        return 2
    from cqlstream.server.runner import serve

    demo = None
    if args.demo:
        from cqlstream.demo_shop import DemoDriver

        url, say = f"http://{args.host}:{args.port}", lambda line: print(line, flush=True)
        demo = DemoDriver(url, settings.api_key, say, spark=not args.no_spark, data_dir=args.data_dir)
        demo.start()
        signal.signal(signal.SIGTERM, _interrupt)  # uvicorn re-raises SIGTERM after its shutdown: clean up too
    try:
        serve(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C (and SIGTERM) once it has shut down: a normal end
        pass
    finally:
        if demo is not None:
            demo.close()  # its temp folder of Spark input files goes
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the global plan of a running server (text, or the JSON graph)."""
    import json

    import httpx

    from cqlstream.client import Client, CqlstreamError

    try:
        with Client(args.url, api_key=args.api_key) as c:
            out = c.plan("json" if args.json else "text")
    except CqlstreamError as e:
        print(f"cqlstream plan: {e}", file=sys.stderr)
        return 1
    except httpx.HTTPError as e:
        print(f"cqlstream plan: cannot reach {args.url}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2) if isinstance(out, dict) else out.rstrip("\n"))
    return 0


def _print_stream_text(c: Client, qid: int, args: argparse.Namespace) -> None:
    """The results as STREAM text lines, rendered here from the NDJSON stream."""
    from cqlstream.io.stream_text import format_line

    snapshot = "if_available" if args.from_ is None else False
    for e in c.subscribe(qid, snapshot=snapshot, follow=args.follow, after=args.from_):
        print(format_line(e.ts, e.sign, e.row), flush=True)


def _print_raw(c: Client, qid: int, args: argparse.Namespace) -> None:
    """The results in a server result format, as the server sends them."""
    resume = {} if args.from_ is None else {"from": args.from_}
    snapshot = "if_available" if args.from_ is None else False
    for chunk in c.stream_raw(qid, args.format, snapshot=snapshot, follow=args.follow, **resume):
        sys.stdout.write(chunk.decode("utf-8", "replace"))
        sys.stdout.flush()


# `query --format` values rendered by the CLI itself; every other value is a server result format
_LOCAL_FORMATS = {"text": _print_stream_text}


# `--approximate` of `query` and `run`: exact results, or static approximation approved
APPROXIMATE = ("exact", "static")
_APPROXIMATE_HELP = (
    "static: approve static approximation at registration (smaller windows and samples only where they "
    "cannot increase output; docs/approximation.md); exact (the default): no approximation at registration"
)
_SYNOPSIS_HELP = (
    "on (the default): a join or COUNT/SUM/AVG/MAX/MIN aggregate over streams read whole that the "
    "bounded-memory characterization judges bounded runs on constant-size synopses "
    "(docs/bounded-memory.md); off: with windows and the ordinary join and aggregate (same results)"
)


def static_lines(doc: dict[str, Any] | None) -> list[str]:
    """A registration reply's `static_approximation` in lines: the rewrites in force and the ones
    refused (none when the query was registered exact)."""
    if not doc:
        return []
    out = ["static approximation: " + ("none applied, the plan is exact" if doc["exact"] else "in force")]
    out += [f"  {a['rule']}: {a['before']} -> {a['after']} ({a['why']})" for a in doc["applied"]]
    out += [f"  {r['rule']} refused at {r['at']}: {r['reason']}" for r in doc["refused"]]
    return out


def cmd_query(args: argparse.Namespace) -> int:
    from cqlstream.client import Client, CqlstreamError, Lagged

    if (args.cql is None) == (args.id is None):
        print("cqlstream query: give a CQL query or --id of a registered one", file=sys.stderr)
        return 2
    if args.id is not None and args.approximate != "exact":
        print("cqlstream query: --approximate applies to a query being registered, not to --id", file=sys.stderr)
        return 2
    try:
        with Client(args.url, api_key=args.api_key) as c:
            if args.id is None:
                approx = None if args.approximate == "exact" else args.approximate
                q = c.register_query(args.cql, name=args.name, seed_from=args.seed_from, approximate=approx)
                if args.seed_from is not None and args.from_ is None:
                    args.from_ = args.seed_from - 1  # its results from the instant it was seeded at
                schema = ", ".join(f"{a['name']} {a['type']}" for a in q["schema"])
                print(f"query {q['id']}: {q['kind']} ({schema})", file=sys.stderr)
                for line in static_lines(q.get("static_approximation")):
                    print(f"query {q['id']}: {line}", file=sys.stderr)
            qid = args.id if args.id is not None else q["id"]
            kind = q["kind"] if args.id is None else c.query(qid)["kind"]
            if kind == "stream" and not args.follow:
                # a stream has no current state to show: without following, nothing would print
                print(
                    f"query {qid} is stream-valued (no snapshot): following its results; Ctrl-C stops", file=sys.stderr
                )
                args.follow = True
            _LOCAL_FORMATS.get(args.format, _print_raw)(c, qid, args)
    except CqlstreamError as e:
        print(f"cqlstream query: {e}", file=sys.stderr)
        return 3 if isinstance(e, Lagged) else 1
    except KeyboardInterrupt:
        return 0
    except Exception as e:  # connection refused and the like
        import httpx

        if isinstance(e, httpx.HTTPError):
            print(f"cqlstream query: cannot reach {args.url}: {e}", file=sys.stderr)
            return 2
        raise
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "bench" / "__main__.py").is_file():
        print("cqlstream bench: the benchmarks (bench/) are in the source checkout only", file=sys.stderr)
        return 2
    # a child process: the benchmarks are a tool of the checkout, not a module the package imports
    import os
    import subprocess

    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.call([sys.executable, "-m", "bench", *args.args], env={**os.environ, "PYTHONPATH": path})


def _format_labels(kind: str) -> str:
    from cqlstream.io.formats import INGEST_FORMATS, RESULT_FORMATS

    return ", ".join(f.label for f in (INGEST_FORMATS if kind == "ingest" else RESULT_FORMATS))


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size().columns` gives it ($COLUMNS, else the
    terminal of stdout, else 80), without importing shutil: argparse makes a help formatter at
    every `add_argument`, and its own call imports shutil with bz2, lzma and zlib (~2.5 ms of every
    start, for a width only help and errors use)."""
    import os

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, its width read by `_columns` (the same width, no shutil)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser: `{ingest formats}` / `{result formats}` in its description are filled
    from the format tables when its help is shown (commands that never show it never load them).
    Its help formatter is `_Formatter`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        if self.description:
            for kind in ("ingest", "result"):
                if "{%s formats}" % kind in self.description:
                    self.description = self.description.replace("{%s formats}" % kind, _format_labels(kind))
        return super().format_help()


class _QueryFormats:
    """`query --format` choices: the CLI's own renderings, then the registered result formats (read
    on first use, so commands other than `query` do not load the format tables)."""

    def _names(self) -> list[str]:
        from cqlstream.io.formats import RESULT_FORMATS

        return [*_LOCAL_FORMATS, *RESULT_FORMATS.names()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()


class _Skipped:
    """What `_OnlyCommand.add_parser` hands out for a subcommand not being built: every call on it
    (add_argument, add_argument_group, set_defaults, ...) does nothing and returns it."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


class _OnlyCommand:
    """The subparsers action of `build_parser(command)`: builds the parser of `command` alone
    (adding the other ~20 subcommands' arguments was ~8 ms of every start) and notes whether it
    was among the subcommands."""

    def __init__(self, sub: Any, command: str) -> None:
        self.sub, self.command, self.found = sub, command, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.command and self.command not in kwargs.get("aliases", ()):
            return _Skipped()
        self.found = True
        return self.sub.add_parser(name, **kwargs)


def _add_serve_options(sv: argparse.ArgumentParser) -> None:
    """`serve`'s options (their defaults and bounds come from the server's Settings, imported here:
    the other commands' parsers, `run`'s among them, do without that module)."""
    from cqlstream.limit_options import add_limit_options
    from cqlstream.server.settings import TICK_MAX, TICK_MIN, Settings

    sv.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sv.add_argument(
        "--data-dir",
        metavar="DIR",
        help="persist everything here (a write-ahead log of every change, checkpoints, plan.json): a restart "
        "with the same DIR, even after a crash, brings back every acknowledged push, the queries' state and ids",
    )
    sv.add_argument(
        "--api-key",
        metavar="KEY",
        help="require this key (header X-API-Key) on every mutating request (or set CQLSTREAM_API_KEY)",
    )
    sv.add_argument("--max-body-mb", type=int, default=256, metavar="MB", help="largest request body (default 256)")
    sv.add_argument(
        "--subscriber-buffer",
        type=int,
        default=1_000_000,
        metavar="N",
        help="result elements buffered per subscriber before it is disconnected as lagging",
    )
    sv.add_argument(
        "--result-history",
        type=int,
        default=100_000,
        metavar="N",
        help="published result elements kept per query for subscribers resuming with from=T (default 100000)",
    )
    sv.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sv.add_argument("--access-log", action="store_true", help="log every request")
    sv.add_argument("--stream-compat", action="store_true", help=_COMPAT_HELP)
    sv.add_argument(
        "--demo",
        action="store_true",
        help="also run the live demo shop: register its streams, relation and queries through the "
        "API, feed orders and clicks 4 times a second through Spark Structured Streaming (CSV files "
        "under DATA_DIR/demo-shop, else a temp folder) and print the big orders as they happen",
    )
    sv.add_argument(
        "--no-spark",
        action="store_true",
        help="with --demo: push the demo's orders and clicks over HTTP instead, without starting Spark",
    )
    sv.add_argument(
        "--tick",
        type=tick_seconds,
        default=Settings.tick_interval,
        metavar="S",
        help=f"seconds between clock ticks, {TICK_MIN:g} to {TICK_MAX:g} (default {Settings.tick_interval:g}): a tick "
        "closes the instants of system-timestamped streams, so their results wait for it (half a tick on "
        "average) and --tick 0.001 makes them flow within a millisecond; a tick that would move no stream's "
        "time is skipped. Event-time results never wait for a tick: the push or heartbeat that makes "
        "an instant final publishes its results at once",
    )
    sv.add_argument(
        "--silence-timeout",
        type=float,
        metavar="S",
        help="a source silent for S seconds has its time advanced to the other sources' (so an idle "
        "stream does not hold joins and windows back); default: never",
    )
    sv.add_argument(
        "--ddl",
        action="append",
        default=[],
        metavar="DDL",
        help="register these streams, relations or views at start (;-separated; kept when --data-dir has them)",
    )
    sv.add_argument(
        "--synopsis-joins",
        choices=["on", "off"],
        default="on",
        help=_SYNOPSIS_HELP
        + "; the engine knob synopsis_joins changes it for later queries, a query's own knob for it",
    )
    sv.add_argument(
        "--engine-threads",
        type=int,
        default=None,
        metavar="N",
        help="threads the engine runs operators on (default 1, or $CQLSTREAM_ENGINE_THREADS): 2 or more start "
        "it on the 'parallel' scheduler, operators that do not feed each other side by side; results are the "
        "same at every count. With query limits (on by default) a pass still runs as a graph and checks the "
        "limits after every operator call, as one thread does: the same queries are suspended alike",
    )
    add_source_options(sv)
    add_durability_options(sv)
    add_limit_options(sv)


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    return _build_parser(None)[0]


def _build_parser(command: str | None) -> tuple[argparse.ArgumentParser, bool]:
    """The CLI's argument parser; with `command`, one whose only subcommand is `command` (for that
    command's line the same parse, help and errors), and whether there is such a subcommand."""
    p = argparse.ArgumentParser(
        prog="cqlstream",
        formatter_class=_Formatter,
        description="cqlstream: continuous CQL queries over data streams. "
        "Subcommands: explain (analyze a query), run (a STREAM script), demo, serve "
        "(the HTTP server), query (a query on a running server), plan (a running "
        "server's global plan), bench.",
    )
    sub: Any = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    if command is not None:
        sub = _OnlyCommand(sub, command)

    e = sub.add_parser(
        "explain",
        help="analyze a CQL query and print its analyzed form and logical plan",
        description="Parse and analyze one CQL query against the given DDL and print the analyzed "
        "query (CQL defaults made explicit), its result kind and schema, and the "
        "optimized logical plan. Exits 1 with line/column and reason for bad CQL.",
    )
    e.add_argument("query", help="the CQL query text")
    e.add_argument(
        "--ddl",
        action="append",
        metavar="TEXT",
        help='registrations, e.g. "register stream S (A int, B float); register relation R (A int)"',
    )
    e.add_argument("--ddl-file", action="append", metavar="FILE", help="a file of ;-separated registrations")
    e.add_argument("--stream-compat", action="store_true", help="STREAM 0.6 defaults (no implicit top-level Istream)")
    e.add_argument("--json", action="store_true", help="print JSON instead of text")
    e.set_defaults(func=cmd_explain)

    r = sub.add_parser(
        "run",
        help="run a STREAM script (tables with source files, queries with dest files)",
        description="Run a STREAM 0.6 script: 'table : register stream|relation ...;' + "
        "'source : FILE', 'vquery : CQL;' + 'vtable : register ...;' (a view), "
        "'query : CQL;' + 'dest : FILE'. Sources are read in timestamp order and every "
        "result is written in STREAM's text form ([t]:+:v1, v2 / [t]:-:...). Relative "
        "paths are relative to the script's folder. Prints the lines written per dest "
        "on stderr. Exits 2 with file:line: reason on any error in the script or its "
        "files.",
    )
    r.add_argument("script", help="the script file")
    r.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write every dest into DIR (keeping its file name) instead of where the script says",
    )
    r.add_argument(
        "--source-dir",
        metavar="DIR",
        help="read every source from DIR (keeping its file name) instead of where the script says",
    )
    r.add_argument("--stream-compat", action="store_true", help=_COMPAT_HELP)
    r.add_argument(
        "--batch-rows",
        type=int,
        default=None,
        metavar="N",
        help="input rows pushed per step: memory and latency vs. per-step overhead (default 100000)",
    )
    r.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="1: read, run and write in turn on one thread; N >= 2: read and parse sources on other threads "
        "and format and write results in N-1 writers (see --writer) while the engine runs; the output is the "
        "same bytes (default 2 when two CPUs are available, else 1)",
    )
    r.add_argument(
        "--writer",
        choices=["process", "thread"],
        default="thread",
        help="with --threads N >= 2, where results are formatted and written: 'thread' (default) on N-1 "
        "threads of this process; 'process' in N-1 writer processes, started with the run and fed through "
        "pipes (a grouped aggregate's changes as compact records), which share no interpreter lock with the "
        "engine but cost ~0.2 s more CPU per run (the processes' start-up); on a busy 2-core machine they "
        "were not faster than threads (bench/README.md)",
    )
    r.add_argument(
        "--reader",
        choices=["process", "thread"],
        default="thread",
        help="with --threads N >= 2, where sources are parsed: 'thread' (default) a thread per source in "
        "this process; 'process' one reader process for them all, started first and fed to the engine "
        "through a pipe (no interpreter lock shared with the engine; the same bytes either way)",
    )
    r.add_argument(
        "--engine-threads",
        type=int,
        default=None,
        metavar="N",
        help="threads the engine runs operators on: operators that do not feed each other run side by "
        "side (the 'parallel' scheduler); 1 (default) runs every operator on the calling thread; the "
        "bytes written are the same at every count",
    )
    r.add_argument("--approximate", choices=APPROXIMATE, default="exact", help=_APPROXIMATE_HELP)
    r.add_argument("--synopsis-joins", choices=["on", "off"], default="on", help=_SYNOPSIS_HELP)
    r.add_argument(
        "--column-pruning",
        choices=["on", "off"],
        default="on",
        help="on (the default): every operator fills only the output columns something above it reads "
        "(a join gathers only those of its pairs, a selection copies only those of its survivors); "
        "off: every column. The bytes written are the same",
    )
    r.set_defaults(func=cmd_run)

    dm = sub.add_parser(
        "demo",
        help="run the demo shop offline from recorded files (a STREAM script) and show "
        "the first lines of each result; `serve --demo` runs it live",
        description="Run demo/shop.cql: two streams (Orders, Clicks) and a relation (Items) with a "
        "filter, a windowed aggregate, a windowed join, an Istream of a partitioned "
        "window and a view; write the results to demo/out/ in a source checkout, to "
        "./cqlstream-demo-out/ from an installed package (or to --out-dir), and print the first lines of each.",
    )
    dm.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write the results here (default: demo/out/ in a source checkout, ./cqlstream-demo-out/ otherwise)",
    )
    dm.add_argument("--lines", type=int, default=8, metavar="N", help="lines to show per result (default 8)")
    dm.add_argument("--stream-compat", action="store_true", help=_COMPAT_HELP)
    dm.set_defaults(func=cmd_demo)

    sv = sub.add_parser(
        "serve",
        help="run the HTTP server (FastAPI + uvicorn)",
        description="Serve the HTTP API: register streams, relations, views and queries, push "
        "input ({ingest formats}), stream results ({result formats}), control tables, /metrics, "
        "OpenAPI docs at /docs.",
    )
    if not isinstance(sv, _Skipped):  # its options read the server's settings: built for `serve` only
        _add_serve_options(sv)
    sv.set_defaults(func=cmd_serve)

    qy = sub.add_parser(
        "query",
        help="register a query on a running server and print its results",
        description="Register a CQL query with a running server (or pick one with --id) and "
        "print its current results (snapshot); with --follow (the default for a "
        "stream-valued query, which has no snapshot) keep printing new results as they become final, in STREAM's text form [t]:+:v1, v2 (or raw "
        "--format). Ctrl-C stops.",
    )
    qy.add_argument("cql", nargs="?", help="the CQL query text")
    qy.add_argument("--id", type=int, help="follow an already registered query instead")
    qy.add_argument("--name", help="a name for the new query")
    qy.add_argument("--follow", "-f", action="store_true", help="keep streaming new results")
    qy.add_argument(
        "--from",
        dest="from_",
        type=int,
        metavar="T",
        help="resume: the results after instant T (the last one seen) instead of the current relation",
    )
    qy.add_argument(
        "--seed-from",
        type=int,
        metavar="T",
        help="register the query as if at instant T, from the server's log archive (serve --retain-log), and "
        "print its results from T on",
    )
    qy.add_argument("--url", default="http://127.0.0.1:8000", help="server URL (default http://127.0.0.1:8000)")
    qy.add_argument("--api-key", help="API key for a server started with --api-key")
    qy.add_argument(
        "--format",
        default="text",
        choices=_QueryFormats(),
        metavar="FORMAT",  # a metavar, or argparse would list the choices (and load the tables) right here
        help="output: STREAM text lines (text, the default) or a server result format as sent; one of %(choices)s",
    )
    qy.add_argument("--approximate", choices=APPROXIMATE, default="exact", help=_APPROXIMATE_HELP)
    qy.set_defaults(func=cmd_query)

    pl = sub.add_parser(
        "plan",
        help="print the shared global plan of a running server",
        description="Print the global plan of a running cqlstream server: every operator with "
        "its queues, the queries using it and its counters; stores; queries with "
        "from when their results are exact. --json prints the graph (nodes: control "
        "tables; edges: queues) that a UI draws.",
    )
    pl.add_argument("--url", default="http://127.0.0.1:8000", help="server URL (default http://127.0.0.1:8000)")
    pl.add_argument("--api-key", help="API key for a server started with --api-key")
    pl.add_argument("--json", action="store_true", help="the JSON graph instead of text")
    pl.set_defaults(func=cmd_plan)

    add_spark_parsers(sub, "http://127.0.0.1:8000")
    add_scale_out_parsers(sub, "http://127.0.0.1:8000")
    add_catalog_parsers(sub, "http://127.0.0.1:8000")  # streams, queries, push, drop

    bn = sub.add_parser(
        "bench",
        help="run the benchmarks (python -m bench)",
        description="Run `python -m bench` with the remaining arguments.",
    )
    bn.add_argument("args", nargs=argparse.REMAINDER, help="arguments for python -m bench (e.g. --rows 100000)")
    bn.set_defaults(func=cmd_bench)
    return p, command is None or sub.found


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line parsed by its subcommand's parser alone (cheaper); by the whole parser when
    there is no such subcommand or arguments are left over, so top-level help and errors (which
    list every subcommand) are the whole parser's."""
    if argv and not argv[0].startswith("-"):
        parser, found = _build_parser(argv[0])
        if found:
            args, extra = parser.parse_known_args(argv)
            if not extra:
                return args
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The command line `argv` (default: the process's own) run; returns the exit status. As the
    program itself (`argv` None: the `cqlstream` executable, `python -m cqlstream`), `run` pauses
    garbage collection while it starts and ends the process without Python's teardown
    (cqlstream/run_process.py); called with arguments (tests, benchmarks), never."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"] and argv[1:2] not in (["-h"], ["--help"]):
        return cmd_bench(argparse.Namespace(args=argv[1:]))  # everything after `bench` is python -m bench's
    args = parse_args(argv)
    fast = as_program and args.func is cmd_run
    if fast:
        from cqlstream import run_process

        run_process.pause_gc()
    try:
        code = args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if fast:
        return run_process.leave(code)
    return code
