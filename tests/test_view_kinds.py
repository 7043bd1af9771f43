"""A script view's declared kind against what its vquery yields (io/view_kinds.py): STREAM 0.6's
two mismatches are accepted with a warning in --stream-compat; in paper mode a relation declared
over a monotonic query is that relation, and a stream declared over a relation is an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cqlstream.io.errors import ScriptError
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import Registrar, parse_script
from cqlstream.io.view_kinds import RULES

CQLSTREAM = str(Path(sys.executable).with_name("cqlstream"))

HEAD = """table : register stream S (A integer);
source : s.dat
table : register stream T (A integer);
source : t.dat
"""
# line 5/6: a join of streams without windows declared a relation (STREAM's AffSegEast)
JOIN = """vquery : select S.A, T.A from S, T where S.A = T.A;
vtable : register relation J (A integer, B integer);
query : select * from J;
dest : j
"""
# line 9/10 (after JOIN): a windowed aggregate declared a stream (STREAM's SM5AvgRel)
AGG = """vquery : select A, Count(*) from S [Range 2] group by A;
vtable : register stream C (A integer, N integer);
query : select * from C;
dest : c
"""


def _script(tmp_path: Path, body: str) -> Path:
    (tmp_path / "s.dat").write_text("i,i\n1,1\n2,2\n3,3\n5,1\n")
    (tmp_path / "t.dat").write_text("i,i\n1,2\n2,1\n4,3\n")
    p = tmp_path / "v.cql"
    p.write_text(HEAD + body)
    return p


def _kinds(script_path: Path, compat: bool) -> dict[str, str]:
    reg = Registrar(parse_script(script_path, compat=compat), None, compat)
    reg.register_all()
    return {name: reg.catalog.get(name).kind for name in ("J", "C") if name in reg.catalog}


def test_compat_accepts_both_mismatches_as_relations_with_warnings(tmp_path):
    p = _script(tmp_path, JOIN + AGG)
    script = parse_script(p, compat=True)
    assert script.warnings == [
        f"{p}:6: warning: vtable 'J' is declared a relation and its vquery (line 5) is monotonic over streams "
        "read without windows: the view is the relation it computes, with no implicit Istream (as in STREAM 0.6)",
        f"{p}:10: warning: vtable 'C' is declared a stream but its vquery (line 9) yields a relation; "
        "STREAM 0.6 keeps it a relation, and so does --stream-compat",
    ]
    assert _kinds(p, compat=True) == {"J": "relation", "C": "relation"}
    run_script(p, out_dir=tmp_path / "o", compat=True)
    # the join's relation grows; C, a relation, loses tuples as its window slides (a stream never would)
    assert (tmp_path / "o" / "j").read_text().splitlines() == ["[2]:+:2, 2", "[2]:+:1, 1", "[4]:+:3, 3", "[5]:+:1, 1"]
    c = (tmp_path / "o" / "c").read_text().splitlines()
    assert "[3]:-:1, 1" in c and "[5]:-:3, 1" in c


def test_paper_takes_the_relation_of_a_monotonic_query_silently(tmp_path):
    p = _script(tmp_path, JOIN)
    assert parse_script(p).warnings == []
    assert _kinds(p, compat=False) == {"J": "relation"}
    run_script(p, out_dir=tmp_path / "o")
    assert sorted((tmp_path / "o" / "j").read_text().splitlines()) == [
        "[2]:+:1, 1",
        "[2]:+:2, 2",
        "[4]:+:3, 3",
        "[5]:+:1, 1",
    ]


def test_paper_refuses_a_stream_declared_over_a_relation_and_names_the_fix(tmp_path):
    p = _script(tmp_path, JOIN + AGG)
    with pytest.raises(ScriptError) as ei:
        parse_script(p)
    assert str(ei.value) == (
        f"{p}:10: vtable 'C' is declared a stream but its vquery (line 9) yields a relation; wrap the vquery in "
        "Istream(...), Dstream(...) or Rstream(...), or register it as a relation"
    )
    # the fixes it names are accepted
    for fixed in (
        AGG.replace("register stream C", "register relation C"),
        AGG.replace(
            "select A, Count(*) from S [Range 2] group by A", "Istream(select A, Count(*) from S [Range 2] group by A)"
        ),
    ):
        assert parse_script(_script(tmp_path, JOIN + fixed)).warnings == []


@pytest.mark.parametrize("compat", [False, True])
def test_a_stream_valued_query_declared_a_relation_stays_an_error(tmp_path, compat):
    p = _script(tmp_path, "vquery : Istream(select A from S [Range 2]);\nvtable : register relation V (A integer);\n")
    with pytest.raises(ScriptError) as ei:
        parse_script(p, compat=compat)
    assert str(ei.value) == (
        f"{p}:6: vtable 'V' is declared a relation but its vquery (line 5) yields a stream; declare it 'register stream'"
    )


@pytest.mark.parametrize("compat", [False, True])
def test_a_stream_over_unwindowed_streams_stays_a_stream(tmp_path, compat):
    """`select ... from S` declared a stream: the implicit Istream's stream, as before, in both modes."""
    p = _script(tmp_path, "vquery : select A from S where A > 1;\nvtable : register stream V (A integer);\n")
    reg = Registrar(parse_script(p, compat=compat), None, compat)
    reg.register_all()
    assert reg.catalog.get("V").kind == "stream" and reg.warnings == []


def test_the_rules_cover_every_possible_reading():
    """The implicit Istream only turns a relation into a stream: six combinations can occur."""
    possible = {
        (d, w, wo)
        for d in ("stream", "relation")
        for w in ("stream", "relation")
        for wo in ("stream", "relation")
        if not (w == "relation" and wo == "stream")
    }
    assert set(RULES) == possible


def test_the_cli_prints_the_warnings_on_stderr(tmp_path):
    p = _script(tmp_path, JOIN + AGG)
    r = subprocess.run(
        [CQLSTREAM, "run", str(p), "--out-dir", str(tmp_path / "o"), "--stream-compat"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert f"{p}:6: warning: vtable 'J'" in r.stderr and f"{p}:10: warning: vtable 'C'" in r.stderr
    assert r.stderr.count("warning:") == 2  # once each, though the script is registered twice (check, run)


def test_one_analysis_gives_both_readings(tmp_path: Path):
    """A script's view needs its vquery read with CQL's implicit ISTREAM and without: the first is
    derived from the second (`implicit_reading`), and is the plan a full analysis gives, for every
    vquery and query of Linear Road's two scripts and of the papers' corpus."""
    from bench.linear_road import gen
    from bench.linear_road.bench import SCRIPTS
    from cqlstream.cql.analyzer import AnalyzeOptions, analyze, implicit_reading
    from cqlstream.cql.errors import CqlError
    from cqlstream.cql.parser import parse_query
    from cqlstream.io.stream_script import Registrar
    from tests.test_corpus import _blocks, _catalog

    derived = 0
    gen.write(gen.PRESETS["tiny"], tmp_path)  # the scripts' sources, for their type lines
    for path, flags in SCRIPTS.values():
        compat = "--stream-compat" in flags
        script = parse_script(path, compat=compat, source_dir=tmp_path)
        check = Registrar(script, None, compat=compat, check_only=True)
        for step in check.script.steps:
            if step.kind in ("view", "query"):
                q = parse_query(step.text)
                plain = analyze(q, check.catalog, options=AnalyzeOptions(stream_compat=True)).plan
                top = implicit_reading(plain)
                assert (top or plain) == analyze(q, check.catalog).plan, step.text
                derived += top is not None
            getattr(check, "_" + step.kind)(step)
    catalog = _catalog()
    for _, _, text in _blocks():
        try:
            plain = analyze(text, catalog, options=AnalyzeOptions(stream_compat=True)).plan
        except CqlError:
            continue
        top = implicit_reading(plain)
        assert (top or plain) == analyze(text, catalog).plan, text
        derived += top is not None
    assert derived > 5  # the implicit Istream was met, not only plans left alone
