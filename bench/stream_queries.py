"""The STREAM comparison queries, run the way a user runs them: `cqlstream run` on script files,
whole process (start-up, reading text sources, executing, writing text results).

    python -m bench.stream_queries --rows 1000000 [--only Q1,Q2] [--json report.json]

Inputs come from bench.gen (seeded, 10 tuples per instant, A in 0..999, B in 0..99) and are
cached in bench/out/. Prints wall seconds, input and output tuples/s, and peak RSS per query.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import gen

OUT = Path(__file__).resolve().parent / "out"

QUERIES = {
    # name: (inputs, query); STREAM 0.6 wall times on 5M tuples per stream: Q1 3.3 s, Q2 24.6 s, Q3 21.7 s
    "Q1": (["S"], "select A, B from S where B < 10"),
    "Q2": (["S"], "select B, Sum(A), Count(A) from S [Rows 1000] group by B"),
    "Q3": (["S", "T"], "Istream(select S.A, T.B from S [Rows 1000], T [Rows 1000] where S.A = T.A)"),
    "Q4": (["S"], "select B, Sum(A), Count(A) from S [Range 100] group by B"),
}


def ensure_input(name: str, rows: int) -> Path:
    path = OUT / f"{name}_{rows}.dat"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        gen.generate(rows, str(path), seed=1 if name == "S" else 2)
    return path


def run_query(qname: str, rows: int, cqlstream: str) -> dict:
    streams, query = QUERIES[qname]
    work = OUT / f"{qname}_{rows}"
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in streams:
        lines += [f"table : register stream {s} (A integer, B integer);", f"source : {ensure_input(s, rows)}"]
    lines += [f"query : {query};", "dest : result.txt"]
    script = work / "script.stream"
    script.write_text("\n".join(lines) + "\n")
    began = time.perf_counter()
    proc = subprocess.Popen([cqlstream, "run", str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{qname} failed: {proc.stderr.read().decode()}")
    with open(work / "result.txt", "rb") as f:
        out_lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    n_in = rows * len(streams)
    return {"query": query, "wall_s": round(wall, 2), "input_tuples_per_s": int(n_in / wall),
            "output_lines": out_lines, "output_tuples_per_s": int(out_lines / wall),
            "peak_rss_mb": usage.ru_maxrss // 1024}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stream_queries", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input stream (default 1,000,000)")
    p.add_argument("--only", help="comma-separated query names (Q1..Q4)")
    p.add_argument("--json", help="write the report to this file")
    p.add_argument("--cqlstream", default=str(Path(sys.executable).with_name("cqlstream")),
                   help="the cqlstream executable (default: next to this Python)")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(QUERIES)
    report = {}
    print(f"{'query':5} {'wall s':>7} {'in tuples/s':>12} {'out lines':>11} {'out/s':>11} {'peak RSS MB':>11}")
    for q in names:
        r = report[q] = run_query(q, args.rows, args.cqlstream)
        print(f"{q:5} {r['wall_s']:7.2f} {r['input_tuples_per_s']:12,} {r['output_lines']:11,} "
              f"{r['output_tuples_per_s']:11,} {r['peak_rss_mb']:11,}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": args.rows, "nproc": os.cpu_count(), "results": report},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
