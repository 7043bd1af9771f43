"""Resuming a result stream after the instant last seen (`from=T`, SSE `Last-Event-ID`): the elements
after it from the query's retained history, then the live ones, with no duplicates and no gaps, also
across a crash and recovery (the replay rebuilds the history)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from cqlstream.client import Client, HistoryGone
from cqlstream.server.host import EngineHost
from cqlstream.server.problems import ProblemError
from cqlstream.server.settings import Settings
from tests.server.test_durability import apply, make, script

AGG = "select cust, sum(amount), count(*) from Orders [Range 5] group by cust"
END = 60


def feed(c: Client, start: int, stop: int) -> None:
    """Orders at instants [start, stop), several customers per instant (so instants hold many elements)."""
    for t in range(start, stop):
        rows = [{"ts": t, "id": t * 10 + k, "cust": "abcde"[(t + k) % 5], "amount": k + t % 7} for k in range(3)]
        c.push("Orders", rows)
        c.heartbeat("Orders", t + 1)  # instant t is final


def setup(server) -> tuple[Client, int]:
    c = Client(server.url)
    c.register_stream("register stream Orders (id integer, cust varchar(8), amount integer)")
    return c, c.register_query(AGG)["id"]


class Reader(threading.Thread):
    """A subscriber that never disconnects: everything through END."""

    def __init__(self, url: str, qid: int) -> None:
        super().__init__(daemon=True)
        self.c = Client(url)
        self.qid = qid
        self.got: list = []

    def run(self) -> None:
        it = self.c.subscribe(self.qid, until=END, after=-1)
        self.got = [tuple(e) for e in it]


def test_resume_after_a_disconnect_gives_exactly_the_elements_after_the_last_instant(server):
    c, qid = setup(server)
    ref = Reader(server.url, qid)
    ref.start()
    feed(c, 1, 15)
    first = [tuple(e) for e in c.subscribe(qid, after=-1, until=14)]  # then the client goes away
    assert first and all(e[0] <= 14 for e in first)
    last = first[-1][0]
    feed(c, 15, 40)  # while it is away: these come from the retained history
    resumed = Client(server.url).subscribe(qid, after=last, until=END)
    out = [tuple(next(resumed))]  # connected: the catch-up is lined up with the live part
    feed(c, 40, END + 1)  # live
    out += [tuple(e) for e in resumed]
    ref.join(timeout=30)
    assert not ref.is_alive()
    assert len(ref.got) > 100
    assert first + out == ref.got
    assert all(e[0] > last for e in out)


def sse_events(text: str) -> list[tuple[str | None, dict]]:
    """(id or None, data object) per SSE event with data, skipping `open`/control events."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "data" in fields and "event" not in fields:
            out.append((fields.get("id"), json.loads(fields["data"])))
    return out


def test_sse_events_carry_ids_and_last_event_id_resumes(server):
    c, qid = setup(server)
    feed(c, 1, 20)
    ref = [tuple(e) for e in c.subscribe(qid, after=-1, until=19)]
    with httpx.Client(base_url=server.url, timeout=20) as h:
        text = h.get(f"/queries/{qid}/results", params={"format": "sse", "from": -1, "until": 9}).text
        events = sse_events(text)
        assert [(d["ts"], d["sign"], tuple(d["row"])) for _, d in events] == [e for e in ref if e[0] <= 9]
        # the id is on the last element of each instant, and it is that instant
        for i, (eid, d) in enumerate(events):
            last_of_instant = i + 1 == len(events) or events[i + 1][1]["ts"] != d["ts"]
            assert (eid is not None) == last_of_instant
            assert eid is None or int(eid) == d["ts"]
        last_id = [eid for eid, _ in events if eid is not None][-1]
        text = h.get(
            f"/queries/{qid}/results", params={"format": "sse", "until": 19}, headers={"Last-Event-ID": last_id}
        ).text
        again = [(d["ts"], d["sign"], tuple(d["row"])) for _, d in sse_events(text)]
        assert [e for e in ref if e[0] <= 9] + again == ref
        bad = h.get(f"/queries/{qid}/results", params={"format": "sse"}, headers={"Last-Event-ID": "x"})
        assert bad.status_code == 422
        both = h.get(f"/queries/{qid}/results", params={"from": 3, "snapshot": "true"})
        assert both.status_code == 422
        # an EventSource opened on a snapshot URL reconnects to the same URL with its Last-Event-ID:
        # it resumes after that instant (it holds the snapshot and the changes through it already)
        first = h.get(f"/queries/{qid}/results", params={"format": "sse", "snapshot": "true", "follow": "false"})
        snap = sse_events(first.text)
        assert snap and snap[-1][0] == first.headers["x-snapshot-at"] and all(d["sign"] == 1 for _, d in snap)
        feed(c, 20, 25)
        text = h.get(
            f"/queries/{qid}/results",
            params={"format": "sse", "snapshot": "true", "until": 24},
            headers={"Last-Event-ID": snap[-1][0]},
        ).text
        later = [(d["ts"], d["sign"], tuple(d["row"])) for _, d in sse_events(text)]
        assert later == [tuple(e) for e in c.subscribe(qid, after=int(snap[-1][0]), until=24)]
        assert later and all(e[0] > int(snap[-1][0]) for e in later)


def test_a_resume_older_than_the_retained_history_is_410(make_server):
    server = make_server(result_history=20)
    c, qid = setup(server)
    feed(c, 1, 30)
    with httpx.Client(base_url=server.url, timeout=20) as h:
        r = h.get(f"/queries/{qid}/results", params={"from": 2, "follow": "false"})
        assert r.status_code == 410
        problem = r.json()
        assert problem["type"].endswith("history_gone") and "snapshot=true" in problem["detail"]
        oldest = problem["oldest"]
        assert 2 < oldest < 29
    with pytest.raises(HistoryGone):
        list(c.subscribe(qid, after=oldest - 1, follow=False))
    tail = [tuple(e) for e in c.subscribe(qid, after=oldest, until=29)]
    assert tail and tail[0][0] == oldest + 1 and tail[-1][0] == 29
    assert len(tail) <= 20 + 5  # the bound, plus the newest instant kept whole


def catch_up(host: EngineHost, qid: int, after: int) -> list | int:
    """The published elements after `after` as a resuming subscriber gets them (or the 410's oldest)."""
    try:
        _, chunk = host.subscribe(qid, "ndjson", asyncio.new_event_loop(), follow=False, after=after)
    except ProblemError as e:
        assert e.code == "history_gone"
        return e.extra["oldest"]
    return chunk.batch.elements()


@pytest.mark.parametrize("checkpoint_every", [None, 25])
def test_after_a_crash_a_resumed_subscriber_gets_no_duplicates_and_no_gaps(tmp_path, checkpoint_every):
    ops = script(seed=11, n=120)
    crash_at = [30, 77]
    ref = EngineHost(Settings())
    for op in ops:
        apply(ref, op)
    host = make(tmp_path)
    seen: dict[int, int] = {}  # per query: the last instant a subscriber saw before each crash
    for i, op in enumerate(ops):
        if i in crash_at:
            for qid in host.fanout.pubs:
                got = catch_up(host, qid, -(1 << 40))
                if isinstance(got, list) and got:
                    seen[qid] = got[-1][0]
            host = make(tmp_path)  # dropped as it is: no close, no checkpoint
            assert host.journal.stats["errors"] == 0
        apply(host, op)
        if checkpoint_every and i % checkpoint_every == 0:
            host.journal.checkpoint()
    assert set(host.fanout.pubs) == set(ref.fanout.pubs)
    compared = 0
    for qid in ref.fanout.pubs:
        for after in {seen.get(qid, -(1 << 40)), -(1 << 40)}:
            want, got = catch_up(ref, qid, after), catch_up(host, qid, after)
            assert got == want, f"query {qid} after {after}"
            compared += len(want) if isinstance(want, list) else 0
    assert compared > 100, "the comparison covers real results"


def test_cli_query_from_prints_the_results_after_the_instant(server, capsys):
    from cqlstream.cli import main
    from cqlstream.io.stream_text import format_line

    c, qid = setup(server)
    feed(c, 1, 12)
    want = [format_line(e.ts, e.sign, e.row) for e in c.subscribe(qid, after=5, follow=False)]
    assert want and len(want) < len(list(c.subscribe(qid, after=-1, follow=False)))
    assert main(["query", "--id", str(qid), "--from", "5", "--url", server.url]) == 0
    assert capsys.readouterr().out.splitlines() == want
    assert main(["query", "--id", str(qid), "--from", "5", "--format", "ndjson", "--url", server.url]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [g["ts"] for g in got] == [e.ts for e in c.subscribe(qid, after=5, follow=False)]


@pytest.mark.time_limit(120)
def test_a_subscriber_resumes_across_a_sigkilled_server(tmp_path):
    """A real `serve --data-dir` killed with SIGKILL (a checkpoint, then log records): a subscriber
    that went away before the checkpoint and resumes after the restart from the last instant it saw
    gets exactly what a server that never stopped publishes after it."""
    from cqlstream.server import checkpoint as ckpt
    from cqlstream.server.recovery import LOG_DIR
    from tests.server.conftest import ServerProcess

    args = ("--data-dir", str(tmp_path / "data"), "--checkpoint-every", "25", "--fsync", "always")
    # the second server, without a data dir and fed the same pushes, is the reference
    procs = [ServerProcess(*args).wait_ready(), ServerProcess().wait_ready()]
    try:
        srv, other = procs
        with Client(srv.url) as c, Client(other.url) as r:
            for x in (c, r):
                x.register_stream("register stream Orders (id integer, cust varchar(8), amount integer)")
                assert x.register_query(AGG)["id"] == 1
            feed(c, 1, 12)
            seen = [tuple(e) for e in c.subscribe(1, after=-1, until=10)]  # then this subscriber goes away
            feed(c, 12, 40)  # a checkpoint is taken in here (every 25 records); the log has the rest
            feed(r, 1, 40)
        deadline = time.monotonic() + 20  # the clock thread takes the checkpoint that is due
        while not ckpt.checkpoints(tmp_path / "data" / LOG_DIR) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ckpt.checkpoints(tmp_path / "data" / LOG_DIR), "no checkpoint was taken"
        srv.proc.kill()  # no shutdown, no last checkpoint
        srv.proc.wait(timeout=10)
        srv = ServerProcess(*args).wait_ready(timeout=40)
        procs.append(srv)
        with Client(srv.url) as c, Client(other.url) as r:
            feed(c, 40, 50)
            feed(r, 40, 50)
            last = seen[-1][0]
            resumed = [tuple(e) for e in c.subscribe(1, after=last, until=49)]
            want = [tuple(e) for e in r.subscribe(1, after=-1, until=49)]
        assert len(want) > 200 and seen + resumed == want
    finally:
        for p in procs:
            p.stop()
