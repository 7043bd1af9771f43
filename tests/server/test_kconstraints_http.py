"""k-constraints over HTTP: declared at POST /streams (DDL text or the JSON `constraints` field),
listed on the stream, used by a join (its k-Mon entity among /entities, its line in EXPLAIN)."""

from __future__ import annotations


def test_constraints_declared_over_http_reach_the_join(http):
    r = http.post(
        "/streams",
        json={
            "name": "P",
            "attrs": [{"name": "id", "type": "integer"}, {"name": "a", "type": "integer"}],
            "constraints": ["a references C(id) within 2", "clustered(a, 5)"],
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["constraints"] == ["a references C(id) within 2", "clustered(a, 5)"]
    r = http.post(
        "/streams",
        content="register stream C (id integer, b integer) with constraints (unique(id))",
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 201 and r.json()["constraints"] == ["unique(id)"]
    assert http.get("/streams/C").json()["constraints"] == ["unique(id)"]
    q = http.post("/queries", json={"cql": "select istream(P.id, C.b) from P [rows 50], C [rows 50] where P.a = C.id"})
    assert q.status_code == 201, q.text
    explain = http.get(f"/queries/{q.json()['id']}").json()["explain"]
    assert "k-constraints (exact): many-one on C.id, RIDS(k=2) on P.a → C.id" in explain
    ents = {e["id"]: e for e in http.get("/entities").json()}
    kmon = [e for e in ents.values() if e["kind"] == "kconstraints"]
    assert len(kmon) == 1 and kmon[0]["knobs"]["mode"] == "exact"
    r = http.patch(f"/entities/{kmon[0]['id']}", json={"knobs": {"mode": "approx"}})
    assert r.status_code == 200 and r.json()["knobs"]["mode"] == "approx"


def test_bad_constraints_are_refused(http):
    r = http.post(
        "/streams",
        json={"name": "S", "attrs": [{"name": "a", "type": "integer"}], "constraints": ["clustered(b, 1)"]},
    )
    assert r.status_code == 422 and r.json()["code"] == "unknown_column"
    r = http.post(
        "/streams", json={"name": "S", "attrs": [{"name": "a", "type": "integer"}], "constraints": ["unique(a)); x"]}
    )
    assert r.status_code == 422
