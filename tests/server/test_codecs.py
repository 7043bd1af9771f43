"""Units: the vectorized result encoders and the ingest parsers (no server needed)."""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pyarrow as pa
import pytest

from cqlstream.engine.batch import Batch
from cqlstream.io.decoders import Target
from cqlstream.io.errors import IngestError
from cqlstream.io.formats import RESULT_FORMATS
from cqlstream.io.formats import decode as parse
from tests.server.formats import PARSERS

TEXTS = ["plain", 'q"uote', "back\\slash", "<a&b>", "ünï ✓", "tab\tnl\nret\r", "\x01ctl\ufffe\uffff", ""]


def _batch():
    n = len(TEXTS)
    ints = np.array([0, -1, 2**62, 7, -(2**63), 5, 6, 1], np.int64)
    floats = np.array([0.1, -0.0, 1e300, float("nan"), float("inf"), 1 / 3, 2.5, 1e-7])
    bools = np.array([True, False] * 4)
    texts = np.array(TEXTS, dtype=object)
    nulls = [None, np.array([0, 0, 0, 0, 0, 0, 1, 0], bool), None, np.array([0, 0, 0, 0, 0, 0, 0, 1], bool)]
    return Batch(
        [ints, floats, bools, texts],
        nulls,
        np.arange(n, dtype=np.int64) * 3,
        np.array([1, -1] * 4, np.int8),
        np.zeros(n, np.uint64),
    )


def test_json_encodings_round_trip_exactly():
    b = _batch()
    for fmt in ("ndjson", "json", "sse"):
        f = RESULT_FORMATS[fmt]
        body = f.header(1, "relation", [("i", "INTEGER")]) + f.elements(b) + f.footer()
        elems, _ = PARSERS[fmt](body.decode())
        assert len(elems) == len(b)
        for (ts, sign, row), (ets, esign, erow) in zip(elems, b.elements()):
            assert (ts, sign) == (ets, esign)
            assert row[0] == erow[0] and row[2] == erow[2] and row[3] == erow[3]
            f = erow[1]
            if f is None or not math.isfinite(f):
                assert row[1] is None, "NULL, NaN and infinities are JSON null"
            else:
                assert row[1] == f and math.copysign(1, row[1]) == math.copysign(1, f)


def test_xml_is_well_formed_and_round_trips():
    b = _batch()
    schema = [("i", "INTEGER"), ("f", "FLOAT"), ("b", "BOOLEAN"), ("t", "VARCHAR")]
    body = (
        RESULT_FORMATS["xml"].header(3, "stream", schema)
        + RESULT_FORMATS["xml"].elements(b)
        + RESULT_FORMATS["xml"].control("lagged", {"detail": 'a <b> & "c"'})
        + RESULT_FORMATS["xml"].footer()
    )
    root = ET.fromstring(body)
    assert root.get("query") == "3" and root.find("lagged").get("detail") == 'a <b> & "c"'
    elems, _events = PARSERS["xml"](body.decode())
    for (ts, sign, row), (ets, esign, erow) in zip(elems, b.elements()):
        assert (ts, sign, row[0], row[2]) == (ets, esign, erow[0], erow[2])
        t = erow[3]
        assert row[3] == t, "every string round-trips: \\r as &#13;, text XML cannot hold in base64"


def test_empty_batch_and_accept_negotiation():
    empty = Batch.empty([])
    assert all(f.elements(empty) == b"" for f in RESULT_FORMATS)
    assert RESULT_FORMATS.from_accept("text/event-stream").name == "sse"
    assert RESULT_FORMATS.from_accept("application/xml;q=0.2, application/x-ndjson;q=0.9").name == "ndjson"
    assert RESULT_FORMATS.from_accept("image/png") is None


T = Target("S", "stream", (("A", "int"), ("B", "float"), ("C", "varchar"), ("D", "bool")), False)
ROWS = [{"ts": 1, "A": 1, "B": 0.5, "C": "x", "D": True}, {"ts": 2, "A": -3, "B": 2, "C": 'ü,"q"', "D": False}]


def _arrow(tbl):
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue()


@pytest.mark.parametrize(
    "body,ctype",
    [
        (json.dumps(ROWS).encode(), "application/json"),
        (json.dumps([[r["ts"], r["A"], r["B"], r["C"], r["D"]] for r in ROWS]).encode(), "application/json"),
        ("".join(json.dumps(r) + "\n" for r in ROWS).encode(), "application/x-ndjson"),
        (
            "".join(json.dumps({k.lower(): v for k, v in r.items()}) + "\n" for r in ROWS).encode(),
            "application/x-ndjson",
        ),
        (b'ts,A,B,C,D\n1,1,0.5,x,true\n2,-3,2,"\xc3\xbc,""q""",false\n', "text/csv; charset=utf-8"),
        (_arrow(pa.Table.from_pylist(ROWS)), "application/vnd.apache.arrow.stream"),
    ],
)
def test_every_ingest_format_gives_the_same_batch(body, ctype):
    b = parse(body, ctype, T).batch()
    assert b.elements() == [(1, 1, (1, 0.5, "x", True)), (2, 1, (-3, 2.0, 'ü,"q"', False))]
    assert [c.dtype.kind for c in b.cols] == ["i", "f", "O", "b"]


def test_nulls_and_relation_signs():
    r = Target("R", "relation", (("A", "int"), ("N", "varchar")), False)
    b = parse(
        b'{"ts":1,"sign":1,"A":null,"N":"a"}\n{"ts":1,"sign":"-","A":2,"N":null}\n', "application/x-ndjson", r
    ).batch()
    assert b.elements() == [(1, 1, (None, "a")), (1, -1, (2, None))]
    b = parse(b"ts,sign,A,N\n1,+,,a\n2,-1,3,b\n", "text/csv", r).batch()
    assert b.elements() == [(1, 1, (None, "a")), (2, -1, (3, "b"))]
    with pytest.raises(IngestError) as e:
        parse(b'[{"ts":1,"sign":0,"A":1,"N":"a"}]', "application/json", r)
    assert (e.value.row, e.value.field) == (0, "sign")


def test_large_ndjson_takes_the_columnar_path_and_errors_name_the_row():
    n = 20000
    body = "".join(json.dumps({"ts": i, "A": i, "B": i / 2, "C": str(i), "D": i % 2 == 0}) + "\n" for i in range(n))
    b = parse(body.encode(), "application/x-ndjson", T).batch()
    assert len(b) == n and b.cols[0].dtype == np.int64 and int(b.cols[0][-1]) == n - 1
    bad = body.replace('"A": 15000,', '"A": "oops",')
    with pytest.raises(IngestError) as e:
        parse(bad.encode(), "application/x-ndjson", T)
    assert (e.value.row, e.value.field, e.value.status) == (15000, "A", 422)


def test_in_process_arrow_tables_take_the_ingest_path():
    from cqlstream.io.decoders import ArrowStream

    tbl = pa.Table.from_pylist([{k.lower(): v for k, v in r.items()} for r in ROWS])
    b = ArrowStream().decode_table(tbl, T).batch()
    assert b.elements() == parse(_arrow(tbl), "application/vnd.apache.arrow.stream", T).batch().elements()
    assert b.elements() == [(1, 1, (1, 0.5, "x", True)), (2, 1, (-3, 2.0, 'ü,"q"', False))]
    with pytest.raises(IngestError) as e:
        ArrowStream().decode_table(tbl.drop_columns(["c"]), T)
    assert e.value.field == "C"
