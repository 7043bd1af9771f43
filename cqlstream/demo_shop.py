"""`cqlstream serve --demo`: the server with a live demo shop, driven through the HTTP API like
any client would (README's first command).

Once the server answers, a background thread registers two system-timestamped streams (Orders,
Clicks; instants are seconds) and a relation (Items), four continuous queries, and then keeps
pushing a few seeded random orders and clicks every quarter second; a second thread prints the
big-orders query's results as they become final. Nothing is registered twice: with a
`--data-dir` that already holds the shop, the demo reuses it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from cqlstream.client import Client

CATALOG = [
    "register stream Orders (item integer, qty integer, price float) with (timestamp = system, unit = second)",
    "register stream Clicks (item integer, user char(8)) with (timestamp = system, unit = second)",
    "register relation Items (item integer, name char(12))",
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
    (
        "engine_load",
        "select entity, Avg(value) from SysStream [Range 10 Seconds] where metric = 'accepted' group by entity",
    ),
]
USERS = ["ann", "bob", "cyd", "dee", "eve"]


class DemoDriver:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        out: Callable[[str], object] = print,
        rate: float = 4.0,
        seed: int = 7,
    ) -> None:
        self.url = url
        self.api_key = api_key
        self.out = out
        self.period = 1.0 / rate
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.ids: dict[str, int] = {}

    def start(self) -> None:
        t = threading.Thread(target=self._main, name="demo-driver", daemon=True)
        t.start()
        self.threads.append(t)

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

    def setup(self, c: Client) -> None:
        names = {s["name"].lower() for s in c.streams()}
        for ddl, name in zip(CATALOG, ("orders", "clicks", "items")):
            if name not in names:
                c.register_stream(ddl)
        if "items" not in names:
            now = int(time.time())
            c.push("Items", [{"ts": now, "sign": 1, "item": i, "name": n} for i, n in ITEMS])
        have = {q.get("name"): q["id"] for q in c.queries()}
        for name, cql in QUERIES:
            self.ids[name] = have[name] if name in have else c.register_query(cql, name=name)["id"]

    def _main(self) -> None:
        with self._client() as c:
            if not self._wait_ready(c):
                return
            self.setup(c)
            base = self.url.rstrip("/")
            self.out(
                "demo shop: streams Orders, Clicks, relation Items; queries "
                + ", ".join(f"{n} (id {i})" for n, i in self.ids.items())
            )
            self.out(
                f"  try: curl -N '{base}/queries/{self.ids['sales_last_10s']}/results?format=ndjson&snapshot=true'"
            )
            self.out(f"       open {base}/docs  ·  {base}/plan?format=text  ·  {base}/metrics")
            self.out("big orders as they happen (time  item  qty  value):")
            t = threading.Thread(target=self._tail, name="demo-tail", daemon=True)
            t.start()
            self.threads.append(t)
            while not self.stop.wait(self.period):
                try:
                    self.tick(c)
                except Exception as e:  # the server is stopping: the demo ends with it
                    if not self.stop.is_set():
                        self.out(f"demo driver stopped: {e}")
                    return

    def tick(self, c: Client) -> None:
        """One round of shop traffic: a few orders and clicks, and Items' time moves on."""
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
        if orders:
            c.push("Orders", orders)
        if clicks:
            c.push("Clicks", clicks)
        c.heartbeat("Items", int(time.time()))

    def _tail(self) -> None:
        try:
            with self._client() as c:
                for e in c.subscribe(self.ids["big_orders"]):
                    if self.stop.is_set():
                        return
                    name, qty, value = e.row
                    self.out(f"  {time.strftime('%H:%M:%S', time.localtime(e.ts))}  {name:<10} {qty:>3} {value:>7.2f}")
        except Exception:
            return
