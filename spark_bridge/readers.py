"""Reader formats: how a `SourceSpec` becomes a Spark streaming DataFrame. A registry, one class per
family (files, rate, socket); any other name is handed to Spark as a data-source short name (its
built-in ones, packages on the class path, registered Python DataSources)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cqlstream.spark_bridge.errors import SparkSourceError
from cqlstream.spark_bridge.schema import ddl_for
from cqlstream.spark_bridge.sinks import StreamInfo
from cqlstream.spark_bridge.spec import SourceSpec


class ReaderFormat(ABC):
    """One way of reading: fills its defaults into a spec, then builds the streaming DataFrame."""

    name: str
    needs_path = False

    def complete(self, spec: SourceSpec) -> SourceSpec:
        """The spec with this format's defaults (e.g. the rate source's time column)."""
        if self.needs_path and not spec.path:
            raise SparkSourceError(
                f"the {self.name} source of '{spec.stream}' needs a path ({spec.stream}={self.name}:PATH)"
            )
        return spec

    @abstractmethod
    def build(self, spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> DataFrame: ...

    def schema(self, spec: SourceSpec, info: StreamInfo) -> str:
        """The schema rows are read with: the spec's, or one made from the stream's."""
        return spec.schema or ddl_for(info.target, spec.time_column, spec.sign_column, dict(spec.columns))


class Files(ReaderFormat):
    """A directory (or glob) of CSV, JSON or Parquet files; new files are new rows. A file is never
    split across micro-batches: bound a batch with `maxFilesPerTrigger`."""

    needs_path = True

    def __init__(self, name: str, defaults: dict[str, str] | None = None) -> None:
        self.name = name
        self.defaults = defaults or {}

    def build(self, spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> DataFrame:
        options = {**self.defaults, **dict(spec.options)}
        return spark.readStream.format(self.name).schema(self.schema(spec, info)).options(**options).load(spec.path)


class Rate(ReaderFormat):
    """Spark's generators (`rate`, `rate-micro-batch`): columns `timestamp` and `value`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def complete(self, spec: SourceSpec) -> SourceSpec:
        return replace(spec, time_column="timestamp") if spec.time_column == "ts" else spec

    def build(self, spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> DataFrame:
        return spark.readStream.format(self.name).options(**dict(spec.options)).load()


class Socket(ReaderFormat):
    """Lines of text from `host:port` (options `host`, `port`, or the path `HOST:PORT`), each a CSV
    row of the stream's fields (event time first, as the schema says)."""

    name = "socket"

    def build(self, spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> DataFrame:
        options = dict(spec.options)
        if spec.path and ":" in spec.path:
            host, _, port = spec.path.rpartition(":")
            options.setdefault("host", host)
            options.setdefault("port", port)
        if "host" not in options or "port" not in options:
            raise SparkSourceError(
                f"the socket source of '{spec.stream}' needs host and port ({spec.stream}=socket:HOST:PORT)"
            )
        lines = spark.readStream.format("socket").options(**options).load()
        schema = self.schema(spec, info)
        return lines.select(F.from_csv(F.col("value"), schema).alias("row")).select("row.*")


class Generic(ReaderFormat):
    """Any other data source Spark knows by name, with the spec's options, schema and path."""

    def __init__(self, name: str) -> None:
        self.name = name

    def build(self, spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> DataFrame:
        reader = spark.readStream.format(self.name).options(**dict(spec.options))
        if spec.schema:
            reader = reader.schema(spec.schema)
        return reader.load(spec.path) if spec.path else reader.load()


FORMATS: dict[str, ReaderFormat] = {}


def register(fmt: ReaderFormat) -> ReaderFormat:
    FORMATS[fmt.name] = fmt
    return fmt


for _fmt in (Files("csv", {"header": "true"}), Files("json"), Files("parquet"), Rate("rate"), Rate("rate-micro-batch")):
    register(_fmt)
register(Socket())


def reader_for(name: str) -> ReaderFormat:
    """The registered format of that name, else Spark's data source of that short name."""
    return FORMATS.get(name) or Generic(name)


def dataframe(spark: SparkSession, spec: SourceSpec, info: StreamInfo) -> tuple[SourceSpec, DataFrame]:
    """The spec with its format's defaults, and its streaming DataFrame (a `SparkSourceError` when
    Spark refuses the definition: unknown format, bad schema or option)."""
    fmt = reader_for(spec.format)
    spec = fmt.complete(spec)
    try:
        return spec, fmt.build(spark, spec, info)
    except SparkSourceError:
        raise
    except Exception as e:
        text = (str(e).strip() or type(e).__name__).splitlines()[0][:500]
        raise SparkSourceError(f"Spark cannot read the {spec.format} source of '{spec.stream}': {text}") from None
