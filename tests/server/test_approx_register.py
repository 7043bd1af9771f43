"""POST /queries approves static approximation with `approximate`; the reply says which rewrites
are in force; the approval survives a crash (write-ahead log) and a restart (plan file)."""

from __future__ import annotations

import json
from pathlib import Path

from cqlstream.engine.dsms import Dsms
from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings

TEXT = {"content-type": "text/plain"}
Q = "select * from S [Range 10 Tolerate 2] where A > 1"


def test_the_reply_lists_the_rewrites_in_force(http):
    assert http.post("/streams", content="register stream S (A integer)", headers=TEXT).status_code == 201
    exact = http.post("/queries", json={"cql": Q})
    assert exact.status_code == 201 and exact.json()["static_approximation"] is None
    assert "WINDOW [RANGE 10]" in exact.json()["explain"]
    r = http.post("/queries", json={"cql": Q, "approximate": "static"})
    assert r.status_code == 201, r.text
    a = r.json()["static_approximation"]
    assert a["approximate"] == "static" and not a["exact"]
    assert a["applied"][0] == {
        "rule": "window_reduction",
        "before": "WINDOW [RANGE 10]",
        "after": "WINDOW [RANGE 2]",
        "why": "TOLERATE clause",
        "changes_values": False,
    }
    assert "Approximation:" in r.json()["explain"]
    text = http.post("/queries", content=Q, headers=TEXT, params={"approximate": "static"})
    assert text.status_code == 201 and text.json()["static_approximation"]["applied"]
    wide = http.post("/queries", json={"cql": "select A from S", "approximate": {"sample_percent": 30}})
    assert wide.json()["static_approximation"]["applied"][0]["after"] == "SAMPLE 30% of S"
    bad = http.post("/queries", json={"cql": Q, "approximate": "sometimes"})
    assert bad.status_code == 422 and bad.json()["code"] == "bad_approximate"


def _host(tmp: Path) -> EngineHost:
    return EngineHost(Settings(data_dir=str(tmp), fsync="off"), Dsms())


def test_the_approval_survives_a_crash_and_a_restart(tmp_path):
    host = _host(tmp_path)
    host.register_source("register stream S (A integer)")
    qid = host.register_query(Q, "approx", approximate={"mode": "static", "sample_percent": 50})["id"]
    plain = host.register_query(Q, "plain")["id"]
    before = host.d.queries[qid].explain()
    # crashed: dropped without closing; the new host replays the write-ahead log
    again = _host(tmp_path)
    assert again.d.queries[qid].explain() == before
    assert again.d.queries[plain].compiled.approximation is None
    again.stop()
    # a clean stop checkpoints; the restart replays no log record and still runs the approximated plan
    third = _host(tmp_path)
    assert third.journal.stats["records"] == 0
    assert third.d.queries[qid].explain() == before
    assert "SAMPLE 50%" in before and "WINDOW [RANGE 2]" in before
    third.stop()


def test_the_plan_file_keeps_the_approval(tmp_path):
    d = Dsms(data_dir=tmp_path)
    d.execute("register stream S (A integer)")
    a = d.register_query(Q, approximate={"mode": "static", "window_fraction": 0.5})
    e = d.register_query(Q)
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    entries = {q["id"]: q for q in saved["queries"]}
    assert entries[a.id]["approximate"] == {"mode": "static", "window_fraction": 0.5}
    assert "approximate" not in entries[e.id]  # an exact query's entry is as before
    r = Dsms(data_dir=tmp_path)
    assert r.queries[a.id].explain() == a.explain() and r.queries[e.id].compiled.approximation is None
