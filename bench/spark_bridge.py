"""Q9: the Spark bridge. Spark's `rate-micro-batch` source at a few batch sizes and masters, four
ways: Spark alone into a `noop` sink and into a `foreachBatch` that only calls `toArrow()` (the fair
baseline: the bridge needs the rows in the driver), then through a `SparkSource` into a `Dsms` in
the process and into a `cqlstream serve` on 127.0.0.1 over HTTP (Arrow IPC pushes), each with two
queries and their subscribers (in process: a polling thread; remote: NDJSON result streams).

Per run: rows/s over the measured micro-batches (after a warm-up) and CPU per micro-batch (the
driver, its JVM, the server), the bridge's overhead against Spark alone at the same batch size
((t_bridge − t_spark) / t_spark per batch, target < 25% against toArrow), and the latency from a
micro-batch's trigger start to its results at the subscriber (p50/p95). Every mode runs `--rounds`
times and its best round counts (the machine may be shared). Each master runs in its own process (a session's master cannot change); one server
serves both. Checks: the rows the bridge applied equal the rows Spark produced, and the selection's
subscriber received every selected row (the process exits 1 otherwise).

    python -m bench.spark_bridge [--sizes 10000 100000] [--masters local[1] local[2]]
                                 [--warmup 3] [--batches 8] [--rounds 2] [--json F] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from typing import Any

from bench import server
from bench.server import ROOT
from bench.spark_modes import MODES

TARGET = 0.25  # the bridge's overhead against Spark alone (toArrow), per batch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.spark_bridge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="rows per micro-batch")
    p.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"], help="Spark masters, one process each")
    p.add_argument("--warmup", type=int, default=3, help="micro-batches before measuring (default 3)")
    p.add_argument("--batches", type=int, default=8, help="micro-batches measured (default 8)")
    p.add_argument(
        "--session-warmup", type=int, default=10, help="unmeasured micro-batches per session first (default 10)"
    )
    p.add_argument("--rounds", type=int, default=2, help="runs of every mode and size; the best counts (default 2)")
    p.add_argument("--json", default="bench/out/spark_bridge.json", help="the JSON report")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke size: local[1], 1,000 rows, 1 + 2 batches, 1 round, no session warm-up",
    )
    p.add_argument("--url", help="use a running server instead of starting one")
    p.add_argument("--child", metavar="MASTER", help=argparse.SUPPRESS)  # one master's runs (internal)
    p.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)  # whose CPU time counts too
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.masters, args.warmup, args.batches, args.rounds = [1000], ["local[1]"], 1, 2, 1
        args.session_warmup = 0
    if args.child:
        return _child(args)

    proc = None
    url = args.url
    if url is None:
        proc, url = server.start()
    results: list[dict[str, Any]] = []
    try:
        print(
            f"Q9 Spark bridge: rate-micro-batch, {args.batches} micro-batches measured after {args.warmup}, "
            f"best of {args.rounds} round(s), "
            f"sizes {', '.join(f'{n:,}' for n in args.sizes)}, masters {', '.join(args.masters)}; server {url}",
            flush=True,
        )
        print("modes: " + "; ".join(f"{name}: {label}" for name, (label, _) in MODES.items()), flush=True)
        for master in args.masters:
            results += _run_child(args, master, url, proc.pid if proc is not None else None)
    finally:
        if proc is not None:
            server.stop(proc)
    add_overheads(results)
    print()
    print(table(results))
    ok = all(r["check"]["ok"] for r in results if "check" in r)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "pyspark": _pyspark_version(),
        "sizes": args.sizes,
        "masters": args.masters,
        "warmup": args.warmup,
        "batches": args.batches,
        "rounds": args.rounds,
        "target_overhead": TARGET,
        "checks_ok": ok,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"\nreport: {args.json}")
    return 0 if ok else 1


def _run_child(args: argparse.Namespace, master: str, url: str, server_pid: int | None) -> list[dict[str, Any]]:
    """One master's runs in a child process (Spark's log goes to a file, shown if the child fails)."""
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        out, log = os.path.join(tmp, "runs.json"), os.path.join(tmp, "spark.log")
        cmd = [sys.executable, "-m", "bench.spark_bridge", "--child", master, "--url", url, "--json", out]
        cmd += ["--warmup", str(args.warmup), "--batches", str(args.batches), "--rounds", str(args.rounds)]
        cmd += ["--session-warmup", str(args.session_warmup)]
        cmd += ["--sizes", *map(str, args.sizes), *(["--server-pid", str(server_pid)] if server_pid else [])]
        with open(log, "w") as err:
            rc = subprocess.run(cmd, cwd=ROOT, stderr=err, timeout=1200).returncode
        if rc or not os.path.exists(out):
            with open(log) as f:
                tail = f.read()[-4000:]
            raise SystemExit(f"the {master} runs failed (exit {rc}):\n{tail}")
        with open(out) as f:
            return list(json.load(f))


def _child(args: argparse.Namespace) -> int:
    from bench.spark_modes import run_all

    results = run_all(
        args.child,
        args.sizes,
        args.warmup,
        args.batches,
        args.rounds,
        args.url,
        args.server_pid,
        args.session_warmup,
        say=lambda s: print(s, flush=True),
    )
    with open(args.json, "w") as f:
        json.dump(results, f)
    return 0


def add_overheads(results: list[dict[str, Any]]) -> None:
    """Per bridge run: (time per batch − Spark alone's) / Spark alone's, against noop and toArrow;
    the same of CPU time per batch."""
    runs = {(r["master"], r["rows_per_batch"], r["mode"]): r for r in results}
    for r in results:
        for base in ("noop", "arrow"):
            spark = runs.get((r["master"], r["rows_per_batch"], base))
            if r["mode"] in ("noop", "arrow") or spark is None:
                continue
            r[f"overhead_vs_{base}"] = spark["rows_per_s"] / r["rows_per_s"] - 1
            if r["cpu_ms"] and spark["cpu_ms"]:
                r[f"cpu_overhead_vs_{base}"] = r["cpu_ms"] / spark["cpu_ms"] - 1


def table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table (the README's layout)."""

    def pct(v: float | None) -> str:
        return "" if v is None else f"{v:+.0%}"

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:,.0f}"

    lines = [
        "| master | rows/batch | mode | rows/s (best) | rounds | ms/batch | vs toArrow | vs noop "
        "| CPU ms/batch | CPU vs toArrow | latency p50 / p95 ms | check |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lat = f"{ms(r.get('latency_ms_p50'))} / {ms(r.get('latency_ms_p95'))}" if "check" in r else ""
        check = ("ok" if r["check"]["ok"] else "FAILED") if "check" in r else ""
        spread = "–".join(f"{v / 1e3:,.0f}k" for v in sorted(r["rounds_rows_per_s"]))
        lines.append(
            f"| {r['master']} | {r['rows_per_batch']:,} | {r['mode']} | {r['rows_per_s']:,.0f} | {spread} "
            f"| {r['batch_ms']:,.0f} | {pct(r.get('overhead_vs_arrow'))} | {pct(r.get('overhead_vs_noop'))} "
            f"| {ms(r.get('cpu_ms'))} | {pct(r.get('cpu_overhead_vs_arrow'))} | {lat} | {check} |"
        )
    return "\n".join(lines)


def _pyspark_version() -> str:
    from importlib.metadata import version

    return version("pyspark")


if __name__ == "__main__":
    sys.exit(main())
