"""STREAM compatibility I/O: script parsing, source files, output text, `cqlstream run` / `demo`.

Errors must name the exact file and line; output text must be STREAM's (`%g` floats exactly);
results of a script must not depend on how its inputs are chunked.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.cql.analyzer import AnalyzeOptions
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.ddl import catalog_from_ddl
from cqlstream.cql.frontend import compile_query
from cqlstream.engine.batch import Batch
from cqlstream.io.dat_source import SourceReader, read_source
from cqlstream.io.errors import ScriptError
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import parse_script
from cqlstream.io.stream_text import format_output
from tests.reference import evaluate

ROOT = Path(__file__).resolve().parent.parent
CQLSTREAM = str(Path(sys.executable).parent / "cqlstream")


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


S_DDL = "register stream S (A integer, B float, C byte, D char(4))"
S_DATA = "i,i,f,b,c4\n1,1,1.5,a,ab\n2,2,-0.25,b,abcd\n2,3,1e6,c,x\n4,0,3.33333333,d,  zz  \n"


def script_error(fn, *args, **kw) -> ScriptError:
    with pytest.raises(ScriptError) as ei:
        fn(*args, **kw)
    return ei.value


# ----------------------------------------------------------------------------- script errors


def _script(tmp_path, body: str, data: dict | None = None) -> Path:
    write(tmp_path, {"data/s.dat": S_DATA, **(data or {})})
    p = tmp_path / "t.cql"
    p.write_text(body)
    return p


GOOD_HEAD = f"table : {S_DDL};\nsource : data/s.dat\n"


@pytest.mark.parametrize(
    "body,line,needle",
    [
        ("# c\n\nfoo : bar;\n", 3, "unknown keyword 'foo'"),
        ("table register stream S (A integer);\n", 1, "expected 'keyword : ...'"),
        ("source : data/s.dat\n", 1, "'source :' without a preceding 'table :'"),
        (GOOD_HEAD + "dest : out\n", 3, "'dest :' without a preceding 'query :'"),
        (GOOD_HEAD + "vtable : register stream V (A integer);\n", 3, "without a preceding 'vquery :'"),
        (f"table : {S_DDL};\nquery : select * from S;\n", 1, "'table' must be followed by 'source :'"),
        (GOOD_HEAD + "\nquery : select * from S;\n", 4, "'query' must be followed by 'dest :' (found end of script)"),
        (
            GOOD_HEAD + "vquery : select * from S;\nquery : select * from S;\ndest : o\n",
            3,
            "'vquery' must be followed by 'vtable :'",
        ),
        (GOOD_HEAD + "query : select *\n  from S\n", 3, "does not end with ';'"),
        (GOOD_HEAD + "query : select * from S\ndest : o\n", 3, "does not end with ';'"),
        (GOOD_HEAD + "query : select * from S; select 1\ndest : o\n", 3, "unexpected text after ';'"),
        (f"table : {S_DDL};\nsource : data/nope.dat\n", 2, "source file 'data/nope.dat' not found"),
        (f"table : {S_DDL};\nsource : data\n", 2, "is a folder"),
        (GOOD_HEAD + "query : select *\n   from S\n   where A >>> 1;\ndest : o\n", 5, "unexpected"),
        (GOOD_HEAD + "query :\n select Z\n from S;\ndest : o\n", 4, "Z"),
        (GOOD_HEAD + "query : select * from T;\ndest : o\n", 3, "T"),
        ("table : register stream S (A integr);\nsource : data/s.dat\n", 1, "unknown type 'integr'"),
        ("table : select * from S;\nsource : data/s.dat\n", 1, "needs 'register stream|relation"),
        (
            GOOD_HEAD + "query : select * from S;\ndest : o\nquery : select A from S;\ndest : o\n",
            6,
            "already written by the query of line 3",
        ),
        (
            GOOD_HEAD + "vquery : select A from S [Range 2];\nvtable : register stream V (A integer);\n",
            4,
            "declared a stream but its vquery (line 3) yields a relation; wrap the vquery in Istream(...), "
            "Dstream(...) or Rstream(...), or register it as a relation",
        ),
        (
            GOOD_HEAD + "vquery : Istream(select A from S [Range 2]);\nvtable : register relation V (A integer);\n",
            4,
            "declared a relation but its vquery (line 3) yields a stream; declare it 'register stream'",
        ),
        (
            GOOD_HEAD + "vquery : select A, B from S;\nvtable : register stream V (A integer);\n",
            4,
            "declares 1 attributes but its vquery (line 3) returns 2",
        ),
        (
            GOOD_HEAD + "vquery : select A, D from S;\nvtable : register stream V (A integer, D float);\n",
            4,
            "declares D FLOAT but its vquery (line 3) gives D CHAR(4)",
        ),
        (GOOD_HEAD + "vquery : select A from S\n   where Q = 1;\nvtable : register stream V (A integer);\n", 4, "Q"),
    ],
)
def test_script_errors_name_the_line(tmp_path, body, line, needle):
    p = _script(tmp_path, body)
    e = script_error(parse_script, p)
    assert (e.path, e.line) == (str(p), line), str(e)
    assert needle in e.reason, str(e)
    assert str(e) == f"{p}:{line}: {e.reason}"


def test_missing_script(tmp_path):
    e = script_error(parse_script, tmp_path / "none.cql")
    assert str(e) == f"{tmp_path / 'none.cql'}: script not found"


def test_statements_span_lines_and_semicolons_in_strings(tmp_path):
    p = _script(
        tmp_path,
        GOOD_HEAD + "# a comment\nquery : select A,\n# inside\n  D from S\n  where D = 'a;b' ;  # tail\ndest : o\n",
    )
    s = parse_script(p)
    (q,) = s.queries
    assert q.line == 4 and "where D = 'a;b'" in q.cql and q.dest == tmp_path / "o"
    (t,) = s.tables
    assert t.source == tmp_path / "data" / "s.dat" and t.line == 1


# ----------------------------------------------------------------------------- source files


def _src(ddl: str):
    (d,) = catalog_from_ddl(ddl).entries()
    return d


@pytest.mark.parametrize(
    "data,line,needle",
    [
        ("i,i,q,b,c4\n1,1,1.0,a,b\n", 1, "unknown type 'q' in column 3"),
        ("i,i,f,b\n1,1,1.0,a\n", 1, "lists 4 columns but stream 'S' needs 5"),
        ("i,i,i,b,c4\n1,1,1,a,b\n", 1, "column 3 is 'i' but attribute B of 'S' is FLOAT"),
        ("i,i,f,b,c5\n1,1,1.0,a,b\n", 1, "column 5 is 'c5' but attribute D of 'S' is CHAR(4)"),
        ("f,i,f,b,c4\n1,1,1.0,a,b\n", 1, "column 1 is the timestamp and must be 'i'"),
        ("", 1, "expected a type line"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n2,2,2.0,b\n", 3, "expected 5 comma-separated values"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n\n2,2,2.0,b,c,d\n", 4, "found 6"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n2,x,2.0,b,c\n", 3, "column 2 (A): 'x' is not an integer"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n2,2,2.0.1,b,c\n", 3, "column 3 (B): '2.0.1' is not a number"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n2,,2.0,b,c\n", 3, "column 2 (A): '' is not an integer"),
        ("i,i,f,b,c4\n1.5,1,1.0,a,b\n", 2, "column 1 (timestamp)"),
        (
            "i,i,f,b,c4\n5,1,1.0,a,b\n\n6,1,1.0,a,b\n3,1,1.0,a,b\n",
            5,
            "timestamp 3 is smaller than the previous one (6)",
        ),
        ("i,i,f,b,c4\n1,1,1.0,ab,b\n", 2, "C is a byte"),
        ("i,i,f,b,c4\n1,1,1.0,,b\n", 2, "C is a byte"),
        ("i,i,f,b,c4\n1,1,1.0,a,b\n1,1,1.0,a,abcde\n", 3, "D is CHAR(4): 'abcde' has 5 characters"),
    ],
)
def test_source_errors_name_the_line(tmp_path, data, line, needle):
    p = tmp_path / "s.dat"
    p.write_text(data)
    e = script_error(read_source, p, _src(S_DDL))
    assert (e.path, e.line) == (str(p), line), str(e)
    assert needle in e.reason, str(e)


def test_relation_source_signs(tmp_path):
    p = tmp_path / "r.dat"
    src = _src("register relation R (A integer, N char(3))")
    p.write_text("i,b,i,c3\n1,+,1,a\n2, - ,1,a\n3,+,2,b\n")
    b = read_source(p, src)
    assert b.ts.tolist() == [1, 2, 3] and b.sign.tolist() == [1, -1, 1] and b.rows() == [(1, "a"), (1, "a"), (2, "b")]
    p.write_text("i,b,i,c3\n1,+,1,a\n2,*,1,a\n")
    e = script_error(read_source, p, src)
    assert (e.line, e.reason) == (3, "sign must be '+' or '-', not '*'")
    p.write_text("i,i,i,c3\n1,+,1,a\n")
    assert "column 2 of a relation is the sign" in script_error(read_source, p, src).reason


def test_read_source_types_and_blocks(tmp_path):
    p = tmp_path / "s.dat"
    p.write_text(S_DATA)
    b = read_source(p, _src(S_DDL))
    assert b.ts.dtype == np.int64 and b.cols[0].dtype == np.int64 and b.cols[1].dtype == np.float64
    assert b.cols[2].dtype == object and b.sign.tolist() == [1, 1, 1, 1]
    assert b.rows() == [(1, 1.5, "a", "ab"), (2, -0.25, "b", "abcd"), (3, 1e6, "c", "x"), (0, 3.33333333, "d", "zz")]
    # many small blocks: same rows, and an error far into the file names its exact line
    lines = ["i,i,f,b,c4"] + [f"{k // 3},{k},{k / 4},x,ab" for k in range(500)]
    p.write_text("\n".join(lines) + "\n")
    blocks = list(SourceReader(p, _src(S_DDL), block_size=256))
    assert len(blocks) > 10 and sum(len(x) for x in blocks) == 500
    assert np.concatenate([x.cols[0] for x in blocks]).tolist() == list(range(500))
    lines[300] = "200,1,1.0,y,ab"  # row 299 (file line 301) jumps ahead: line 302 (ts 100) goes back
    p.write_text("\n".join(lines) + "\n")
    e = script_error(lambda: list(SourceReader(p, _src(S_DDL), block_size=256)))
    assert (e.line, e.reason.split(";")[0]) == (302, "timestamp 100 is smaller than the previous one (200)")
    lines[300] = "99,1,oops,y,ab"
    p.write_text("\n".join(lines) + "\n")
    e = script_error(lambda: list(SourceReader(p, _src(S_DDL), block_size=256)))
    assert (e.line, e.reason) == (301, "column 3 (B): 'oops' is not a number")


def test_header_only_and_empty_lines(tmp_path):
    p = tmp_path / "s.dat"
    for text in ("i,i,f,b,c4", "i,i,f,b,c4\n", "i,i,f,b,c4\n\n\n"):
        p.write_text(text)
        assert len(read_source(p, _src(S_DDL))) == 0


# ----------------------------------------------------------------------------- output text


def _batch(cols, ts=None, sign=None, nulls=None):
    n = len(cols[0])
    return Batch(
        [np.asarray(c) if not isinstance(c, np.ndarray) else c for c in cols],
        nulls or [None] * len(cols),
        np.asarray(ts if ts is not None else np.arange(n), np.int64),
        np.asarray(sign if sign is not None else np.ones(n), np.int8),
        np.zeros(n, np.uint64),
    )


def _ref_line(t, s, row):
    def v(x):
        if x is None:
            return "null"
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, float):
            return "%g" % x
        return str(x)

    return f"[{t}]:{'+' if s > 0 else '-'}:{', '.join(v(x) for x in row)}\n"


TRICKY = [
    0.0,
    -0.0,
    1.0,
    0.5,
    2.5,
    1234565.0,
    999999.5,
    9999995.0,
    0.0001,
    0.00001,
    0.000123456789,
    1e6,
    1e-5,
    1e100,
    -1e-100,
    5e-324,
    1.7976931348623157e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    99999.95,
    1.0000005,
    3.3333333333333335,
    9.9999995,
    0.00099999995,
    1e22,
    1e21,
    1e-22,
    123.456,
    1.1,
    2.2,
    3.3,
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.floats(allow_nan=True, allow_infinity=True)
        | st.decimals(min_value=-(10**8), max_value=10**8, places=4, allow_nan=False).map(float)
        | st.sampled_from(TRICKY),
        min_size=1,
        max_size=300,
    )
)
def test_floats_are_c_percent_g(xs):
    got = format_output(_batch([np.array(xs, np.float64)])).decode().splitlines()
    assert got == [f"[{i}]:+:{'%g' % x}" for i, x in enumerate(xs)]


def test_many_floats_percent_g():
    rng = np.random.default_rng(7)
    xs = np.concatenate(
        [
            rng.random(30000) * 10.0 ** rng.integers(-30, 30, 30000),
            np.frombuffer(rng.bytes(8 * 30000), np.float64),
            [float(f"{rng.integers(100000, 1000000)}5e{rng.integers(-12, 12)}") for _ in range(5000)],
        ]
    )
    got = format_output(_batch([xs], ts=np.zeros(len(xs)))).decode().splitlines()
    assert got == ["[0]:+:" + "%g" % x for x in xs.tolist()]


_text = st.text(st.characters(blacklist_characters="\x00\n\r", blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1) | st.none(),
            st.floats() | st.none(),
            _text | st.none(),
            st.booleans() | st.none(),
            st.integers(0, 1000),
            st.booleans(),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_rows_match_reference_text(rows):
    ints = [r[0] for r in rows]
    flts = [r[1] for r in rows]
    txts = [r[2] for r in rows]
    bools = [r[3] for r in rows]
    ts = sorted(r[4] for r in rows)
    sign = [1 if r[5] else -1 for r in rows]
    cols = [
        np.array([0 if v is None else v for v in ints], np.int64),
        np.array([0.0 if v is None else v for v in flts], np.float64),
        np.array(["" if v is None else v for v in txts] + [None], dtype=object)[:-1],
        np.array([False if v is None else v for v in bools], bool),
    ]
    nulls = [np.array([v is None for v in c]) for c in (ints, flts, txts, bools)]
    nulls = [m if m.any() else None for m in nulls]
    got = format_output(_batch(cols, ts=ts, sign=sign, nulls=nulls)).decode()
    want = "".join(_ref_line(t, s, row) for t, s, row in zip(ts, sign, zip(ints, flts, txts, bools)))
    assert got == want


def test_text_edge_cases():
    cols = [np.array(["", "é", "日本語x", "a, b", "nul\x00x"], dtype=object), np.array([1, -1, 0, 2**63 - 1, -(2**63)])]
    got = format_output(_batch(cols, ts=[0, 0, 1, 1, 1])).decode()
    assert got == (
        "[0]:+:, 1\n[0]:+:é, -1\n[1]:+:日本語x, 0\n[1]:+:a, b, 9223372036854775807\n"
        "[1]:+:nul\x00x, -9223372036854775808\n"
    )
    assert format_output(_batch([np.zeros(0)])) == b""


def test_large_output_chunks():
    n = 200_000
    a = np.arange(n) * 7 - 5000
    got = format_output(_batch([a, a * 0.5], ts=np.arange(n) // 3, sign=np.where(a % 2 == 0, 1, -1)))
    lines = got.decode().splitlines()
    assert len(lines) == n
    for i in (0, 1, 65535, 65536, 131072, n - 1):
        assert lines[i] == _ref_line(i // 3, 1 if a[i] % 2 == 0 else -1, (int(a[i]), float(a[i] * 0.5))).rstrip("\n")


# ----------------------------------------------------------------------------- running scripts

ROUND_TRIP = """# round trip
table : register stream S (A integer, B float, C byte, D char(4));
source : data/s.dat
query : select * from S where A > 1;
dest : out/filter
query : select * from S [Range 1];
dest : out/range1
query : select A from S [Rows 2];
dest : out/rows2
"""

EXPECTED = {
    "filter": "[2]:+:2, -0.25, b, abcd\n[2]:+:3, 1e+06, c, x\n",
    "range1": (
        "[1]:+:1, 1.5, a, ab\n[2]:+:2, -0.25, b, abcd\n[2]:+:3, 1e+06, c, x\n[3]:-:1, 1.5, a, ab\n"
        "[4]:-:2, -0.25, b, abcd\n[4]:-:3, 1e+06, c, x\n[4]:+:0, 3.33333, d, zz\n"
    ),
    "rows2": "[1]:+:1\n[2]:-:1\n[2]:+:2\n[2]:+:3\n[4]:-:2\n[4]:+:0\n",
}
# STREAM 0.6: a Range 1 tuple leaves at τ+1, not τ+2
EXPECTED_COMPAT_RANGE1 = (
    "[1]:+:1, 1.5, a, ab\n[2]:-:1, 1.5, a, ab\n[2]:+:2, -0.25, b, abcd\n[2]:+:3, 1e+06, c, x\n"
    "[3]:-:2, -0.25, b, abcd\n[3]:-:3, 1e+06, c, x\n[4]:+:0, 3.33333, d, zz\n"
)


def net_lines(text: str) -> list[str]:
    """Lines in net form per instant (a + and - of one value at one instant cancel), sorted within
    an instant; also checks the lines come in non-decreasing timestamp order."""
    out, last = [], None
    by_t: dict[int, Counter] = {}
    for line in text.splitlines():
        head, sign, body = line.split(":", 2)
        t = int(head.strip("[]"))
        assert last is None or t >= last, f"out of order: {line}"
        last = t
        by_t.setdefault(t, Counter())[body] += 1 if sign == "+" else -1
    for t in sorted(by_t):
        for body, c in sorted(by_t[t].items()):
            out.extend([f"[{t}]:{'+' if c > 0 else '-'}:{body}"] * abs(c))
    return out


def test_round_trip_through_cli(tmp_path):
    write(tmp_path, {"data/s.dat": S_DATA, "run.cql": ROUND_TRIP})
    r = subprocess.run([CQLSTREAM, "run", str(tmp_path / "run.cql")], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    for name, want in EXPECTED.items():
        assert net_lines((tmp_path / "out" / name).read_text()) == net_lines(want), name
    assert f"{tmp_path / 'out' / 'filter'}: 2 lines" in r.stderr
    # --out-dir keeps the file names; --stream-compat changes when Range tuples leave
    r = subprocess.run(
        [CQLSTREAM, "run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / "c"), "--stream-compat"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert net_lines((tmp_path / "c" / "range1").read_text()) == net_lines(EXPECTED_COMPAT_RANGE1)
    assert net_lines((tmp_path / "c" / "filter").read_text()) == net_lines(EXPECTED["filter"])
    assert net_lines((tmp_path / "c" / "rows2").read_text()) == net_lines(EXPECTED["rows2"])


def test_relative_paths_resolve_against_the_script(tmp_path, monkeypatch):
    write(tmp_path, {"proj/data/s.dat": S_DATA, "proj/sub/run.cql": ROUND_TRIP.replace("data/s.dat", "../data/s.dat")})
    monkeypatch.chdir(tmp_path)
    counts = run_script("proj/sub/run.cql")
    assert counts == {"proj/sub/out/filter": 2, "proj/sub/out/range1": 7, "proj/sub/out/rows2": 6}
    assert (tmp_path / "proj/sub/out/filter").read_text() == EXPECTED["filter"]
    counts = run_script(tmp_path / "proj/sub/run.cql", out_dir=tmp_path / "elsewhere")
    assert sorted(Path(k).name for k in counts) == ["filter", "range1", "rows2"]
    assert (tmp_path / "elsewhere/filter").read_text() == EXPECTED["filter"]


def test_cli_errors_exit_2_without_traceback(tmp_path):
    write(
        tmp_path,
        {
            "data/s.dat": S_DATA.replace("2,3,1e6", "2,3,zz"),
            "run.cql": ROUND_TRIP,
            "bad.cql": "table : register stream S (A integer);\nsource : missing.dat\n",
        },
    )
    for script, where, needle in [
        ("run.cql", f"{tmp_path / 'data' / 's.dat'}:4: ", "'zz' is not a number"),
        ("bad.cql", f"{tmp_path / 'bad.cql'}:2: ", "not found"),
        ("none.cql", f"{tmp_path / 'none.cql'}: ", "script not found"),
    ]:
        r = subprocess.run([CQLSTREAM, "run", str(tmp_path / script)], capture_output=True, text=True)
        assert r.returncode == 2, (script, r.stderr)
        assert r.stderr.startswith(where) and needle in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_rejected_input_names_the_line(tmp_path):
    write(
        tmp_path,
        {
            "r.dat": "i,b,i\n1,+,1\n\n2,-,1\n3,-,7\n",
            "run.cql": "table : register relation R (A integer);\nsource : r.dat\n"
            "query : select * from R;\ndest : out\n",
        },
    )
    e = script_error(run_script, tmp_path / "run.cql")
    assert (e.path, e.line) == (str(tmp_path / "r.dat"), 5) and "not in relation" in e.reason, str(e)


# ----------------------------------------------------------------------------- the demo

DEMO = ROOT / "demo" / "shop.cql"


def _reference_lines(script_path: Path, step_text: str, compat=False) -> list[str]:
    """The reference evaluator's result of one query of a script, in net text form."""
    script = parse_script(script_path)
    cat = Catalog()
    from cqlstream.io.stream_script import Registrar

    reg = Registrar(script, None, compat)
    reg.catalog = cat
    reg.register_all()
    inputs = {}
    for step, d in reg.sources:
        b = read_source(step.file, d)
        if d.kind == "stream":
            inputs[d.name] = [(t, row) for t, row in zip(b.ts.tolist(), b.rows())]
        else:
            inputs[d.name] = [(t, s, row) for t, s, row in zip(b.ts.tolist(), b.sign.tolist(), b.rows())]
    q = compile_query(step_text, cat, options=AnalyzeOptions(stream_compat=compat))
    res = evaluate(q.analyzed.plan, inputs, compat=compat, functions=cat.functions)
    from tests.reference import format_result

    return net_lines("".join(line + "\n" for line in format_result(res)))


def test_demo_runs_and_matches_the_reference(tmp_path):
    r = subprocess.run([CQLSTREAM, "demo", "--out-dir", str(tmp_path), "--lines", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    script = parse_script(DEMO)
    names = [s.file.name for s in script.steps if s.kind == "query"]
    assert len(names) == 5
    for s in script.steps:
        if s.kind != "query":
            continue
        assert f"== {tmp_path / s.file.name}" in r.stdout
        got = (tmp_path / s.file.name).read_text()
        assert got, s.file.name
        assert net_lines(got) == _reference_lines(DEMO, s.text), s.file.name


def test_demo_is_independent_of_push_size(tmp_path):
    big = run_script(DEMO, out_dir=tmp_path / "big")
    run_script(DEMO, out_dir=tmp_path / "small", batch_rows=7)
    assert list(big.values()) and all(n > 0 for n in big.values())
    for name in (Path(k).name for k in big):
        assert net_lines((tmp_path / "big" / name).read_text()) == net_lines((tmp_path / "small" / name).read_text())


# ----------------------------------------------------------------------------- benchmark generator


def test_bench_generator(tmp_path):
    from bench.gen import columns, generate

    p = tmp_path / "S.dat"
    generate(25, str(p), seed=3)
    lines = p.read_text().splitlines()
    assert lines[0] == "i,i,i" and len(lines) == 26
    ts, a, b = columns(25, seed=3)
    assert lines[1:] == [f"{t},{x},{y}" for t, x, y in zip(ts, a, b)]
    assert ts.tolist() == [i // 10 + 1 for i in range(25)]
    assert a.min() >= 0 and a.max() <= 999 and b.min() >= 0 and b.max() <= 99
    generate(25, str(tmp_path / "T.dat"), seed=3)
    assert (tmp_path / "T.dat").read_text() == p.read_text()
    got = read_source(p, _src("register stream S (A integer, B integer)"))
    assert got.cols[0].tolist() == a.tolist() and got.ts.tolist() == ts.tolist()


def test_sources_starting_and_ending_at_different_times(tmp_path):
    """Sources merged by timestamp with heartbeats for idle ones: results equal the reference for
    any push size (a source that starts late keeps its own first instant; one that ends early
    does not hold others back)."""
    s_rows = "\n".join(f"{t},{t % 7}" for t in range(1, 80) for _ in range(t % 3))
    t_rows = "\n".join(f"{t},{t % 5}" for t in range(40, 60))
    r_rows = "1,+,1\n1,+,2\n10,-,1\n12,+,3\n"
    body = (
        "table : register stream S (A integer);\nsource : s.dat\n"
        "table : register stream T (A integer);\nsource : t.dat\n"
        "table : register relation R (A integer);\nsource : r.dat\n"
        "query : select count(*), sum(A) from T [Range 5];\ndest : t_count\n"
        "query : Istream(select S.A, T.A from S [Rows 3], T [Range 2] where S.A < T.A);\ndest : st_join\n"
        "query : select S.A from S [Now], R where S.A = R.A;\ndest : s_in_r\n"
        "query : Rstream(select count(*) from S [Range 4]);\ndest : s_count\n"
    )
    write(
        tmp_path,
        {
            "s.dat": "i,i\n" + s_rows + "\n",
            "t.dat": "i,i\n" + t_rows + "\n",
            "r.dat": "i,b,i\n" + r_rows,
            "run.cql": body,
        },
    )
    script = tmp_path / "run.cql"
    steps = [s for s in parse_script(script).steps if s.kind == "query"]
    want = {s.file.name: _reference_lines(script, s.text) for s in steps}
    assert all(want.values())
    for rows in (1, 4, 33, 100_000):
        run_script(script, out_dir=tmp_path / f"o{rows}", batch_rows=rows)
        for name, lines in want.items():
            assert net_lines((tmp_path / f"o{rows}" / name).read_text()) == lines, (rows, name)


# ---------------------------------------------------------------- the statement scanner


def _statement_end_by_char(text: str, state: dict) -> int:
    """The scanner as it was, one character at a time: the reference for `_statement_end`."""
    i, n = 0, len(text)
    while i < n:
        q = state.get("quote")
        c = text[i]
        if state.get("block"):
            j = text.find("*/", i)
            if j < 0:
                return -1
            state["block"] = False
            i = j + 2
            continue
        if q:
            if c == q:
                if i + 1 < n and text[i + 1] == q:
                    i += 2
                    continue
                state["quote"] = None
            i += 1
            continue
        if c in "'\"`":
            state["quote"] = c
        elif c == "-" and text.startswith("--", i):
            return -1
        elif c == "/" and text.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        elif c == ";":
            return i
        i += 1
    return -1


def test_the_statement_scanner_is_the_character_loop():
    """`_statement_end` jumps between the characters that matter; on random lines of quotes,
    comments, slashes, dashes, stars and semicolons (state carried from line to line, as a
    statement spanning lines carries it) it finds the same ends and leaves the same state."""
    import random

    from cqlstream.io.script_items import _statement_end

    rng = random.Random(18)
    alphabet = ["a", " ", ";", "'", '"', "`", "-", "/", "*", "''", "--", "/*", "*/", "x;y"]
    for _ in range(3000):
        got_state: dict = {}
        want_state: dict = {}
        for _ in range(rng.randint(1, 4)):
            line = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
            assert _statement_end(line, got_state) == _statement_end_by_char(line, want_state), repr(line)
            assert {k: v for k, v in got_state.items() if v} == {k: v for k, v in want_state.items() if v}, repr(line)
