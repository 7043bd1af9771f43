"""Result encoders: a whole result batch becomes text at once (pyarrow string kernels), never per tuple.

Each format is a `ResultFormat`: its name, media type, and the bytes of a result stream's header,
elements, control messages (`lagged`, `end`), keep-alives and footer. One element per result tuple,
with its timestamp and sign:
- `ndjson`: `{"ts":5,"sign":1,"row":[1,"x",null]}` per line;
- `json`: the same objects as one streamed JSON array (`[` … `,` … `]`);
- `sse`: `data: {…same object…}` events (after an `open` event carrying the schema), the last one
  of each instant with `id: <ts>` (so a reconnecting EventSource resumes after it);
- `xml` (STREAM style): `<tuple ts="5" sign="+"><v>1</v><v>x</v><v null="true"/></tuple>` inside
  `<results query=… kind=…>`, after a `<schema>` element.
Control messages are `{"event": …}` objects / SSE events / XML elements. The table of formats is
io/formats.py.
"""

from __future__ import annotations

import base64
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from cqlstream.engine.batch import Batch
from cqlstream.io.lazy_compute import pc

# ---------------------------------------------------------------- value columns as text


def _text_array(col: np.ndarray) -> pa.Array:
    return pa.array(col, type=pa.string(), from_pandas=False)


# what JSON text must escape, and the line separators some line readers split at (NEL, U+2028,
# U+2029): escaped too, so an NDJSON element or SSE event is always one line whoever reads it
_CONTROL = r"[\x00-\x1f\x{85}\x{2028}\x{2029}]"
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _json_strings(col: np.ndarray) -> pa.Array:
    arr = _text_array(col)
    if len(arr) and pc.any(pc.match_substring_regex(arr, _CONTROL)).as_py():
        return pa.array([json.dumps(v, ensure_ascii=False).translate(_LINE_BREAKS) for v in col.tolist()], pa.string())
    arr = pc.replace_substring(arr, "\\", "\\\\")
    arr = pc.replace_substring(arr, '"', '\\"')
    return pc.binary_join_element_wise('"', arr, '"', "")


# characters XML 1.0 cannot hold, not even as character references
_NOT_XML = "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x{fffe}\\x{ffff}]"


def _xml_strings(col: np.ndarray) -> tuple[pa.Array, np.ndarray | None]:
    """Escaped element text per value, and which values are written in base64 instead (None: none):
    those holding a character XML 1.0 cannot carry at all (C0 controls but tab and line breaks,
    U+FFFE, U+FFFF). A carriage return becomes `&#13;`, which parsers keep (a raw one they turn
    into a line feed)."""
    arr = _text_array(col)
    if not len(arr):
        return arr, None
    b64 = None
    bad = pc.match_substring_regex(arr, _NOT_XML)
    if pc.any(bad).as_py():
        b64 = bad.to_numpy(zero_copy_only=False) & ~np.asarray(pc.is_null(arr))
        rows = np.flatnonzero(b64)  # the rare values that need it: base64 of their UTF-8
        enc = arr.to_numpy(zero_copy_only=False).astype(object)
        enc[rows] = [base64.b64encode(v.encode("utf-8")).decode("ascii") for v in enc[rows].tolist()]
        arr = pa.array(enc, pa.string())
    arr = pc.replace_substring(arr, "&", "&amp;")
    arr = pc.replace_substring(arr, "<", "&lt;")
    arr = pc.replace_substring(arr, ">", "&gt;")
    arr = pc.replace_substring(arr, "\r", "&#13;")
    return arr, (b64 if b64 is not None and b64.any() else None)


def _value_strings(col: np.ndarray, mask: np.ndarray | None, json_mode: bool) -> pa.Array:
    """One string per value, NULL left as an Arrow null (the caller fills its NULL spelling)."""
    if col.dtype.kind in "iu":
        arr = pc.cast(pa.array(col.astype(np.int64, copy=False)), pa.string())
    elif col.dtype.kind == "f":
        bad = ~np.isfinite(col)
        if json_mode and bad.any():  # JSON has no NaN/Infinity: they become null
            mask = bad if mask is None else (mask | bad)
        arr = pc.cast(pa.array(col), pa.string())
        if json_mode and len(arr):  # keep floats floats for JSON readers: 3 → 3.0, -0 → -0.0
            plain = pc.invert(pc.match_substring_regex(arr, "[.eEn]"))
            if pc.any(plain).as_py():
                arr = pc.if_else(plain, pc.binary_join_element_wise(arr, ".0", ""), arr)
    elif col.dtype == np.bool_:
        arr = pc.cast(pa.array(col), pa.string())
    else:
        arr = _json_strings(col) if json_mode else _xml_strings(col)[0]
    return _masked(arr, mask)


def _masked(arr: pa.Array, mask: np.ndarray | None) -> pa.Array:
    """`arr` with the NULL rows of `mask` as Arrow nulls."""
    if mask is not None and mask.any():
        arr = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), arr)
    return arr


def _body(arr: pa.Array) -> bytes:
    """The concatenated bytes of a string array (its data buffer between the first and last offset)."""
    if len(arr) == 0:
        return b""
    if arr.offset or arr.null_count:
        arr = pa.concat_arrays([arr])  # normalise
    offs = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    data = arr.buffers()[2]
    return data.to_pybytes()[int(offs[0]) : int(offs[-1])] if data is not None else b""


def _ints(a: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(np.asarray(a, np.int64)), pa.string())


# ---------------------------------------------------------------- per-format element text


def ndjson_lines(b: Batch) -> bytes:
    """One JSON object per element, each ending in a newline."""
    if len(b) == 0:
        return b""
    return _body(_json_objects(b, "\n"))


def _json_objects(b: Batch, end: str) -> pa.Array:
    """Each element's JSON object followed by `end`, as a string array."""
    parts: list[str | pa.Array] = [
        '{"ts":',
        _ints(b.ts),
        ',"sign":',
        pc.cast(pa.array(b.sign.astype(np.int8)), pa.string()),
        ',"row":[',
    ]
    for i, col in enumerate(b.cols):
        if i:
            parts.append(",")
        parts.append(pc.fill_null(_value_strings(col, b.nulls[i], True), "null"))
    parts.append("]}" + end)
    return pc.binary_join_element_wise(*parts, "")


def sse_events(b: Batch) -> bytes:
    """A `data:` event per element; the last element of each instant also carries `id: <ts>`, so a
    client's Last-Event-ID is the last instant it saw whole (elements of an instant arrive together)."""
    n = len(b)
    if n == 0:
        return b""
    last = np.ones(n, bool)
    last[:-1] = b.ts[1:] != b.ts[:-1]
    ids = pc.binary_join_element_wise("id: ", _ints(b.ts), "\n", "")
    prefix = pc.if_else(pa.array(last), ids, "")
    return _body(pc.binary_join_element_wise(prefix, "data: ", _json_objects(b, "\n\n"), ""))


def xml_elements(b: Batch) -> bytes:
    n = len(b)
    if n == 0:
        return b""
    sign = pa.array(np.where(b.sign > 0, "+", "-").astype(object), pa.string())
    parts: list[str | pa.Array] = ['<tuple ts="', _ints(b.ts), '" sign="', sign, '">']
    for i, col in enumerate(b.cols):
        opening: str | pa.Array = "<v>"
        if col.dtype == object:
            v, b64 = _xml_strings(col)
            v = _masked(v, b.nulls[i])
            if b64 is not None:
                opening = pc.if_else(pa.array(b64), '<v enc="base64">', "<v>")
        else:
            v = _value_strings(col, b.nulls[i], False)
        parts.append(pc.fill_null(pc.binary_join_element_wise(opening, v, "</v>", ""), '<v null="true"/>'))
    parts.append("</tuple>\n")
    return _body(pc.binary_join_element_wise(*parts, ""))


# ---------------------------------------------------------------- the formats


class ResultFormat(ABC):
    """A result stream format: a subclass sets the class attributes and writes `elements`; the
    framing methods default to nothing."""

    name: ClassVar[str]
    label: ClassVar[str]  # for help texts
    media_type: ClassVar[str]  # the reply's Content-Type
    aliases: ClassVar[tuple[str, ...]] = ()  # other media types an Accept header may name
    charset: ClassVar[bool] = True  # the Content-Type carries `; charset=utf-8`
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string"}}  # the OpenAPI content entry

    @property
    def content_type(self) -> str:
        return self.media_type + ("; charset=utf-8" if self.charset else "")

    def header(self, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
        """What opens the stream (before any element); `schema` is (name, type) per column."""
        return b""

    @abstractmethod
    def elements(self, b: Batch) -> bytes:
        """The elements of `b`, ready to follow earlier output of the same stream."""

    @abstractmethod
    def control(self, event: str, info: dict[str, Any]) -> bytes:
        """A control message (`lagged`, `end`) with its details."""

    def keepalive(self) -> bytes:
        """Bytes that change nothing for a reader (to notice dead connections, keep proxies open)."""
        return b""

    def footer(self) -> bytes:
        """What closes the stream."""
        return b""


class Ndjson(ResultFormat):
    name = "ndjson"
    label = "NDJSON"
    media_type = "application/x-ndjson"
    aliases = ("application/ndjson", "application/jsonl")
    openapi: ClassVar[dict[str, Any]] = {
        "schema": {"type": "string"},
        "example": '{"ts":5,"sign":1,"row":[1,"x",null]}\n',
    }

    def elements(self, b: Batch) -> bytes:
        return ndjson_lines(b)

    def control(self, event: str, info: dict[str, Any]) -> bytes:
        return json.dumps({"event": event, **info}).encode() + b"\n"


class JsonArray(ResultFormat):
    """One streamed JSON array: every element is followed by ',\n'; the footer closes the array
    (with a last `close` event, so no element needs to know it is the last)."""

    name = "json"
    label = "JSON"
    media_type = "application/json"
    charset = False  # JSON is UTF-8 by definition
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "array", "items": {"type": "object"}}}

    def header(self, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
        return b"[\n"

    def elements(self, b: Batch) -> bytes:
        return ndjson_lines(b).replace(b"}\n", b"},\n")

    def control(self, event: str, info: dict[str, Any]) -> bytes:
        return json.dumps({"event": event, **info}).encode() + b",\n"

    def keepalive(self) -> bytes:
        return b"\n"

    def footer(self) -> bytes:
        return b'{"event":"close"}\n]\n'


class Sse(ResultFormat):
    """Server-Sent Events: an `open` event with the schema, a `data:` event per element (with an
    `id:` line, the element's instant, on the last element of each instant: see `sse_events`)."""

    name = "sse"
    label = "SSE"
    media_type = "text/event-stream"

    def header(self, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
        info = {"event": "open", "query": query_id, "kind": kind, "schema": [{"name": n, "type": t} for n, t in schema]}
        return b"retry: 3000\nevent: open\ndata: " + json.dumps(info).encode() + b"\n\n"

    def elements(self, b: Batch) -> bytes:
        return sse_events(b)

    def control(self, event: str, info: dict[str, Any]) -> bytes:
        return f"event: {event}\ndata: {json.dumps({'event': event, **info})}\n\n".encode()

    def keepalive(self) -> bytes:
        return b": keepalive\n\n"


class Xml(ResultFormat):
    """STREAM-style XML: `<results>` with a `<schema>`, then a `<tuple>` per element."""

    name = "xml"
    label = "XML"
    media_type = "application/xml"
    aliases = ("text/xml",)

    def header(self, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
        from xml.sax.saxutils import quoteattr  # here: it imports urllib, which start-up need not pay for

        attrs = "".join(f"<attribute name={quoteattr(n)} type={quoteattr(t)}/>" for n, t in schema)
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<results query="{query_id}" kind="{kind}">\n'
            f"<schema>{attrs}</schema>\n"
        ).encode()

    def elements(self, b: Batch) -> bytes:
        return xml_elements(b)

    def control(self, event: str, info: dict[str, Any]) -> bytes:
        from xml.sax.saxutils import escape, quoteattr

        attrs = "".join(f" {k}={quoteattr(str(v))}" for k, v in info.items())
        return f"<{escape(event)}{attrs}/>\n".encode()

    def keepalive(self) -> bytes:
        return b"\n"

    def footer(self) -> bytes:
        return b"</results>\n"


__all__ = ["JsonArray", "Ndjson", "ResultFormat", "Sse", "Xml", "ndjson_lines", "sse_events", "xml_elements"]
