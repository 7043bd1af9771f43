"""Spark sources added over the API come back after a restart on the same data dir, like queries
(a real uvicorn on 127.0.0.1 twice, embedded Spark local[2]); a removed one does not. Bounded waits."""

from __future__ import annotations

import json
import time

from cqlstream.client import Client
from cqlstream.server.settings import Settings
from tests.server.conftest import ServerThread

WAIT = 90


def wait_for(what, check, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not (out := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return out


def rows(c: Client, stream: str) -> int:
    return c.spark_source(stream)["counters"]["rows"]


def test_api_sources_survive_a_restart(tmp_path):
    settings = Settings(spark_master="local[2]", data_dir=str(tmp_path / "d"))
    first = ServerThread(settings).start()
    try:
        with Client(first.url, timeout=WAIT) as c:
            c.register_stream("register stream Ticks (value int) with (unit = millisecond)")
            c.register_stream("register stream Gone (value int) with (unit = millisecond)")
            c.add_spark_source("Ticks=rate?rowsPerSecond=50&trigger=200 milliseconds")
            c.add_spark_source("Gone=rate?rowsPerSecond=5")
            c.remove_spark_source("Gone")
            wait_for("rows before the restart", lambda: rows(c, "Ticks") > 0)
    finally:
        first.stop()
    saved = json.loads((tmp_path / "d" / "spark-sources.json").read_text())
    assert [s["stream"] for s in saved["sources"]] == ["Ticks"]
    accepted_before = None
    second = ServerThread(settings).start()
    try:
        with Client(second.url, timeout=WAIT) as c:
            accepted_before = c.stream("Ticks")["accepted"]  # the log brought the rows back
            assert accepted_before > 0
            wait_for("the restored source", lambda: [s["stream"] for s in c.spark_sources()] == ["Ticks"])
            wait_for("rows after the restart", lambda: rows(c, "Ticks") > 0)
            assert c.spark_source("Ticks")["state"] == "running"
            assert c.stream("Ticks")["accepted"] > accepted_before
            # resumed from its checkpoint: no row older than the stream's time, none twice
            assert c.spark_source("Ticks")["counters"]["late_rows"] == 0
    finally:
        second.stop()
