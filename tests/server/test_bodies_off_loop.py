"""Request bodies of the ingest and registration routes are parsed in worker threads, never on the
event loop (server/bodies.py): a large body cannot stall the other connections while it parses."""

from __future__ import annotations

import json
import threading

import cqlstream.server.api_sources as api_sources
import cqlstream.server.bodies as bodies


class _Recording:
    """`json` with a `loads` that records the thread it runs in."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def loads(self, s, **kw):
        self.threads.append(threading.current_thread())
        return json.loads(s, **kw)

    def __getattr__(self, name):
        return getattr(json, name)


def test_bodies_are_parsed_off_the_event_loop(server, monkeypatch):
    rec = _Recording()
    monkeypatch.setattr(bodies, "json", rec)
    monkeypatch.setattr(api_sources, "json", rec)
    with server.client() as c:
        assert c.post("/streams", json={"ddl": "register stream S (A integer)"}).status_code == 201
        r = c.post("/queries", json={"cql": "select * from S [Range 2]"})
        assert r.status_code == 201
        qid = r.json()["id"]
        assert c.post("/streams/S/heartbeat", json={"ts": 3}).status_code == 200
        assert c.patch(f"/queries/{qid}", json={"weight": 2}).status_code == 200
        assert c.post("/views", json={"name": "V", "query": "select A from S"}).status_code == 201
        assert c.post("/streams/S/heartbeat", json={"ts": "x"}).status_code == 422  # errors too
        pad = {"ts": 4, "pad": [0] * 200_000}  # a large body: refused after parsing, off the loop
        assert c.post("/streams/S/heartbeat", json=pad).json()["field"] == "body.pad"
    assert len(rec.threads) == 7
    assert all(t is not server.thread and t is not threading.main_thread() for t in rec.threads), rec.threads
