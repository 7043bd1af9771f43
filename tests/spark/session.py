"""The one way the Spark tests open their local Spark session: local[2], no UI, two shuffle
partitions, quiet logs, and this interpreter for Spark's Python workers (Python data sources and
pandas UDFs run there and must import cqlstream). One session per test module (module fixture)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery


@contextmanager
def local_session(app_name: str) -> Iterator[SparkSession]:
    """A local[2] session for one test module; PYSPARK_PYTHON is restored when it stops.

    No try/skip: a machine where Spark cannot start fails here (Java is part of the set-up)."""
    # PySpark reads PYSPARK_PYTHON when the SparkContext starts (the default is `python3` on PATH)
    old = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()
        if old is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = old


def finish(q: StreamingQuery, wait: float, what: str = "the distributed run") -> None:
    """Wait (bounded) for an available-now streaming query to end; it is stopped either way and
    must end without an exception."""
    try:
        assert q.awaitTermination(wait), f"{what} did not finish in {wait} s"
    finally:
        q.stop()
    assert q.exception() is None
