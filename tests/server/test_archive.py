"""The log as an archive: a query registered late with `seed_from` T gets exactly the results of the
same query registered at T in a run that never stopped (unshared: it sees the input from T on, and
relations as they were at T), although the archive spans several segments, checkpoints and restarts,
and the seeded registration itself is recovered after a crash. Plus the archive's errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cqlstream.cql.errors import CqlError
from cqlstream.server.host import EngineHost
from cqlstream.server.problems import ProblemError
from cqlstream.server.settings import Settings

DDL = [
    "register stream Orders (id integer, cust varchar(8), amount integer) with (slack = 2)",
    "register stream Clicks (cust varchar(8), page integer)",
    "register relation Vip (cust varchar(8), level integer)",
]
OTHER = "select cust, count(*) from Orders [Range 6] group by cust"  # registered from the start
SEEDED = [
    "select cust, sum(amount), count(*) from Orders [Range 10] group by cust",
    "select Orders.id, Clicks.page from Orders [Range 4], Clicks [Rows 3] where Orders.cust = Clicks.cust",
    "select Orders.id, Vip.level from Orders [Range 3], Vip where Orders.cust = Vip.cust",
    "select level, count(*) from Vip group by level",
]
T = 40


def script(seed: int, n: int) -> list[tuple]:
    """Pushes (Orders within its slack, Clicks, Vip inserts and deletes) and heartbeats, instants 1…"""
    rng = random.Random(seed)
    ops: list[tuple] = []
    vip: list[dict] = []
    t = 1
    for i in range(n):
        t += rng.randint(0, 1)
        r = rng.random()
        if r < 0.45:
            rows = [
                {"ts": max(t - rng.randint(0, 2), 1), "id": i * 10 + k, "cust": rng.choice("abcd"), "amount": i % 7}
                for k in range(rng.randint(1, 3))
            ]
            ops.append(("push", "Orders", rows))
        elif r < 0.8:
            rows = [{"ts": t, "cust": rng.choice("abcd"), "page": rng.randint(1, 5)} for _ in range(rng.randint(1, 2))]
            ops.append(("push", "Clicks", rows))
        elif r < 0.93:
            if vip and rng.random() < 0.4:
                row = vip.pop(rng.randrange(len(vip)))
                ops.append(("push", "Vip", [{**row, "ts": t, "sign": -1}]))
            else:
                row = {"cust": rng.choice("abcd"), "level": rng.randint(1, 3)}
                vip.append(row)
                ops.append(("push", "Vip", [{**row, "ts": t, "sign": 1}]))
        else:
            ops.append(("heartbeat", rng.choice(["Orders", "Clicks", "Vip"]), t))
    return ops


def reaches(op: tuple, t: int) -> bool:
    """Whether the op is the first kind of record to reach instant t (server/archive.py's rule)."""
    if op[0] == "push":
        return max(r["ts"] for r in op[2]) >= t
    return op[2] > t


def apply(host: EngineHost, op: tuple, checkpoints: bool = True) -> None:
    if op[0] == "push":
        host.push(op[1], json.dumps(op[2]).encode(), "application/json")
    else:
        host.heartbeat(op[1], op[2])
    if checkpoints:
        host.journal.maybe_checkpoint()  # what the server's clock thread does


def results(host: EngineHost, qid: int) -> list[tuple]:
    pub = host.fanout.pubs[qid]
    b = pub.history.after(-(1 << 62), [a.type for a in pub.handle.schema])
    return sorted(b.elements())


def reference(ops: list[tuple]) -> dict[int, list[tuple]]:
    """A host that never stops; the seeded queries registered (unshared) at T."""
    host = EngineHost(Settings())
    for d in DDL:
        host.register_source(d)
    host.register_query(OTHER)
    ids = []
    for op in ops:
        if not ids and reaches(op, T):
            for q in SEEDED:
                h = host.d.register_query(q, share=False)
                host.fanout.add(h)
                ids.append(h.id)
            host._run()
        apply(host, op)
    return {i: results(host, qid) for i, qid in enumerate(ids)}


def settings(tmp: Path, **kw) -> Settings:
    kw = {"retain_log": True, "checkpoint_records": 17, "segment_bytes": 2048, **kw}
    return Settings(data_dir=str(tmp), fsync="off", **kw)


def test_seeded_query_equals_one_registered_at_t(tmp_path):
    ops = script(seed=3, n=260)
    want = reference(ops)
    assert all(want.values()), want  # every query has results to compare
    host = EngineHost(settings(tmp_path))
    for d in DDL:
        host.register_source(d)
    host.register_query(OTHER)
    for op in ops[:120]:
        apply(host, op)
    host.stop()  # a clean restart (a last checkpoint)
    host = EngineHost(settings(tmp_path))
    for op in ops[120:180]:
        apply(host, op)
    assert len(host.journal.wal.segments()) >= 3  # the archive spans several segments and checkpoints
    assert host.journal.metrics()["first_lsn"] == 1
    other_before = results(host, 1)
    subs = host.fanout.pubs[1].subscribers.copy()
    ids = [host.register_query(q, seed_from=T)["id"] for q in SEEDED]
    assert results(host, 1) == other_before and host.fanout.pubs[1].subscribers == subs  # saw nothing
    seeded_at = host.journal.wal.next_lsn - len(SEEDED)
    for op in ops[180:200]:
        apply(host, op, checkpoints=False)
    del host  # a crash: the seeded registrations are replayed from the log (no checkpoint after them)
    host = EngineHost(settings(tmp_path))
    start = host.journal.stats["from"]
    assert start.startswith("checkpoint-") and int(start[len("checkpoint-") : -len(".ckpt")]) <= seeded_at
    for op in ops[200:]:
        apply(host, op)
    got = {i: results(host, qid) for i, qid in enumerate(ids)}
    for i in range(len(SEEDED)):
        assert got[i] == want[i], SEEDED[i]
    assert host.get_query(ids[0])["complete_from"] is not None
    host.stop()


def test_seed_errors(tmp_path):
    plain = EngineHost(Settings())
    plain.register_source(DDL[1])
    with pytest.raises(ProblemError, match="--data-dir DIR --retain-log") as e:
        plain.register_query(SEEDED[1].replace("Orders", "Clicks"), seed_from=1)
    assert (e.value.status, e.value.code) == (409, "no_archive")
    not_kept = EngineHost(settings(tmp_path / "a", retain_log=False))
    with pytest.raises(ProblemError, match="restart it with --retain-log") as e:
        not_kept.register_query("select * from Clicks [Range 2]", seed_from=1)
    not_kept.stop()

    host = EngineHost(settings(tmp_path / "b"))
    for d in DDL:
        host.register_source(d)
    for op in script(seed=5, n=60):
        apply(host, op)
    earliest = min(min(r["ts"] for r in op[2]) if op[0] == "push" else op[2] for op in script(seed=5, n=60))
    latest = max(i.max_ts for i in host.d.inputs.values())
    with pytest.raises(ProblemError, match=f"earliest instant is {earliest}") as e:
        host.register_query(SEEDED[0], seed_from=earliest - 1)
    assert (e.value.status, e.value.code) == (422, "before_archive")
    with pytest.raises(ProblemError, match=f"latest instant in the archive is {latest}") as e:
        host.register_query(SEEDED[0], seed_from=latest + 1)
    assert (e.value.status, e.value.code) == (422, "seed_in_future")
    with pytest.raises(CqlError, match="Nope") as e:
        host.register_query("select * from Nope [Range 2]", seed_from=earliest)
    assert e.value.to_dict().get("excerpt")  # refused before the log is read, with the caret excerpt
    assert not host.d.queries  # nothing registered by a refused seeding
    host.register_query(SEEDED[0], seed_from=earliest)  # the whole archive
    host.stop()


def test_seed_over_http(tmp_path, make_server):
    """POST /queries with seed_from, then a resume from T−1 gives every result since T."""
    srv = make_server(data_dir=str(tmp_path), retain_log=True, fsync="off")
    with srv.client() as c:
        for d in DDL:
            c.post("/streams", json={"ddl": d}).raise_for_status()
        for op in script(seed=9, n=120):
            url = f"/streams/{op[1]}/tuples" if op[0] == "push" else f"/streams/{op[1]}/heartbeat"
            c.post(url, json=op[2] if op[0] == "push" else {"ts": op[2]}).raise_for_status()
        r = c.post("/queries", json={"cql": SEEDED[0], "seed_from": 20})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        lines = c.get(f"/queries/{qid}/results", params={"from": 19, "follow": "false"}).text.splitlines()
        ts = [json.loads(x)["ts"] for x in lines if x.startswith("{") and '"ts"' in x]
        assert ts and min(ts) >= 20
        r = c.post("/queries", json={"cql": SEEDED[0], "seed_from": 10**9})
        assert r.status_code == 422 and r.json()["code"] == "seed_in_future", r.text


def test_archive_bench_runs(tmp_path):
    from bench import archive

    report = tmp_path / "a.json"
    assert archive.main(["--pushes", "60", "--rows", "5", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["results_published"] > 0 and data["push_latency_while_seeding"]["n"] >= 0
