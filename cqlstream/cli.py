"""The `cqlstream` command line: one subcommand per job; user errors print a message, never a traceback."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cql.analyzer import AnalyzeOptions
from cql.catalog import Catalog
from cql.errors import CqlError
from cql.frontend import compile_query


def _read_ddl(args) -> str:
    parts = []
    for path in args.ddl_file or []:
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
        except OSError as e:
            raise SystemExit(f"cqlstream: cannot read DDL file {path}: {e.strerror}")
    parts.extend(args.ddl or [])
    return ";\n".join(parts)


def cmd_explain(args) -> int:
    ddl = _read_ddl(args)
    try:
        catalog = Catalog.from_ddl(ddl) if ddl.strip() else Catalog()
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
        print(json.dumps({"kind": compiled.kind, "schema": [{"name": a.name, "type": str(a.type)} for a in
                                                            compiled.schema], "explain": compiled.explain()}, indent=2))
    else:
        print(compiled.explain())
    return 0


_COMPAT_HELP = ("STREAM 0.6 behaviour: [Range N] holds (t-N, t] (a tuple leaves at t+N), no implicit "
                "top-level Istream, no row for a scalar aggregate over no input, no Istream/Dstream/Rstream "
                "output at the last instant")


def _run(script, out_dir, compat: bool, batch_rows: int):
    """run_script with user errors turned into (message, exit code 2)."""
    from engine.stream_script import ScriptError, run_script

    try:
        return run_script(script, out_dir=out_dir, compat=compat, batch_rows=batch_rows), None
    except ScriptError as e:
        return None, str(e)
    except OSError as e:  # writing results: disk full, permissions
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        return None, f"cannot write{where}: {e.strerror or e}"


def cmd_run(args) -> int:
    from engine.stream_script import DEFAULT_BATCH_ROWS

    if args.batch_rows is None:
        args.batch_rows = DEFAULT_BATCH_ROWS
    if args.batch_rows < 1:
        print("cqlstream run: --batch-rows must be at least 1", file=sys.stderr)
        return 2
    counts, err = _run(args.script, args.out_dir, args.stream_compat, args.batch_rows)
    if err:
        print(err, file=sys.stderr)
        return 2
    for dest, n in counts.items():
        print(f"{dest}: {n} line{'s' if n != 1 else ''}", file=sys.stderr)
    return 0


DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
DEMO_SCRIPT = DEMO_DIR / "shop.cql"


def cmd_demo(args) -> int:
    if not DEMO_SCRIPT.is_file():
        print(f"cqlstream demo: the demo script {DEMO_SCRIPT} is missing (the demo runs from a source checkout)",
              file=sys.stderr)
        return 2
    out_dir = Path(args.out_dir) if args.out_dir else DEMO_DIR / "out"
    print(f"Running {DEMO_SCRIPT} (results in {out_dir})\n")
    print(_demo_queries(DEMO_SCRIPT))
    counts, err = _run(DEMO_SCRIPT, out_dir, args.stream_compat, 100_000)
    if err:
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
    from engine.stream_script import parse_script

    script = parse_script(path)
    out = []
    for s in script.steps:
        if s.kind == "query":
            text = " ".join(s.text.split())
            out.append(f"  {s.file.name}: {text}")
        elif s.kind == "view":
            name = s.ddl.split("(")[0].split()[-1]
            out.append(f"  {name} (a view): {' '.join(s.text.split())}")
    return "Queries:\n" + "\n".join(out) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cqlstream", description="cqlstream: continuous CQL queries over data streams. "
                                "Subcommands: explain (analyze a query), run (a STREAM script), demo.")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explain", help="analyze a CQL query and print its analyzed form and logical plan",
                       description="Parse and analyze one CQL query against the given DDL and print the analyzed "
                                   "query (CQL defaults made explicit), its result kind and schema, and the "
                                   "optimized logical plan. Exits 1 with line/column and reason for bad CQL.")
    e.add_argument("query", help="the CQL query text")
    e.add_argument("--ddl", action="append", metavar="TEXT",
                   help='registrations, e.g. "register stream S (A int, B float); register relation R (A int)"')
    e.add_argument("--ddl-file", action="append", metavar="FILE", help="a file of ;-separated registrations")
    e.add_argument("--stream-compat", action="store_true", help="STREAM 0.6 defaults (no implicit top-level Istream)")
    e.add_argument("--json", action="store_true", help="print JSON instead of text")
    e.set_defaults(func=cmd_explain)

    r = sub.add_parser("run", help="run a STREAM script (tables with source files, queries with dest files)",
                       description="Run a STREAM 0.6 script: 'table : register stream|relation ...;' + "
                                   "'source : FILE', 'vquery : CQL;' + 'vtable : register ...;' (a view), "
                                   "'query : CQL;' + 'dest : FILE'. Sources are read in timestamp order and every "
                                   "result is written in STREAM's text form ([t]:+:v1, v2 / [t]:-:...). Relative "
                                   "paths are relative to the script's folder. Prints the lines written per dest "
                                   "on stderr. Exits 2 with file:line: reason on any error in the script or its "
                                   "files.")
    r.add_argument("script", help="the script file")
    r.add_argument("--out-dir", metavar="DIR", help="write every dest into DIR (keeping its file name) instead of "
                                                    "where the script says")
    r.add_argument("--stream-compat", action="store_true", help=_COMPAT_HELP)
    r.add_argument("--batch-rows", type=int, default=None, metavar="N",
                   help="input rows pushed per step: memory and latency vs. per-step overhead (default 100000)")
    r.set_defaults(func=cmd_run)

    dm = sub.add_parser("demo", help="run the demo script (a small shop) and show the first lines of each result",
                        description="Run demo/shop.cql: two streams (Orders, Clicks) and a relation (Items) with a "
                                    "filter, a windowed aggregate, a windowed join, an Istream of a partitioned "
                                    "window and a view; write the results to demo/out/ (or --out-dir) and print "
                                    "the first lines of each.")
    dm.add_argument("--out-dir", metavar="DIR", help="write the results here instead of demo/out/")
    dm.add_argument("--lines", type=int, default=8, metavar="N", help="lines to show per result (default 8)")
    dm.add_argument("--stream-compat", action="store_true", help=_COMPAT_HELP)
    dm.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and the like
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
