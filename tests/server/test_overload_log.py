"""The overload controller in the server: `serve --overload-control on` starts it, a query's reply
says what approximation is in force, and its changes are logged so that recovery applies the same
sampling at the same points (the replay does not decide again from its own timing)."""

from __future__ import annotations

import json
from dataclasses import replace

from cqlstream.engine.approx.controller import Load
from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings


def make(tmp) -> EngineHost:
    """A host with the controller on; no clock thread: the test turns the controller by hand."""
    return EngineHost(Settings(data_dir=str(tmp), fsync="off", checkpoint_records=None, overload_control=True))


def push(host: EngineHost, rows: list[dict]) -> None:
    host.push("S", json.dumps(rows).encode(), "application/json")


def test_changes_are_logged_and_replayed(tmp_path):
    host = make(tmp_path)
    a = host.d.approx
    assert a is not None and host.d.control_table("engine")["knobs"]["approximation"] == "on"
    a.config = replace(a.config, interval=0.0, settle=1)
    host.register_source("register stream S (a int, b int)")
    q = host.register_query("select a, b from S where b >= 0")["id"]
    assert host.get_query(q)["approximation"] is None
    load = [Load(200 << 20)]  # twice the default limit of 100 MiB
    a.measure = lambda: load[0]
    for t in range(1, 30):
        push(host, [{"ts": t, "a": t * 100 + i, "b": i} for i in range(40)])
        if t in (5, 10, 15):
            host._approximate()
        if t == 20:
            load[0] = Load(0)
            a.config = replace(a.config, calm=1)
            host._approximate()
    live = host.get_query(q)["approximation"]
    assert live is not None and live["sampling_rate"] < 1.0 and "queue memory" in live["reason"]
    assert [c.sampling_rate for c in a.history][:3] == sorted([c.sampling_rate for c in a.history][:3], reverse=True)
    with host.lock:
        n_live = host.d.queries[q].pnode.queue.tuples_in
    assert 0 < n_live < 29 * 40
    # crash: a new host recovers from the log; its controller replays the logged steps
    host2 = make(tmp_path)
    again = host2.get_query(q)["approximation"]
    assert again is not None and again["sampling_rate"] == live["sampling_rate"]
    with host2.lock:
        assert host2.d.queries[q].pnode.queue.tuples_in == n_live
        assert host2.d.approx is not None and not host2.d.approx.frozen
    host2.stop()


def test_off_by_default(tmp_path):
    host = EngineHost(Settings())
    host.register_source("register stream S (a int, b int)")
    q = host.register_query("select a from S")
    assert host.d.approx is None and q["approximation"] is None and host.get_query(q["id"])["approximation"] is None
    assert "approximation" not in host.d.control_table(f"query:{q['id']}")  # tables as before
    host.stop()
