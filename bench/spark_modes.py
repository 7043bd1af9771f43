"""The measured runs of the Spark bridge benchmark, in one process with one Spark session (a
session's master cannot change): Spark's `rate-micro-batch` source into a `noop` sink and into a
`foreachBatch` that only calls `toArrow()` (Spark alone), and through a `SparkSource` into a `Dsms`
in this process or into a `cqlstream serve` over HTTP.

Every run is one streaming query: `warmup` micro-batches, then `batches` measured ones. Throughput
comes from Spark's own progress reports (trigger start and duration of each micro-batch), the same
way for every mode. The rate source stamps every row of micro-batch k with one timestamp
(start + k × advance), so the event time here spreads a batch's rows over its `advance` ms
(`ev = unix_millis(timestamp) + (value mod rows) × advance div rows`): with Spark's watermark rule
(complete below the largest event time) a batch's last millisecond waits for the next batch, and
with one instant per batch every result would. Latency of a result row = the wall clock when the
subscriber received it − the wall clock when Spark started the micro-batch that generated its row
(the rate source's event times are synthetic: they map to batches, batches to trigger starts).
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from cqlstream.engine.dsms import Dsms
from cqlstream.spark_bridge import HttpSink, SparkSource, SparkSourceConfig

AGGREGATE = "select count(*), sum(value) from {R} [Range 1000]"
SELECTION = "Istream(select value from {R} [Now] where value % {every} = 0)"
WAIT = 180.0  # seconds any one run may take before it is given up as stuck
POLL = 0.002  # seconds between two polls of the in-process subscriber
TS_FIELD = re.compile(rb'"ts":(-?\d+)')
_RUNS = itertools.count()


@dataclass(frozen=True)
class Plan:
    """One run's shape: rows per micro-batch, Spark partitions, batches before and during measuring,
    and how far event time advances per batch (ms)."""

    rows: int
    partitions: int
    warmup: int
    batches: int
    advance_ms: int = 1000

    @property
    def every(self) -> int:
        """The selection keeps every `every`-th value: about 100 results per batch, at event times
        spread over the batch (the last one ~advance/100 ms before the batch's end, so final once the
        batch is applied)."""
        return max(self.rows // 100, 1)

    @property
    def last(self) -> int:
        """The id of the last measured micro-batch."""
        return self.warmup + self.batches - 1


@dataclass(frozen=True)
class Trigger:
    """One micro-batch as Spark's progress report gives it."""

    batch_id: int
    start: float  # wall clock (epoch s) of the trigger's start
    seconds: float  # the trigger's duration
    rows: int
    add_batch_ms: int  # of which the sink (foreachBatch: toArrow, the bridge) took this


class Cpu:
    """CPU seconds (user + sys) of the processes doing the work: this one (the Spark driver's Python
    side, the bridge, the subscribers), its JVM, and the server when there is one. Linux (/proc)."""

    def __init__(self, pids: list[int], complete: bool = True) -> None:
        self.pids = pids
        self.complete = complete  # False: the JVM was not found (CPU figures are then left out)
        self.tick = os.sysconf("SC_CLK_TCK")

    @classmethod
    def of(cls, server_pid: int | None) -> Cpu:
        """This process, its Java child (the Spark JVM) and the server."""
        jvm = [c for c in _children(os.getpid()) if _comm(c) == "java"]
        return cls([os.getpid(), *jvm, *([server_pid] if server_pid else [])], complete=len(jvm) == 1)

    def seconds(self) -> float:
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / self.tick


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def rate_frame(spark: SparkSession, plan: Plan, start_ms: int) -> DataFrame:
    """The rate-micro-batch source with event time spread over each batch (`ev`, ms) and `value`."""
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", plan.rows)
        .option("numPartitions", plan.partitions)
        .option("advanceMillisPerBatch", plan.advance_ms)
        .option("startTimestamp", start_ms)
        .load()
    )
    r, a = plan.rows, plan.advance_ms
    return df.selectExpr(f"unix_millis(timestamp) + ((value % {r}) * {a}) div {r} AS ev", "value")


class Progress(StreamingQueryListener):
    """Spark's progress reports of the session's streaming queries as they happen, each with the CPU
    meter's reading when it arrived (a listener: asking the JVM for `lastProgress` in a loop costs
    ~4 ms of CPU per call, which would blur the CPU figures)."""

    def __init__(self, cpu: Cpu) -> None:
        self.cpu = cpu
        self.cond = threading.Condition()
        self.seen: dict[str, dict[int, tuple[Trigger, float]]] = {}  # query id -> batch id -> (trigger, CPU s)
        self.ended: dict[str, str | None] = {}  # query id -> its exception

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        cpu = self.cpu.seconds()
        p = event.progress
        d = p.durationMs
        start = datetime.fromisoformat(p.timestamp).timestamp()
        t = Trigger(p.batchId, start, d.get("triggerExecution", 0) / 1e3, p.numInputRows, d.get("addBatch", 0))
        with self.cond:
            self.seen.setdefault(str(p.id), {})[p.batchId] = (t, cpu)
            self.cond.notify_all()

    def onQueryTerminated(self, event: Any) -> None:
        with self.cond:
            self.ended[str(event.id)] = event.exception
            self.cond.notify_all()

    def wait(self, query: StreamingQuery, plan: Plan, timeout: float = WAIT) -> tuple[dict[int, Trigger], float | None]:
        """Until the last measured micro-batch is done (a failed query raises): its triggers so far
        and the CPU seconds per batch between the reports of the last warm-up batch and the last one."""
        qid = str(query.id)

        def done() -> bool:
            return max(self.seen.get(qid, {}), default=-1) >= plan.last or qid in self.ended

        with self.cond:
            if not self.cond.wait_for(done, timeout):
                raise TimeoutError(f"micro-batch {plan.last} not done within {timeout:g} s")
            if max(self.seen.get(qid, {}), default=-1) < plan.last:
                raise RuntimeError(f"the streaming query ended early: {self.ended[qid]}")
            seen = dict(self.seen[qid])
        trig = {i: t for i, (t, _) in seen.items()}
        if not self.cpu.complete or plan.warmup - 1 not in seen or plan.last not in seen:
            return trig, None
        return trig, (seen[plan.last][1] - seen[plan.warmup - 1][1]) / plan.batches


@dataclass(frozen=True)
class Where:
    """What a run uses: the session, a scratch folder (checkpoints), the server, the progress reports."""

    spark: SparkSession
    tmp: str
    url: str
    progress: Progress


def throughput(trig: dict[int, Trigger], plan: Plan) -> dict[str, Any]:
    """Rows/s over the measured batches: their rows / (start of the first → end of the last)."""
    ids = range(plan.warmup, plan.last + 1)
    missing = [i for i in ids if i not in trig]
    if missing:
        raise RuntimeError(f"no progress report for micro-batches {missing}")
    ts = [trig[i] for i in ids]
    elapsed = ts[-1].start + ts[-1].seconds - ts[0].start
    per = np.array([t.seconds for t in ts]) * 1e3
    return {
        "rows_per_s": sum(t.rows for t in ts) / elapsed,
        "batch_ms": elapsed / len(ts) * 1e3,
        "batch_ms_min": float(per.min()),
        "batch_ms_max": float(per.max()),
        "add_batch_ms": float(np.mean([t.add_batch_ms for t in ts])),
    }


# ---------------------------------------------------------------- Spark alone


def spark_noop(at: Where, plan: Plan) -> dict[str, Any]:
    df = rate_frame(at.spark, plan, int(time.time() * 1000))
    q = df.writeStream.format("noop").option("checkpointLocation", f"{at.tmp}/noop").start()
    return _spark_alone(at, q, plan)


def spark_to_arrow(at: Where, plan: Plan) -> dict[str, Any]:
    took: dict[int, float] = {}  # batch id -> seconds toArrow() took

    def to_arrow(batch_df: DataFrame, batch_id: int) -> None:
        t = time.perf_counter()
        batch_df.toArrow()
        took[batch_id] = time.perf_counter() - t

    df = rate_frame(at.spark, plan, int(time.time() * 1000))
    q = df.writeStream.foreachBatch(to_arrow).option("checkpointLocation", f"{at.tmp}/arrow").start()
    out = _spark_alone(at, q, plan)
    out["to_arrow_ms"] = float(np.mean([took[i] for i in range(plan.warmup, plan.last + 1)])) * 1e3
    return out


def _spark_alone(at: Where, q: StreamingQuery, plan: Plan) -> dict[str, Any]:
    try:
        trig, cpu = at.progress.wait(q, plan)
    finally:
        q.stop()
    return {**throughput(trig, plan), "cpu_ms": None if cpu is None else cpu * 1e3}


# ---------------------------------------------------------------- through the bridge


class Received:
    """What a subscriber got: arrays of result event times (ms) with the wall clock they arrived at,
    and a count of the other query's result rows."""

    def __init__(self) -> None:
        self.ts: list[np.ndarray] = []
        self.at: list[float] = []
        self.other_rows = 0
        self.guard = threading.Lock()

    def add(self, ts: np.ndarray, at: float) -> None:
        if len(ts):
            with self.guard:
                self.ts.append(ts)
                self.at.append(at)

    def count_other(self, n: int) -> None:
        self.other_rows += n  # one thread per query counts

    def through(self, bound: int) -> int:
        """Selected rows received so far with event time ≤ `bound`."""
        with self.guard:
            return int(sum(int((t <= bound).sum()) for t in self.ts))

    def latencies(self, plan: Plan, start_ms: int, trig: dict[int, Trigger]) -> np.ndarray:
        """Seconds from the trigger start of each measured row's batch to its arrival."""
        with self.guard:
            pairs = list(zip(self.ts, self.at))
        starts = np.array([trig[i].start if i in trig else np.nan for i in range(plan.last + 1)])
        out = []
        for ts, at in pairs:
            k = (ts - start_ms) // plan.advance_ms
            k = k[(k >= plan.warmup) & (k <= plan.last)]
            out.append(at - starts[k])
        return np.concatenate(out) if out else np.empty(0)


def bridge_engine(at: Where, plan: Plan) -> dict[str, Any]:
    """SparkSource into a Dsms here, a thread polling both queries' subscriptions."""
    d = Dsms()
    d.execute("register stream R (value integer) with (unit = millisecond)")
    sel = d.subscribe(d.register_query(SELECTION.format(R="R", every=plan.every)).id)
    agg = d.subscribe(d.register_query(AGGREGATE.format(R="R")).id)
    lock = threading.RLock()
    got = Received()
    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            with lock:
                a, b = sel.poll(), agg.poll()
            now = time.time()
            got.add(np.array(a.ts, np.int64), now)
            got.count_other(len(b))
            time.sleep(POLL)

    th = threading.Thread(target=poller, name="bench-poller", daemon=True)
    th.start()
    try:
        return _through_bridge(at, plan, d, "R", got, lock=lock)
    finally:
        stop.set()
        th.join(10)


def bridge_http(at: Where, plan: Plan) -> dict[str, Any]:
    """SparkSource into a server over HTTP; two threads stream the queries' results as NDJSON."""
    name = f"R_{plan.partitions}_{plan.rows}_{next(_RUNS)}"  # a new stream per run on the shared server
    url = at.url
    c = httpx.Client(base_url=url, timeout=60)
    ddl = f"register stream {name} (value integer) with (unit = millisecond)"
    c.post("/streams", content=ddl, headers={"content-type": "text/plain"}).raise_for_status()
    qids = []
    for cql in (SELECTION.format(R=name, every=plan.every), AGGREGATE.format(R=name)):
        r = c.post("/queries", json={"cql": cql})
        r.raise_for_status()
        qids.append(r.json()["id"])
    got = Received()
    readers: list[_NdjsonReader] = []
    sink = HttpSink(url)
    try:
        readers.append(_NdjsonReader(url, qids[0], got.add))
        readers.append(_NdjsonReader(url, qids[1], lambda ts, _: got.count_other(len(ts))))
        return _through_bridge(at, plan, sink, name, got)
    finally:
        sink.close()
        for qid in qids:  # ends both result streams (an `end` message)
            c.delete(f"/queries/{qid}")
        for reader in readers:
            reader.join(10)
        c.close()


class _NdjsonReader(threading.Thread):
    """Streams one query's results; hands each chunk's event times and arrival time to `on_rows`."""

    def __init__(self, url: str, qid: int, on_rows: Callable[[np.ndarray, float], None]) -> None:
        super().__init__(name=f"bench-results-{qid}", daemon=True)
        self.url, self.qid, self.on_rows = url, qid, on_rows
        self.opened = threading.Event()
        self.error: BaseException | None = None
        self.start()
        if not self.opened.wait(30):
            raise TimeoutError(f"the results of query {qid} did not open: {self.error}")

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=httpx.Timeout(10, read=None)) as c:
                with c.stream("GET", f"/queries/{self.qid}/results", params={"format": "ndjson"}) as r:
                    r.raise_for_status()
                    self.opened.set()
                    rest = b""
                    for chunk in r.iter_bytes():
                        at = time.time()
                        data = rest + chunk
                        cut = data.rfind(b"\n") + 1
                        rest = data[cut:]
                        found = TS_FIELD.findall(data, 0, cut)
                        if found:
                            self.on_rows(np.array(found, dtype=np.int64), at)
        except BaseException as e:  # reported through opened/error; the run's check then fails
            self.error = e
            self.opened.set()


class _TimedSource(SparkSource):
    """A SparkSource that records, per micro-batch, how long `toArrow()` took (from the callback's
    start to `apply`) and how long `apply` took (prepare, the sink: the engine or the HTTP push)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.took: dict[int, tuple[float, float]] = {}

    def apply(self, batch_id: int, table: pa.Table, started: float | None = None, run_id: str | None = None) -> None:
        t = time.perf_counter()
        super().apply(batch_id, table, started, run_id)
        self.took[batch_id] = (t - (started or t), time.perf_counter() - t)


def _through_bridge(
    at: Where,
    plan: Plan,
    into: Dsms | HttpSink,
    stream: str,
    got: Received,
    lock: threading.RLock | None = None,
) -> dict[str, Any]:
    start_ms = int(time.time() * 1000)
    df = rate_frame(at.spark, plan, start_ms)
    applied: dict[int, int] = {}  # batch id -> rows Spark delivered

    def on_applied(batch_id: int, table: pa.Table) -> None:
        applied[batch_id] = table.num_rows

    cfg = SparkSourceConfig(stream=stream, time_column="ev", checkpoint=f"{at.tmp}/bridge")
    src = _TimedSource(into, df, cfg, lock=lock, on_applied=on_applied)
    q = src.start()
    try:
        trig, cpu = at.progress.wait(q, plan)
    finally:
        src.stop()
    out = throughput(trig, plan)
    # every selected row of batches 0..last (event times ≤ the last measured one) must arrive
    spark_rows = sum(trig[i].rows for i in range(plan.last + 1) if i in trig)
    expected = -(-spark_rows // plan.every)  # values 0..spark_rows-1 that are multiples of `every`
    bound = start_ms + plan.last * plan.advance_ms + plan.advance_ms - 1
    deadline = time.monotonic() + 30
    while got.through(bound) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    lat = got.latencies(plan, start_ms, trig) * 1e3
    took = np.array([src.took[i] for i in range(plan.warmup, plan.last + 1) if i in src.took]).reshape(-1, 2)
    out.update(
        {
            "cpu_ms": None if cpu is None else cpu * 1e3,
            "to_arrow_ms": float(took[:, 0].mean()) * 1e3 if len(took) else None,
            "apply_ms": float(took[:, 1].mean()) * 1e3 if len(took) else None,
            "latency_ms": lat,  # every measured result row's (rounds are pooled: combine())
            "check": {
                "spark_rows": spark_rows,
                "bridge_rows": sum(applied[i] for i in range(plan.last + 1) if i in applied),
                "selected_expected": expected,
                "selected_received": got.through(bound),
                "aggregate_rows_received": got.other_rows,
            },
        }
    )
    c = out["check"]
    c["ok"] = c["spark_rows"] == c["bridge_rows"] and c["selected_expected"] == c["selected_received"]
    return out


Mode = Callable[[Where, Plan], dict[str, Any]]
# name -> (what it measures, the run)
MODES: dict[str, tuple[str, Mode]] = {
    "noop": ("Spark alone: noop sink", spark_noop),
    "arrow": ("Spark alone: foreachBatch toArrow()", spark_to_arrow),
    "engine": ("bridge into a Dsms in this process", bridge_engine),
    "http": ("bridge over HTTP to cqlstream serve", bridge_http),
}


def run_all(
    master: str,
    sizes: list[int],
    warmup: int,
    batches: int,
    rounds: int,
    url: str,
    server_pid: int | None = None,
    session_warmup: int = 10,
    say: Callable[[str], object] = print,
) -> list[dict[str, Any]]:
    """Every mode at every batch size, `rounds` times (every other round in reverse order, so that no
    mode always runs first), in one Spark session of `master`, after `session_warmup` unmeasured
    micro-batches that warm the JVM up (the first micro-batches of a session take seconds)."""
    from cqlstream.spark_bridge import SparkRuntime

    cores = int(master[master.index("[") + 1 : -1]) if "[" in master else 1
    t = time.perf_counter()
    spark = SparkRuntime(master, "cqlstream-bench", conf={"spark.sql.shuffle.partitions": str(cores)}).session()
    say(f"{master}: Spark session in {time.perf_counter() - t:.1f} s")
    progress = Progress(Cpu.of(server_pid))
    spark.streams.addListener(progress)
    results = []
    try:
        if session_warmup:
            t = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
                spark_to_arrow(Where(spark, tmp, url, progress), Plan(max(sizes), cores, 0, session_warmup))
            say(f"{master}: warm-up ({session_warmup} micro-batches of toArrow) {time.perf_counter() - t:.1f} s")
        for rows in sizes:
            plan = Plan(rows, cores, warmup, batches)
            runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for k in range(rounds):
                for mode in list(MODES)[:: 1 if k % 2 == 0 else -1]:
                    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
                        r = MODES[mode][1](Where(spark, tmp, url, progress), plan)
                    runs[mode].append(r)
                    say(_line(master, rows, mode, r))
            results += [combine(master, rows, mode, rs) for mode, rs in runs.items()]
    finally:
        spark.stop()
    return results


def combine(master: str, rows: int, mode: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds: the best round's throughput (the machine is shared: the others lost time to
    other work), every round's rows/s, the latency percentiles of all rounds' rows together, and the
    checks of every round."""
    best = dict(max(rounds, key=lambda r: r["rows_per_s"]))
    out = {"master": master, "rows_per_batch": rows, "mode": mode, **best}
    out["rounds_rows_per_s"] = [r["rows_per_s"] for r in rounds]
    cpu = [r["cpu_ms"] for r in rounds if r["cpu_ms"] is not None]
    out["cpu_ms"] = min(cpu) if cpu else None  # the least disturbed round's
    out["rounds_cpu_ms"] = cpu
    if "check" in best:
        lat = np.concatenate([r["latency_ms"] for r in rounds])
        del out["latency_ms"]
        out["latency_ms_p50"] = float(np.percentile(lat, 50)) if len(lat) else None
        out["latency_ms_p95"] = float(np.percentile(lat, 95)) if len(lat) else None
        out["latency_samples"] = len(lat)
        out["check"] = {"ok": all(r["check"]["ok"] for r in rounds), "rounds": [r["check"] for r in rounds]}
    return out


def _line(master: str, rows: int, mode: str, r: dict[str, Any]) -> str:
    text = f"  {master:9s} {rows:>9,} rows/batch  {mode:6s} {r['rows_per_s']:>10,.0f} rows/s  {r['batch_ms']:4.0f} ms/batch"
    text += f"  CPU {r['cpu_ms'] or float('nan'):4.0f} ms/batch"
    if "check" in r:
        lat = r["latency_ms"]
        p50, p95 = np.percentile(lat, [50, 95]) if len(lat) else (np.nan, np.nan)
        text += f"  latency p50 {p50:4.0f} ms p95 {p95:4.0f} ms  check {'ok' if r['check']['ok'] else r['check']}"
    return text
