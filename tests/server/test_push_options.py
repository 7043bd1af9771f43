"""Push options of `POST /streams/{name}/tuples` on a real server: `Idempotency-Key` (a retry applies
once and gets the first reply back), `late=drop` (late rows dropped and counted), `heartbeat=T` (the
micro-batch and its watermark in one request); results are checked against the reference evaluator."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

from cqlstream.client import Client, InvalidInput
from cqlstream.server.idempotency import IdempotencyStore
from tests.engine_harness import run_reference

DDL = "register stream S (A integer, B integer)"
QUERY = "select A, count(*), sum(B) from S [Range 4] group by A"
TUPLES = "/streams/S/tuples"


def rows(*ts: int) -> list[dict[str, int]]:
    """One row per timestamp, with values derived from it."""
    return [{"ts": t, "A": t % 3, "B": 10 * t + i} for i, t in enumerate(ts)]


def events(pushed: list[dict[str, int]]) -> list[tuple[int, tuple[int, int]]]:
    return [(r["ts"], (r["A"], r["B"])) for r in pushed]


def reference_through(pushed: list[dict[str, int]], through: int) -> dict[int, Counter]:
    """The reference evaluator's results on `pushed` (in order) and a heartbeat at through+1, instants
    up to `through`."""
    ref = run_reference(DDL + ";", QUERY, {"S": [*events(pushed), (through + 1, None)]})
    return {t: c for t, c in ref.items() if t <= through}


class Collector(threading.Thread):
    """A subscriber to query `qid` until results are final through `until` (or 30 s pass)."""

    def __init__(self, url: str, qid: int, until: int) -> None:
        super().__init__(daemon=True)
        self.url, self.qid, self.until = url, qid, until
        self.elements: list = []
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with Client(self.url, timeout=30) as c:
                self.elements = list(c.subscribe(self.qid, until=self.until))
        except Exception as e:  # reported by result()
            self.error = e

    def result(self, timeout: float = 20) -> dict[int, Counter]:
        self.join(timeout)
        assert not self.is_alive(), f"the subscriber did not see results final through {self.until}"
        assert self.error is None, self.error
        out: dict[int, Counter] = {}
        for e in self.elements:
            out.setdefault(e.ts, Counter())[e.row] += e.sign
        return {t: Counter({k: v for k, v in c.items() if v}) for t, c in out.items() if any(c.values())}


def start(server, until: int) -> Collector:
    """Register S and the query, and a subscriber attached to it (waited for) until `until`."""
    with Client(server.url) as c:
        c.register_stream(DDL)
        qid = c.register_query(QUERY)["id"]
    col = Collector(server.url, qid, until)
    col.start()
    deadline = time.monotonic() + 15
    while server.host.health()["subscribers"] < 1:
        assert time.monotonic() < deadline and col.is_alive(), col.error
        time.sleep(0.02)
    return col


def source(http, name: str = "S") -> dict:
    return http.get(f"/streams/{name}").json()


def metric(http, line_start: str) -> str:
    lines = [ln for ln in http.get("/metrics").text.splitlines() if ln.startswith(line_start)]
    assert len(lines) == 1, lines
    return lines[0].rsplit(" ", 1)[1]


def test_a_retry_with_the_same_key_applies_once_and_replays_the_reply(server, http):
    col = start(server, until=9)
    first = http.post(TUPLES, json=rows(1, 2, 3, 4, 5), headers={"Idempotency-Key": "batch-1"})
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    assert first.json() == {"source": "S", "accepted": 5, "late": 0, "refused": 0, "replayed": False}
    again = http.post(TUPLES, json=rows(1, 2, 3, 4, 5), headers={"Idempotency-Key": "batch-1"})
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == {**first.json(), "replayed": True}
    # the key names the push, not its body: another body with the key is a replay too, applied never
    other = http.post(TUPLES, json=rows(6, 7), headers={"Idempotency-Key": "batch-1"})
    assert other.json() == {**first.json(), "replayed": True}
    assert source(http)["accepted"] == 5 and source(http)["max_ts"] == 5
    nxt = http.post(TUPLES, json=rows(6, 8), params={"heartbeat": 10}, headers={"Idempotency-Key": "batch-2"})
    assert nxt.json() == {"source": "S", "accepted": 2, "late": 0, "refused": 0, "replayed": False}
    assert col.result() == reference_through(rows(1, 2, 3, 4, 5) + rows(6, 8), 9)
    assert metric(http, 'cqlstream_pushes_replayed_total{source="S"}') == "2"
    assert metric(http, 'cqlstream_idempotency_keys{source="S"}') == "2"
    assert metric(http, "cqlstream_pushes_total") == "2"


def test_different_keys_both_apply_and_keys_are_per_source(server, http):
    http.post("/streams", content=DDL, headers={"content-type": "text/plain"})
    http.post("/streams", content="register stream T (A integer, B integer)", headers={"content-type": "text/plain"})
    for key in ("a", "b"):
        r = http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": key})
        assert r.json()["replayed"] is False
    r = http.post("/streams/T/tuples", json=rows(5), headers={"Idempotency-Key": "a"})
    assert r.json() == {"source": "T", "accepted": 1, "late": 0, "refused": 0, "replayed": False}
    r = http.post("/streams/t/tuples", json=rows(5), headers={"Idempotency-Key": "a"})  # names are case-insensitive
    assert r.json()["replayed"] is True
    assert source(http)["accepted"] == 2 and source(http, "T")["accepted"] == 1


def test_a_rejected_push_records_no_key_and_can_be_retried_fixed(server, http):
    http.post("/streams", content=DDL, headers={"content-type": "text/plain"})
    bad = rows(1, 2)
    bad[1]["B"] = "two"
    r = http.post(TUPLES, json=bad, headers={"Idempotency-Key": "k"})
    assert r.status_code == 422 and r.json()["row"] == 1 and "idempotent-replayed" not in r.headers
    r = http.post(TUPLES, json=rows(1, 2), headers={"Idempotency-Key": "k"})
    assert r.json() == {"source": "S", "accepted": 2, "late": 0, "refused": 0, "replayed": False}
    # a late row rejects the whole push (the default); the same key with late=drop then applies
    r = http.post(TUPLES, json=rows(1, 3), headers={"Idempotency-Key": "k2"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_input" and "already accepted" in r.json()["detail"]
    assert source(http)["accepted"] == 2 and source(http)["max_ts"] == 2
    r = http.post(TUPLES, json=rows(1, 3), params={"late": "drop"}, headers={"Idempotency-Key": "k2"})
    assert r.json() == {"source": "S", "accepted": 1, "late": 1, "refused": 0, "replayed": False}
    assert metric(http, 'cqlstream_idempotency_keys{source="S"}') == "2"


def test_late_drop_counts_and_equals_pushing_only_the_in_time_rows(server, http):
    col = start(server, until=11)
    assert http.post(TUPLES, json=rows(1, 3, 3)).json()["accepted"] == 3
    # late=reject (the default) rejects the whole push when a row is older than the stream's time
    r = http.post(TUPLES, json=rows(2, 4), params={"late": "reject"})
    assert r.status_code == 422 and r.json()["row"] == 0 and r.json()["field"] == "ts"
    assert source(http)["accepted"] == 3 and source(http)["max_ts"] == 3
    r = http.post(TUPLES, json=rows(1, 2, 3, 5, 6), params={"late": "drop"})
    assert r.json() == {"source": "S", "accepted": 3, "late": 2, "refused": 0, "replayed": False}
    r = http.post(TUPLES, json=rows(4, 9), params={"late": "drop", "heartbeat": 12})
    assert r.json()["late"] == 1
    in_time = rows(1, 3, 3) + rows(1, 2, 3, 5, 6)[2:] + rows(4, 9)[1:]
    assert col.result() == reference_through(in_time, 11)
    assert metric(http, 'cqlstream_source_late_total{source="S"}') == "3"
    r = http.post(TUPLES, json=rows(20), params={"late": "later"})
    assert r.status_code == 422 and r.json()["field"] == "query.late"


def test_heartbeat_in_the_push_makes_results_final_and_a_lower_one_is_a_no_op(server, http):
    col = start(server, until=6)
    r = http.post(TUPLES, json=rows(1, 2, 4, 5), params={"heartbeat": 7})
    assert r.status_code == 200 and r.json()["accepted"] == 4
    assert col.result() == reference_through(rows(1, 2, 4, 5), 6)  # final through 6 with no other request
    assert source(http)["max_ts"] == 7
    r = http.post(TUPLES, json=rows(8), params={"heartbeat": 3})  # below the stream's time: nothing moves back
    assert r.status_code == 200 and r.json()["accepted"] == 1 and source(http)["max_ts"] == 8
    r = http.post(TUPLES, json=[], params={"heartbeat": 2})
    assert r.status_code == 200 and r.json()["accepted"] == 0 and source(http)["max_ts"] == 8
    r = http.post(TUPLES, json=[], params={"heartbeat": 30})  # an empty push with a heartbeat is a heartbeat
    assert r.status_code == 200 and source(http)["max_ts"] == 30
    r = http.post(TUPLES, json=rows(31), params={"heartbeat": "soon"})
    assert r.status_code == 422 and r.json()["field"] == "query.heartbeat" and source(http)["max_ts"] == 30


def test_a_key_longer_than_the_limit_is_422_naming_the_header(server, http):
    http.post("/streams", content=DDL, headers={"content-type": "text/plain"})
    r = http.post(TUPLES, json=rows(1), headers={"Idempotency-Key": "k" * 201})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "invalid_request" and "idempotency-key" in r.json()["field"].lower()
    assert source(http)["accepted"] == 0
    assert http.post(TUPLES, json=rows(1), headers={"Idempotency-Key": "k" * 200}).json()["accepted"] == 1


def test_the_key_store_keeps_the_last_keys_per_source(make_server):
    srv = make_server(idempotency_keys=2)
    with srv.client() as http:
        http.post("/streams", content=DDL, headers={"content-type": "text/plain"})
        for key in ("k1", "k2", "k3"):
            http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": key})
        assert http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": "k3"}).json()["replayed"] is True
        assert http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": "k2"}).json()["replayed"] is True
        # k1 was the oldest: forgotten, so it applies again
        assert http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": "k1"}).json()["replayed"] is False
        assert source(http)["accepted"] == 4
        assert metric(http, 'cqlstream_idempotency_keys{source="S"}') == "2"
        # dropping the source forgets its keys: a new S starts afresh
        assert http.delete("/streams/S").status_code == 204
        http.post("/streams", content=DDL, headers={"content-type": "text/plain"})
        assert http.post(TUPLES, json=rows(5), headers={"Idempotency-Key": "k3"}).json()["replayed"] is False


def test_idempotency_store_evicts_the_oldest_key():
    store = IdempotencyStore(3)
    for i in range(5):
        store.record("S", f"k{i}", {"accepted": i})
    assert [store.seen("s", f"k{i}") for i in range(5)] == [
        None,
        None,
        {"accepted": 2},
        {"accepted": 3},
        {"accepted": 4},
    ]
    store.seen("S", "k4")["accepted"] = 99  # a copy: the recorded reply does not change
    assert store.seen("S", "k4") == {"accepted": 4} and store.sizes() == {"s": 3}
    store.forget("S")
    assert store.seen("S", "k4") is None
    with pytest.raises(ValueError):
        IdempotencyStore(0)


def test_client_arrow_push_with_a_key_late_drop_and_heartbeat(server):
    col = start(server, until=8)
    with Client(server.url) as c:
        table = pa.table({"ts": [1, 2, 4], "A": [1, 2, 1], "B": [5, 6, 7]})
        first = c.push_result("S", table, idempotency_key="arrow-1")
        assert first == {"source": "S", "accepted": 3, "late": 0, "refused": 0, "replayed": False}
        assert c.push_result("S", table, idempotency_key="arrow-1") == {**first, "replayed": True}
        late = pa.table({"ts": [3, 6], "A": [0, 0], "B": [8, 9]})
        assert c.push("S", late, late="drop", heartbeat=9, idempotency_key="arrow-2") == 1  # not the late row
        assert c.push_result("S", late, late="drop", heartbeat=9, idempotency_key="arrow-2")["late"] == 1
        with pytest.raises(InvalidInput):
            c.push("S", [{"ts": 1, "A": 1, "B": 1}])
        assert c.stream("S")["accepted"] == 4  # the tuples that entered the stream: not the late one
    pushed = [
        {"ts": 1, "A": 1, "B": 5},
        {"ts": 2, "A": 2, "B": 6},
        {"ts": 4, "A": 1, "B": 7},
        {"ts": 6, "A": 0, "B": 9},
    ]
    assert col.result() == reference_through(pushed, 8)


def test_openapi_documents_the_push_options(http):
    op = http.get("/openapi.json").json()["paths"]["/streams/{name}/tuples"]["post"]
    params = {(p["in"], p["name"]): p for p in op["parameters"]}
    assert {("query", "late"), ("query", "heartbeat"), ("header", "Idempotency-Key")} <= set(params)
    assert params[("query", "late")]["schema"]["enum"] == ["reject", "drop"]
    assert params[("header", "Idempotency-Key")]["schema"]["anyOf"][0]["maxLength"] == 200
    assert "Idempotent-Replayed" in op["description"]
    result = http.get("/openapi.json").json()["components"]["schemas"]["PushResult"]["properties"]
    assert {"accepted", "late", "replayed"} <= set(result)
