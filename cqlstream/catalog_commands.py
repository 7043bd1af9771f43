"""The command line's catalog commands for a running server: `cqlstream streams`, `cqlstream queries`
(a compact table with result rates from the control tables), `cqlstream push` (rows from a file or
stdin) and `cqlstream drop`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# file suffix -> ingest format of `cqlstream push`
_SUFFIX_FORMATS = {".csv": "csv", ".ndjson": "ndjson", ".jsonl": "ndjson", ".json": "json", ".arrow": "arrow"}


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as left-aligned columns under a header (numbers right-aligned)."""
    cells = [[str(h) for h in header]] + [["–" if v is None else str(v) for v in r] for r in rows]
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows) for i in range(len(header))]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _run(name: str, args: argparse.Namespace, body: Callable[[Any], int]) -> int:
    """Call `body(client)`, turning problems and connection errors into a message and exit code 1."""
    import httpx

    from cqlstream.client import Client, CqlstreamError

    try:
        with Client(args.url, api_key=args.api_key) as c:
            return body(c)
    except CqlstreamError as e:
        print(f"cqlstream {name}: {e}", file=sys.stderr)
        return 1
    except httpx.HTTPError as e:
        print(f"cqlstream {name}: cannot reach {args.url}: {e}", file=sys.stderr)
        return 1


# ---------------------------------------------------------------- cqlstream streams
def cmd_streams(args: argparse.Namespace) -> int:
    def body(c: Any) -> int:
        sources = c.streams()
        if args.json:
            import json

            print(json.dumps(sources, indent=2))
            return 0
        rows = [
            (
                s["name"],
                s["kind"],
                ", ".join(f"{a['name']} {a['type'].lower()}" for a in s["attrs"]),
                s["accepted"],
                s["max_ts"],
                "system" if s["timestamp"] == "system" else s["time_unit"],
            )
            for s in sources
        ]
        print(table(("NAME", "KIND", "SCHEMA", "ACCEPTED", "TIME", "STAMPS"), rows))
        return 0

    return _run("streams", args, body)


# ---------------------------------------------------------------- cqlstream queries
def query_rates(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[int, float]:
    """Results per second of each query between two samples of the control tables (`/entities`)."""
    out: dict[int, float] = {}
    for eid, e in after.items():
        if e["kind"] == "query" and eid in before and seconds > 0:
            delta = (e["counters"].get("results") or 0) - (before[eid]["counters"].get("results") or 0)
            out[int(eid.split(":", 1)[1])] = max(0.0, delta / seconds)
    return out


def cmd_queries(args: argparse.Namespace) -> int:
    def entities(c: Any) -> tuple[float, dict[str, Any]]:
        return time.monotonic(), {e["id"]: e for e in c.entities()}

    def body(c: Any) -> int:
        t0, first = entities(c)
        rates: dict[int, float] = {}
        if args.interval > 0:
            time.sleep(args.interval)
            t1, second = entities(c)
            rates = query_rates(first, second, t1 - t0)
        else:
            second = first
        queries = c.queries()
        if args.json:
            import json

            print(json.dumps([{**q, "results_per_second": rates.get(q["id"])} for q in queries], indent=2))
            return 0
        rows = []
        for q in queries:
            counters = second.get(f"query:{q['id']}", {}).get("counters", {})
            mem = counters.get("memory_bytes")
            rate = rates.get(q["id"])
            rows.append(
                (
                    q["id"],
                    q["name"] or "",
                    q["kind"],
                    "active" if q["active"] else "inactive",
                    q["weight"],
                    None if rate is None else round(rate, 1),
                    None if mem is None else round(mem),
                    {True: "yes", False: "no", None: "rate"}[q["bounded_memory"]],
                    "start" if q["complete_from"] is None else q["complete_from"],
                    _short(q["cql"], args.width),
                )
            )
        print(
            table(("ID", "NAME", "KIND", "STATE", "WEIGHT", "OUT/S", "BYTES", "BOUNDED", "COMPLETE FROM", "CQL"), rows)
        )
        return 0

    return _run("queries", args, body)


# ---------------------------------------------------------------- cqlstream push
def cmd_push(args: argparse.Namespace) -> int:
    path = None if args.file in (None, "-") else Path(args.file)
    fmt = args.format or (_SUFFIX_FORMATS.get(path.suffix.lower(), "csv") if path else "csv")
    try:
        data = path.read_bytes() if path else sys.stdin.buffer.read()
    except OSError as e:
        print(f"cqlstream push: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2

    def body(c: Any) -> int:
        out = c.push_result(args.stream, data, format=fmt, late=args.late, heartbeat=args.heartbeat)
        late = f", {out['late']} late rows dropped" if out.get("late") else ""
        refused = f", {out['refused']} rows refused under overload" if out.get("refused") else ""
        print(f"pushed {out['accepted']} rows to {out['source']}{late}{refused}")
        return 0

    return _run("push", args, body)


# ---------------------------------------------------------------- cqlstream drop
_DROPS: dict[str, Callable[[Any, str], None]] = {
    "stream": lambda c, name: c.drop_stream(name),
    "relation": lambda c, name: c.drop_stream(name),
    "view": lambda c, name: c.drop_view(name),
    "query": lambda c, name: c.deregister(int(name)),
}


def cmd_drop(args: argparse.Namespace) -> int:
    if args.kind == "query" and not args.name.isdigit():
        print("cqlstream drop: a query is dropped by its id (see `cqlstream queries`)", file=sys.stderr)
        return 2

    def body(c: Any) -> int:
        _DROPS[args.kind](c, args.name)
        print(f"dropped {args.kind} {args.name}")
        return 0

    return _run("drop", args, body)


def add_parsers(sub: Any, url_default: str) -> None:
    """streams, queries, push and drop, each with --url and --api-key."""

    def server(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--url", default=url_default, help=f"server URL (default {url_default})")
        p.add_argument("--api-key", help="API key for a server started with --api-key")
        return p

    st = server(sub.add_parser("streams", help="list the streams and relations of a running server"))
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=cmd_streams)

    qs = server(
        sub.add_parser(
            "queries",
            help="list the queries of a running server with their result rates",
            description="One line per query: id, name, kind, state, weight, results per second (two samples "
            "of the control tables --interval apart), state bytes, bounded-memory verdict (yes; rate: "
            "bounded for a bounded arrival rate; no), the instant its results are exact from, its CQL.",
        )
    )
    qs.add_argument("--interval", type=float, default=1.0, metavar="S", help="rate sampling interval (0: no rates)")
    qs.add_argument("--width", type=int, default=60, metavar="N", help="cut the CQL text to N characters")
    qs.add_argument("--json", action="store_true", help="print JSON (each query with results_per_second)")
    qs.set_defaults(func=cmd_queries)

    pu = server(
        sub.add_parser(
            "push",
            help="push rows from a file or stdin to a stream or relation",
            description="Push rows, all or nothing: CSV with a header line naming the fields (the default), "
            "NDJSON, a JSON array or Arrow IPC, chosen by --format or the file's suffix.",
        )
    )
    pu.add_argument("stream", help="the stream or relation")
    pu.add_argument("file", nargs="?", help="the rows (default: stdin)")
    pu.add_argument("--format", choices=("csv", "ndjson", "json", "arrow"), help="input format")
    pu.add_argument("--heartbeat", type=int, metavar="T", help="then advance the stream's time to T")
    pu.add_argument("--late", choices=("reject", "drop"), default="reject", help="rows older than the stream's time")
    pu.set_defaults(func=cmd_push)

    dr = server(sub.add_parser("drop", help="drop a stream, relation or view, or deregister a query"))
    dr.add_argument("kind", choices=tuple(_DROPS), help="what to drop")
    dr.add_argument("name", help="its name (a query: its id)")
    dr.set_defaults(func=cmd_drop)
