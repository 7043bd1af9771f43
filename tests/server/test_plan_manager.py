"""The plan manager over a real uvicorn server: snapshots are the engine's and line up with the deltas
that follow them (queries registered after data, late subscribers, a late query sharing a running
plan), checked against an in-process `Dsms` fed the same input; shapes the engine cannot snapshot
are refused with 409 `snapshot_unavailable`; `GET /plan`, peek, completeness, inactive queries."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from cqlstream.client import Client, SnapshotUnavailable
from cqlstream.engine.dsms import Dsms
from tests.server.formats import ndjson
from tests.server.test_results import _Reader

DDL = ["register stream S (A integer, B integer)", "register stream T (A integer, C integer)"]
QUERIES = {
    "aggregate": "select A, count(*), sum(B) from S [Range 6] group by A",
    "join": "select S.A, S.B, T.C from S [Range 4], T [Range 3] where S.A = T.A",
    "window": "select * from S [Range 5]",
    "distinct": "select distinct A from S [Range 5]",
}
END = 60


def _batches(seed=11):
    """Pushes (source, rows) in time order, one heartbeat per instant block."""
    rnd = random.Random(seed)
    out = []
    for t0 in range(1, END + 1, 3):
        for name, col in (("S", "B"), ("T", "C")):
            rows = [
                {"ts": t0 + rnd.randint(0, 2), "A": rnd.randint(1, 4), col: rnd.randint(0, 9)}
                for _ in range(rnd.randint(0, 7))
            ]
            out.append((name, sorted(rows, key=lambda r: r["ts"])))
    return out


def _relation(elems, through=None):
    c = Counter()
    for ts, s, row in elems:
        if through is None or ts <= through:
            c[row] += s
            assert c[row] >= 0
    return +c


class Mirror:
    """The server and an in-process Dsms fed the same registrations and input."""

    def __init__(self, http):
        self.http = http
        self.ref = Dsms()
        self.subs: dict[int, object] = {}
        self.seen: dict[int, list] = {}

    def source(self, ddl):
        assert self.http.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code == 201
        self.ref.register_source(ddl)

    def query(self, cql):
        r = self.http.post("/queries", json={"cql": cql})
        assert r.status_code == 201, r.text
        out = r.json()
        h = self.ref.register_query(cql)
        assert h.id == out["id"]
        assert {k: out[k] for k in ("complete_from", "complete")} == h.completeness()
        self.subs[h.id] = self.ref.subscribe(h.id, snapshot=True)  # a late query sharing a running plan starts
        # from its relation now
        self.seen[h.id] = []
        return out

    def push(self, name, rows):
        if rows:
            r = self.http.post(f"/streams/{name}/tuples", json=rows)
            assert r.status_code == 200, r.text
            attrs = [k for k in rows[0] if k != "ts"]
            self.ref.push(name, [tuple(x[a] for a in attrs) for x in rows], ts=[x["ts"] for x in rows])

    def heartbeat(self, t):
        for name in ("S", "T"):
            assert self.http.post(f"/streams/{name}/heartbeat", json={"ts": t}).status_code == 200
            self.ref.heartbeat(name, t)
        self.ref.run()
        for qid, sub in self.subs.items():
            self.seen[qid] += sub.poll().elements()


def _snapshot_and_deltas(rd):
    elems, _events = ndjson(rd.text)
    at = int(rd.headers["x-snapshot-at"])
    snap = [e for e in elems if e[0] <= at]
    assert all(ts == at and s == 1 for ts, s, _ in snap), "the snapshot is + rows stamped with its instant"
    assert elems[len(snap) :] == [e for e in elems if e[0] > at], "then only changes after it"
    return at, snap, elems[len(snap) :]


def _feed(m, part):
    """Push each (stream, rows) of `part` through `m`; T's pushes are followed by a heartbeat at
    their last instant."""
    for name, rows in part:
        m.push(name, rows)
        if name == "T" and rows:
            m.heartbeat(rows[-1]["ts"])


@pytest.mark.time_limit(60)
def test_snapshots_line_up_with_deltas_for_late_queries_and_late_subscribers(server, http):
    m = Mirror(http)
    for ddl in DDL:
        m.source(ddl)
    pushes = _batches()
    third = len(pushes) // 3

    _feed(m, pushes[:third])  # data first, then the queries join the running plan
    qids = {k: m.query(q)["id"] for k, q in QUERIES.items()}
    _feed(m, pushes[third : 2 * third])
    twin = m.query(QUERIES["aggregate"])["id"]  # identical to a running query: shares its plan, late
    shared = http.get("/plan").json()
    assert any({qids["aggregate"], twin} <= set(n["queries"]) for n in shared["nodes"] if n["kind"] == "operator")

    readers = {
        qid: _Reader(server.url, qid, "ndjson", {"snapshot": "true", "until": END}) for qid in [*qids.values(), twin]
    }
    for rd in readers.values():
        rd.start()
    for rd in readers.values():
        assert rd.ready.wait(10) and rd.error is None and rd.status == 200, (rd.error, rd.status)
    _feed(m, pushes[2 * third :])
    m.heartbeat(END + 1)
    for qid, rd in readers.items():
        rd.join(20)
        assert not rd.is_alive() and rd.error is None, rd.error
        at, snap, deltas = _snapshot_and_deltas(rd)
        want = m.seen[qid]
        assert Counter(row for _, _, row in snap) == _relation(want, at), f"query {qid}: snapshot at {at}"
        assert deltas == [e for e in want if at < e[0] <= END], f"query {qid}: the changes after the snapshot"
        assert _relation(snap + deltas) == _relation(want, END)
    assert _relation(m.seen[twin], END) == _relation(m.seen[qids["aggregate"]], END)
    for k, qid in qids.items():
        assert _relation(m.seen[qid], END), f"{k} has rows at the end"
        got = http.get(f"/queries/{qid}").json()
        assert {x: got[x] for x in ("complete_from", "complete")} == m.ref.queries[qid].completeness()
        assert got["complete"] and got["complete_from"] is not None and got["complete_from"] <= END


def test_relation_source_snapshots_are_exact_or_refused(server, http):
    """Select/project/join directly over a source relation: the engine's snapshot is not lined up
    with the query's published results (see the report), so the server refuses with 409 rather than
    sending rows twice; an aggregate over the relation keeps its own state and is snapshotted."""
    http.post("/streams", content="register relation R (A integer, N integer)", headers={"content-type": "text/plain"})
    cqls = ["select * from R", "select A from R where N > 1", "select A, count(*) from R group by A"]
    qids = [http.post("/queries", json={"cql": q}).json()["id"] for q in cqls]
    rows = [
        {"ts": 1, "sign": 1, "A": 1, "N": 2},
        {"ts": 2, "sign": 1, "A": 2, "N": 5},
        {"ts": 3, "sign": -1, "A": 1, "N": 2},
        {"ts": 3, "sign": 1, "A": 3, "N": 1},
    ]
    assert http.post("/streams/R/tuples", json=rows).json()["accepted"] == 4
    http.post("/streams/R/heartbeat", json={"ts": 4})
    want = {qids[0]: {(2, 5): 1, (3, 1): 1}, qids[1]: {(2,): 1}, qids[2]: {(2, 1): 1, (3, 1): 1}}
    for qid in qids:
        r = http.get(f"/queries/{qid}/results", params={"snapshot": "true", "follow": "false"})
        if r.status_code == 409:
            assert qid != qids[2] and r.json()["code"] == "snapshot_unavailable", r.text
            assert "subscribe without snapshot" in r.json()["detail"]
            continue
        assert r.status_code == 200 and r.headers["x-snapshot-at"] == "3"
        elems, _ = ndjson(r.text)
        assert all(ts == 3 and s == 1 for ts, s, _ in elems)
        assert Counter(row for _, _, row in elems) == want[qid]
    r = http.get(f"/queries/{qids[0]}/results", params={"follow": "false"})
    assert r.status_code == 200 and "x-snapshot-at" not in r.headers, "no snapshot asked: nothing to refuse"
    with Client(server.url) as c:  # the client: strict, or falling back to the changes from now on
        for qid in qids:
            try:
                strict = Counter(e.row for e in c.subscribe(qid, snapshot=True, follow=False))
            except SnapshotUnavailable:
                strict = None
            fallback = Counter(e.row for e in c.subscribe(qid, snapshot="if_available", follow=False))
            if strict is None:
                assert fallback == Counter(), "no snapshot: only changes from now on (none come)"
            else:
                assert strict == fallback == want[qid]
            raw = b"".join(c.stream_raw(qid, "xml", snapshot="if_available", follow=False))
            assert raw.startswith(b"<?xml") or raw.startswith(b"<results")


def test_inactive_queries_end_and_refuse_subscribers(server, http):
    http.post("/streams", content="register stream S (A integer)", headers={"content-type": "text/plain"})
    qid = http.post("/queries", json={"cql": "select A, count(*) from S [Range 5] group by A"}).json()["id"]
    rd = _Reader(server.url, qid, "ndjson", {})
    rd.start()
    assert rd.ready.wait(10)
    http.post("/streams/S/tuples", json=[{"ts": 1, "A": 1}, {"ts": 2, "A": 2}])
    http.post("/streams/S/heartbeat", json={"ts": 3})
    assert http.patch(f"/entities/query:{qid}", json={"knobs": {"active": False}}).json()["knobs"]["active"] is False
    rd.join(10)
    assert not rd.is_alive()
    elems, events = ndjson(rd.text)
    assert _relation(elems) == {(1, 1): 1, (2, 1): 1}
    assert events == [{"event": "end", "detail": "query deactivated"}]
    r = http.get(f"/queries/{qid}/results", params={"snapshot": "true"})
    assert r.status_code == 409 and r.json()["code"] == "query_inactive"
    back = http.patch(f"/queries/{qid}", json={"active": True}).json()
    assert back["active"] is True and back["complete_from"] == 8 and back["complete"] is True, "window refilled"
    http.post("/streams/S/tuples", json=[{"ts": 9, "A": 1}])
    http.post("/streams/S/heartbeat", json={"ts": 10})
    r = http.get(f"/queries/{qid}/results", params={"snapshot": "true", "follow": "false"})
    assert r.status_code == 200 and r.headers["x-snapshot-at"] == "9"
    assert [(s, row) for _, s, row in ndjson(r.text)[0]] == [(1, (1, 1))], "S [Range 5] at 9 holds A=1 once"


def test_plan_peek_and_completeness_endpoints(http):
    http.post("/streams", content="register stream S (A integer, B integer)", headers={"content-type": "text/plain"})
    q1 = http.post("/queries", json={"cql": "select A, count(*) from S [Range 4] group by A"}).json()
    assert q1["complete"] is True and q1["complete_from"] is None, "registered before data: exact from the start"
    http.post("/streams/S/tuples", json=[{"ts": t, "A": t % 3, "B": t} for t in range(1, 11)])
    http.post("/streams/S/heartbeat", json={"ts": 11})
    q2 = http.post("/queries", json={"cql": "select * from S [Rows 3] where B > 2"}).json()
    assert q2["complete"] is False and q2["complete_from"] is None, "a late Rows window cannot have its history"
    q3 = http.post("/queries", json={"cql": "select B from S [Range 2]"}).json()
    assert q3["complete"] is True and q3["complete_from"] == 10, "the shared window store holds its extent"
    assert {k: http.get(f"/queries/{q2['id']}").json()[k] for k in ("complete", "complete_from")} == {
        "complete": False,
        "complete_from": None,
    }

    g = http.get("/plan")
    assert g.status_code == 200 and g.headers["content-type"].startswith("application/json")
    g = g.json()
    ids = {n["id"] for n in g["nodes"]}
    assert {f"query:{q1['id']}", f"query:{q2['id']}", "src:S"} <= ids
    assert g["edges"] and all(e["from"] in ids and (e["to"] in ids) for e in g["edges"])
    assert any(e["to"] == f"query:{q1['id']}" for e in g["edges"])
    text = http.get("/plan", params={"format": "text"})
    assert text.headers["content-type"].startswith("text/plain") and text.text.startswith("Global plan: 3 queries")
    assert f"query:{q2['id']} (active" in text.text
    assert http.get("/plan", headers={"accept": "text/plain"}).text == text.text
    assert http.get("/plan", params={"format": "dot"}).status_code == 422

    p = http.get("/entities/src:S/peek", params={"n": 3})
    assert p.status_code == 200, p.text
    assert [t["row"] for t in p.json()["tuples"]] == [[t % 3, t] for t in (8, 9, 10)]
    win = next(
        n
        for n in g["nodes"]
        if n["kind"] == "operator" and str(n.get("type")).endswith("window") and q1["id"] in n["queries"]
    )
    p = http.get(f"/entities/{win['id']}/peek").json()
    assert p["what"] == "window contents" and sorted(t["row"][1] for t in p["tuples"]) == [6, 7, 8, 9, 10]
    assert http.get("/entities/src:S/peek", params={"n": 0}).json()["tuples"] == []
    assert http.get("/entities/src:S/peek", params={"n": 5000}).status_code == 422
    r = http.get("/entities/op:99999/peek")
    assert r.status_code == 404 and r.json()["code"] == "unknown_entity"

    qe = http.get(f"/entities/query:{q1['id']}").json()
    assert qe["counters"]["complete_from"] is None and qe["counters"]["subscribers"] == 0
    r = http.patch(f"/entities/query:{q1['id']}", json={"knobs": {"weight": 2, "bogus": 1}})
    assert r.status_code == 422 and r.json()["code"] == "unknown_knob"
    assert http.get(f"/queries/{q1['id']}").json()["weight"] == 1.0, "nothing set when a knob name is unknown"
    r = http.patch("/entities/src:S", json={"knobs": {"sampling_rate": 2}})
    assert r.status_code == 422 and r.json()["code"] == "bad_knob_value"
    r = http.patch(f"/entities/{win['id']}", json={"knobs": {"memory_limit": 10}})
    assert r.status_code == 200 and r.json()["knobs"]["memory_limit"] == 10


def test_query_replies_carry_the_bounded_memory_verdict(http):
    http.post("/streams", content="register stream S (A integer, B integer)", headers={"content-type": "text/plain"})
    cases = {"select * from S [Rows 5]": True, "select * from S [Range 5]": None, "select distinct A from S": False}
    for cql, want in cases.items():
        r = http.post("/queries", json={"cql": cql})
        assert r.status_code == 201
        body = r.json()
        assert body["bounded_memory"] is want and body["bounded_memory_note"], body
        assert http.get(f"/queries/{body['id']}").json()["bounded_memory"] is want


@pytest.mark.time_limit(60)
def test_a_late_query_reading_a_column_the_running_join_did_not_fill(server, http):
    """Column pruning over HTTP: the first query reads only S.B of its stream join, which then
    fills no other column; a query registered after data that reads T.C is given a stream join of
    its own, and from its complete_from on its results equal an in-process engine without pruning
    fed alike."""
    m = Mirror(http)
    m.ref = Dsms(prune_columns=False)
    for ddl in DDL:
        m.source(ddl)
    join = "from S [Now], T [Range 3] where S.A = T.A"
    pushes = _batches(5)
    half = len(pushes) // 2

    first = m.query(f"select rstream(S.B) {join}")["id"]
    _feed(m, pushes[:half])
    # (not m.query: its own copy starts later than the mirror's shared one, so complete_from differs)
    late = http.post("/queries", json={"cql": f"select rstream(S.A, T.C) {join}"}).json()
    h = m.ref.register_query(f"select rstream(S.A, T.C) {join}")
    assert h.id == late["id"] and h.complete_from is not None and late["complete_from"] >= h.complete_from
    m.subs[h.id], m.seen[h.id] = m.ref.subscribe(h.id), []
    joins = [n for n in http.get("/plan").json()["nodes"] if "join" in n.get("type", "")]
    assert len(joins) == 2, joins
    assert any("produced rows without columns this query reads" in j["note"] for j in joins), joins
    rd = _Reader(server.url, late["id"], "ndjson", {"until": END})
    rd.start()
    assert rd.ready.wait(10) and rd.error is None and rd.status == 200, (rd.error, rd.status)
    _feed(m, pushes[half:])
    m.heartbeat(END + 1)
    rd.join(20)
    assert not rd.is_alive() and rd.error is None, rd.error
    elems, _ = ndjson(rd.text)
    cf = late["complete_from"]
    assert cf is not None and cf < END
    got = Counter(e for e in elems if e[0] >= cf)
    assert got == Counter(e for e in m.seen[late["id"]] if cf <= e[0] <= END)
    assert sum(got.values()) > 0 and m.seen[first]
