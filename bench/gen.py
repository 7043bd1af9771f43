"""Seeded generator of the benchmark inputs, in STREAM's source format.

`i,i,i` on the first line, then one `ts,A,B` row per tuple: N tuples, 10 per instant
(ts = i div 10 + 1), A uniform in 0..999, B uniform in 0..99, from numpy's default generator
seeded with `seed`, so the same arguments always give the same file.

    python -m bench.gen --rows 5000000 --out /tmp/S.dat [--seed 1]

Writing is vectorized (pyarrow's CSV writer over whole columns, in blocks of a million rows).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

PER_INSTANT = 10
BLOCK = 1_000_000


def _streams(seed: int):
    """One independent generator per column, so values do not depend on the block size."""
    return np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])


def blocks(rows: int, seed: int = 1, block: int = BLOCK):
    """(ts, A, B) int64 numpy arrays, `block` rows at a time."""
    ra, rb = _streams(seed)
    for start in range(0, rows, block):
        n = min(block, rows - start)
        ts = np.arange(start, start + n, dtype=np.int64) // PER_INSTANT + 1
        yield ts, ra.integers(0, 1000, size=n, dtype=np.int64), rb.integers(0, 100, size=n, dtype=np.int64)


def columns(rows: int, seed: int = 1):
    """The whole (ts, A, B) of a generated file as numpy arrays (tests, in-memory benchmarks)."""
    parts = list(blocks(rows, seed, max(rows, 1)))
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z
    return parts[0]


def generate(rows: int, out: str, seed: int = 1) -> int:
    """Write `rows` tuples to `out`; returns the number of bytes written."""
    written = 0
    opts = pacsv.WriteOptions(include_header=False, quoting_style="none")
    with pa.OSFile(out, "wb") as f:
        f.write(b"i,i,i\n")
        written += 6
        for ts, a, b in blocks(rows, seed):
            sink = pa.BufferOutputStream()
            pacsv.write_csv(pa.table({"ts": ts, "A": a, "B": b}), sink, write_options=opts)
            buf = sink.getvalue()
            f.write(buf)
            written += buf.size
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.gen",
        description="Write a seeded STREAM source file of benchmark tuples "
        "(i,i,i header; ts,A,B rows; 10 tuples per instant; "
        "A in 0..999, B in 0..99).",
    )
    p.add_argument("--rows", type=int, required=True, help="number of tuples")
    p.add_argument("--out", required=True, help="file to write")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = p.parse_args(argv)
    if args.rows < 0:
        p.error("--rows must be non-negative")
    began = time.perf_counter()
    try:
        size = generate(args.rows, args.out, args.seed)
    except OSError as e:
        print(f"bench.gen: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(
        f"wrote {args.rows} rows ({size / 1e6:.1f} MB) to {args.out} in {time.perf_counter() - began:.2f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
