"""Service endpoints: OpenAPI docs, health, Prometheus metrics (with per-query memory and CPU),
control tables read and written over HTTP, query activate/weight."""

from __future__ import annotations

import re


def _setup(http):
    http.post("/streams", content="register stream S (A integer, B integer)", headers={"content-type": "text/plain"})
    q = http.post("/queries", json={"cql": "select A, count(*) from S [Range 10] group by A", "name": "counts"})
    assert q.status_code == 201 and q.headers["location"] == f"/queries/{q.json()['id']}"
    http.post("/streams/S/tuples", json=[{"ts": t, "A": t % 3, "B": t} for t in range(1, 50)])
    http.post("/streams/S/heartbeat", json={"ts": 60})
    return q.json()


def test_openapi_docs_and_health(http):
    spec = http.get("/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/streams",
        "/streams/{name}",
        "/streams/{name}/tuples",
        "/streams/{name}/heartbeat",
        "/queries",
        "/queries/{qid}",
        "/queries/{qid}/results",
        "/views",
        "/views/{name}",
        "/entities",
        "/entities/{entity_id}",
        "/entities/{entity_id}/peek",
        "/plan",
        "/metrics",
        "/healthz",
    } <= paths
    plan = spec["paths"]["/plan"]["get"]["responses"]["200"]["content"]
    assert set(plan) == {"application/json", "text/plain"}
    assert plan["application/json"]["schema"]["$ref"].endswith("/PlanGraph")
    assert {"complete_from", "complete"} <= set(spec["components"]["schemas"]["QueryOut"]["properties"])
    push = spec["paths"]["/streams/{name}/tuples"]["post"]
    assert set(push["requestBody"]["content"]) == {
        "application/json",
        "application/x-ndjson",
        "text/csv",
        "application/vnd.apache.arrow.stream",
    }
    assert push["responses"]["422"]["content"]["application/problem+json"]["schema"]["$ref"].endswith("/Problem")
    assert set(spec["paths"]["/queries/{qid}/results"]["get"]["responses"]["200"]["content"]) == {
        "application/x-ndjson",
        "application/json",
        "text/event-stream",
        "application/xml",
    }
    docs = http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    h = http.get("/healthz").json()
    assert h["status"] == "ok" and h["persistence"] is False


def test_metrics_are_prometheus_text_with_per_query_cost(http):
    q = _setup(http)
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"]*"\})? \S+', line), line
    assert 'cqlstream_tuples_accepted_total{source="S"} 49' in text
    assert re.search(rf'cqlstream_query_memory_bytes{{query="{q["id"]}"}} \d', text)
    assert re.search(rf'cqlstream_query_cpu_seconds_total{{query="{q["id"]}"}} [0-9.e-]+', text)
    assert re.search(rf'cqlstream_results_total{{query="{q["id"]}"}} [1-9]', text)
    assert "cqlstream_subscriber_lag_disconnects_total 0" in text


def test_control_tables_and_query_knobs(http):
    q = _setup(http)
    ents = http.get("/entities").json()
    kinds = {e["kind"] for e in ents}
    assert {"query", "source", "operator", "queue"} <= kinds
    eid = f"query:{q['id']}"
    one = http.get(f"/entities/{eid}").json()
    assert one["id"] == eid and "weight" in one["knobs"]
    r = http.patch(f"/entities/{eid}", json={"knobs": {"weight": 3}})
    assert r.status_code == 200 and r.json()["knobs"]["weight"] == 3
    assert http.get(f"/queries/{q['id']}").json()["weight"] == 3
    r = http.patch(f"/entities/{eid}", json={"knobs": {"no_such_knob": 1}})
    assert r.status_code == 422 and r.json()["code"] in ("unknown_knob", "bad_knob_value")
    r = http.patch(f"/entities/{eid}", json={"knobs": {"weight": "heavy"}})
    assert r.status_code == 422
    assert http.patch(f"/queries/{q['id']}", json={"active": False}).json()["active"] is False
    http.post("/streams/S/tuples", json=[{"ts": 70, "A": 1, "B": 1}])
    back = http.patch(f"/queries/{q['id']}", json={"active": True, "weight": 0.5}).json()
    assert back["active"] is True and back["weight"] == 0.5
    names = [x["name"] for x in http.get("/queries").json()]
    assert "counts" in names
    r = http.post("/queries", json={"cql": "select * from S", "name": "counts"})
    assert r.status_code == 409 and r.json()["code"] == "duplicate_name"
