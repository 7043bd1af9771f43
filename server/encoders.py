"""Result encoders: a whole result batch becomes text at once (pyarrow string kernels), never per tuple.

Formats (one element per result tuple, with its timestamp and sign):
- `ndjson`: `{"ts":5,"sign":1,"row":[1,"x",null]}` per line;
- `json`: the same objects as one streamed JSON array (`[` … `,` … `]`);
- `sse`: `data: {…same object…}` events (after an `open` event carrying the schema);
- `xml` (STREAM style): `<tuple ts="5" sign="+"><v>1</v><v>x</v><v null="true"/></tuple>` inside
  `<results query=… kind=…>`, after a `<schema>` element.
Control messages (`lagged`, `end`) are `{"event": …}` objects / SSE events / XML elements.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cqlstream.engine.batch import Batch

FORMATS = ("ndjson", "json", "sse", "xml")
MEDIA = {
    "ndjson": "application/x-ndjson",
    "json": "application/json",
    "sse": "text/event-stream",
    "xml": "application/xml",
}
_BY_MEDIA = {
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/json": "json",
    "text/event-stream": "sse",
    "application/xml": "xml",
    "text/xml": "xml",
}


def format_from_accept(accept: str | None) -> str | None:
    """The first supported format named by an Accept header (None when it names none of them)."""
    if not accept:
        return None
    ranked = []
    for i, part in enumerate(accept.split(",")):
        bits = [b.strip() for b in part.split(";")]
        q = 1.0
        for b in bits[1:]:
            if b.startswith("q="):
                try:
                    q = float(b[2:])
                except ValueError:
                    q = 0.0
        ranked.append((-q, i, bits[0].lower()))
    for _, _, mt in sorted(ranked):
        if mt in _BY_MEDIA:
            return _BY_MEDIA[mt]
    return None


# ---------------------------------------------------------------- value columns as text


def _text_array(col: np.ndarray) -> pa.Array:
    return pa.array(col, type=pa.string(), from_pandas=False)


_CONTROL = r"[\x00-\x1f]"


def _json_strings(col: np.ndarray) -> pa.Array:
    arr = _text_array(col)
    if len(arr) and pc.any(pc.match_substring_regex(arr, _CONTROL)).as_py():
        return pa.array([json.dumps(v, ensure_ascii=False) for v in col.tolist()], pa.string())
    arr = pc.replace_substring(arr, "\\", "\\\\")
    arr = pc.replace_substring(arr, '"', '\\"')
    return pc.binary_join_element_wise('"', arr, '"', "")


def _xml_strings(col: np.ndarray) -> pa.Array:
    arr = _text_array(col)
    if not len(arr):
        return arr
    arr = pc.replace_substring(arr, "&", "&amp;")
    arr = pc.replace_substring(arr, "<", "&lt;")
    arr = pc.replace_substring(arr, ">", "&gt;")
    if pc.any(pc.match_substring_regex(arr, r"[\x00-\x08\x0b\x0c\x0e-\x1f]")).as_py():
        arr = pc.replace_substring_regex(arr, r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "\ufffd")
    return arr


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
        arr = _json_strings(col) if json_mode else _xml_strings(col)
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
    n = len(b)
    if n == 0:
        return b""
    parts: list = [
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
    parts.append("]}\n")
    return _body(pc.binary_join_element_wise(*parts, ""))


def xml_elements(b: Batch) -> bytes:
    n = len(b)
    if n == 0:
        return b""
    sign = pa.array(np.where(b.sign > 0, "+", "-").astype(object), pa.string())
    parts: list = ['<tuple ts="', _ints(b.ts), '" sign="', sign, '">']
    for i, col in enumerate(b.cols):
        v = _value_strings(col, b.nulls[i], False)
        parts.append(pc.fill_null(pc.binary_join_element_wise("<v>", v, "</v>", ""), '<v null="true"/>'))
    parts.append("</tuple>\n")
    return _body(pc.binary_join_element_wise(*parts, ""))


def encode(b: Batch, fmt: str) -> bytes:
    """The elements of `b` in `fmt`, ready to be concatenated after earlier output of the same
    subscription (JSON elements are each followed by ',\n'; the trailer closes the array)."""
    if fmt == "xml":
        return xml_elements(b)
    lines = ndjson_lines(b)
    if fmt == "ndjson" or not lines:
        return lines
    if fmt == "json":
        return lines.replace(b"}\n", b"},\n")
    if fmt == "sse":
        return b"data: " + lines[:-1].replace(b"\n", b"\n\ndata: ") + b"\n\n"
    raise ValueError(fmt)


# ---------------------------------------------------------------- framing


def header(fmt: str, query_id: int, kind: str, schema: list[tuple[str, str]]) -> bytes:
    if fmt == "json":
        return b"[\n"
    if fmt == "sse":
        info = {"event": "open", "query": query_id, "kind": kind, "schema": [{"name": n, "type": t} for n, t in schema]}
        return b"retry: 3000\nevent: open\ndata: " + json.dumps(info).encode() + b"\n\n"
    if fmt == "xml":
        attrs = "".join(f"<attribute name={quoteattr(n)} type={quoteattr(t)}/>" for n, t in schema)
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<results query="{query_id}" kind="{kind}">\n'
            f"<schema>{attrs}</schema>\n"
        ).encode()
    return b""


def control(fmt: str, event: str, info: dict) -> bytes:
    """A control message (lagged / end) in `fmt`; in JSON it is the array's last element."""
    obj = {"event": event, **info}
    if fmt == "ndjson":
        return json.dumps(obj).encode() + b"\n"
    if fmt == "json":
        return json.dumps(obj).encode() + b",\n"
    if fmt == "sse":
        return f"event: {event}\ndata: {json.dumps(obj)}\n\n".encode()
    attrs = "".join(f" {k}={quoteattr(str(v))}" for k, v in info.items())
    return f"<{escape(event)}{attrs}/>\n".encode()


def trailer(fmt: str) -> bytes:
    if fmt == "json":
        return b'{"event":"close"}\n]\n'
    if fmt == "xml":
        return b"</results>\n"
    return b""


def keepalive(fmt: str) -> bytes:
    """Bytes that change nothing for a reader of `fmt` (to notice dead connections, keep proxies open)."""
    if fmt == "sse":
        return b": keepalive\n\n"
    if fmt in ("json", "xml"):
        return b"\n"
    return b""
