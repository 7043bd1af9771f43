"""Per-operator CPU of a Linear Road run, and one join's calls replayed alone.

`python -m bench.linear_road.ops --source-dir DIR [--no-band] [--no-range-distinct] [--replay N] [--joins]
[--per-call KINDS]` runs
`linearroad.cql` under `--stream-compat --threads 1` in this process (the dest files go to a
temporary directory) with every operator's `process` timed by thread CPU (nested calls counted
once), and prints the operators' CPU by kind and the largest ones (`--joins`: every join, with
its calls). `--no-band` keeps the window under Rstream(S [Now] ⋈ S' [Range N]) (the plan before
the band join: the stream–relation join over the window); `--no-range-distinct` keeps the window
under VolSMV's DISTINCT (DistinctOp over it). `--replay N` also records the calls of the `SegChangeStr` self-join (and, with
`--no-band`, of the window feeding it) and replays them N times on copies of the operators taken
before their first call, printing the best replay's CPU; `--op EID` replays that operator instead
(e.g. `--op op:49`, the VolSMV DISTINCT reading its window's stream, op:50 while it read the window;
eids as the list of the largest operators prints them). `--per-call StreamJoinOp,JoinOp` replays
every operator of those classes alone and prints per class its CPU and the Python function calls
per operator call (the fixed cost of Linear Road's ~2,500 small calls; session 18).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from cqlstream.engine.operators.base import Operator

SCRIPT = Path(__file__).with_name("linearroad.cql")


def _all_operator_classes() -> list[type[Operator]]:
    from cqlstream.engine.operators.registry import OPERATORS

    for module, _ in OPERATORS.values():
        importlib.import_module(f"cqlstream.engine.operators.{module}")
    for extra in ("band_join", "range_distinct"):  # operators the registry does not name
        try:
            importlib.import_module(f"cqlstream.engine.operators.{extra}")
        except ImportError:  # a tree from before them
            pass
    out, todo = [], [Operator]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


MATCH = ["Seg <>"]  # the replayed join: a part of its predicate (--match)
OP: list[str | None] = [None]  # the replayed operator's eid (--op), instead of the join
KINDS: set[str] = set()  # operator classes whose calls --per-call replays, each operator alone


def _is_self_join(op: Operator) -> bool:
    pred = getattr(op, "predicate", None)
    return op.kind in ("stream join", "band join") and pred is not None and MATCH[0] in pred.sql()


class Recorder:
    """Thread CPU per operator; the self-join's (and its window's) calls with copies of the
    operators as they were before their first call."""

    def __init__(self, replay: bool) -> None:
        self.cpu: dict[int, float] = defaultdict(float)
        self.calls_of: dict[int, int] = defaultdict(int)
        self.ops: dict[int, Operator] = {}
        self.depth = 0
        self.replay = replay
        self.calls: dict[int, list[tuple[list[Any], int]]] = defaultdict(list)
        self.first: dict[int, Operator] = {}

    def wants(self, op: Operator) -> bool:
        if not self.replay:
            return False
        if KINDS:
            return type(op).__name__ in KINDS
        if OP[0] is not None:
            return op.eid == OP[0]
        if _is_self_join(op):
            return True
        # the window feeding the self-join (the plan without the band join)
        return type(op).__name__ == "WindowOp" and any(
            _is_self_join(o) and op.output in o.inputs for o in self.ops.values()
        )

    def wrap(self, cls: type[Operator]) -> None:
        fn = cls.__dict__.get("process")
        if fn is None:
            return
        rec = self

        def process(self: Operator, inputs: list[Any], bound: int) -> Any:
            if rec.depth:
                return fn(self, inputs, bound)
            rec.ops[id(self)] = self
            rec.calls_of[id(self)] += 1
            if rec.wants(self):
                if id(self) not in rec.first:
                    rec.first[id(self)] = copy.deepcopy(self)
                rec.calls[id(self)].append((inputs, bound))
            rec.depth += 1
            t = time.thread_time()
            try:
                return fn(self, inputs, bound)
            finally:
                rec.cpu[id(self)] += time.thread_time() - t
                rec.depth -= 1

        cls.process = process  # type: ignore[method-assign]


def _time_steps() -> list[Any]:
    """Wrap Operator.step to sum its thread CPU: [seconds, calls] (the per-step overhead is this
    minus the operators' `process`)."""
    acc: list[Any] = [0.0, 0]
    step = Operator.step

    def timed(self: Operator, budget: int | None = None) -> int:
        t = time.thread_time()
        try:
            return step(self, budget)
        finally:
            acc[0] += time.thread_time() - t
            acc[1] += 1

    Operator.step = timed  # type: ignore[method-assign]
    return acc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--no-band", action="store_true", help="keep the window (the plan before the band join)")
    ap.add_argument(
        "--no-range-distinct",
        action="store_true",
        help="keep the window under DISTINCT(S [Range N]) (the plan before session 17)",
    )
    ap.add_argument("--replay", type=int, default=0, help="replay the self-join's calls this many times")
    ap.add_argument("--profile", action="store_true", help="cProfile one more replay")
    ap.add_argument("--top", type=int, default=8, help="how many of the largest operators to list")
    ap.add_argument("--joins", action="store_true", help="also list every join operator's CPU and calls")
    ap.add_argument("--match", default=MATCH[0], help="replay the join whose predicate holds this text")
    ap.add_argument("--op", default=None, help="replay this operator (its eid, e.g. op:49) instead of the join")
    ap.add_argument(
        "--per-call",
        default="",
        metavar="KINDS",
        help="replay every operator of these classes alone (comma-separated, e.g. StreamJoinOp,JoinOp) and print "
        "per class the best replay's CPU and the Python function calls per operator call (cProfile of one more "
        "replay): the fixed cost of small calls. Not for WindowOp over a shared window store (its calls read "
        "the store, which the replay does not refill)",
    )
    args = ap.parse_args(argv)
    MATCH[0] = args.match
    OP[0] = args.op
    KINDS.update(k for k in args.per_call.split(",") if k)
    if KINDS and not args.replay:
        args.replay = 3
    if args.no_band:
        rule = importlib.import_module("cqlstream.cql.logical.rewrites.stream_join")
        rule.band_window = lambda x: None
    if args.no_range_distinct:
        importlib.import_module("cqlstream.cql.logical.rewrites.range_distinct").fused_window = lambda x: None
    rec = Recorder(args.replay > 0)
    for cls in _all_operator_classes():
        rec.wrap(cls)
    steps = _time_steps()
    from cqlstream.cli import main as cli

    with tempfile.TemporaryDirectory() as out:
        t = time.process_time()
        cli(
            ["run", str(SCRIPT), "--source-dir", args.source_dir, "--out-dir", out, "--stream-compat", "--threads", "1"]
        )
        total = time.process_time() - t
    by_kind: dict[str, float] = defaultdict(float)
    for k, v in rec.cpu.items():
        by_kind[type(rec.ops[k]).__name__] += v
    ops_cpu = sum(rec.cpu.values())
    print(f"process CPU of the run (imports excluded): {total:.2f} s; operators {ops_cpu:.2f} s")
    print(
        f"operator steps: {steps[1]} calls, {steps[0]:.3f} s; outside the operators' process "
        f"(queues, watermarks, output pushes): {steps[0] - ops_cpu:.3f} s"
    )
    for name, v in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<22} {v:6.3f} s")
    print("largest operators:")
    for k, v in sorted(rec.cpu.items(), key=lambda kv: -kv[1])[: args.top]:
        op = rec.ops[k]
        what = getattr(op, "predicate", None) or getattr(op, "spec", None)
        print(f"  {v:6.3f} s  {op.kind:<12} {op.eid}  {'' if what is None else what.sql()[:70]}")
    if args.joins:
        joins = [(k, v) for k, v in rec.cpu.items() if "join" in rec.ops[k].kind]
        print(f"join operators: {sum(v for _, v in joins):.3f} s")
        for k, v in sorted(joins, key=lambda kv: -kv[1]):
            op = rec.ops[k]
            pred = getattr(op, "predicate", None)
            print(
                f"  {v:6.3f} s  {op.kind:<12} {op.eid:<7} {rec.calls_of[k]:>4} calls  {'' if pred is None else pred.sql()[:60]}"
            )
    if KINDS:
        _per_call(rec, args.replay)
    elif args.replay:
        best = float("inf")
        rec.depth = 1  # the copies' calls are neither timed nor recorded by the wrapper
        for _ in range(args.replay):
            fresh = {k: copy.deepcopy(first) for k, first in rec.first.items()}
            t = time.thread_time()
            for k, op in fresh.items():
                for inputs, bound in rec.calls[k]:
                    op.process(inputs, bound)
            best = min(best, time.thread_time() - t)
        kinds = ", ".join(f"{rec.first[k].kind} ({len(rec.calls[k])} calls)" for k in rec.first)
        what = "self-join" if args.op is None else args.op
        print(f"{what} replayed alone, best of {args.replay}: {best:.3f} s  [{kinds}]")
        if args.profile:
            import cProfile
            import pstats

            fresh = {k: copy.deepcopy(first) for k, first in rec.first.items()}
            with cProfile.Profile() as prof:
                for k, op in fresh.items():
                    for inputs, bound in rec.calls[k]:
                        op.process(inputs, bound)
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
        for k in rec.first:
            print(
                f"  {rec.ops[k].kind}: {rec.cpu[k]:.3f} s in the run; widths {getattr(rec.ops[k], 'widths', None)}; {rec.ops[k].counters.extra}"
            )


def _per_call(rec: Recorder, n: int) -> None:
    """Each recorded operator's calls replayed alone (best of `n`, thread CPU), and the Python
    function calls of one more replay under cProfile; summed per operator class."""
    import cProfile
    import pstats

    rec.depth = 1  # the copies' calls are neither timed nor recorded by the wrapper
    cpu: dict[str, float] = defaultdict(float)
    pycalls: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    for k, first in rec.first.items():
        best = float("inf")
        for _ in range(n):
            op = copy.deepcopy(first)
            t = time.thread_time()
            for inputs, bound in rec.calls[k]:
                op.process(inputs, bound)
            best = min(best, time.thread_time() - t)
        op = copy.deepcopy(first)
        with cProfile.Profile() as prof:
            for inputs, bound in rec.calls[k]:
                op.process(inputs, bound)
        kind = type(first).__name__
        cpu[kind] += best
        pycalls[kind] += pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
        calls[kind] += len(rec.calls[k])
    print(f"replayed alone, best of {n} (thread CPU), and Python function calls per operator call:")
    for kind in sorted(cpu, key=lambda c: -cpu[c]):
        c = max(calls[kind], 1)
        print(
            f"  {kind:<16} {calls[kind]:5d} calls {cpu[kind] * 1e3:8.2f} ms {cpu[kind] / c * 1e6:8.1f} µs/call {pycalls[kind] / c:7.0f} py calls/call"
        )


if __name__ == "__main__":
    main()
