"""What `cqlstream run` sets up before its script is checked: thread and block defaults, read-ahead
depths, and the process's malloc settings.

A module of its own, light to import (no numpy, no compiler, no engine): the CLI uses it to start
reading sources (io/early_readers.py) while the engine is still being imported.
"""

from __future__ import annotations

import os

# Rows pushed per round. Measured on the 5M-row benchmarks: 100k keeps peak memory near 0.2-0.3 GB at
# the same CPU time as 1M for filters and aggregates, while joins (work per round grows faster than
# linearly with the round's size) took 20 s at 100k against minutes and 9 GB at 1M.
DEFAULT_BATCH_ROWS = 100_000

# Parsed blocks read ahead per source when reading runs in its own thread: 2 while the engine runs
# (memory: a few blocks), 8 before its first block is taken (~13 MB of text at the default block
# size): a reader started while the script is checked and the engine imported parses most of a
# 1M-row source then, while the other core is idle (Q2/Q4 at 2 threads, bench/README.md, sessions 16
# and 19), and the extra blocks are gone before the run's state grows (Linear Road at 3M: peak RSS
# 284 MB with 8 blocks throughout).
READ_AHEAD = 2
READ_AHEAD_EARLY = 8


def default_threads() -> int:
    """Threads for a run: 2 where the process may use two or more CPUs (reading and writing then
    overlap the engine), else 1. More writer threads pay only with many dests and more cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return 2 if cpus >= 2 else 1


def block_bytes(batch_rows: int, block_size: int | None = None) -> int:
    """Bytes of source text parsed at a time: `block_size` when given, else ~16 bytes per row of a
    round, between 1 and 64 MB. The same at every thread count (rounds follow the blocks)."""
    return block_size or int(min(64 << 20, max(1 << 20, batch_rows * 16)))


_malloc_tuned = False


def tune_malloc() -> None:
    """Keep freed memory in the process (glibc): every round allocates and frees many arrays of
    a few MB, which glibc otherwise maps and unmaps each time — page faults on every first touch
    (measured on Q4 at 5M rows: 89k → 51k minor faults, 0.2-0.3 s of CPU). What is kept is
    reused by the next round. The trim threshold bounds it: at 512 MB, Linear Road at 3M rows
    with reader and writer threads on a loaded machine peaked at 1.3 GB (324 MB untuned, ~300 MB
    live); at 64 MB it peaks at 324 MB with the same CPU (and Q2/Q4's CPU unchanged).
    Called before the first source is read. A no-op where mallopt is not available."""
    global _malloc_tuned
    if _malloc_tuned or os.environ.get("CQLSTREAM_MALLOC_TUNE", "1") == "0":
        return
    _malloc_tuned = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)  # the process's own symbols, libc's among them (no ldconfig run)
        M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -2, -3, -8
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)  # arrays up to 32 MB come from the heap
        libc.mallopt(M_TRIM_THRESHOLD, 64 << 20)  # give memory back only past 64 MB free at the top
        libc.mallopt(M_TOP_PAD, 64 << 20)
        # one heap for the reader and writer threads too: each thread's own arena would keep its
        # freed blocks apart (measured on Q2 at 2 threads: peak RSS 276 → 260 MB, same CPU)
        libc.mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError, TypeError):  # not glibc
        pass


__all__ = ["DEFAULT_BATCH_ROWS", "READ_AHEAD", "READ_AHEAD_EARLY", "block_bytes", "default_threads", "tune_malloc"]
