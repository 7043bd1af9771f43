"""The input path's cost on the engine's thread in a Linear Road run (default threads: sources read
and parsed on reader threads): `Reader.take` (queue reads, with the copies that put a taken span
together from several parts), the feed's block hand-over (`_Feed.fill`, and how long the engine's
thread waited in it for a block, the first one after registration on its own), and the thread's
whole CPU.

Run it with the interpreter of the tree to measure (its path, not `-m`, so that another tree's
venv can run the same file): `.venv/bin/python bench/linear_road/input_path.py --source-dir IN` (or `--script` with another script).
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parent / "linearroad.cql"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", help="Linear Road's inputs (the script's own sources when not given)")
    ap.add_argument("--script", default=str(SCRIPT), help="another script (e.g. bench.stream_queries' Q4)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from cqlstream.engine import queues
    from cqlstream.io import script_runner

    main_thread = threading.main_thread()
    acc: dict[str, Any] = {"take": 0.0, "takes": 0, "concat": 0.0, "concats": 0, "fill_cpu": 0.0}
    acc.update(fill_wait=0.0, first_wait=None, registered=None)

    take, concat, fill = queues.Reader.take, queues.concat, script_runner._Feed.fill
    feed_all = script_runner._feed_all
    acc["fills"], acc["feeds"] = 0, 0

    def counted_feed_all(d: Any, feeds: Any, *rest: Any) -> None:
        acc["feeds"] = len(feeds)
        feed_all(d, feeds, *rest)

    def timed_take(self: Any, bound: int) -> Any:
        if threading.current_thread() is not main_thread:
            return take(self, bound)
        t = time.thread_time()
        try:
            return take(self, bound)
        finally:
            acc["take"] += time.thread_time() - t
            acc["takes"] += 1

    def timed_concat(parts: Any, types: Any = None) -> Any:
        t = time.thread_time()
        try:
            return concat(parts, types)
        finally:
            acc["concat"] += time.thread_time() - t
            acc["concats"] += 1

    def timed_fill(self: Any) -> None:
        t, w = time.thread_time(), time.perf_counter()
        try:
            fill(self)
        finally:
            waited = time.perf_counter() - w
            acc["fill_cpu"] += time.thread_time() - t
            acc["fill_wait"] += waited
            acc["fills"] += 1
            if acc["fills"] == acc["feeds"]:  # every source's first block is in
                acc["first_wait"] = time.perf_counter() - acc["registered"]

    def registered() -> None:
        acc["registered"] = time.perf_counter()

    queues.Reader.take = timed_take  # type: ignore[method-assign]
    queues.concat = timed_concat
    script_runner._Feed.fill = timed_fill  # type: ignore[method-assign]
    script_runner._feed_all = counted_feed_all
    gc.disable()  # as `cqlstream run` at start-up (cqlstream/run_process.py)
    with tempfile.TemporaryDirectory() as out:
        t, w = time.thread_time(), time.perf_counter()
        script_runner.run_script(
            args.script,
            out_dir=out,
            compat=Path(args.script) == SCRIPT,
            source_dir=args.source_dir,
            threads=args.threads,
            on_registered=lambda: (registered(), gc.enable()),
        )
        cpu, wall = time.thread_time() - t, time.perf_counter() - w
    print(f"engine's thread: CPU {cpu:.3f} s, wall {wall:.3f} s (load {os.getloadavg()[0]:.2f})")
    print(
        f"Reader.take: {acc['takes']} calls, {acc['take'] * 1e3:.1f} ms; of it concatenations of parts "
        f"{acc['concats']}, {acc['concat'] * 1e3:.1f} ms"
    )
    print(
        f"feed block hand-over: CPU {acc['fill_cpu'] * 1e3:.1f} ms, waited {acc['fill_wait'] * 1e3:.1f} ms; "
        f"registration end to the first round's blocks: {(acc['first_wait'] or 0) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
