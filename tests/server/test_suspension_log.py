"""A query suspended over a limit stays suspended after a crash and recovery, at the same point,
even when the limit is a time limit (whose replay would not trip the same way)."""

from __future__ import annotations

import json

from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings


def make(tmp, **kw) -> EngineHost:
    host = EngineHost(Settings(data_dir=str(tmp), fsync="off", checkpoint_records=None, **kw))
    host.start()
    return host


def push(host: EngineHost, stream: str, rows: list[dict]) -> None:
    host.push(stream, json.dumps(rows).encode(), "application/json")


def test_a_cpu_suspension_is_replayed_from_its_record(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (a int)")
    host.register_source("register stream T (a int)")
    cross = host.register_query("select * from S [Range Unbounded], T [Range Unbounded]")["id"]
    other = host.register_query("select count(*) from S [Range 10]")["id"]
    push(host, "S", [{"ts": 1, "a": i} for i in range(50)])
    host.control.set_knobs(f"query:{cross}", {"cpu_limit": 1e-9})  # any work is too much: the next run trips it
    push(host, "T", [{"ts": 2, "a": i} for i in range(50)])
    push(host, "S", [{"ts": 3, "a": 7}])
    live = host.get_query(cross)
    assert live["state"] == "suspended" and live["suspended"].startswith("cpu")
    counts = host.get_query(other)
    # crash: the host is dropped without stopping; a new one recovers from the log alone
    host2 = make(tmp_path)
    again = host2.get_query(cross)
    assert (again["state"], again["suspended"]) == ("suspended", live["suspended"])
    assert host2.get_query(other)["state"] == counts["state"] == "active"
    with host2.lock, host.lock:
        assert host2.d.queries[other].pnode.queue.tuples_in == host.d.queries[other].pnode.queue.tuples_in
    host2.stop()
