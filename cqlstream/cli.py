"""The `cqlstream` command line: one subcommand per job; user errors print a message, never a traceback."""
from __future__ import annotations

import argparse
import json
import sys

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cqlstream", description="cqlstream: continuous CQL queries over data streams.")
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
