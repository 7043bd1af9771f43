"""The catalog's query table says what approximation is in force: static approximation approved
at registration, and the rows admission control refused under overload."""

from __future__ import annotations

import math
import re

from playwright.sync_api import expect

from cqlstream.server.settings import Settings
from tests.console.conftest import OfflinePage
from tests.console.test_views import setup_stream
from tests.server.conftest import ServerThread
from tests.server.hand_overload import HandOverload


def test_query_table_shows_static_approximation_and_refused_rows(browser) -> None:
    s = ServerThread(Settings(overload_control=True, overload_queue_memory_limit=4000)).start()
    p = OfflinePage(browser, s.url)
    try:
        setup_stream(s)
        with s.client() as c:
            r = c.post(
                "/queries", json={"cql": "select * from S [Range 10 Tolerate 2] where A > 1", "approximate": "static"}
            )
            assert r.status_code == 201, r.text
            assert (
                c.post("/queries", json={"cql": "select A, Count(*) from S [Range 50 Slide 50] group by A"}).status_code
                == 201
            )
            refused = 0
            for t in range(1, 30):
                rows = "ts,A,B\n" + "".join(f"{t},{i % 5},{i}.5\n" for i in range(60))
                r = c.post("/streams/S/tuples", content=rows, headers={"content-type": "text/csv"})
                assert r.status_code == 200, r.text
                refused += r.json()["refused"]
        assert refused > 0
        page = p.page
        page.goto("/#catalog")
        expect(page.locator("#queries tr[data-id='1']")).to_contain_text("static approximation (1 rewrite)")
        expect(page.locator("#queries tr[data-id='2']")).to_contain_text(f"{refused} rows refused")
        expect(page.locator("#queries tr[data-id='2']")).not_to_contain_text("static approximation")
        p.shot("catalog-overload")
        assert p.external == [] and p.errors == []
    finally:
        p.context.close()
        s.stop()


def test_results_view_shows_the_sampling_rate_in_force(browser) -> None:
    """The live results view hears the stream's `approximation` message: `sampled N%` while the
    overload controller samples the query, and nothing once it is exact again."""
    s = ServerThread(Settings(overload_control=True)).start()
    p = OfflinePage(browser, s.url)
    host = s.host
    hand = HandOverload(host)
    try:
        setup_stream(s)
        with s.client() as c:
            q = c.post("/queries", json={"cql": "select A from S"}).json()["id"]
        page = p.page
        page.goto(f"/#results/{q}")
        expect(page.locator("#results-state")).to_have_text("live")
        expect(page.locator("#results-approx")).to_have_text("")
        hand.press(400)  # four times the default queue limit
        rate = host.get_query(q)["approximation"]["sampling_rate"]
        assert rate < 1.0
        expect(page.locator("#results-approx")).to_have_text(
            f"sampled {math.floor(rate * 100 + 0.5)}%"
        )  # as Math.round
        expect(page.locator("#results-approx")).to_have_attribute("title", re.compile("queue memory"))
        p.shot("results-approximated")
        hand.release(q)
        assert host.get_query(q)["approximation"] is None
        expect(page.locator("#results-approx")).to_have_text("")
        assert p.external == [] and p.errors == []
    finally:
        p.context.close()
        s.stop()
