"""`cqlstream serve --engine-threads N`: the same pushes into servers at each thread count.

Starts `cqlstream serve --engine-threads N` with its default per-query memory and CPU limits
(checked between the levels of the parallel pass; `--no-limits`: `--query-memory-limit 0
--query-cpu-limit 0`) for each N, alternately for `--rounds` rounds,
registers grouped aggregates over two streams and a windowed join between them, pushes the same
Arrow batches into S and T in turn, and prints per run the wall seconds of the pushes (each push
runs the engine before it replies), the server process's CPU seconds (user + system) and the
result elements per query (from /metrics: they must be equal at every count). `--in-process`
runs the same pushes into the engine alone (`Dsms.push_batch`, the server's default limits and
scheduler, no HTTP), so the figures are the engine's: wall and process CPU of the pushes' runs,
and from each operator call's CPU time (its thread's) the passes' total, their span as a DAG
(the longest chain of calls: no thread count runs a pass faster) and their span by levels (the
sum over levels of the longest call: how a pass checking limits goes), which a loaded machine
does not change as it changes the wall.

    python -m bench.server_threads [--rows 400000] [--batch 50000] [--threads 1 2] [--rounds 2] [--no-limits] [--in-process]
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


def columns(pushes: list[tuple[str, bytes]]) -> list[tuple[str, tuple[np.ndarray, ...]]]:
    """The pushes' columns (ts, a, b), decoded once before the in-process runs."""
    import pyarrow as pa

    out = []
    for name, body in pushes:
        tbl = pa.ipc.open_stream(body).read_all()
        out.append((name, tuple(tbl.column(c).to_numpy() for c in ("ts", "a", "b"))))
    return out


def in_process(n: int, cols: list[tuple[str, tuple[np.ndarray, ...]]], last_ts: int, limits: bool = True) -> dict:
    """The pushes into a Dsms as the server builds it (its default limits and scheduler at `n`
    threads), each followed by a run, as a push to the server is."""
    from cqlstream.engine import parallel
    from cqlstream.engine.batch import Batch
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.scheduler import for_threads
    from cqlstream.server.settings import Settings

    st = Settings()
    before = parallel.threads()
    parallel.set_threads(n)
    try:
        d = Dsms(
            scheduler=for_threads(n, st.work_budget),
            query_memory_limit=st.query_memory_limit if limits else None,
            query_cpu_limit=st.query_cpu_limit if limits else None,
        )
        for name in ("S", "T"):
            d.execute(f"register stream {name} (a integer, b integer)")
        hs = [d.register_query(q) for q in QUERIES]
        subs = [d.subscribe(h.id) for h in hs]
        counts = [0] * len(subs)
        spans = Spans()
        cpu0, t0 = time.process_time(), time.perf_counter()
        for name, (ts, a, b) in cols:
            k = len(ts)
            d.push_batch(name, Batch([a, b], [None, None], ts, np.ones(k, np.int8), np.zeros(k, np.uint64)))
            d.run()
            for i, s in enumerate(subs):
                counts[i] += len(s.poll())
        for name in ("S", "T"):
            d.heartbeat(name, last_ts + 1)
        d.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        for i, s in enumerate(subs):
            counts[i] += len(s.poll())
        checks = d.guard.checks
    finally:
        parallel.set_threads(before)
        spans.close()
    return {
        "threads": n,
        "scheduler": d.scheduler.name,
        "wall": wall,
        "cpu": cpu,
        "results": counts,
        "checks": checks,
        "spans": spans.totals,
    }


class Spans:
    """Each parallel pass's calls timed (thread CPU time) while open: `totals` sums over the
    passes the calls' time (`work`), the pass graph's longest chain (`dag`) and the sum of each
    level's longest call (`levels`), with `worker` the time of calls on engine workers."""

    def __init__(self) -> None:
        import threading

        from cqlstream.engine import parallel_pass as PP

        self.PP, self.lock = PP, threading.Lock()
        self.totals = {"passes": 0, "work": 0.0, "dag": 0.0, "levels": 0.0, "worker": 0.0}
        self.calls: dict[int, float] = {}
        self.call, self.run_pass = PP.Pass.call, PP.run_pass
        call, run_pass = self.call, self.run_pass

        def timed_call(p: object, i: int) -> object:
            t = time.thread_time()
            try:
                return call(p, i)
            finally:
                dt = time.thread_time() - t
                with self.lock:
                    self.calls[i] = dt
                    if threading.current_thread().name.startswith("cqlstream-engine"):
                        self.totals["worker"] += dt

        def timed_pass(g: PP.Graph, *a: object) -> object:
            self.calls.clear()
            widest_level: list[int] = []
            try:
                return run_pass(g, *a)
            finally:
                finish = [0.0] * len(g.ops)
                widest: dict[int, float] = {}
                for i in range(len(g.ops)):
                    c = self.calls.get(i, 0.0)
                    finish[i] = max((finish[j] for j in g.deps[i]), default=0.0) + c
                    level = max((k + 1 for k in (widest_level[j] for j in g.deps[i])), default=0)
                    widest_level.append(level)  # the pass graph's depth (older graphs lack it)
                    widest[level] = max(widest.get(level, 0.0), c)
                t = self.totals
                t["passes"] += 1
                t["work"] += sum(self.calls.values())
                t["dag"] += max(finish, default=0.0)
                t["levels"] += sum(widest.values())

        PP.Pass.call, PP.run_pass = timed_call, timed_pass  # type: ignore[method-assign,assignment]

    def close(self) -> None:
        self.PP.Pass.call, self.PP.run_pass = self.call, self.run_pass  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.server_threads", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=400_000, help="rows pushed into each stream (default 400000)")
    p.add_argument("--batch", type=int, default=50_000, help="rows per push (default 50000)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="engine thread counts (default 1 2)")
    p.add_argument("--rounds", type=int, default=2, help="alternated rounds (default 2)")
    p.add_argument("--no-limits", action="store_true", help="servers without query memory and CPU limits")
    p.add_argument("--in-process", action="store_true", help="the engine alone, in this process (no HTTP)")
    a = p.parse_args(argv)
    pushes = bodies(a.rows, a.batch)
    last_ts = (a.rows - 1) // 1000 + 1
    limits = "no query limits" if a.no_limits else "the default query limits"
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rows} rows per stream in pushes of {a.batch}; {limits}")
    runs: dict[int, list[dict]] = {n: [] for n in a.threads}
    cols = columns(pushes) if a.in_process else []
    for r in range(a.rounds):
        for n in a.threads:
            if a.in_process:
                res = in_process(n, cols, last_ts, not a.no_limits)
            else:
                res = one(n, pushes, last_ts, not a.no_limits)
            runs[n].append(res)
            checks = f", limit checks {res['checks']}" if "checks" in res else ""
            if res.get("spans", {}).get("passes"):
                sp = res["spans"]
                checks += (
                    f"; {sp['passes']} passes: calls {sp['work']:.2f} s (on the worker {sp['worker']:.2f}), "
                    f"span as a DAG {sp['dag']:.2f} s, by levels {sp['levels']:.2f} s"
                )
            print(
                f"round {r + 1} threads {n} ({res['scheduler']}): wall {res['wall']:.2f} s, "
                f"cpu {res['cpu']:.2f} s, results {res['results']}{checks}"
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
