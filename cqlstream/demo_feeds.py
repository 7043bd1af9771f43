"""How the demo shop's orders and clicks reach the server: through Spark Structured Streaming (CSV
files that the server's embedded Spark reads, started through the API like any client would) or
pushed over HTTP. Either way the rows carry their event time in milliseconds."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from cqlstream.client import Client, CqlstreamError
from cqlstream.demo_files import DemoFolder, FileDrop

Rows = Sequence[Mapping[str, Any]]
SPARK_START_SECONDS = 300.0  # how long the demo waits for the server to start a Spark source


class Feed(ABC):
    """One way of delivering each round of shop traffic to the streams Orders and Clicks."""

    def __init__(self, url: str, api_key: str | None, out: Callable[[str], object], data_dir: str | None) -> None:
        self.url = url
        self.api_key = api_key
        self.out = out
        self.data_dir = data_dir

    @abstractmethod
    def banner(self) -> list[str]:
        """Lines saying how the rows travel (printed under the demo's first line)."""

    def start(self) -> None:
        """Called once the catalog and queries are registered, before the first round."""
        return None

    @abstractmethod
    def tick(self, c: Client, ts: int, orders: Rows, clicks: Rows) -> None:
        """Deliver one round: its rows are all at event time `ts` (ms), later than any round before."""

    def close(self) -> None:
        """Release what the feed made (called when the server has stopped)."""
        return None


class HttpFeed(Feed):
    """Rows pushed over HTTP with their event time; a stream without rows this round gets a heartbeat."""

    def banner(self) -> list[str]:
        return ["  feed: orders and clicks pushed over HTTP with their event time (--no-spark: Spark is not started)"]

    def tick(self, c: Client, ts: int, orders: Rows, clicks: Rows) -> None:
        for name, rows in (("Orders", orders), ("Clicks", clicks)):
            if rows:
                c.push(name, [{"ts": ts, **r} for r in rows])
            else:
                c.heartbeat(name, ts)


# the Spark sources' reader settings: a bounded catch-up per micro-batch, files deleted once read
SPARK_OPTIONS = {"maxFilesPerTrigger": "20", "cleanSource": "delete"}
SPARK_TRIGGER = "500 milliseconds"
COLUMNS = {"Orders": ("ts", "item", "qty", "price"), "Clicks": ("ts", "item", "user")}


class SparkFeed(Feed):
    """Each round's rows as CSV files (one per stream) that Spark file sources of the server read:
    the sources are started with `POST /spark/sources` in the background (Spark takes a while to
    start; files written meanwhile are read once it runs). If Spark cannot start, no more files
    are written and the message says how to run the demo without it."""

    def __init__(self, url: str, api_key: str | None, out: Callable[[str], object], data_dir: str | None) -> None:
        super().__init__(url, api_key, out, data_dir)
        self.folder = DemoFolder(data_dir)
        self.files = FileDrop(self.folder.root, COLUMNS)
        self.failed = threading.Event()
        self.thread: threading.Thread | None = None

    def spec(self, stream: str) -> dict[str, Any]:
        """The JSON definition of a stream's Spark source (event time: the integer column ts, in ms)."""
        spec: dict[str, Any] = {
            "stream": stream,
            "format": "csv",
            "path": str(self.files.folder(stream)),
            "options": SPARK_OPTIONS,
            "time_column": "ts",
            "trigger": SPARK_TRIGGER,
        }
        if self.folder.temporary:  # checkpoints go with the files (a --data-dir keeps both)
            spec["checkpoint"] = str(self.folder.root / "checkpoints" / stream.lower())
        return spec

    def banner(self) -> list[str]:
        where = self.folder.root
        kept = "" if not self.folder.temporary else " (removed at exit)"
        return [
            "  feed: Spark Structured Streaming (embedded) reads Orders and Clicks from CSV files written 4 times a",
            f"        second into {where}/{{orders,clicks}}{kept}; Items is pushed over HTTP",
            f"  Spark is starting (10-60 s; then GET {self.url}/spark/sources); big orders print once its first "
            "micro-batches are in",
        ]

    def start(self) -> None:
        self.thread = threading.Thread(target=self._start_sources, name="demo-spark", daemon=True)
        self.thread.start()

    def _start_sources(self) -> None:
        try:
            with Client(self.url, api_key=self.api_key, timeout=SPARK_START_SECONDS) as c:
                for stream in COLUMNS:  # one after the other: if Spark cannot start, one attempt says so
                    try:
                        c.add_spark_source(self.spec(stream))
                    except CqlstreamError as e:
                        if e.status != 409:  # 409: a source feeds it already
                            raise
            self.out(f"Spark sources running: {', '.join(COLUMNS)} (GET {self.url}/spark/sources)")
        except httpx.TransportError:  # the server stopped while Spark was starting
            self.failed.set()
        except Exception as e:
            self.failed.set()
            self.out(f"demo: the Spark sources did not start: {e}")
            self.out("  run `cqlstream serve --demo --no-spark` for the demo without Spark")

    def tick(self, c: Client, ts: int, orders: Rows, clicks: Rows) -> None:
        if self.failed.is_set():
            return
        self.files.write("Orders", ts, orders)
        self.files.write("Clicks", ts, clicks)

    def close(self) -> None:
        self.folder.close()


FEEDS: dict[str, type[Feed]] = {"spark": SparkFeed, "http": HttpFeed}
