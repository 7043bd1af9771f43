"""The Spark session of a process: started on first use (about 10 s), quiet (log level WARN, no UI),
stopped once. Everything that needs Spark in the server or the CLI asks this for the session."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from cqlstream.spark_bridge.errors import SparkSourceError

log = logging.getLogger("cqlstream.spark")
LOG4J = Path(__file__).with_name("log4j2.properties")  # warnings only, without the start-up chatter


class SparkRuntime:
    """A lazily started local (or `master`) Spark session. `say` gets one line when Spark is up."""

    def __init__(
        self,
        master: str = "local[*]",
        app_name: str = "cqlstream",
        conf: dict[str, str] | None = None,
        say: Callable[[str], object] | None = None,
    ) -> None:
        self.master = master
        self.app_name = app_name
        self.conf = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.adaptive.enabled": "false",  # not used by streaming queries (Spark says so at each start)
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J.as_uri()}",
            **(conf or {}),
        }
        self.say = say or log.info
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        self.start_seconds: float | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> SparkSession:
        """The session, started now if need be (`spark_unavailable` when Spark or Java is missing)."""
        with self._lock:
            if self._session is None:
                t = time.perf_counter()
                # Python workers (UDFs, Python data sources such as `cqlstream`) run this interpreter,
                # which has cqlstream installed, unless the user chose another
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                for chatty in ("py4j", "py4j.clientserver", "py4j.java_gateway"):  # one line per callback at INFO
                    logging.getLogger(chatty).setLevel(logging.WARNING)
                try:
                    builder = SparkSession.builder.master(self.master).appName(self.app_name)
                    for k, v in self.conf.items():
                        builder = builder.config(k, v)
                    session = builder.getOrCreate()
                    session.sparkContext.setLogLevel("WARN")
                except Exception as e:
                    text = (str(e).strip() or type(e).__name__).splitlines()[0][:300]
                    raise SparkSourceError(
                        f"Spark cannot start here ({text}); Java 17 or 21 must be on PATH or JAVA_HOME",
                        code="spark_unavailable",
                    ) from None
                self.start_seconds = time.perf_counter() - t
                self._session = session
                self.say(f"Spark started in {self.start_seconds:.1f} s ({self.master})")
            return self._session

    def stop(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None
