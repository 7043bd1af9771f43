"""`cqlstream serve --engine-threads N`: the same pushes into servers at each thread count.

Starts `cqlstream serve --engine-threads N` with its default per-query memory and CPU limits
(checked between the levels of the parallel pass; `--no-limits`: `--query-memory-limit 0
--query-cpu-limit 0`) for each N, alternately for `--rounds` rounds,
registers grouped aggregates over two streams and a windowed join between them, pushes the same
Arrow batches into S and T in turn, and prints per run the wall seconds of the pushes (each push
runs the engine before it replies), the server process's CPU seconds (user + system) and the
result elements per query (from /metrics: they must be equal at every count).

    python -m bench.server_threads [--rows 400000] [--batch 50000] [--threads 1 2] [--rounds 2] [--no-limits]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import time

import httpx
import numpy as np

from bench import server

QUERIES = [
    "select a, count(*), sum(b) from S [Range 50] group by a",
    "select b, count(*), max(a) from T [Range 50] group by b",
    "select S.a, count(*) from S [Range 5], T [Range 5] where S.a = T.a group by S.a",
]


def _arrow(ts: np.ndarray, a: np.ndarray, b: np.ndarray) -> bytes:
    import pyarrow as pa

    tbl = pa.table({"ts": ts, "a": a, "b": b})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue()


def bodies(rows: int, batch: int) -> list[tuple[str, bytes]]:
    """S and T batches in turn, ts advancing 1 per 1000 rows of each stream."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(0, rows, batch):
        n = min(batch, rows - i)
        ts = (np.arange(i, i + n, dtype=np.int64) // 1000) + 1
        for name in ("S", "T"):
            out.append((name, _arrow(ts, rng.integers(0, 5000, n), rng.integers(0, 500, n))))
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(n: int, pushes: list[tuple[str, bytes]], last_ts: int, limits: bool = True) -> dict:
    args = ["--engine-threads", str(n)]
    if not limits:
        args += ["--query-memory-limit", "0", "--query-cpu-limit", "0"]
    with server.serving(*args) as (proc, url), httpx.Client(base_url=url, timeout=600) as c:
        for name in ("S", "T"):
            c.post("/streams", content=f"register stream {name} (a integer, b integer)").raise_for_status()
        qids = [c.post("/queries", json={"cql": q}).raise_for_status().json()["id"] for q in QUERIES]
        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
        for name, body in pushes:
            c.post(
                f"/streams/{name}/tuples", content=body, headers={"content-type": "application/vnd.apache.arrow.stream"}
            ).raise_for_status()
        for name in ("S", "T"):
            c.post(f"/streams/{name}/heartbeat", json={"ts": last_ts + 1}).raise_for_status()
        wall, cpu = time.perf_counter() - t0, cpu_seconds(proc.pid) - cpu0
        metrics = c.get("/metrics").text
        engine = c.get("/entities/engine").json()
    results = [
        int(float(m.group(1)))
        for q in qids
        if (m := re.search(rf'^cqlstream_results_total{{query="{q}"}} (\S+)$', metrics, re.M))
    ]
    if len(results) != len(qids) or not all(results):
        raise SystemExit(f"/metrics gave no result count for every query: {results}")
    return {"threads": n, "scheduler": engine["knobs"]["scheduler"], "wall": wall, "cpu": cpu, "results": results}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.server_threads", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=400_000, help="rows pushed into each stream (default 400000)")
    p.add_argument("--batch", type=int, default=50_000, help="rows per push (default 50000)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="engine thread counts (default 1 2)")
    p.add_argument("--rounds", type=int, default=2, help="alternated rounds (default 2)")
    p.add_argument("--no-limits", action="store_true", help="servers without query memory and CPU limits")
    a = p.parse_args(argv)
    pushes = bodies(a.rows, a.batch)
    last_ts = (a.rows - 1) // 1000 + 1
    limits = "no query limits" if a.no_limits else "the default query limits"
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rows} rows per stream in pushes of {a.batch}; {limits}")
    runs: dict[int, list[dict]] = {n: [] for n in a.threads}
    for r in range(a.rounds):
        for n in a.threads:
            res = one(n, pushes, last_ts, not a.no_limits)
            runs[n].append(res)
            print(
                f"round {r + 1} threads {n} ({res['scheduler']}): wall {res['wall']:.2f} s, "
                f"cpu {res['cpu']:.2f} s, results {res['results']}"
            )
    first = runs[a.threads[0]][0]["results"]
    same = all(x["results"] == first for rs in runs.values() for x in rs)
    print("results equal at every count:", same)
    for n, rs in runs.items():
        print(
            f"threads {n}: median wall {statistics.median(x['wall'] for x in rs):.2f} s, "
            f"median cpu {statistics.median(x['cpu'] for x in rs):.2f} s"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
