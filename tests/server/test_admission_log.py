"""Admission control in the server: a push over the queue memory limit is admitted in part, its
reply says how many rows were refused, and the decision is logged with the push so that recovery
admits the same rows (it does not decide again from its own queues)."""

from __future__ import annotations

import json

from cqlstream.server.host import EngineHost
from cqlstream.server.settings import Settings


def make(tmp) -> EngineHost:
    """A host with the controller on and a tiny queue memory limit; no clock thread."""
    return EngineHost(
        Settings(
            data_dir=str(tmp),
            fsync="off",
            checkpoint_records=None,
            overload_control=True,
            overload_queue_memory_limit=6000,
        )
    )


def test_refused_rows_are_replied_logged_and_replayed(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (a int, b int)")
    qs = [host.register_query("select a, Count(*) from S [Range 50 Slide 50] group by a")["id"] for _ in range(2)]
    host.patch_query(qs[1], None, 4.0)
    replies = []
    for t in range(1, 40):
        rows = [{"ts": t, "a": i % 7, "b": i} for i in range(60)]
        replies.append(host.push("S", json.dumps(rows).encode(), "application/json"))
    refused = sum(r["refused"] for r in replies)
    assert refused > 0 and all(r["accepted"] == 60 for r in replies)
    live = {q: host.get_query(q)["approximation"] for q in qs}
    assert live[qs[0]]["refused_rows"] == refused and live[qs[0]]["sampling_rate"] <= live[qs[1]]["sampling_rate"]
    with host.lock:
        counts = [host.d.queries[q].pnode.queue.tuples_in for q in qs]
        shed = host.d.inputs["s"].shed
    host.stop()
    # crash: a new host recovers from the log, applying each push's logged decision
    host2 = make(tmp_path)
    with host2.lock:
        assert [host2.d.queries[q].pnode.queue.tuples_in for q in qs] == counts
        assert host2.d.inputs["s"].shed == shed and host2.d.inputs["s"].refused == refused
        assert host2.d.approx is not None and not host2.d.approx.frozen
    assert {q: host2.get_query(q)["approximation"]["sampling_rate"] for q in qs} == {
        q: a["sampling_rate"] for q, a in live.items()
    }
    host2.stop()


def test_serve_options_reach_the_controller():
    from cqlstream.cli import build_parser
    from cqlstream.limit_options import limit_settings
    from cqlstream.server.host import _overload

    args = build_parser().parse_args(
        ["serve", "--overload-control", "on", "--overload-admission", "off", "--overload-policy", "allocator"]
    )
    cfg = _overload(Settings(**limit_settings(args)))
    assert cfg is not None and cfg.enabled and not cfg.admission and cfg.policy == "allocator"
