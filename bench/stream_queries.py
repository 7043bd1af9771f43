"""The whole-process benchmark suite (Q1-Q7), run the way a user runs queries.

`cqlstream run` on script files, whole process (start-up, reading text sources, executing,
writing text results): the STREAM comparison queries Q1-Q3 and Q4-Q7.

    python -m bench.stream_queries --rows 1000000 [--only Q1,Q2] [--json report.json]

Inputs come from bench.gen (seeded, 10 tuples per instant, A in 0..999, B in 0..99; S, T and U
with seeds 1, 2, 3) and are cached in bench/out/. Prints wall seconds, input and output tuples/s
and peak RSS per query (output tuples = lines written to all of the query's dest files).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import bytecode, gen, run_clocks

OUT = Path(__file__).resolve().parent / "out"


def _q7() -> list[str]:
    """100 queries over one shared window, each with its own dest."""
    return [f"select A, B from S [Range 60] where A = {k}" for k in range(100)]


QUERIES = {
    # name: (inputs, query or list of queries); STREAM 0.6 wall times on 5M tuples per stream: Q1 3.3 s,
    # Q2 24.6 s, Q3 21.7 s
    "Q1": (["S"], "select A, B from S where B < 10"),
    "Q2": (["S"], "select B, Sum(A), Count(A) from S [Rows 1000] group by B"),
    "Q3": (["S", "T"], "Istream(select S.A, T.B from S [Rows 1000], T [Rows 1000] where S.A = T.A)"),
    "Q4": (["S"], "select B, Sum(A), Count(A) from S [Range 100] group by B"),
    # a 3-way windowed join: every new tuple meets ~0.5 x 0.5 partners: ~0.75 output lines per row of one input
    "Q5": (
        ["S", "T", "U"],
        "Istream(select S.A, T.B, U.B from S [Rows 500], T [Rows 500], U [Rows 500] where S.A = T.A and T.A = U.A)",
    ),
    # Istream of a partitioned window: every arriving tuple enters its partition (one line per input row)
    "Q6": (["S"], "Istream(select * from S [Partition By B Rows 5])"),
    # 100 registered queries sharing one window, each selecting one value of A into its own dest
    "Q7": (["S"], _q7()),
}

_SEEDS = {"S": 1, "T": 2, "U": 3}


def ensure_input(name: str, rows: int) -> Path:
    path = OUT / f"{name}_{rows}.dat"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        gen.generate(rows, str(path), seed=_SEEDS[name])
    return path


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def write_script(qname: str, rows: int) -> tuple[Path, list[Path]]:
    """The query's STREAM script (in bench/out/<query>_<rows>/) and its dest files."""
    streams, query = QUERIES[qname]
    queries = [query] if isinstance(query, str) else query
    work = OUT / f"{qname}_{rows}"
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in streams:
        lines += [f"table : register stream {s} (A integer, B integer);", f"source : {ensure_input(s, rows)}"]
    dests = []
    for i, q in enumerate(queries):
        dest = "result.txt" if len(queries) == 1 else f"result_{i:03d}.txt"
        lines += [f"query : {q};", f"dest : {dest}"]
        dests.append(work / dest)
    script = work / "script.stream"
    script.write_text("\n".join(lines) + "\n")
    return script, dests


def run_query(
    qname: str,
    rows: int,
    cqlstream: str,
    threads: int | None = None,
    writer: str | None = None,
    clocks: bool = False,
    flags: list[str] | None = None,
) -> dict:
    """One whole-process run. `clocks`: run through bench.run_clocks (same CLI, same Python) and add
    the main thread's CPU, the other threads' and children's CPU and the main thread's run-queue wait.
    `flags`: more `cqlstream run` options (e.g. --engine-threads 2)."""
    streams, query = QUERIES[qname]
    script, dests = write_script(qname, rows)
    exe = [sys.executable, "-m", "bench.run_clocks"] if clocks else [cqlstream]
    cmd = exe + ["run", str(script)] + ([] if threads is None else ["--threads", str(threads)])
    cmd += [] if writer is None else ["--writer", writer]
    cmd += flags or []
    began = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{qname} failed: {err}")
    out_lines = sum(_count_lines(d) for d in dests)
    n_in = rows * len(streams)
    shown = query if isinstance(query, str) else f"{len(query)} queries: {query[0]}; ...; {query[-1]}"
    return {
        "query": shown,
        "queries": 1 if isinstance(query, str) else len(query),
        "inputs": streams,
        "threads": threads,
        "flags": " ".join(flags or []),
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "input_tuples": n_in,
        "input_tuples_per_s": int(n_in / wall),
        "output_lines": out_lines,
        "output_tuples_per_s": int(out_lines / wall),
        "peak_rss_mb": usage.ru_maxrss // 1024,
        **({"clocks": run_clocks.parse(err)} if clocks else {}),
    }


def default_cqlstream() -> str:
    """The cqlstream executable next to this Python."""
    return str(Path(sys.executable).with_name("cqlstream"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stream_queries", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="tuples per input stream (default 1,000,000)")
    p.add_argument("--only", help="comma-separated query names (Q1..Q7)")
    p.add_argument("--json", help="write the report to this file")
    p.add_argument(
        "--cqlstream", default=default_cqlstream(), help="the cqlstream executable (default: next to this Python)"
    )
    p.add_argument("--threads", help="comma-separated `cqlstream run --threads` counts to compare, e.g. 1,2")
    p.add_argument("--repeat", type=int, default=1, help="runs per query and thread count (default 1)")
    p.add_argument(
        "--run-flags",
        action="append",
        default=[],
        metavar="COUNT=FLAGS",
        help="more `cqlstream run` options for the runs at one --threads count, e.g. '2=--engine-threads 2' "
        "(repeatable)",
    )
    p.add_argument("--writer", choices=["thread", "process"], help="`cqlstream run --writer` (default: its own)")
    p.add_argument(
        "--clocks",
        action="store_true",
        help="also print per-thread clocks (bench/run_clocks.py): the main thread's CPU (the critical "
        "path) and its time blocked (GIL, queues), other threads' CPU (readers, writers, engine workers) and writer "
        "processes', and wall minus the main thread's run-queue wait",
    )
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(QUERIES)
    unknown = [q for q in names if q not in QUERIES]
    if unknown:
        p.error(f"unknown query {', '.join(unknown)} (known: {', '.join(QUERIES)})")
    counts: list[int | None] = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    if any(t is not None and t < 1 for t in counts) or args.repeat < 1:
        p.error("--threads counts and --repeat must be at least 1")
    flags: dict[int | None, list[str]] = {}
    for spec in args.run_flags:
        count, eq, text = spec.partition("=")
        if not eq or not count.strip().isdigit():
            p.error(f"--run-flags wants COUNT=FLAGS, got {spec!r}")
        flags[int(count)] = shlex.split(text)
    bytecode.compile_for(args.cqlstream)  # time the runs as an installed package starts
    report: dict[str, dict] = {}
    print(
        f"{'query':5} {'thr':>3} {'wall s':>7} {'cpu s':>7} {'in tuples/s':>12} {'out lines':>11} {'out/s':>11} "
        f"{'peak RSS MB':>11}"
    )
    for q in names:
        runs = []
        for _ in range(args.repeat):
            for t in counts:  # alternating, so a busy spell on the machine hits every count alike
                r = run_query(q, args.rows, args.cqlstream, t, args.writer, args.clocks, flags.get(t))
                runs.append(r)
                c = r.get("clocks")
                extra = (
                    f"  main {c['main']:.2f} (blocked {c.get('blocked', 0):.2f}) others {c['others']:.2f} "
                    f"(read {c.get('read', 0):.2f} write {c.get('write', 0):.2f} engine {c.get('engine', 0):.2f}) "
                    f"children {c['children']:.2f} wall-runq {c['wall'] - c['runq']:.2f}"
                    if c
                    else ""
                )
                print(
                    f"{q:5} {'-' if t is None else t:>3} {r['wall_s']:7.2f} {r['cpu_s']:7.2f} "
                    f"{r['input_tuples_per_s']:12,} {r['output_lines']:11,} {r['output_tuples_per_s']:11,} "
                    f"{r['peak_rss_mb']:11,}{extra}",
                    flush=True,
                )
        report[q] = {**runs[0], "runs": runs} if len(runs) > 1 else runs[0]
    if len(counts) > 1 or args.repeat > 1:
        _summary(report, counts)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": args.rows, "nproc": os.cpu_count(), "results": report}, indent=2)
        )
    return 0


def pair_speedups(runs: list[dict], counts: list[int | None], t: int | None) -> list[float]:
    """Per round of the alternation (one run at each count, in `counts` order), the first count's
    wall over count `t`'s: a ratio of neighbouring runs, which a slow spell of the machine moves
    far less than the ratio of walls taken minutes apart."""
    n, j = len(counts), counts.index(t)
    rounds = [runs[k : k + n] for k in range(0, len(runs) - n + 1, n)]
    return [r[0]["wall_s"] / r[j]["wall_s"] for r in rounds if r[j]["wall_s"] > 0]


def _summary(report: dict[str, dict], counts: list[int | None]) -> None:
    """Per query and thread count: the range and median of wall and CPU seconds over the runs, the
    ratio of the best walls against the first count, and the median and range of the ratios within
    each round of the alternation."""
    print(
        f"\n{'query':5} {'thr':>3} {'wall s (range)':>15} {'median':>7} {'cpu s (range)':>15} {'best-wall speed-up':>19}"
        f" {'per-round speed-up: median (range)':>35}"
    )
    for q, r in report.items():
        runs = r.get("runs", [r])
        base = min(x["wall_s"] for x in runs if x["threads"] == counts[0])
        for t in counts:
            mine = [x for x in runs if x["threads"] == t]
            walls, cpus = [x["wall_s"] for x in mine], [x["cpu_s"] for x in mine]
            pairs = pair_speedups(runs, counts, t)
            per_round = (
                f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}–{max(pairs):.2f})"
                if pairs and t != counts[0]
                else ""
            )
            print(
                f"{q:5} {'-' if t is None else t:>3} {min(walls):6.2f}–{max(walls):<8.2f} "
                f"{statistics.median(walls):7.2f} {min(cpus):6.2f}–{max(cpus):<8.2f} {base / min(walls):18.2f}x"
                f" {per_round:>35}"
            )


if __name__ == "__main__":
    sys.exit(main())
