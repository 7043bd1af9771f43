"""`cqlstream` with per-thread clocks: the critical path of a run on a busy machine.

    python -m bench.run_clocks run SCRIPT [cqlstream run options]

Runs the CLI in this process and, at exit, prints to stderr one line `clocks: main=… others=…
children=… wall=… runq=…` (seconds): the main thread's CPU time (the engine's thread: the
critical path), the other threads' CPU (reader and writer threads), the reaped children's CPU
(writer processes), the wall time, and the main thread's time spent waiting on a run queue
(Linux /proc/self/task/<tid>/schedstat; 0 elsewhere). wall − runq is the wall time the run
would take with a core to itself, waits for the GIL, queues and pipes included: on a machine
shared with other jobs, where wall times say little about threads, it and the main thread's
CPU do (bench/README.md, "Writer processes and lazy imports").
"""

from __future__ import annotations

import os
import resource
import sys
import time

CLOCKS = "clocks:"


def _runq() -> float:
    try:
        with open(f"/proc/self/task/{os.getpid()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def main(argv: list[str]) -> int:
    began = time.perf_counter()
    from cqlstream.cli import main as cli_main

    rc = cli_main(argv)
    wall = time.perf_counter() - began
    own = time.thread_time()
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"{CLOCKS} main={own:.3f} others={me.ru_utime + me.ru_stime - own:.3f} "
        f"children={kids.ru_utime + kids.ru_stime:.3f} wall={wall:.3f} runq={_runq():.3f}",
        file=sys.stderr,
    )
    return rc


def parse(stderr: str) -> dict[str, float]:
    """The clocks line of a run's stderr as {name: seconds}."""
    line = next(x for x in stderr.splitlines() if x.startswith(CLOCKS))
    return {k: float(v) for k, v in (part.split("=") for part in line[len(CLOCKS) :].split())}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
