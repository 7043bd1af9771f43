"""`cqlstream serve` options for limits, keys and CORS (README "Limits"), and the Settings fields they fill."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

from cqlstream.server.settings import Settings

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size(text: str) -> int | None:
    """Bytes from `1073741824`, `512M`, `1G`, `1GiB`; `0` or `none`: no limit (None)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    if t in ("NONE", "0"):
        return None
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        n = float(t[: len(t) - len(unit)] if unit else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1G, 512M, 0 for none)") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"a size must not be negative: {text!r}")
    return int(n * _UNITS[unit])


class _Policies:
    """`--overload-policy` choices: the registered overload policies, read on first use (every
    command builds this parser; only `serve` needs engine/approx/shedding.py, ~15 ms to import)."""

    def _names(self) -> list[str]:
        from cqlstream.engine.approx import shedding

        return shedding.policy_names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()


def add_limit_options(p: argparse.ArgumentParser) -> None:
    d = Settings()
    g = p.add_argument_group("limits, keys and CORS")
    g.add_argument(
        "--query-memory-limit",
        type=size,
        default=d.query_memory_limit,
        metavar="SIZE",
        help="state a query may hold (e.g. 512M, 2G; 0: none) before the engine suspends it (state "
        "'suspended', its result streams end with the reason; raise its knob memory_limit and activate it "
        "again); a query's own memory_limit knob overrides it (default 1G)",
    )
    g.add_argument(
        "--query-cpu-limit",
        type=float,
        default=d.query_cpu_limit,
        metavar="S",
        help="CPU seconds of engine threads a query may take in one run (one push, heartbeat or tick; each "
        "thread counts only its own time) before the engine suspends it likewise; its knob cpu_limit overrides "
        f"it; 0: none (default {d.query_cpu_limit:g})",
    )
    g.add_argument(
        "--work-budget",
        type=int,
        default=d.work_budget,
        metavar="N",
        help="input elements per operator call (whole instants), so memory limits are checked within one "
        f"engine run; 0: unbounded (default {d.work_budget})",
    )
    g.add_argument(
        "--overload-control",
        choices=["on", "off"],
        default="off",
        help="approximate under overload: when the engine's queues pass --queue-memory-limit (or its CPU "
        "--overload-cpu-limit), sample queries' input, heavier-weighted queries last (default off)",
    )
    g.add_argument(
        "--queue-memory-limit",
        type=size,
        default=d.overload_queue_memory_limit,
        metavar="SIZE",
        help="with --overload-control on: bytes the engine's queues may hold (default 100M; 0: not watched)",
    )
    g.add_argument(
        "--overload-cpu-limit",
        type=float,
        default=None,
        metavar="S",
        help="with --overload-control on: engine seconds per second (e.g. 0.8); default: not watched",
    )
    g.add_argument(
        "--overload-admission",
        choices=["on", "off"],
        default="on",
        help="with --overload-control on: admit only part of a push that would put the queues over "
        "--queue-memory-limit (the push's reply says how many rows were refused; default on)",
    )
    g.add_argument(
        "--overload-policy",
        choices=_Policies(),
        metavar="POLICY",  # a metavar, or argparse would list the choices (and import shedding) right here
        default=d.overload_policy,
        help="with --overload-control on: who loses precision first: weighted (least precision per load "
        "saved, by query weight; the default), uniform (weights ignored) or allocator (the "
        "precision-maximizing allocator); one of %(choices)s",
    )
    g.add_argument(
        "--max-pending-pushes",
        type=int,
        default=d.max_pending_pushes,
        metavar="N",
        help=f"pushes in flight before new ones get 429 with Retry-After (default {d.max_pending_pushes})",
    )
    g.add_argument(
        "--max-engine-lag",
        type=float,
        default=d.max_engine_lag,
        metavar="S",
        help="seconds the engine may be busy on one call before pushes get 429 and /readyz 503 "
        f"(default {d.max_engine_lag:g})",
    )
    g.add_argument(
        "--read-key",
        metavar="KEY",
        help="require this key or the --api-key (header X-API-Key) on reads: results, peek, CQL texts, "
        "/plan, /entities (or set CQLSTREAM_READ_KEY); default: reads are open",
    )
    g.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from this origin (repeatable; '*' for any); default: none",
    )
    g.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=d.keep_alive_timeout,
        metavar="S",
        help=f"close idle keep-alive connections after S seconds (default {d.keep_alive_timeout:g})",
    )
    g.add_argument(
        "--header-timeout",
        type=float,
        default=d.header_timeout,
        metavar="S",
        help="close a connection that has not sent a complete request head S seconds after opening or "
        f"after its previous response (default {d.header_timeout:g})",
    )
    g.add_argument(
        "--body-timeout",
        type=float,
        default=d.body_timeout,
        metavar="S",
        help=f"answer 408 when a request body has not fully arrived after S seconds (default {d.body_timeout:g})",
    )


def limit_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Settings fields of the options above."""
    return {
        "query_memory_limit": args.query_memory_limit,
        "query_cpu_limit": args.query_cpu_limit or None,
        "work_budget": args.work_budget or None,
        "overload_control": args.overload_control == "on",
        "overload_queue_memory_limit": args.queue_memory_limit,
        "overload_cpu_limit": args.overload_cpu_limit or None,
        "overload_admission": args.overload_admission == "on",
        "overload_policy": args.overload_policy,
        "max_pending_pushes": args.max_pending_pushes,
        "max_engine_lag": args.max_engine_lag,
        "read_key": args.read_key or os.environ.get("CQLSTREAM_READ_KEY") or None,
        "cors_origins": tuple(args.cors_origin),
        "keep_alive_timeout": args.keep_alive_timeout,
        "header_timeout": args.header_timeout,
        "body_timeout": args.body_timeout,
    }
