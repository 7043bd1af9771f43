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
