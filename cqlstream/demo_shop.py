"""`cqlstream serve --demo`: the server with a live demo shop, driven through the HTTP API like any
client would (README's first command), its orders and clicks fed through Spark Structured Streaming.

Once the server answers, a background thread registers two application-timestamped streams
(Orders, Clicks; event time in milliseconds) and a relation (Items), four continuous queries, and
then produces a few seeded random orders and clicks every quarter second, stamped with the wall
clock. By default they are written as small CSV files that the server's embedded Spark session
reads (two Spark file sources started with `POST /spark/sources`); with `--no-spark` they are
pushed over HTTP instead (demo_feeds.py). Items is pushed over HTTP once and its time advanced
with every round. A second thread prints the big-orders query's results as they become final.
Nothing is registered twice: with a `--data-dir` that already holds the shop, the demo reuses it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from cqlstream.client import Client
from cqlstream.demo_feeds import FEEDS, Feed

CATALOG = [
    "register stream Orders (item integer, qty integer, price float) with (unit = millisecond)",
    "register stream Clicks (item integer, user char(8)) with (unit = millisecond)",
    "register relation Items (item integer, name char(12)) with (unit = millisecond)",
]
ITEMS = [(1, "coffee"), (2, "tea"), (3, "croissant"), (4, "bagel"), (5, "muffin"), (6, "juice")]
QUERIES = [
    (
        "big_orders",
        "Istream(select I.name, O.qty, O.price * O.qty from Orders [Now] as O, Items as I "
        "where O.item = I.item and O.qty >= 4)",
    ),
    ("sales_last_10s", "select item, count(*), sum(qty) from Orders [Range 10 Seconds] group by item"),
    (
        "clicks_then_orders",
        "Istream(select C.user, O.item, O.qty from Clicks [Range 5 Seconds] as C, "
        "Orders [Now] as O where C.item = O.item)",
    ),
    # Tuples accepted per second by each source. SysStream publishes the cumulative `accepted`
    # counter about once a second (the engine's publishing interval), so over the last 10 seconds
    # the increase divided by the number of intervals between the samples is the rate per second
    # (NULL while a source has only one sample: division by zero).
    (
        "engine_load",
        "select entity, (max(value) - min(value)) / (count(*) - 1) as per_second "
        "from SysStream [Range 10 Seconds] where metric = 'accepted' group by entity",
    ),
]
USERS = ["ann", "bob", "cyd", "dee", "eve"]


class ShopTraffic:
    """Seeded random rounds of orders and clicks (their fields; the event time is the feed's)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)

    def round(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        r = self.rng
        orders = [
            {
                "item": r.randint(1, 6),
                "qty": r.choice([1, 1, 1, 2, 2, 3, 4, 5]),
                "price": r.choice([2.5, 3.0, 3.5, 4.25]),
            }
            for _ in range(r.randint(0, 3))
        ]
        clicks = [{"item": r.randint(1, 6), "user": r.choice(USERS)} for _ in range(r.randint(0, 4))]
        return orders, clicks


class DemoDriver:
    """The demo shop as a client of the server at `url`; `spark=False` pushes over HTTP only.
    `data_dir`: where the Spark feed's files go (else a temp folder, removed by `close`)."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        out: Callable[[str], object] = print,
        rate: float = 4.0,
        seed: int = 7,
        spark: bool = True,
        data_dir: str | None = None,
    ) -> None:
        self.url = url
        self.api_key = api_key
        self.out = out
        self.period = 1.0 / rate
        self.traffic = ShopTraffic(seed)
        self.feed: Feed = FEEDS["spark" if spark else "http"](url, api_key, out, data_dir)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.ids: dict[str, int] = {}
        self.last_ts = 0

    def start(self) -> None:
        t = threading.Thread(target=self._main, name="demo-driver", daemon=True)
        t.start()
        self.threads.append(t)

    def close(self, timeout: float = 5.0) -> None:
        """Stop producing (the server has stopped) and remove what the feed made."""
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        self.feed.close()

    def _client(self) -> Client:
        return Client(self.url, api_key=self.api_key, timeout=10.0)

    def _wait_ready(self, c: Client) -> bool:
        while not self.stop.is_set():
            try:
                c.health()
                return True
            except Exception:
                time.sleep(0.1)
        return False

    def now(self) -> int:
        """The wall clock in ms, strictly increasing (event times of successive rounds)."""
        self.last_ts = max(self.last_ts + 1, int(time.time() * 1000))
        return self.last_ts

    def setup(self, c: Client) -> None:
        streams = {s["name"].lower(): s for s in c.streams()}
        old = streams.get("orders")
        if old is not None and (old.get("timestamp") == "system" or old.get("time_unit") != "millisecond"):
            raise RuntimeError(
                "the data dir holds the shop of an older demo (system-timestamped streams): use a fresh --data-dir"
            )
        for ddl, name in zip(CATALOG, ("orders", "clicks", "items")):
            if name not in streams:
                c.register_stream(ddl)
        if not c.entity("src:Items")["counters"].get("accepted"):
            c.push("Items", [{"ts": self.now(), "sign": 1, "item": i, "name": n} for i, n in ITEMS])
        have = {q.get("name"): q["id"] for q in c.queries()}
        for name, cql in QUERIES:
            self.ids[name] = have[name] if name in have else c.register_query(cql, name=name)["id"]

    def _main(self) -> None:
        with self._client() as c:
            if not self._wait_ready(c):
                return
            try:
                self.setup(c)
            except Exception as e:
                self.out(f"demo: cannot set up the shop: {e}")
                return
            base = self.url.rstrip("/")
            self.out(
                "demo shop: streams Orders, Clicks, relation Items; queries "
                + ", ".join(f"{n} (id {i})" for n, i in self.ids.items())
            )
            for line in self.feed.banner():
                self.out(line)
            self.out(
                f"  try: curl -N '{base}/queries/{self.ids['sales_last_10s']}/results?format=ndjson&snapshot=true'"
            )
            self.out(f"       open {base}/docs  ·  {base}/plan?format=text  ·  {base}/metrics")
            self.out("big orders as they happen (time  item  qty  value):")
            t = threading.Thread(target=self._tail, name="demo-tail", daemon=True)
            t.start()
            self.threads.append(t)
            self.feed.start()
            while not self.stop.wait(self.period):
                try:
                    self.tick(c)
                except httpx.TransportError:  # the server is stopping: the demo ends with it
                    return
                except Exception as e:
                    if not self.stop.is_set():
                        self.out(f"demo driver stopped: {e}")
                    return

    def tick(self, c: Client) -> None:
        """One round of shop traffic at the wall clock's time; Items' time moves on with it."""
        ts = self.now()
        orders, clicks = self.traffic.round()
        self.feed.tick(c, ts, orders, clicks)
        c.heartbeat("Items", ts)

    def _tail(self) -> None:
        try:
            with self._client() as c:
                for e in c.subscribe(self.ids["big_orders"]):
                    if self.stop.is_set():
                        return
                    name, qty, value = e.row
                    at = time.strftime("%H:%M:%S", time.localtime(e.ts / 1000))
                    self.out(f"  {at}  {name:<10} {qty:>3} {value:>7.2f}")
        except Exception:
            return
