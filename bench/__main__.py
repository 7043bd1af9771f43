"""`python -m bench [--rows N]`: the per-operator-family figures, then the STREAM comparison queries."""
from __future__ import annotations

import argparse
import sys

from bench import operators, stream_queries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input stream (default 1,000,000)")
    args = p.parse_args(argv)
    print("== operator families (in process)")
    operators.main(["--rows", str(args.rows)])
    print("\n== STREAM comparison queries (cqlstream run, whole process)")
    return stream_queries.main(["--rows", str(args.rows)])


if __name__ == "__main__":
    sys.exit(main())
