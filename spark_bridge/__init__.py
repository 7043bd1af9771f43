"""Spark Structured Streaming as the data pipeline: streaming DataFrames feeding engine streams and
relations, in this process or on a server over HTTP (`SparkSource`, `SparkSources`, `SourceSpec`),
and query results back into Spark (`CqlResultsSource`, the data source `cqlstream`).

Names are imported on first use, so that reading a source definition (spec.py) does not import
pyspark (a second or more) where no Spark source runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SparkSource": "source",
    "SparkSourceConfig": "config",
    "SparkSourceError": "errors",
    "SourceSpec": "spec",
    "SourceFile": "spec",
    "SparkSources": "manager",
    "SparkRuntime": "runtime",
    "EngineSink": "sinks",
    "HttpSink": "sinks",
    "CqlResultsSource": "results_source",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cqlstream.spark_bridge' has no attribute '{name}'")
    return getattr(importlib.import_module(f"cqlstream.spark_bridge.{_EXPORTS[name]}"), name)
