"""The catalog's query table says what approximation is in force: static approximation approved
at registration, and the rows admission control refused under overload."""

from __future__ import annotations

from playwright.sync_api import expect

from cqlstream.server.settings import Settings
from tests.console.conftest import OfflinePage
from tests.console.test_views import setup_stream
from tests.server.conftest import ServerThread


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
