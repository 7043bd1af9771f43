"""Catalog and plans on disk: restored at start-up with the same ids; offline edits and
run-time changes honoured; a bad file is reported by entry."""

from __future__ import annotations

import json

import pytest

from cqlstream.engine.dsms import Dsms
from cqlstream.engine.persist import PlanFileError

DDL = (
    "register stream S (A int, B int) with (slack = 2); register relation R (A int, B varchar(8)); "
    "register view V as select * from S [Range 5] where A > 0"
)


def _setup(tmp_path):
    d = Dsms(data_dir=tmp_path)
    d.execute(DDL)
    a = d.register_query("select A, Count(*) from V group by A", name="counts")
    b = d.register_query("Istream(select S.A, R.B from S [Now], R where S.A = R.A)")
    c = d.register_query("select * from S [Range 5] where A > 0 and B = 1")
    d.deregister(b.id)  # ids are not reused
    e = d.register_query("select distinct B from S [Rows 3]")
    d.set_weight(a.id, 2.5)
    d.set_active(e.id, False)
    d.set_knob("src:S", "sampling_rate", 0.5)
    return d, a, c, e


def test_restart_keeps_sources_views_and_queries_with_their_ids(tmp_path):
    d, a, c, e = _setup(tmp_path)
    r = Dsms(data_dir=tmp_path)
    assert sorted(r.queries) == [a.id, c.id, e.id] == [1, 3, 4]
    assert r.queries[a.id].name == "counts" and r.queries[a.id].weight == 2.5
    assert r.queries[e.id].active is False and r.queries[e.id].pnode is None
    assert r.catalog.get("S").slack == 2 and r.catalog.get("V") is not None
    assert r.control_table("src:S")["knobs"]["sampling_rate"] == 0.5
    assert r.explain_plan().splitlines()[0] == d.explain_plan().splitlines()[0]
    d.deregister(4)
    r = Dsms(data_dir=tmp_path)
    assert r.register_query("select * from S").id == 5  # numbering continues: ids are never reused
    # the restored engine runs: push and read results
    r.set_knob("src:S", "sampling_rate", 1.0)
    sub = r.subscribe(a.id)
    r.push("S", [(1, 1), (1, 2)], ts=[1, 1])
    r.heartbeat("S", 5)
    r.run()
    assert sub.poll().elements() == [(1, 1, (1, 2))]


def test_file_is_readable_and_offline_edits_are_honoured(tmp_path):
    _d, _a, c, _e = _setup(tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["format"] == "cqlstream-plan" and doc["catalog"][0].upper().startswith("REGISTER STREAM S")
    assert [q["id"] for q in doc["queries"]] == [1, 3, 4]
    shared_ops = len(Dsms(data_dir=tmp_path).plan.operators)
    for q in doc["queries"]:  # explicit sharing written by hand: query 3 gets its own operators
        if q["id"] == c.id:
            q["share"] = False
    doc["queries"].append({"id": 9, "cql": "select B from S [Range 5] where A > 0", "weight": 1})
    (tmp_path / "plan.json").write_text(json.dumps(doc, indent=1))
    r = Dsms(data_dir=tmp_path)
    assert r.queries[c.id].share is False and 9 in r.queries
    assert len(r.plan.operators) > shared_ops
    windows = [t for t in r.control_tables() if t.get("type") == "seq-window"]
    assert any(w["queries"] == [c.id] for w in windows)  # its private window


def test_run_time_knobs_are_written_back(tmp_path):
    d = Dsms(data_dir=tmp_path)
    d.execute("register stream S (A int, B int); register stream T (A int, B int); register stream U (A int, B int)")
    d.register_query("Istream(select S.B from S [Range 3], T [Range 3], U [Range 3] where S.A = T.A and T.A = U.A)")
    (join,) = [t for t in d.control_tables() if t.get("type") == "join"]
    d.set_knob(join["id"], "probe_orders", [[2, 1], [0, 2], [1, 0]])
    d.set_knob("engine", "scheduler", "weighted")
    r = Dsms(data_dir=tmp_path)
    (rj,) = [t for t in r.control_tables() if t.get("type") == "join"]
    assert rj["knobs"]["probe_orders"] == [[2, 1], [0, 2], [1, 0]]
    assert r.control_table("engine")["knobs"]["scheduler"] == "weighted"


@pytest.mark.parametrize(
    "doc,where",
    [
        ("{not json", "not readable JSON"),
        ('{"format": "other"}', "not a cqlstream-plan file"),
        ('{"format": "cqlstream-plan", "catalog": ["register stream S (A int"]}', "catalog[0]"),
        (
            '{"format": "cqlstream-plan", "catalog": ["register stream S (A int)"], '
            '"queries": [{"id": 1, "cql": "select nope from S"}]}',
            "queries[0] (id 1)",
        ),
        ('{"format": "cqlstream-plan", "queries": [{"cql": "select 1"}]}', "queries[0]"),
        (
            '{"format": "cqlstream-plan", "knobs": [{"operator": "join: X", "knob": "probe_orders", "value": []}]}',
            "knobs[0]",
        ),
    ],
)
def test_bad_plan_file_names_the_entry(tmp_path, doc, where):
    (tmp_path / "plan.json").write_text(doc)
    with pytest.raises(
        PlanFileError, match=where.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        Dsms(data_dir=tmp_path)
