"""`cqlstream` with per-thread clocks: the critical path of a run on a busy machine.

    python -m bench.run_clocks run SCRIPT [cqlstream run options]

Runs the CLI in this process and, at exit, prints to stderr one line `clocks: main=… others=…
children=… wall=… runq=… blocked=… read=… write=… engine=…` (seconds): the main thread's CPU time
(the engine's thread: the critical path), the other threads' CPU (reader and writer threads), the
reaped children's CPU (writer processes), the wall time, the main thread's time spent waiting on a
run queue (Linux /proc/self/task/<tid>/schedstat; 0 elsewhere) and its time blocked (wall − CPU −
run-queue wait: waiting for the GIL, a reader's block, room in a writer's queue, an engine
worker's part, or I/O); then the CPU of the other threads by kind: source readers, result
writers and the engine's worker threads. wall − runq is the wall time the run would take with a
core to itself, waits for the GIL, queues and pipes included: on a machine shared with other
jobs, where wall times say little about threads, it and the main thread's CPU do (bench/README.md,
"Writer processes and lazy imports", "session 15, Q2/Q4 threads").
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time

CLOCKS = "clocks:"

# thread name prefix (io/script_runner.py, io/result_writer.py, engine/parallel.py) → kind
KINDS = {"cqlstream-read-": "read", "cqlstream-writer-": "write", "cqlstream-engine": "engine"}
_cpu: dict[str, float] = dict.fromkeys(KINDS.values(), 0.0)
_lock = threading.Lock()


def _runq() -> float:
    try:
        with open(f"/proc/self/task/{os.getpid()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def _count_threads() -> None:
    """Add every thread's CPU, at its end, to its kind's total (threads of the run end before it
    returns: readers are closed, writers joined, the engine's pool shut down or idle)."""
    run = threading.Thread.run

    def counted(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            kind = next((k for p, k in KINDS.items() if self.name.startswith(p)), None)
            if kind is not None:
                with _lock:
                    _cpu[kind] += time.thread_time()

    threading.Thread.run = counted  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    began = time.perf_counter()
    _count_threads()
    from cqlstream.cli import main as cli_main

    rc = cli_main(argv)
    wall = time.perf_counter() - began
    own = time.thread_time()
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    runq = _runq()
    with _lock:
        kinds = " ".join(f"{k}={v:.3f}" for k, v in _cpu.items())
    print(
        f"{CLOCKS} main={own:.3f} others={me.ru_utime + me.ru_stime - own:.3f} "
        f"children={kids.ru_utime + kids.ru_stime:.3f} wall={wall:.3f} runq={runq:.3f} "
        f"blocked={max(0.0, wall - own - runq):.3f} {kinds}",
        file=sys.stderr,
    )
    return rc


def parse(stderr: str) -> dict[str, float]:
    """The clocks line of a run's stderr as {name: seconds}."""
    line = next(x for x in stderr.splitlines() if x.startswith(CLOCKS))
    return {k: float(v) for k, v in (part.split("=") for part in line[len(CLOCKS) :].split())}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
