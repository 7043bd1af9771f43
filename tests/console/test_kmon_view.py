"""The console's k-Mon view: per stream its declared constraints and those its joins use (with k
and whether withdrawn), per join its k-Mon state, all from the control tables the engine
publishes; a constraint the data breaks shows as withdrawn."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from tests.console.conftest import OfflinePage
from tests.server.conftest import ServerThread


def _push(c, name: str, rows: list[tuple[int, int, int]], heartbeat: int) -> None:
    csv = "ts,id,v\n" + "".join(f"{t},{a},{b}\n" for t, a, b in rows)
    r = c.post(f"/streams/{name}/tuples?heartbeat={heartbeat}", content=csv, headers={"content-type": "text/csv"})
    assert r.status_code == 200, r.text


def _kmon_entity(c, ready, tries: int = 200) -> dict:
    """The join's k-Mon control table once `ready(counters)` (the server works off pushes on its own)."""
    for _ in range(tries):
        ent = next((e for e in c.get("/entities").json() if e["kind"] == "kconstraints"), None)
        if ent is not None and ready(ent["counters"]):
            return ent
        time.sleep(0.05)
    raise AssertionError(f"k-Mon state never got there: {ent}")


def test_kmon_view_shows_constraints_per_stream_and_state_per_join(server: ServerThread, offline: OfflinePage) -> None:
    with server.client() as c:
        for ddl in (
            "register stream P (id integer, v integer) with constraints (id references C(id) within 0)",
            "register stream C (id integer, v integer) with constraints (unique(id))",
            "register stream Q (id integer, v integer)",
        ):
            assert c.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code == 201
        q = c.post(
            "/queries", json={"cql": "select istream(P.v, C.v) from P [rows 100], C [rows 100] where P.id = C.id"}
        )
        assert q.status_code == 201, q.text
        _push(c, "C", [(1, i, 0) for i in range(6)], 1)
        _push(c, "P", [(2, i, 1) for i in range(4)] + [(2, 9, 1)], 2)  # id 9: no C yet, RIDS(0) says none will come
        _push(c, "C", [], 3)
        _push(c, "P", [], 3)
        ent = _kmon_entity(c, lambda cnt: cnt.get("spilled_tuples", 0) > 0)
    cnt = ent["counters"]
    assert cnt["spilled_tuples"] > 0  # the view below shows a join that really moved rows out
    page = offline.page
    page.goto("/#kmon")
    rids = page.locator("#kmon-streams tr[data-stream='P'][data-constraint^='RIDS']")
    expect(rids).to_contain_text("RIDS(k=0) on P.id → C.id")
    expect(rids).to_contain_text("declared")
    expect(rids).to_contain_text("in use")
    expect(page.locator("#kmon-streams tr[data-stream='C']")).to_contain_text("many-one on C.id")
    expect(page.locator("#kmon-streams tr[data-stream='Q']")).to_contain_text("no join uses them")
    row = page.locator(f"#kmon-joins tr[data-id='{ent['id']}']")
    expect(row).to_contain_text(f"{cnt['in0_yes']} / {cnt['in0_no']} / {cnt['in0_unknown']}")
    expect(row).to_contain_text(f"{cnt['in1_yes']} / {cnt['in1_no']} / {cnt['in1_unknown']}")
    expect(row.locator("td").nth(5)).to_have_text(str(cnt["spilled_tuples"]))
    expect(row.locator("td").nth(7)).to_have_text(str(cnt["kmon_bytes"]))
    expect(page.locator("#kmon-empty")).to_be_hidden()
    offline.shot("kmon")
    with server.client() as c:  # C's id 9 arrives after all: RIDS(0) broken, withdrawn
        _push(c, "C", [(4, 9, 5)], 5)
        _push(c, "P", [], 5)
    expect(rids).to_contain_text("withdrawn (k = ∞)")
    expect(rids).to_contain_text("RIDS(k=∞) on P.id → C.id")
    expect(row).to_contain_text("RIDS(k=∞) on P.id → C.id")
    assert offline.external == [] and offline.errors == []
