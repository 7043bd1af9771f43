"""The crash test: a real `cqlstream serve --data-dir` under steady ingest, with a subscriber, is killed
with SIGKILL at random points three times and restarted on the same data dir. Every acknowledged
push must be reflected, exactly once (the pusher retries an unanswered push with its idempotency
key), and the final results of a windowed aggregate and of a join must equal those of a server
that never stopped, fed in process with exactly the acknowledged pushes."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter

import httpx
import pytest

from cqlstream.client import Client
from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings
from tests.server.conftest import ServerProcess

DDL = [
    "register stream Orders (id integer, cust varchar(8), amount integer)",
    "register stream Clicks (cust varchar(8), page integer)",
]
AGG = "select cust, sum(amount), count(*) from Orders [Range 30] group by cust"
JOIN = "select Orders.id, Clicks.page from Orders [Range 4], Clicks [Range 4] where Orders.cust = Clicks.cust"
KILLS = 3


class Pusher(threading.Thread):
    """Pushes to whichever server is up (`self.url`), one push at a time, application timestamps;
    a push without an answer is retried with the same idempotency key until it is answered."""

    def __init__(self, url: str, seed: int) -> None:
        super().__init__(daemon=True, name="pusher")
        self.url = url
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.acked: list[tuple[str, list[dict], dict]] = []  # (stream, rows, reply) in the order answered
        self.retries = 0
        self.client: Client | None = None
        self.client_url = ""
        self.error: BaseException | None = None

    def _push(self, stream: str, rows: list[dict], key: str) -> dict:
        while True:
            try:
                if self.client is None or self.client_url != self.url:
                    self.client, self.client_url = Client(self.url, timeout=5.0), self.url
                return self.client.push_result(stream, rows, idempotency_key=key)
            except httpx.TransportError:  # the server is down (or died while answering): again, same key
                self.retries += 1
                self.client = None
                time.sleep(0.05)

    def run(self) -> None:
        t, i = 0, 0
        try:
            while not self.stop.is_set():
                t += 1
                for stream in ("Orders", "Clicks"):
                    i += 1
                    n = self.rng.randint(1, 3)
                    if stream == "Orders":
                        rows = [
                            {
                                "ts": t,
                                "id": i * 10 + k,
                                "cust": self.rng.choice("abcde"),
                                "amount": self.rng.randint(1, 9),
                            }
                            for k in range(n)
                        ]
                    else:
                        rows = [
                            {"ts": t, "cust": self.rng.choice("abcde"), "page": self.rng.randint(1, 5)}
                            for _ in range(n)
                        ]
                    reply = self._push(stream, rows, key=f"p{i}")
                    self.acked.append((stream, rows, reply))
                time.sleep(0.002)
            self.last_ts = t
        except BaseException as e:  # reported by the test
            self.error = e


class Subscriber(threading.Thread):
    """Follows the aggregate's results (snapshot, then changes) and rebuilds its relation; after a
    crash it reconnects with a new snapshot."""

    def __init__(self, url: str, qid: int) -> None:
        super().__init__(daemon=True, name="subscriber")
        self.url, self.qid = url, qid
        self.relation: Counter = Counter()
        self.connections = 0
        self.elements = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with Client(self.url, timeout=5.0) as c:
                    rel: Counter = Counter()
                    first = True
                    for e in c.subscribe(self.qid, snapshot=True):
                        if first:
                            self.connections += 1
                            first = False
                        rel[e.row] += e.sign
                        self.elements += 1
                        with self.lock:
                            self.relation = +rel
                        if self.stop.is_set():
                            return
            except Exception:  # the server went down mid-stream, or is not up yet: reconnect
                time.sleep(0.05)


def reference(pushes: list[tuple[str, list[dict], dict]], last_ts: int) -> tuple[Counter, Counter]:
    """The final relations of AGG and JOIN on a host that never stopped, fed the acknowledged pushes."""
    host = EngineHost(Settings())
    for ddl in DDL:
        host.register_source(ddl)
    agg = host.register_query(AGG)["id"]
    join = host.register_query(JOIN)["id"]
    for stream, rows, _ in pushes:
        host.push(stream, json.dumps(rows).encode(), "application/json")
    for stream in ("Orders", "Clicks"):
        host.heartbeat(stream, last_ts + 1)
    loop = asyncio.new_event_loop()
    try:
        out = []
        for qid in (agg, join):
            snap = host.subscribe(qid, "ndjson", loop, snapshot=True, follow=False)[1]
            out.append(Counter(snap.batch.rows()))
        return out[0], out[1]
    finally:
        loop.close()


def final(url: str, qid: int) -> Counter:
    with Client(url) as c:
        return Counter(e.row for e in c.subscribe(qid, snapshot=True, follow=False))


PER_KILL = 40


@pytest.mark.time_limit(120)
def test_sigkill_three_times_loses_no_acknowledged_push_and_results_stay_exact(tmp_path):
    rng = random.Random(20261123)
    args = ("--data-dir", str(tmp_path / "data"), "--checkpoint-every", "300")
    procs: list[ServerProcess] = []
    pusher = sub = None
    try:
        srv = ServerProcess(*args).wait_ready()
        procs.append(srv)
        with Client(srv.url) as c:
            for ddl in DDL:
                c.register_stream(ddl)
            agg = c.register_query(AGG)["id"]
            join = c.register_query(JOIN)["id"]
        pusher = Pusher(srv.url, seed=rng.randint(0, 1 << 30))
        sub = Subscriber(srv.url, agg)
        pusher.start()
        sub.start()
        for k in range(KILLS):
            time.sleep(rng.uniform(0.5, 2.0))
            # at least PER_KILL more acknowledged pushes before each kill (a loaded machine pushes
            # fewer in the same time; the final check wants more than 100 in all), bounded in time
            deadline = time.monotonic() + 20
            while len(pusher.acked) < (k + 1) * PER_KILL and time.monotonic() < deadline:
                time.sleep(0.05)
            before = len(pusher.acked)
            srv.proc.kill()  # SIGKILL: no shutdown, no last checkpoint, no flush
            srv.proc.wait(timeout=10)
            srv = ServerProcess(*args).wait_ready(timeout=40)
            procs.append(srv)
            pusher.url = sub.url = srv.url
            with Client(srv.url) as c:
                accepted = {s["name"]: s["accepted"] for s in c.streams()}
                acked = Counter()
                for stream, _, reply in pusher.acked[:before]:
                    acked[stream] += reply["accepted"]
                for stream in ("Orders", "Clicks"):
                    assert accepted[stream] >= acked[stream], "an acknowledged push was lost in the crash"
                assert {q["id"] for q in c.queries()} == {agg, join}
        time.sleep(0.5)
        pusher.stop.set()
        pusher.join(timeout=20)
        assert not pusher.is_alive() and pusher.error is None, pusher.error
        assert len(pusher.acked) > 100, f"{len(pusher.acked)} pushes acknowledged"

        with Client(srv.url) as c:
            accepted = {s["name"]: s["accepted"] for s in c.streams()}
            for stream in ("Orders", "Clicks"):
                rows = sum(len(r) for s, r, _ in pusher.acked if s == stream)
                assert accepted[stream] == rows, f"{stream}: every acknowledged row once, no more"
                c.heartbeat(stream, pusher.last_ts + 1)
        want_agg, want_join = reference(pusher.acked, pusher.last_ts)
        assert sum(want_agg.values()) > 0 and sum(want_join.values()) > 0
        assert final(srv.url, agg) == want_agg
        assert final(srv.url, join) == want_join

        deadline = time.monotonic() + 10  # the subscriber, reconnected with a snapshot, catches up too
        while time.monotonic() < deadline:
            with sub.lock:
                if sub.relation == want_agg:
                    break
            time.sleep(0.05)
        with sub.lock:
            assert sub.relation == want_agg
        assert sub.connections >= 2, "the subscriber followed the results across restarts"
    finally:
        if pusher is not None:
            pusher.stop.set()
        if sub is not None:
            sub.stop.set()
        for p in procs:
            p.stop()
