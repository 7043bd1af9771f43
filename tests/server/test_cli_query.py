"""`cqlstream query` on a stream-valued query follows its results (a stream has no snapshot to
print), saying so, instead of printing nothing."""

from __future__ import annotations

import threading
import time

from cqlstream.cli import main as cli_main
from cqlstream.client import Client


def test_query_id_on_a_stream_follows_and_says_so(server, capsys):
    with Client(server.url) as c:
        c.register_stream("register stream S (A integer)")
        qid = c.register_query("select * from S where A > 1")["id"]
        rc: list[int] = []
        t = threading.Thread(target=lambda: rc.append(cli_main(["query", "--id", str(qid), "--url", server.url])))
        t.start()
        deadline = time.monotonic() + 10
        while not c.query(qid)["subscribers"] and time.monotonic() < deadline:  # subscribed before the rows
            time.sleep(0.05)
        c.push("S", [{"ts": 1, "A": 1}, {"ts": 2, "A": 5}])
        c.heartbeat("S", 3)
        time.sleep(0.5)
        c.deregister(qid)  # ends the followed stream
        t.join(10)
    assert not t.is_alive() and rc == [0]
    out, err = capsys.readouterr()
    assert f"query {qid} is stream-valued (no snapshot): following its results" in err
    assert out.splitlines() == ["[2]:+:5"]


def test_query_approximate_static_registers_with_the_rewrites_and_says_which(server, capsys):
    with Client(server.url) as c:
        c.register_stream("register stream S (A integer)")
        c.push("S", [{"ts": 1, "A": 2}, {"ts": 2, "A": 5}])
        c.heartbeat("S", 3)
    q = "select Count(*) from S [Range 10 Tolerate 2] where A > 1"
    assert cli_main(["query", q, "--approximate", "static", "--url", server.url]) == 0
    _, err = capsys.readouterr()
    assert "static approximation: in force" in err
    assert "window_reduction: WINDOW [RANGE 10] -> WINDOW [RANGE 2] (TOLERATE clause" in err
    assert cli_main(["query", q, "--url", server.url]) == 0  # exact: registered as written, nothing said
    _, err = capsys.readouterr()
    assert "static approximation" not in err
    with Client(server.url) as c:
        qs = c.queries()
    assert [q.get("static_approximation") is not None for q in qs] == [True, False]
    assert cli_main(["query", "--id", "1", "--approximate", "static", "--url", server.url]) == 2
