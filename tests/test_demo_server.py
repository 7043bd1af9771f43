"""README's first command, `make demo` = `cqlstream serve --demo`: the server comes up on
127.0.0.1, the demo shop registers itself through the API and its queries produce results, fed
through the server's embedded Spark (CSV files read by two Spark file sources) or, with
`--no-spark`, pushed over HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cqlstream.client import Client
from tests.demo_process import big_orders, running_demo

CQLSTREAM = str(Path(sys.executable).with_name("cqlstream"))
QUERIES = {"big_orders", "sales_last_10s", "clicks_then_orders", "engine_load"}
WAIT = 60  # seconds any condition below may take once the demo prints big orders
# what the console must not show while the demo runs: Spark's start-up notes, progress bars, warnings of
# slow batches, py4j's INFO lines, stack traces. (Its stop is quiet too unless a micro-batch outlasts the
# few seconds a source waits for it, which a heavily loaded machine can make happen: not checked.)
NOISE = (
    "Traceback",
    "Exception",
    " WARN ",
    "ERROR",
    "log4j profile",
    "Setting default log level",
    "NativeCodeLoader",
    "[Stage ",
    "falling behind",
    "py4j",
    "adaptive",
    "demo driver stopped",
)


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        out = check()
        if out:
            return out
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.5)


def check_results(c: Client) -> dict[str, int]:
    """The shop's queries are registered and the windowed aggregate holds the orders of the last 10 s."""
    names = {q["name"]: q["id"] for q in c.queries()}
    assert set(names) == QUERIES
    orders = c.stream("Orders")
    assert (orders["timestamp"], orders["time_unit"]) == ("application", "millisecond"), orders
    snap = list(c.subscribe(names["sales_last_10s"], snapshot=True, follow=False))
    assert snap and all(e.sign == 1 and 1 <= e.row[0] <= 6 and e.row[1] >= 1 for e in snap), snap
    assert abs(snap[0].ts / 1000 - time.time()) < 120, "event time is the wall clock in ms"
    assert c.entity("src:Orders")["counters"]["accepted"] > 0
    return names


def test_serve_demo_feeds_the_shop_through_spark():
    with running_demo(CQLSTREAM) as (url, lines):
        text = "".join(lines)
        folder = Path(re.search(r"second into (\S+)/\{orders,clicks\} \(removed at exit\)", text).group(1))
        with Client(url, timeout=30) as c:

            def running() -> list[dict[str, Any]] | None:
                srcs = {s["stream"]: s for s in c.spark_sources()}
                ok = set(srcs) == {"Orders", "Clicks"} and all(
                    s["state"] == "running" and s["counters"]["rows"] > 0 and s["counters"]["late_rows"] == 0
                    for s in srcs.values()
                )
                return list(srcs.values()) if ok else None

            sources = wait_for("both Spark sources running with rows", running)
            assert {s["spec"]["format"] for s in sources} == {"csv"}
            assert all(s["spec"]["path"].startswith(str(folder)) for s in sources)
            check_results(c)
            # read files are deleted (cleanSource): the folders stay small once Spark has caught up
            wait_for("Spark to catch up", lambda: len(list((folder / "orders").iterdir())) < 40)
            seen = len(big_orders(lines))
            wait_for("more big orders", lambda: len(big_orders(lines)) > seen)
        running = "".join(lines)  # the console while the demo runs (its stop is checked below)
    assert running.count("Spark started in") == 1, running
    assert "Spark sources running: Orders, Clicks" in running
    assert not [n for n in NOISE if n in running], running
    assert not folder.exists(), "the demo's temp folder is removed at exit"


def test_serve_demo_without_spark_pushes_over_http():
    with running_demo(CQLSTREAM, spark=False) as (url, lines):
        with Client(url, timeout=10) as c:
            check_results(c)
            assert c.spark_sources() == []
        text = subprocess.run([CQLSTREAM, "plan", "--url", url], capture_output=True, text=True, timeout=30)
        assert text.returncode == 0 and text.stdout.startswith("Global plan: 4 queries"), text.stderr
        graph = json.loads(
            subprocess.run(
                [CQLSTREAM, "plan", "--url", url, "--json"], capture_output=True, text=True, timeout=30
            ).stdout
        )
        ids = {n["id"] for n in graph["nodes"]}
        assert {"src:Orders", "query:1"} <= ids and all(e["to"] in ids for e in graph["edges"])
    text = "".join(lines)
    assert "pushed over HTTP" in text and "Spark started" not in text
    assert not [n for n in NOISE if n in text], text
