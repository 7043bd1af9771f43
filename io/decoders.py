"""Ingest decoders: request bodies → typed columns for one push (JSON array, NDJSON, CSV, Arrow IPC
stream), each format an `IngestFormat` (its media types, its decoder, and the client's encoder of rows).

Every push is validated whole before anything reaches the engine; errors name the 0-based row and
the field. The NDJSON, CSV and Arrow paths are columnar (pyarrow parses, numpy holds the columns);
when the fast parser refuses a body, a row-by-row pass finds the exact row and field to report (or
accepts what the fast path is too strict for, such as explicit NULLs and case-insensitive names).

Row shapes:
- objects: `{"ts": 5, "A": 1, "B": "x"}` (+ `"sign": 1 | -1 | "+" | "-"` for relations; no `ts`
  for system-timestamped streams); field names match the declared columns case-insensitively;
  a missing column is an error, an explicit `null` is NULL.
- arrays (JSON only): `[ts, (sign,) A, B]`, in declared column order.
- CSV: a header line naming the fields, then one line per row; an empty field is NULL for
  non-text columns; signs may be written `+`/`-`.
- Arrow IPC stream: one column per field, cast safely to the declared types.

The table of formats is io/formats.py.
"""

from __future__ import annotations

import csv
import io
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from cqlstream.cql.catalog import SourceDef
from cqlstream.engine.batch import Batch
from cqlstream.io.errors import IngestError
from cqlstream.io.lazy_compute import pc
from cqlstream.io.value_checks import check_floats, check_texts, check_timestamps

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_TEXT_KINDS = ("char", "varchar")
_BOM = b"\xef\xbb\xbf"


def _strip_bom(body: bytes) -> bytes:
    """A text body without its UTF-8 byte-order mark (spreadsheets write one before CSV)."""
    return body[len(_BOM) :] if body.startswith(_BOM) else body


def checked(parsed: Parsed, target: Target, *, texts: bool = True) -> Parsed:
    """`parsed` once its values pass the checks every format shares (io/value_checks.py); `texts`
    False: its text columns were checked already (as Arrow columns, see `_from_table`)."""
    check_timestamps(parsed.ts, target.ts_field)
    for i, ((name, kind), col, mask) in enumerate(zip(target.columns, parsed.cols, parsed.nulls)):
        if kind == "float":
            check_floats(col, mask, name)
        elif texts and col.dtype == object:
            check_texts(col, mask, name, target.length(i))
    return parsed


@dataclass(frozen=True)
class Target:
    """What one source accepts: its columns (name, type kind), kind and timestamp mode."""

    name: str
    kind: str  # stream | relation
    columns: tuple[tuple[str, str], ...]  # (name, DataType.kind)
    system_ts: bool
    ts_field: str = "ts"
    sign_field: str = "sign"
    lengths: tuple[int | None, ...] = ()  # declared char(N) / varchar(N) lengths, by column (empty: unchecked)

    @property
    def relation(self) -> bool:
        return self.kind == "relation"

    def fields(self) -> list[str]:
        """Field names of a pushed row, in array order."""
        out = [] if self.system_ts else [self.ts_field]
        if self.relation:
            out.append(self.sign_field)
        return out + [c for c, _ in self.columns]

    @classmethod
    def of(cls, source: SourceDef, ts_field: str = "ts", sign_field: str = "sign") -> Target:
        """What a registered stream or relation accepts (the server's pushes and in-process sources)."""
        return cls(
            source.name,
            source.kind,
            tuple((a.name, a.type.kind) for a in source.attrs),
            source.timestamp == "system",
            ts_field,
            sign_field,
            tuple(a.type.length if a.type.kind in _TEXT_KINDS else None for a in source.attrs),
        )

    def length(self, i: int) -> int | None:
        """The declared length of column i (None: unbounded or unknown)."""
        return self.lengths[i] if i < len(self.lengths) else None


@dataclass
class Parsed:
    cols: list[np.ndarray]
    nulls: list[np.ndarray | None]
    ts: np.ndarray | None  # None for system-timestamped streams
    sign: np.ndarray | None

    def __len__(self) -> int:
        return len(self.cols[0]) if self.cols else (0 if self.ts is None else len(self.ts))

    def batch(self, ts: np.ndarray | None = None) -> Batch:
        n = len(self)
        t = self.ts if ts is None else ts
        sign = self.sign if self.sign is not None else np.ones(n, np.int8)
        return Batch(
            self.cols, self.nulls, np.asarray(t, np.int64), sign.astype(np.int8, copy=False), np.zeros(n, np.uint64)
        )


# ---------------------------------------------------------------- arrow types

_ARROW = {"int": pa.int64(), "timestamp": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}


def _arrow_type(kind: str) -> pa.DataType:
    return _ARROW.get(kind, pa.string())


def _arrow_schema(target: Target, sign_type: pa.DataType | None = None) -> pa.Schema:
    sign_type = pa.int64() if sign_type is None else sign_type
    fields = []
    if not target.system_ts:
        fields.append(pa.field(target.ts_field, pa.int64()))
    if target.relation:
        fields.append(pa.field(target.sign_field, sign_type))
    fields += [pa.field(c, _arrow_type(k)) for c, k in target.columns]
    return pa.schema(fields)


def _numpy_column(arr: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """An Arrow column (already of the declared type) → (numpy column as the engine holds it, null mask)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    mask = None
    if arr.null_count:
        mask = arr.is_null().to_numpy(zero_copy_only=False)
        arr = pc.fill_null(arr, _ARROW_FILL.get(kind, ""))
    if kind in ("int", "timestamp"):
        col = arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    elif kind == "float":
        col = arr.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    elif kind == "bool":
        col = arr.to_numpy(zero_copy_only=False).astype(np.bool_, copy=False)
    else:
        col = arr.to_numpy(zero_copy_only=False)
        if col.dtype != object:
            col = col.astype(object)
    return col, mask


_ARROW_FILL = {"int": 0, "timestamp": 0, "float": 0.0, "bool": False}


def _from_table(tbl: pa.Table, target: Target, names: dict[str, str]) -> Parsed:
    """Columns of a table already cast to the declared types (names: field → table column)."""
    ts = sign = None
    if not target.system_ts:
        c = tbl.column(names[target.ts_field])
        if c.null_count:
            i = _first_null(c)
            raise IngestError(f"row {i}: field '{target.ts_field}' is null", i, target.ts_field)
        ts = c.to_numpy().astype(np.int64, copy=False)
    if target.relation:
        c = tbl.column(names[target.sign_field])
        sign = _signs(c, target)
    cols, nulls = [], []
    for i, (name, kind) in enumerate(target.columns):
        if _arrow_type(kind) == pa.string():
            _check_utf8(tbl.column(names[name]), name)
            check_texts(tbl.column(names[name]), None, name, target.length(i))
        col, mask = _numpy_column(tbl.column(names[name]), kind)
        cols.append(col)
        nulls.append(mask if mask is not None and mask.any() else None)
    return checked(Parsed(cols, nulls, ts, sign), target, texts=False)


def _check_utf8(c: pa.Array | pa.ChunkedArray, field: str) -> None:
    """Refuse a string column holding invalid UTF-8 (the JSON reader and Arrow IPC bodies do not
    check it); only a failing column is scanned for its first bad row."""
    try:
        c.validate(full=True)
    except pa.ArrowInvalid:
        values = pc.cast(c, pa.binary()).to_pylist()
        i = next(i for i, v in enumerate(values) if v is not None and not _is_utf8(v))
        raise IngestError(
            f"row {i} field '{field}': the text is not UTF-8", i, field, status=400, code="malformed_body"
        ) from None


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _first_null(c: pa.Array | pa.ChunkedArray) -> int:
    return int(np.argmax(c.is_null().to_numpy(zero_copy_only=False)))


def _signs(c: pa.Array | pa.ChunkedArray, target: Target) -> np.ndarray:
    if isinstance(c, pa.ChunkedArray):
        c = c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)
    if c.null_count:
        i = _first_null(c)
        raise IngestError(f"row {i}: field '{target.sign_field}' is null", i, target.sign_field)
    if pa.types.is_string(c.type) or pa.types.is_large_string(c.type):
        s = c.to_numpy(zero_copy_only=False).astype(str)
        out = np.zeros(len(s), np.int8)
        out[(s == "+") | (s == "1") | (s == "+1")] = 1
        out[(s == "-") | (s == "-1")] = -1
    else:
        v = c.to_numpy(zero_copy_only=False)
        out = np.where(v == 1, 1, np.where(v == -1, -1, 0)).astype(np.int8)
    bad = np.flatnonzero(out == 0)
    if len(bad):
        i = int(bad[0])
        raise IngestError(
            f"row {i}: field '{target.sign_field}' must be 1 or -1 (or '+' / '-'), got {c[i].as_py()!r}",
            i,
            target.sign_field,
        )
    return out


# ---------------------------------------------------------------- NDJSON


def _parse_ndjson(body: bytes, target: Target) -> Parsed:
    import pyarrow.json as pj

    body = _strip_bom(body)
    if not body.strip():
        return _empty(target)
    tbl = None
    try:
        if _NULL not in body:
            opts = pj.ParseOptions(explicit_schema=_arrow_schema(target), unexpected_field_behavior="error")
            tbl = pj.read_json(
                io.BytesIO(body),
                read_options=pj.ReadOptions(block_size=max(1 << 20, min(len(body) // 8, 16 << 20))),
                parse_options=opts,
            )
    except (pa.ArrowException, UnicodeDecodeError):  # the row-by-row pass below names the culprit
        tbl = None
    if tbl is not None and not any(c.null_count for c in tbl.columns):
        return _from_table(tbl, target, {f: f for f in target.fields()})
    # the slow path finds the offending row/field (or accepts explicit NULLs and other spellings)
    rows = []
    for i, line in enumerate(_lines(body)):
        if not line.strip():
            raise IngestError(f"row {i}: empty line", i, status=400, code="malformed_body")
        rows.append(_json_value(line, i))
    return _from_rows(rows, target)


# pyarrow's JSON reader (26.x) crashes the process on a row that is a bare `null` at the start of a
# block: a body holding `null` anywhere skips it (explicit NULLs take the row-by-row pass anyway)
_NULL = b"null"


def _lines(body: bytes) -> list[bytes]:
    lines = body.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


# ---------------------------------------------------------------- JSON


def _json_value(text: bytes, row: int | None = None) -> Any:
    """`json.loads`, its failures as IngestErrors: 400 for malformed JSON or bytes that are not
    UTF-8, 422 `too_deep` for nesting deeper than the parser's stack (rows are flat anyway)."""
    at = f"row {row}: " if row is not None else ""
    try:
        return json.loads(text)
    except UnicodeDecodeError as e:
        raise IngestError(
            f"{at}the body is not UTF-8: byte 0x{text[e.start]:02x} at offset {e.start}",
            row,
            status=400,
            code="malformed_body",
        ) from None
    except ValueError as e:
        raise IngestError(f"{at}malformed JSON: {e}", row, status=400, code="malformed_body") from None
    except RecursionError:
        raise IngestError(
            f"{at}JSON nested too deeply (a row is an object or array of plain values)", row, code="too_deep"
        ) from None


def _parse_json(body: bytes, target: Target) -> Parsed:
    data = _json_value(_strip_bom(body))
    if isinstance(data, dict) and "rows" in data and len(data) == 1:
        data = data["rows"]
    if not isinstance(data, list):
        raise IngestError(
            "the body must be a JSON array of rows (objects or arrays)", status=400, code="malformed_body"
        )
    return _from_rows(data, target)


def _check_value(v: Any, kind: str, row: int, field: str) -> Any:
    """A JSON value checked against a column type (None passes as NULL)."""
    if v is None:
        return None
    if kind in ("int", "timestamp"):
        ok = isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= INT64_MAX
    elif kind == "float":
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ok:
            v = float(v)
    elif kind == "bool":
        ok = isinstance(v, bool)
    else:
        ok = isinstance(v, str)
    if not ok:
        raise IngestError(
            f"row {row} field '{field}': {json.dumps(v)[:80]} is not a{_article(kind)} {_kind_name(kind)}", row, field
        )
    return v


def _article(kind: str) -> str:
    return "n" if _kind_name(kind)[0] in "aeiou" else ""


def _kind_name(kind: str) -> str:
    return {"int": "integer", "timestamp": "integer timestamp", "float": "number", "bool": "boolean"}.get(
        kind, "string"
    )


def _from_rows(rows: list[Any], target: Target) -> Parsed:
    """Python rows (dicts or lists, from JSON) → columns, checking each value; errors name row and field."""
    fields = target.fields()
    lower = {f.lower(): f for f in fields}
    n = len(rows)
    values: dict[str, list[Any]] = {f: [None] * n for f in fields}
    for i, r in enumerate(rows):
        if isinstance(r, dict):
            seen = set()
            for key, v in r.items():
                f = lower.get(str(key).lower())
                if f is None:
                    if not target.system_ts or str(key).lower() != target.ts_field.lower():
                        raise IngestError(f"row {i}: unknown field '{key}' (expected {', '.join(fields)})", i, key)
                    raise IngestError(
                        f"row {i}: '{target.name}' is system-timestamped: rows carry no '{target.ts_field}'", i, key
                    )
                if f in seen:
                    raise IngestError(f"row {i}: field '{f}' is given twice", i, f)
                seen.add(f)
                values[f][i] = v
            if len(seen) != len(fields):
                missing = [f for f in fields if f not in seen]
                raise IngestError(f"row {i}: missing field '{missing[0]}'", i, missing[0])
        elif isinstance(r, list):
            if len(r) != len(fields):
                raise IngestError(f"row {i} has {len(r)} values, expected {len(fields)} ({', '.join(fields)})", i)
            for f, v in zip(fields, r):
                values[f][i] = v
        else:
            raise IngestError(f"row {i}: a row must be a JSON object or array", i, status=422)
    ts = sign = None
    if not target.system_ts:
        f = target.ts_field
        col = values[f]
        for i, v in enumerate(col):
            if v is None:
                raise IngestError(f"row {i}: field '{f}' is null", i, f)
            _check_value(v, "int", i, f)
        ts = np.array(col, np.int64) if n else np.zeros(0, np.int64)
    if target.relation:
        f = target.sign_field
        sign = np.zeros(n, np.int8)
        for i, v in enumerate(values[f]):
            s = {1: 1, -1: -1, "+": 1, "-": -1, "+1": 1, "-1": -1, "1": 1}.get(v) if not isinstance(v, bool) else None
            if s is None:
                raise IngestError(
                    f"row {i}: field '{f}' must be 1 or -1 (or '+' / '-'), got {json.dumps(v)[:40]}", i, f
                )
            sign[i] = s
    cols, nulls = [], []
    for name, kind in target.columns:
        col = [_check_value(v, kind, i, name) for i, v in enumerate(values[name])]
        cols_, mask = _column(col, kind)
        cols.append(cols_)
        nulls.append(mask)
    return checked(Parsed(cols, nulls, ts, sign), target)


def _column(vals: list[Any], kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    n = len(vals)
    mask = np.fromiter((v is None for v in vals), bool, n)
    anynull = bool(mask.any())
    arr: np.ndarray
    if kind in ("int", "timestamp", "float", "bool"):
        dtype = {"float": np.float64, "bool": np.bool_}.get(kind, np.int64)
        fill = {"float": 0.0, "bool": False}.get(kind, 0)
        arr = (
            np.array([fill if v is None else v for v in vals] if anynull else vals, dtype=dtype)
            if n
            else np.zeros(0, dtype)
        )
    else:
        arr = np.empty(n, dtype=object)
        arr[:] = ["" if v is None else v for v in vals] if anynull else vals
    return arr, (mask if anynull else None)


def _empty(target: Target) -> Parsed:
    return _from_rows([], target)


# ---------------------------------------------------------------- CSV


def _parse_csv(body: bytes, target: Target) -> Parsed:
    import pyarrow.csv as pcsv

    body = _strip_bom(body)
    if not body.strip():
        return _empty(target)
    header_end = body.find(b"\n")
    header = body[: header_end if header_end >= 0 else len(body)].decode("utf-8", "replace").strip("\r")
    try:
        names = next(csv.reader([header]), [])
    except csv.Error as e:
        raise IngestError(f"malformed CSV header: {e}", status=400, code="malformed_body") from None
    fields = target.fields()
    lower = {f.lower(): f for f in fields}
    mapped = []
    for h in names:
        f = lower.get(h.strip().lower())
        if f is None:
            raise IngestError(f"CSV header: unknown field '{h}' (expected {', '.join(fields)})", None, h)
        if f in mapped:
            raise IngestError(f"CSV header: field '{f}' is given twice", None, f)
        mapped.append(f)
    missing = [f for f in fields if f not in mapped]
    if missing:
        raise IngestError(f"CSV header: missing field '{missing[0]}'", None, missing[0])
    kinds = {target.ts_field: "int", target.sign_field: "sign", **{c: k for c, k in target.columns}}
    types = {h: (pa.string() if kinds[f] == "sign" else _arrow_type(kinds[f])) for h, f in zip(names, mapped)}
    try:
        tbl = pcsv.read_csv(
            io.BytesIO(body),
            read_options=pcsv.ReadOptions(block_size=max(1 << 20, min(len(body) // 8, 16 << 20))),
            convert_options=pcsv.ConvertOptions(
                column_types=types,
                null_values=["", "null", "NULL"],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                true_values=["true", "True", "TRUE", "1"],
                false_values=["false", "False", "FALSE", "0"],
            ),
        )
    except (pa.ArrowException, UnicodeDecodeError):
        tbl = None
    if tbl is not None and tbl.num_columns == len(names):
        return _from_table(tbl, target, dict(zip(mapped, names)))
    return _csv_slow(body, target, mapped, kinds)


def _csv_slow(body: bytes, target: Target, mapped: list[str], kinds: dict[str, str]) -> Parsed:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        at = body.count(b"\n", 0, e.start) - 1  # the row (the header is line 0, row -1)
        raise IngestError(
            f"{'the CSV header' if at < 0 else f'row {at}'} is not UTF-8: byte 0x{body[e.start]:02x} "
            f"at offset {e.start}",
            at if at >= 0 else None,
            status=400,
            code="malformed_body",
        ) from None
    rows = []
    for i, rec in enumerate(_csv_records(text)):
        if not rec:
            continue
        if len(rec) != len(mapped):
            raise IngestError(f"row {i} has {len(rec)} values, expected {len(mapped)}", i)
        row: dict[str, object] = {}
        for f, s in zip(mapped, rec):
            kind = kinds[f]
            if kind == "sign":
                row[f] = s.strip()
                continue
            if kind not in ("int", "timestamp", "float", "bool") or s not in ("", "null", "NULL"):
                row[f] = _convert(s, kind, i, f)
            else:
                row[f] = None
        rows.append(row)
    return _from_rows(rows, target)


def _csv_records(text: str) -> list[list[str]]:
    """The records after the header line, or a 400 naming the line the csv module cannot read."""
    reader = csv.reader(io.StringIO(text))
    try:
        next(reader, None)
        return list(reader)
    except csv.Error as e:
        raise IngestError(f"malformed CSV at line {reader.line_num}: {e}", status=400, code="malformed_body") from None


def _convert(s: str, kind: str, row: int, field: str) -> int | float | bool | str:
    try:
        if kind in ("int", "timestamp"):
            return int(s)
        if kind == "float":
            return float(s)
        if kind == "bool":
            b = {"true": True, "1": True, "false": False, "0": False}.get(s.strip().lower())
            if b is None:
                raise ValueError
            return b
    except ValueError:
        raise IngestError(
            f"row {row} field '{field}': {s[:80]!r} is not a{_article(kind)} {_kind_name(kind)}", row, field
        ) from None
    return s


# ---------------------------------------------------------------- Arrow IPC


def _parse_arrow(body: bytes, target: Target) -> Parsed:
    if not body:
        return _empty(target)
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        tbl = reader.read_all()
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        try:
            tbl = pa.ipc.open_file(pa.py_buffer(body)).read_all()
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            raise IngestError(f"malformed Arrow IPC stream: {e}", status=400, code="malformed_body") from None
    try:
        tbl.column_names  # noqa: B018  (decoded on access: a name that is not UTF-8 fails here)
    except UnicodeDecodeError:
        raise IngestError(
            "malformed Arrow IPC stream: a field name is not UTF-8", status=400, code="malformed_body"
        ) from None
    return arrow_table_columns(tbl, target)


def arrow_table_columns(tbl: pa.Table, target: Target) -> Parsed:
    """An Arrow table (one column per field, names matched case-insensitively) as typed columns:
    the Arrow IPC body's path, and the entry point of in-process Arrow sources."""
    fields = target.fields()
    lower = {f.lower(): f for f in fields}
    names: dict[str, str] = {}
    for col in tbl.column_names:
        f = lower.get(col.lower())
        if f is None:
            if target.system_ts and col.lower() == target.ts_field.lower():
                raise IngestError(
                    f"'{target.name}' is system-timestamped: rows carry no '{target.ts_field}'", None, col
                )
            raise IngestError(f"unknown field '{col}' (expected {', '.join(fields)})", None, col)
        if f in names:
            raise IngestError(f"field '{f}' is given twice", None, f)
        names[f] = col
    missing = [f for f in fields if f not in names]
    if missing:
        raise IngestError(f"missing field '{missing[0]}'", None, missing[0])
    kinds = {target.ts_field: "int", **{c: k for c, k in target.columns}}
    cols = {}
    for f, col in names.items():
        arr = tbl.column(col)
        if f == target.sign_field and target.relation:
            cols[f] = arr
            continue
        want = _arrow_type(kinds[f])
        if arr.type != want:
            if pa.types.is_dictionary(arr.type):
                arr = pc.cast(arr, arr.type.value_type)
            textual = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
            if (
                (pa.types.is_boolean(arr.type) and kinds[f] != "bool")
                or (want == pa.string() and not textual)
                or (textual and want != pa.string())
            ):
                raise IngestError(
                    f"field '{f}': Arrow type {arr.type} is not a{_article(kinds[f])} {_kind_name(kinds[f])}", None, f
                )
            try:
                arr = pc.cast(arr, want, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowException) as e:
                raise IngestError(
                    f"field '{f}': cannot convert {tbl.column(col).type} to {_kind_name(kinds[f])}: {e}", None, f
                ) from None
        cols[f] = arr
    t2 = pa.table({f: cols[f] for f in fields})
    return _from_table(t2, target, {f: f for f in fields})


# ---------------------------------------------------------------- the formats

_ROW = {"oneOf": [{"type": "object", "additionalProperties": True}, {"type": "array"}]}


class IngestFormat(ABC):
    """A push body format: a subclass sets the class attributes and writes `decode` (the server's
    side) and `encode_rows` (the client's side)."""

    name: ClassVar[str]
    label: ClassVar[str]  # for help texts
    media_type: ClassVar[str]  # the Content-Type a client sends
    aliases: ClassVar[tuple[str, ...]] = ()  # other Content-Types accepted for it
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string"}}  # the OpenAPI requestBody content entry

    @abstractmethod
    def decode(self, body: bytes, target: Target) -> Parsed:
        """The whole body as typed columns for `target`, or an IngestError naming the row and field."""

    @abstractmethod
    def encode_rows(self, rows: Any) -> bytes:
        """A body in this format for rows (dicts `{ts, [sign], A, ...}` or lists `[ts, [sign], A, ...]`)."""


class JsonRows(IngestFormat):
    name = "json"
    label = "JSON"
    media_type = "application/json"
    openapi: ClassVar[dict[str, Any]] = {
        "schema": {"type": "array", "items": _ROW},
        "example": [{"ts": 1, "A": 1, "B": 0.5}, {"ts": 2, "A": 2, "B": 1.5}],
    }

    def decode(self, body: bytes, target: Target) -> Parsed:
        return _parse_json(body, target)

    def encode_rows(self, rows: Any) -> bytes:
        return json.dumps(list(rows)).encode()


class NdjsonRows(IngestFormat):
    name = "ndjson"
    label = "NDJSON"
    media_type = "application/x-ndjson"
    aliases = ("application/ndjson", "application/jsonl", "application/json-lines", "application/jsonlines")
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string"}, "example": '{"ts": 1, "A": 1, "B": 0.5}\n'}

    def decode(self, body: bytes, target: Target) -> Parsed:
        return _parse_ndjson(body, target)

    def encode_rows(self, rows: Any) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in rows).encode()


class CsvRows(IngestFormat):
    name = "csv"
    label = "CSV"
    media_type = "text/csv"
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string"}, "example": "ts,A,B\n1,1,0.5\n"}

    def decode(self, body: bytes, target: Target) -> Parsed:
        return _parse_csv(body, target)

    def encode_rows(self, rows: Any) -> bytes:
        rows = list(rows)
        if not rows or not isinstance(rows[0], dict):
            raise ValueError("CSV pushes take dict rows (the header comes from their keys)")
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return out.getvalue().encode()


class ArrowStream(IngestFormat):
    name = "arrow"
    label = "Arrow"
    media_type = "application/vnd.apache.arrow.stream"
    aliases = ("application/vnd.apache.arrow.file", "application/x-arrow")
    openapi: ClassVar[dict[str, Any]] = {"schema": {"type": "string", "format": "binary"}}

    def decode(self, body: bytes, target: Target) -> Parsed:
        return _parse_arrow(body, target)

    def decode_table(self, table: pa.Table, target: Target) -> Parsed:
        """An Arrow table already in memory (no IPC round trip), checked and cast like a body."""
        return arrow_table_columns(table, target)

    def encode_rows(self, rows: Any) -> bytes:
        if not isinstance(rows, (pa.Table, pa.RecordBatch)):
            raise ValueError("Arrow pushes take a pyarrow Table or RecordBatch")
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, rows.schema) as w:
            w.write(rows)
        return sink.getvalue()


__all__ = [
    "ArrowStream",
    "CsvRows",
    "IngestError",
    "IngestFormat",
    "JsonRows",
    "NdjsonRows",
    "Parsed",
    "Target",
    "arrow_table_columns",
]
