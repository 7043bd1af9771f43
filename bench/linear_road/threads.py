"""How the `parallel` scheduler runs a Linear Road run's passes, and what two threads gain.

`python -m bench.linear_road.threads --source-dir DIR [--engine-threads N]` runs `linearroad.cql`
under `--stream-compat --threads 1` in this process with the given engine threads and prints the
wall and thread CPU spent inside the engine's `run` calls (the calling thread's and the engine
workers' apart), and the *DAG bound*: from each operator call's thread CPU, the sum over passes
of the longest chain of calls that must follow each other (producer before consumer), i.e. the
least engine time any number of idle cores could take; with the operators' total CPU it bounds
what two cores can gain. `--query-memory-limit BYTES` gives every query that memory limit, so the
passes check limits after each call, as a graph (as in a server with its default limits; the
queries suspended are listed); `--by-levels` runs them by levels with the check between levels,
as before session 19. The *levels bound* (the sum over passes of each level's longest call) says
what levels cost against the DAG, the *checked-in-plan-order bound* what a graph whose operators
all waited for their producers' checks in plan order would cost. On a machine shared with other work these say more than
the wall.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("linearroad.cql")


def _runq() -> float:
    """Seconds this thread has waited on a run queue (Linux schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--engine-threads", type=int, default=2)
    ap.add_argument("--round-robin", action="store_true", help="the sequential scheduler instead (for its engine time)")
    ap.add_argument(
        "--bare",
        action="store_true",
        help="no per-call clocks (no DAG bound): the engine's time as a user gets it; worker CPU per pass",
    )
    ap.add_argument("--query-memory-limit", type=int, default=None, metavar="BYTES", help="every query's memory limit")
    ap.add_argument(
        "--by-levels",
        action="store_true",
        help="a pass checking limits runs by levels, the check between levels (before session 19), not as a graph",
    )
    args = ap.parse_args(argv)
    if args.query_memory_limit is not None:
        from functools import partial

        from cqlstream.engine.dsms import Dsms as _Dsms
        from cqlstream.io import script_runner as _sr

        _sr.Dsms = partial(_Dsms, query_memory_limit=args.query_memory_limit)  # type: ignore[misc]
    if args.round_robin:
        from cqlstream.engine.scheduler import RoundRobin
        from cqlstream.io import script_runner

        script_runner.for_threads = lambda threads, budget=None: RoundRobin(budget)  # type: ignore[assignment]

    from cqlstream.engine import parallel_pass as PP
    from cqlstream.engine.dsms import Dsms

    if args.by_levels:
        PP.by_levels = True  # type: ignore[attr-defined]
    suspended: list[tuple[int, str]] = []
    suspend = Dsms.suspend

    def suspend_(self: Dsms, query_id: int, reason: str) -> None:
        suspended.append((query_id, reason))
        suspend(self, query_id, reason)

    Dsms.suspend = suspend_  # type: ignore[method-assign]

    lock = threading.Lock()
    by_thread: dict[str, float] = defaultdict(float)
    calls: dict[int, float] = {}
    totals = {"ops": 0.0, "chain": 0.0, "levels": 0.0, "commits": 0.0, "graph": 0.0, "passes": 0}
    call = PP.Pass.call

    def timed_call(self: Any, i: int) -> Any:
        t = time.thread_time()
        try:
            return call(self, i)
        finally:
            dt = time.thread_time() - t
            with lock:
                calls[i] = dt
                by_thread[threading.current_thread().name] += dt

    loop = PP.Pass.loop

    def timed_loop(self: Any, helper: bool = False) -> None:
        t = time.thread_time()
        try:
            loop(self, helper)
        finally:
            if helper:
                with lock:
                    by_thread[threading.current_thread().name] += time.thread_time() - t

    if args.bare:
        PP.Pass.loop = timed_loop  # type: ignore[method-assign]
    else:
        PP.Pass.call = timed_call  # type: ignore[method-assign]
    run_pass = PP.run_pass

    def timed_pass(g: Any, *a: Any) -> Any:
        calls.clear()
        try:
            return run_pass(g, *a)
        finally:
            finish = [0.0] * len(g.ops)
            cmt = [0.0] * len(g.ops)
            for i in range(len(g.ops)):
                finish[i] = max((finish[d] for d in g.deps[i]), default=0.0) + calls.get(i, 0.0)
            totals["ops"] += sum(calls.values())
            totals["chain"] += max(finish, default=0.0)
            totals["passes"] += 1
            widest: dict[int, float] = {}
            for i, d in enumerate(g.depth):
                widest[d] = max(widest.get(d, 0.0), calls.get(i, 0.0))
            totals["levels"] += sum(widest.values())
            # checked in plan order: an operator starts once its producers are checked, and a
            # call is checked once it and every call before it in plan order have ended
            fin = [0.0] * len(g.ops)
            checked = 0.0
            for i in range(len(g.ops)):
                fin[i] = max((cmt[d] for d in g.deps[i]), default=0.0) + calls.get(i, 0.0) if i else calls.get(i, 0.0)
                checked = max(checked, fin[i])
                cmt[i] = checked
            totals["commits"] += max(fin, default=0.0)
            # as this pass runs under limits (session 19): a graph, but an operator whose calls
            # may reserve memory starts once every operator before it has started
            fin2, started = [0.0] * len(g.ops), 0.0
            for i, op in enumerate(g.ops):
                start = max((fin2[d] for d in g.deps[i]), default=0.0)
                if PP.reserving(op):
                    start = max(start, started)
                started = max(started, start)
                fin2[i] = start + calls.get(i, 0.0)
            totals["graph"] += max(fin2, default=0.0)

    if not args.bare:
        PP.run_pass = timed_pass  # type: ignore[assignment]
    engine = [0.0, 0.0, 0.0]  # wall, calling thread CPU, calling thread's run-queue wait inside Dsms.run
    run = Dsms.run

    def timed_run(self: Dsms, *a: Any, **k: Any) -> int:
        t, c, q = time.perf_counter(), time.thread_time(), _runq()
        try:
            return run(self, *a, **k)
        finally:
            engine[0] += time.perf_counter() - t
            engine[1] += time.thread_time() - c
            engine[2] += _runq() - q

    Dsms.run = timed_run  # type: ignore[method-assign]
    from cqlstream.cli import main as cli

    argv_run = ["run", str(SCRIPT), "--source-dir", args.source_dir, "--stream-compat", "--threads", "1"]
    from bench.linear_road.bench import checksum

    with tempfile.TemporaryDirectory() as out:
        t, c = time.perf_counter(), time.process_time()
        cli([*argv_run, "--out-dir", out, "--engine-threads", str(args.engine_threads)])
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        sums = {p.name: checksum(p) for p in sorted(Path(out).iterdir()) if p.is_file()}
    workers = sum(v for k, v in by_thread.items() if k.startswith("cqlstream-engine"))
    # cqlstream run keeps round robin at one engine thread (io/script_runner.py)
    rr = args.round_robin or args.engine_threads == 1
    what = "round robin" if rr else f"parallel, engine threads {args.engine_threads}"
    print(f"{what}: run wall {wall:.2f} s, process CPU {cpu:.2f} s")
    print(
        f"  inside Dsms.run: wall {engine[0]:.3f} s, calling thread CPU {engine[1]:.3f} s, workers CPU {workers:.3f} s; "
        f"the calling thread waited {engine[2]:.3f} s for a core"
    )
    print("  " + ", ".join(f"{k} {n:,} {h}" for k, (n, h) in sums.items()))
    if suspended:
        print(f"  {len(suspended)} queries suspended, in this order:")
        for qid, reason in suspended:
            print(f"    query {qid}: {reason}")
    print(
        f"  operator calls' CPU {totals['ops']:.3f} s over {totals['passes']} passes; "
        f"DAG bound {totals['chain']:.3f} s; two cores at best max(bound, CPU/2) = "
        f"{max(totals['chain'], totals['ops'] / 2):.3f} s; levels bound {totals['levels']:.3f} s; "
        f"checked-in-plan-order bound {totals['commits']:.3f} s; "
        f"graph under limits bound {totals['graph']:.3f} s"
    )


if __name__ == "__main__":
    main()
