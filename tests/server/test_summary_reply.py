"""Over HTTP: an except's `summary` knob set to bloom through PATCH /entities shows in the query's
reply (`summaries`, with the estimated error) and EXPLAIN; an exact query's `summaries` is empty;
once the right window has expired the filter is empty again."""

from __future__ import annotations

TEXT = {"content-type": "text/plain"}


def test_the_reply_reports_the_summary_in_force(http):
    for s in ("L", "R"):
        assert http.post("/streams", content=f"register stream {s} (a integer)", headers=TEXT).status_code == 201
    q = http.post("/queries", json={"cql": "select a from L [Range 5] except select a from R [Range 5]"})
    assert q.status_code == 201, q.text
    assert q.json()["summaries"] == []
    ents = [e for e in http.get("/entities").json() if e.get("type") == "except"]
    assert len(ents) == 1
    r = http.patch(f"/entities/{ents[0]['id']}", json={"knobs": {"summary": "bloom", "summary_bytes": 64}})
    assert r.status_code == 200 and r.json()["knobs"]["summary"] == "bloom"
    for s in ("L", "R"):
        rows = [{"ts": t, "a": (7 * t + (s == "R")) % 40} for t in range(1, 60)]
        assert http.post(f"/streams/{s}/tuples", json=rows).status_code in (200, 202)
        http.post(f"/streams/{s}/heartbeat", json={"ts": 60})
    got = http.get(f"/queries/{q.json()['id']}").json()
    (info,) = got["summaries"]
    assert info["summary"] == "bloom" and info["kind"] == "except" and info["wrong_kind"] == "removed"
    assert 0 < info["fp_rate"] <= 1 and info["bound"] == "sub-bag of the exact result"
    assert "Summaries:" in got["explain"] and "counting Bloom filter of the right input, 64 B" in got["explain"]
    for s in ("L", "R"):
        http.post(f"/streams/{s}/heartbeat", json={"ts": 100})
    (after,) = http.get(f"/queries/{q.json()['id']}").json()["summaries"]
    assert after["fp_rate"] == 0  # the windows expired: the counting filter forgot them
    bad = http.patch(f"/entities/{ents[0]['id']}", json={"knobs": {"summary": "reservoir"}})
    assert bad.status_code == 422
