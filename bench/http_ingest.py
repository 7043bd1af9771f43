"""Q8: sustained HTTP ingest over loopback while subscribers stream results.

Starts `cqlstream serve` on a free 127.0.0.1 port (or uses --url), registers
`S (A integer, B float, C integer)` and the query `select * from S where B < 0.1` (10% of the
input), opens N subscribers (default 10, in a separate process so that their reading does not
compete with the pushing client) that stream the results as NDJSON, then pushes pre-encoded
batches as NDJSON and as Arrow IPC and prints the sustained ingest rate (tuples/s, from the first
push to the last reply) and how long the subscribers took to receive every result.

    python -m bench.http_ingest [--tuples 2000000] [--batch 50000] [--subscribers 10]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench import server
from cqlstream.io.formats import INGEST_FORMATS

ROOT = Path(__file__).resolve().parent.parent
QUERY = "select * from S where B < 0.1"
TARGET = 500_000


def _batches(n_total: int, batch: int, start_ts: int, seed: int):
    """(A, B, C, ts) column batches; ts advances 1 per 1000 tuples."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(0, n_total, batch):
        n = min(batch, n_total - i)
        idx = np.arange(i, i + n, dtype=np.int64)
        out.append((idx, np.round(rng.random(n), 6), rng.integers(0, 1000, n), start_ts + idx // 1000))
    return out


def _ndjson(cols) -> bytes:
    import pyarrow as pa
    import pyarrow.compute as pc

    a, b, c, ts = cols
    s = lambda x: pc.cast(pa.array(x), pa.string())  # noqa: E731
    lines = pc.binary_join_element_wise('{"ts":', s(ts), ',"A":', s(a), ',"B":', s(b), ',"C":', s(c), "}\n", "")
    end = int(np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1)[-1])
    return lines.buffers()[2].to_pybytes()[:end]


def _arrow(cols) -> bytes:
    import pyarrow as pa

    a, b, c, ts = cols
    tbl = pa.table({"ts": ts, "A": a, "B": b, "C": c})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue()


def _subscriber_proc(url: str, qid: int, n: int, until: int, ready, results) -> None:
    import httpx

    counts = [0] * n
    done = [None] * n
    opened = threading.Barrier(n + 1)

    def one(k):
        with httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=600)) as c:
            with c.stream("GET", f"/queries/{qid}/results", params={"format": "ndjson", "until": until}) as r:
                opened.wait()
                for chunk in r.iter_bytes(1 << 20):
                    counts[k] += chunk.count(b"\n")
        done[k] = time.time()

    ths = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(n)]
    for t in ths:
        t.start()
    opened.wait()
    ready.set()
    for t in ths:
        t.join()
    results.put((counts, done))


def run_phase(url: str, fmt: str, n_total: int, batch: int, subscribers: int, start_ts: int) -> dict:
    import httpx

    c = httpx.Client(base_url=url, timeout=120)
    name = f"S_{fmt}"
    c.post(
        "/streams",
        content=f"register stream {name} (A integer, B float, C integer)",
        headers={"content-type": "text/plain"},
    ).raise_for_status()
    q = c.post("/queries", json={"cql": QUERY.replace(" S ", f" {name} ")})
    q.raise_for_status()
    qid = q.json()["id"]
    cols = _batches(n_total, batch, start_ts, seed=42)
    encode = {"ndjson": _ndjson, "arrow": _arrow}[fmt]  # this bench's fast body builders
    bodies = [encode(b) for b in cols]
    expected = int(sum(int((b[1] < 0.1).sum()) for b in cols))
    last_ts = int(cols[-1][3][-1])
    ctype = INGEST_FORMATS[fmt].media_type

    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    sp = ctx.Process(target=_subscriber_proc, args=(url, qid, subscribers, last_ts, ready, results), daemon=True)
    sp.start()
    if not ready.wait(60):
        raise SystemExit("subscribers did not connect")
    t0 = time.time()
    for body in bodies:
        r = c.post(f"/streams/{name}/tuples", content=body, headers={"content-type": ctype})
        if r.status_code != 200:
            raise SystemExit(f"push failed: {r.status_code} {r.text[:300]}")
    t1 = time.time()
    c.post(f"/streams/{name}/heartbeat", json={"ts": last_ts + 1}).raise_for_status()
    counts, done = results.get(timeout=600)
    sp.join(10)
    t2 = max(done)
    metrics = c.get("/metrics").text
    lagged = next(
        (
            line.split()[-1]
            for line in metrics.splitlines()
            if line.startswith("cqlstream_subscriber_lag_disconnects_total")
        ),
        "?",
    )
    c.delete(f"/queries/{qid}")
    c.close()
    return {
        "format": fmt,
        "tuples": n_total,
        "batch": batch,
        "bytes": sum(map(len, bodies)),
        "ingest_s": t1 - t0,
        "tuples_per_s": n_total / (t1 - t0),
        "all_results_s": t2 - t0,
        "results_per_subscriber": expected,
        "received": counts,
        "lag_disconnects": lagged,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.http_ingest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tuples", type=int, default=2_000_000, help="tuples pushed per format (default 2,000,000)")
    p.add_argument("--batch", type=int, default=50_000, help="tuples per push (default 50,000)")
    p.add_argument("--subscribers", type=int, default=10, help="result subscribers (default 10)")
    p.add_argument("--format", choices=["ndjson", "arrow", "both"], default="both")
    p.add_argument("--url", help="use a running server instead of starting one")
    args = p.parse_args(argv)
    proc = None
    url = args.url
    if url is None:
        proc, url = server.start()
    ok, met = True, True
    try:
        fmts = ["ndjson", "arrow"] if args.format == "both" else [args.format]
        print(
            f"Q8 HTTP ingest over loopback: {args.tuples:,} tuples per format in pushes of {args.batch:,}, "
            f"{args.subscribers} subscribers streaming '{QUERY}' (NDJSON)"
        )
        for i, fmt in enumerate(fmts):
            r = run_phase(url, fmt, args.tuples, args.batch, args.subscribers, start_ts=1 + i * 10**9)
            got_all = all(n == r["results_per_subscriber"] for n in r["received"])
            ok &= got_all
            met &= r["tuples_per_s"] >= TARGET
            print(
                f"  {fmt:6s}: {r['tuples_per_s']:>12,.0f} tuples/s ingest ({r['bytes'] / r['ingest_s'] / 1e6:.0f} "
                f"MB/s, {r['ingest_s']:.2f} s); every subscriber got all {r['results_per_subscriber']:,} results "
                f"{'yes' if got_all else 'NO ' + str(r['received'])} after {r['all_results_s']:.2f} s; "
                f"lag disconnects {r['lag_disconnects']}"
            )
        print(f"  target >= {TARGET:,} tuples/s: {'met' if met else 'NOT met'}")
    finally:
        if proc is not None:
            server.stop(proc)
    return 0 if ok else 1  # 1: some subscriber missed results


if __name__ == "__main__":
    sys.exit(main())
