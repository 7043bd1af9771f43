"""The tables of formats: every ingest decoder and result encoder the server, the CLI and the client
know of. Adding a format is one class (io/decoders.py or io/encoders.py) and one line here."""

from __future__ import annotations

from cqlstream.io.decoders import ArrowStream, CsvRows, IngestFormat, JsonRows, NdjsonRows, Parsed, Target
from cqlstream.io.encoders import JsonArray, Ndjson, ResultFormat, Sse, Xml
from cqlstream.io.errors import IngestError
from cqlstream.io.registry import Registry

# bodies of `POST /streams/{name}/tuples`, selected by Content-Type
INGEST_FORMATS: Registry[IngestFormat] = Registry("ingest format", [JsonRows(), NdjsonRows(), CsvRows(), ArrowStream()])

# replies of `GET /queries/{id}/results`, selected by `format=` or Accept; the first is the default
RESULT_FORMATS: Registry[ResultFormat] = Registry("result format", [Ndjson(), JsonArray(), Sse(), Xml()])


def ingest_format(content_type: str | None) -> IngestFormat:
    """The ingest format of a Content-Type, or an IngestError (415) listing the supported ones."""
    fmt = INGEST_FORMATS.by_media_type(content_type or "")
    if fmt is None:
        raise IngestError(
            f"unsupported Content-Type '{content_type or ''}'; use one of {', '.join(INGEST_FORMATS.media_types())}",
            status=415,
            code="unsupported_media_type",
        )
    return fmt


def decode(body: bytes, content_type: str | None, target: Target) -> Parsed:
    """A push body as typed columns, by its Content-Type."""
    return ingest_format(content_type).decode(body, target)


def default_result_format() -> ResultFormat:
    return next(iter(RESULT_FORMATS))


__all__ = ["INGEST_FORMATS", "RESULT_FORMATS", "decode", "default_result_format", "ingest_format"]
