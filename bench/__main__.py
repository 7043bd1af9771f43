"""`python -m bench [--rows N] [--json F]` (also `cqlstream bench`): the per-operator-family
figures, the whole-process suite Q1–Q7 (STREAM comparison), and the many-queries benchmark;
one JSON report with all of them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


def _run(module: str, *args: str) -> int:
    """Each part in its own process: a child's peak RSS starts from its parent's RSS at fork, so
    the in-process operator runs must not inflate the whole-process suite's figures."""
    return subprocess.run([sys.executable, "-m", module, *args]).returncode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input stream (default 1,000,000)")
    p.add_argument("--json", default="bench/out/report.json", help="the JSON report (default bench/out/report.json)")
    args = p.parse_args(argv)
    parts = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("== operator families (in process)", flush=True)
        rc = _run("bench.operators", "--rows", str(args.rows), "--json", os.path.join(tmp, "operators.json"))
        print("\n== STREAM comparison suite (cqlstream run, whole process)", flush=True)
        rc = rc or _run("bench.stream_queries", "--rows", str(args.rows), "--json", os.path.join(tmp, "suite.json"))
        print("\n== many similar queries on one engine", flush=True)
        rc = rc or _run(
            "bench.sharing", "--rows", str(min(args.rows, 1_000_000)), "--json", os.path.join(tmp, "sharing.json")
        )
        if rc:
            return rc
        for name in ("operators", "suite", "sharing"):
            with open(os.path.join(tmp, f"{name}.json")) as f:
                parts[name] = json.load(f)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"rows": args.rows, "nproc": os.cpu_count(), **parts}, f, indent=2)
    print(f"\nreport: {args.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
