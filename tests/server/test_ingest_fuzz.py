"""Fuzzed push bodies for every ingest format against a real server: each push is accepted (2xx)
or refused with a 4xx problem document, never a 5xx; the server stays healthy; and the results
that were final before (known rows, read back in every result format) are still there, intact.

Bodies are raw bytes, rows of random JSON values (deep, huge, NaN, lone surrogates, NUL, wrong
types, unknown and missing fields) in the format's own encoding, and byte-level mutations of
those. Derandomized with a bounded example count, so a CI run is stable and quick."""

from __future__ import annotations

import io
import json
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.io.formats import INGEST_FORMATS
from tests.server.conftest import ServerThread
from tests.server.formats import PARSERS

EXAMPLES = 200  # per format
FIELDS = ["ts", "A", "B", "C", "D"]
KNOWN = [{"ts": 0, "A": 1, "B": 0.5, "C": "abc", "D": "x"}, {"ts": 1, "A": -7, "B": -1e300, "C": "", "D": "ü\r\n<"}]

# ---------------------------------------------------------------- bodies

SPECIAL_TEXT = ["\ud800", "\udfff", "\x00", "abcd", "\ufeff", "\ufffe", "\r", "]]>", "é" * 4, ""]
SPECIAL_INT = [1 << 62, (1 << 62) + 1, (1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1, 10**400]
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from(SPECIAL_INT),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(SPECIAL_TEXT),
)
value = st.recursive(
    scalar, lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=3), ch, max_size=3), max_leaves=8
)
timestamp = st.one_of(st.integers(2, 40), st.integers(-(1 << 64), 1 << 64), st.sampled_from(SPECIAL_INT), value)
field_name = st.one_of(st.sampled_from(FIELDS + ["a", "ts ", "E", "sign"]), st.text(max_size=3))
row = st.one_of(
    st.fixed_dictionaries({"ts": timestamp, "A": value, "B": value, "C": value, "D": value}),
    st.fixed_dictionaries(
        {
            "ts": st.integers(2, 40),
            "A": st.integers(-9, 9),
            "B": st.floats(),
            "C": st.text(max_size=5),
            "D": st.text(max_size=5),
        }
    ),
    st.dictionaries(field_name, value, max_size=6),
    st.lists(value, max_size=6),
    value,
)
PATHOLOGICAL = [
    b"[" * 100_000,
    b"[" * 50_000 + b"]" * 50_000,
    b"{" * 10_000,
    b"\xef\xbb\xbf",
    b"\xff\xfe\x00",
    b"\x00" * 64,
]


def _json(rows: list, ascii_only: bool) -> bytes:
    return json.dumps(rows, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _ndjson(rows: list, ascii_only: bool) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + b"\n" for r in rows)


def _csv_cell(v) -> str:
    s = json.dumps(v) if isinstance(v, (list, dict)) else "" if v is None else str(v)
    return s if not any(ch in s for ch in ',"\n\r') else '"' + s.replace('"', '""') + '"'


@st.composite
def csv_body(draw) -> bytes:
    header = draw(st.one_of(st.just(FIELDS), st.permutations(FIELDS), st.lists(field_name, max_size=6)))
    rows = draw(st.lists(st.lists(st.one_of(scalar, value), min_size=len(header), max_size=len(header)), max_size=6))
    text = (
        ",".join(_csv_cell(h) for h in header) + "\n" + "".join(",".join(_csv_cell(v) for v in r) + "\n" for r in rows)
    )
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return bom + text.encode("utf-8", "surrogatepass")


ARROW_TYPES = [
    pa.int64(),
    pa.int8(),
    pa.uint64(),
    pa.float64(),
    pa.float32(),
    pa.string(),
    pa.large_string(),
    pa.bool_(),
    pa.binary(),
]
ARROW_VALUES = {
    pa.int64(): st.integers(-(1 << 63), (1 << 63) - 1),
    pa.int8(): st.integers(-128, 127),
    pa.uint64(): st.integers(0, (1 << 64) - 1),
    pa.float64(): st.floats(allow_nan=True, allow_infinity=True),
    pa.float32(): st.floats(width=32, allow_nan=True, allow_infinity=True),
    pa.string(): st.text(max_size=6),
    pa.large_string(): st.sampled_from(SPECIAL_TEXT[2:] + ["x"]),
    pa.bool_(): st.booleans(),
    pa.binary(): st.binary(max_size=6),
}


@st.composite
def arrow_body(draw) -> bytes:
    names = draw(st.one_of(st.just(FIELDS), st.lists(field_name, max_size=6, unique=True)))
    n = draw(st.integers(0, 5))
    cols = {}
    for name in names:
        t = draw(st.sampled_from(ARROW_TYPES))
        vals = draw(st.lists(st.one_of(st.none(), ARROW_VALUES[t]), min_size=n, max_size=n))
        cols[name] = pa.array(vals, t)
    sink = io.BytesIO()
    table = pa.table(cols) if cols else pa.table({"x": pa.array([], pa.int64())})
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write(table)
    return sink.getvalue()


@st.composite
def mutated(draw, body: st.SearchStrategy[bytes]) -> bytes:
    b = draw(body)
    how = draw(st.sampled_from(["as is", "as is", "truncate", "insert", "flip"]))
    if how == "as is" or not b:
        return b
    at = draw(st.integers(0, len(b) - 1))
    if how == "truncate":
        return b[:at]
    if how == "insert":
        return b[:at] + draw(st.binary(min_size=1, max_size=4)) + b[at:]
    return b[:at] + bytes([b[at] ^ draw(st.integers(1, 255))]) + b[at + 1 :]


rows = st.lists(row, max_size=6)
BODIES = {
    "json": st.builds(_json, rows, st.booleans()),
    "ndjson": st.builds(_ndjson, rows, st.booleans()),
    "csv": csv_body(),
    "arrow": arrow_body(),
}


def bodies(fmt: str) -> st.SearchStrategy[bytes]:
    return st.one_of(mutated(BODIES[fmt]), st.binary(max_size=200), st.sampled_from(PATHOLOGICAL))


# ---------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def srv():
    s = ServerThread().start()
    with s.client() as c:
        assert (
            c.post("/streams", json={"ddl": "register stream F (A integer, B float, C char(3), D varchar)"}).status_code
            == 201
        )
        assert c.post("/queries", json={"cql": "select * from F [range unbounded]"}).status_code == 201
        assert c.post("/streams/F/tuples", json=KNOWN).status_code == 200
        assert c.post("/streams/F/heartbeat", json={"ts": 2}).status_code == 200  # KNOWN is final
    yield s
    s.stop()


def known_results(c, fmt: str) -> Counter:
    """The KNOWN rows among the query's current relation (a snapshot, read in format `fmt`)."""
    r = c.get("/queries/1/results", params={"format": fmt, "snapshot": "true", "follow": "false"})
    assert r.status_code == 200, r.text
    rows = Counter(row for ts, sign, row in PARSERS[fmt](r.text)[0] if sign == 1)
    return rows & EXPECTED


EXPECTED = Counter(tuple(r[f] for f in FIELDS[1:]) for r in KNOWN)


@pytest.mark.time_limit(120)
@pytest.mark.parametrize("fmt", INGEST_FORMATS.names())
def test_fuzzed_bodies_are_accepted_or_a_4xx_and_hurt_nothing(srv, fmt):
    media_type = INGEST_FORMATS[fmt].media_type
    seen: dict[int, int] = {}
    with srv.client() as c:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.function_scoped_fixture,
                HealthCheck.data_too_large,
            ],
        )
        @given(bodies(fmt))
        def push(body: bytes) -> None:
            r = c.post("/streams/F/tuples", content=body, headers={"content-type": media_type})
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            assert r.status_code == 200 or 400 <= r.status_code < 500, (r.status_code, body[:200], r.text[:300])
            if r.status_code != 200:
                p = r.json()
                assert r.headers["content-type"] == "application/problem+json" and p["code"] and p["detail"], p
            assert c.get("/healthz").status_code == 200

        push()
        for out in PARSERS:  # the results from before, intact and readable in every format
            assert known_results(c, out) == EXPECTED, out
    assert seen.get(200, 0) and sum(v for k, v in seen.items() if k != 200), f"fuzzing reached one outcome only: {seen}"
