"""A Spark source definition as users write it: one line (`cqlstream serve --source`), a TOML file,
or a JSON object (the HTTP API). Plain data; Spark is only touched when a source starts.

One line: `STREAM=FORMAT[:PATH][?key=value&...]`, for example

    Orders=csv:/data/orders?header=true&time=ts&delay=2
    Ticks=rate?rowsPerSecond=50&time=timestamp

Keys the bridge reads itself (`SETTINGS`): time, delay, schema, sign, trigger, checkpoint, and
`col.FIELD=COLUMN` (the Spark column feeding a field of another name); every other key is an
option of Spark's reader (`maxFilesPerTrigger`, `header`, `host`, `port`, ...).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from cqlstream.spark_bridge.config import SparkSourceConfig
from cqlstream.spark_bridge.errors import SparkSourceError

# one-line key -> SourceSpec field (the rest of the query string are Spark reader options)
SETTINGS = {
    "time": "time_column",
    "delay": "watermark_delay",
    "schema": "schema",
    "sign": "sign_column",
    "trigger": "trigger",
    "checkpoint": "checkpoint",
}
_FIELDS = ("stream", "format", "path", "options", "columns", *SETTINGS.values())


@dataclass(frozen=True)
class SourceSpec:
    """How to read one Spark streaming DataFrame and which stream or relation it feeds.

    - `format`: a reader format (csv, json, parquet, socket, rate, rate-micro-batch, or the short
      name of any Spark data source, Python DataSources included); `path` where the format reads one.
    - `options`: Spark reader options, as strings.
    - `schema`: the Spark schema (DDL, e.g. `ts LONG, item INT`) for formats that need one; by
      default it is made from the stream's own schema.
    - `columns`: (field, Spark column) pairs where the names differ.
    - `time_column`, `watermark_delay` (in the stream's ticks), `sign_column`: as in SparkSourceConfig.
    - `trigger`: a processing-time interval ("1 second"), "available-now" (what is there, then
      stop), or None (a micro-batch as soon as the last one is done).
    - `checkpoint`: Spark's checkpoint directory (default: one per stream under the server's).
    """

    stream: str
    format: str
    path: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    columns: tuple[tuple[str, str], ...] = ()
    time_column: str = "ts"
    watermark_delay: int = 0
    schema: str | None = None
    sign_column: str = "sign"
    trigger: str | None = None
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        if not self.stream.replace("_", "a").isalnum() or self.stream[0].isdigit():
            raise SparkSourceError(f"'{self.stream}' is not a stream name", field="stream")
        if not self.format:
            raise SparkSourceError(f"the source of '{self.stream}' has no format", field="format")
        if isinstance(self.watermark_delay, bool) or not isinstance(self.watermark_delay, int):
            raise SparkSourceError(f"delay must be an integer number of ticks, got {self.watermark_delay!r}")
        if self.watermark_delay < 0:
            raise SparkSourceError(f"delay must be ≥ 0 (got {self.watermark_delay})", field="delay")

    # ------------------------------------------------------------ readers of the three forms
    @classmethod
    def parse(cls, text: str) -> SourceSpec:
        """One line `STREAM=FORMAT[:PATH][?key=value&...]`."""
        head, _, query = text.strip().partition("?")
        stream, eq, rest = head.partition("=")
        if not eq or not stream.strip() or not rest.strip():
            raise SparkSourceError(
                f"source '{text}': expected STREAM=FORMAT[:PATH][?key=value&...], e.g. Orders=csv:/data/orders",
                field="source",
            )
        fmt, _, path = rest.partition(":")
        items: dict[str, Any] = {"stream": stream.strip(), "format": fmt.strip().lower(), "path": path or None}
        options: list[tuple[str, str]] = []
        columns: list[tuple[str, str]] = []
        for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
            if key.startswith("col."):
                columns.append((key[4:], value))
            elif key in SETTINGS:
                items[SETTINGS[key]] = value
            else:
                options.append((key, value))
        items["options"] = options
        items["columns"] = columns
        return cls.of(items, where=f"source '{text}'")

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str = "source") -> SourceSpec:
        """From a mapping (JSON or a TOML table): the fields by name; `options` and `columns` as
        tables or lists of pairs; `delay` and the other one-line keys accepted as aliases."""
        items = dict(data)
        for short, long in SETTINGS.items():
            if short in items and short != long:
                items[long] = items.pop(short)
        unknown = sorted(set(items) - set(_FIELDS))
        if unknown:
            raise SparkSourceError(
                f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}", field=unknown[0]
            )
        for name in ("stream", "format"):
            if not isinstance(items.get(name), str):
                raise SparkSourceError(f"{where}: '{name}' (a string) is required", field=name)
        for name in ("options", "columns"):
            items[name] = _pairs(items.get(name, ()), f"{where}: {name}")
        delay = items.get("watermark_delay", 0)
        if isinstance(delay, str):
            try:
                items["watermark_delay"] = int(delay)
            except ValueError:
                raise SparkSourceError(f"{where}: delay must be an integer, got '{delay}'", field="delay") from None
        for name in ("path", "schema", "trigger", "checkpoint", "time_column", "sign_column"):
            if items.get(name) is not None and not isinstance(items[name], str):
                raise SparkSourceError(f"{where}: '{name}' must be a string", field=name)
        items["format"] = items["format"].lower()
        return cls(**items)

    def to_dict(self) -> dict[str, Any]:
        """As JSON: the form `of` reads back."""
        return {
            "stream": self.stream,
            "format": self.format,
            "path": self.path,
            "options": dict(self.options),
            "columns": dict(self.columns),
            "time_column": self.time_column,
            "watermark_delay": self.watermark_delay,
            "schema": self.schema,
            "sign_column": self.sign_column,
            "trigger": self.trigger,
            "checkpoint": self.checkpoint,
        }

    # ------------------------------------------------------------ what the bridge runs
    def config(self, checkpoint_root: str | Path) -> SparkSourceConfig:
        """The binding of this source (its checkpoint under `checkpoint_root` unless given)."""
        available_now = (self.trigger or "").replace("_", "-").lower() in ("available-now", "availablenow", "once")
        return SparkSourceConfig(
            stream=self.stream,
            time_column=self.time_column,
            checkpoint=self.checkpoint or str(Path(checkpoint_root) / self.stream.lower()),
            watermark_delay=self.watermark_delay,
            trigger_interval=None if available_now else self.trigger,
            available_now=available_now,
            sign_column=self.sign_column,
            columns=self.columns,
        )


def _pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """Options or column maps: a table {k: v} or a list of [k, v] pairs; values become strings
    (Spark reader options are strings; TOML booleans become 'true'/'false')."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        items = [tuple(p) for p in value]
    else:
        raise SparkSourceError(f"{where}: expected a table of key = value", field=where.rsplit(" ", 1)[-1])
    return tuple((str(k), _text(v)) for k, v in items)


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class SourceFile:
    """A TOML file of sources: one `[[source]]` table per source (the keys of `SourceSpec`)."""

    path: Path
    specs: tuple[SourceSpec, ...] = field(default=())

    @classmethod
    def load(cls, path: str | Path) -> SourceFile:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise SparkSourceError(f"cannot read source file {p}: {e.strerror}", field="file") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise SparkSourceError(f"source file {p}: {e}", field="file") from None
        tables = data.get("source", [])
        extra = sorted(set(data) - {"source"})
        if extra or not isinstance(tables, list):
            raise SparkSourceError(f"source file {p}: expected [[source]] tables only (found {', '.join(extra)})")
        return cls(p, tuple(SourceSpec.of(t, where=f"{p}: source {i + 1}") for i, t in enumerate(tables)))
