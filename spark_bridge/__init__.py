"""Spark Structured Streaming sources feeding engine streams: `SparkSource` binds a streaming
DataFrame to a stream or relation of a `Dsms` (in-process: the Spark driver runs beside the engine)."""

from cqlstream.spark_bridge.config import SparkSourceConfig
from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.source import SparkSource

__all__ = ["SparkSource", "SparkSourceConfig", "SparkSourceError"]
