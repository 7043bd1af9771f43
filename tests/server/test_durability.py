"""The engine host's write-ahead log, checkpoints and recovery, in process: a host is "crashed" by
dropping it without closing anything, a new host recovers from the same data dir and goes on; its
results from there on must equal those of a host that never stopped."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from cqlstream.engine.batch import Batch
from cqlstream.engine.dsms import Dsms
from cqlstream.server.host import EngineHost
from cqlstream.server.recovery import RecoveryError
from cqlstream.server.settings import Settings
from cqlstream.server.wal import WriteAheadLog
from cqlstream.server.wal_records import decode_batch, encode_batch

DDL = [
    "register stream Orders (id integer, cust varchar(8), amount float) with (slack = 2)",
    "register stream Clicks (cust varchar(8), page integer)",
    "register relation Vip (cust varchar(8))",
]
QUERIES = [
    ("select cust, sum(amount), count(*) from Orders [Range 10] group by cust", "agg"),
    ("select Orders.id, Clicks.page from Orders [Range 5], Clicks [Rows 3] where Orders.cust = Clicks.cust", "join"),
    ("select istream(Orders.id) from Orders [Now], Vip where Orders.cust = Vip.cust", "vip"),
    ("select rstream(page) from Clicks [Partition by cust rows 2]", None),
    ("select distinct cust from Clicks [Range 20]", None),
]


def make(tmp: Path, dsms: Dsms | None = None, **kw) -> EngineHost:
    kw.setdefault("fsync", "off")
    return EngineHost(Settings(data_dir=str(tmp), **kw), dsms)


def script(seed: int, n: int) -> list[tuple]:
    """A reproducible sequence of host calls: pushes (some with idempotency keys, some of them
    retried), heartbeats, relation updates, a query registered and one dropped midway, a knob."""
    rng = random.Random(seed)
    ops: list[tuple] = [("ddl", d) for d in DDL] + [("query", q, name) for q, name in QUERIES]
    t = 0
    for i in range(n):
        t += rng.randint(0, 2)
        r = rng.random()
        if r < 0.45:
            rows = [
                {"ts": t - rng.randint(0, 2), "id": i * 10 + k, "cust": rng.choice("abcd"), "amount": rng.random() * 9}
                for k in range(rng.randint(1, 4))
            ]
            ops.append(("push", "Orders", rows, f"o{i}" if rng.random() < 0.5 else None))
        elif r < 0.8:
            rows = [{"ts": t, "cust": rng.choice("abcd"), "page": rng.randint(1, 5)} for _ in range(rng.randint(1, 3))]
            ops.append(("push", "Clicks", rows, f"c{i}"))
            if rng.random() < 0.2:
                ops.append(("push", "Clicks", rows, f"c{i}"))  # a retry: replayed, not applied again
        elif r < 0.9:
            ops.append(("push", "Vip", [{"ts": t, "sign": 1, "cust": rng.choice("abcd")}], None))
        else:
            ops.append(("heartbeat", rng.choice(["Orders", "Clicks", "Vip"]), t))
        if i == n // 3:
            ops.append(("query", "select cust, max(amount) from Orders [Range 8] group by cust", "late"))
        if i == n // 4:
            ops.append(("patch", 3, False, 2.0))  # deactivated (its operators go), weighed
        if i == n // 4 + 10:
            ops.append(("patch", 3, True, None))  # active again: merged while data flows
        if i == n // 2:
            ops.append(("delete", 4))
            ops.append(("knob", "engine", {"scheduler": "weighted"}))
    return ops


def apply(host: EngineHost, op: tuple) -> None:
    kind = op[0]
    if kind == "ddl":
        (host.register_view if op[1].startswith("register view") else host.register_source)(op[1])
    elif kind == "query":
        host.register_query(op[1], op[2])
    elif kind == "push":
        host.push(op[1], json.dumps(op[2]).encode(), "application/json", key=op[3])
    elif kind == "heartbeat":
        host.heartbeat(op[1], op[2])
    elif kind == "delete":
        host.delete_query(op[1])
    elif kind == "patch":
        host.patch_query(op[1], op[2], op[3])
    elif kind == "knob":
        host.control.set_knobs(op[1], op[2])


def subscribe(host: EngineHost) -> dict:
    return {qid: host.d.subscribe(qid) for qid in host.d.queries}


def collect(subs: dict, out: dict) -> None:
    for qid, s in subs.items():
        out.setdefault(qid, []).extend(s.poll().elements())


def state(host: EngineHost) -> dict:
    """What must survive: sources' clocks and counters, query ids, published positions, keys."""
    return {
        "inputs": {k: (i.max_ts, int(i.accepted), int(i.late)) for k, i in host.d.inputs.items()},
        "queries": {qid: (h.text, h.name, h.active) for qid, h in host.d.queries.items()},
        "next_id": host.d.peek_next_query_id(),
        "pubs": {qid: (p.through, p.emitted) for qid, p in host.fanout.pubs.items()},
        "keys": host.idempotency.sizes(),
        "accepted": dict(host.accepted),
        "pushes": host.pushes,
    }


def run_reference(ops: list[tuple], crash_at: list[int]) -> tuple[dict, list[dict], list[dict]]:
    """An uninterrupted host (no data dir): its results after each crash point, and its state there."""
    host = EngineHost(Settings())
    tails: dict = {}
    states, subs_at = [], []
    subs: dict = {}
    for i, op in enumerate(ops):
        if i in crash_at:
            collect(subs, {})  # results before the crash point are not compared
            subs = subscribe(host)
            subs_at.append(subs)
            states.append(state(host))
        apply(host, op)
    collect(subs, tails)
    return tails, states, subs_at


@pytest.mark.parametrize("checkpoint_every", [None, 25])
def test_recovered_host_goes_on_exactly_like_one_that_never_stopped(tmp_path, checkpoint_every):
    ops = script(seed=7, n=120)
    crash_at = [20, 61, 130]
    want, want_states, _ = run_reference(ops, crash_at)
    host = make(tmp_path)
    subs: dict = {}
    got: dict = {}
    for i, op in enumerate(ops):
        if i in crash_at:
            collect(subs, {})
            host = make(tmp_path)  # the old host is dropped as it is: no close, no checkpoint
            assert host.journal.stats["errors"] == 0
            assert state(host) == want_states[crash_at.index(i)], f"state after recovery at op {i}"
            subs = subscribe(host)
        apply(host, op)
        if checkpoint_every and i % checkpoint_every == 0:
            host.journal.checkpoint()
    collect(subs, got)
    assert got == want
    assert sum(len(v) for v in got.values()) > 50, "the comparison covers real results"


def test_idempotency_keys_survive_a_crash(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (A integer)")
    first = host.push("S", b'[{"ts": 1, "A": 1}]', "application/json", key="k1")
    host = make(tmp_path)
    again = host.push("S", b'[{"ts": 1, "A": 1}]', "application/json", key="k1")
    assert again == {**first, "replayed": True}
    assert host.d.inputs["s"].accepted == 1
    host.journal.checkpoint()
    host = make(tmp_path)
    assert host.push("S", b'[{"ts": 1, "A": 1}]', "application/json", key="k1")["replayed"] is True


def test_a_clean_stop_checkpoints_and_the_restart_replays_nothing(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (A integer)")
    qid = host.register_query("select count(*) from S [Range 3]")["id"]
    for t in range(1, 30):
        host.push("S", json.dumps([{"ts": t, "A": t}]).encode(), "application/json")
    expect = state(host)
    host.stop()
    host = make(tmp_path)
    assert host.journal.stats["records"] == 0 and host.journal.stats["from"].startswith("checkpoint-")
    assert state(host) == expect and qid in host.fanout.pubs


def test_a_change_that_cannot_be_logged_is_refused_and_so_is_every_later_one(tmp_path, monkeypatch):
    from cqlstream.server.problems import ProblemError
    from cqlstream.server.wal import LogError

    host = make(tmp_path)
    host.register_source("register stream S (A integer)")

    def full(*a, **k):
        raise LogError("No space left on device")

    monkeypatch.setattr(host.journal.wal, "append", full)
    with pytest.raises(ProblemError) as e:
        host.push("S", b'[{"ts": 1, "A": 1}]', "application/json")
    assert e.value.status == 503 and e.value.code == "log_unavailable"
    monkeypatch.undo()
    with pytest.raises(ProblemError) as e:
        host.push("S", b'[{"ts": 2, "A": 1}]', "application/json")
    assert e.value.status == 503
    assert host.get_source("S")["accepted"] == 1, "reads still answer"


def test_a_torn_last_record_is_cut_off(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (A integer)")
    for t in range(1, 6):
        host.push("S", json.dumps([{"ts": t, "A": t}]).encode(), "application/json")
    seg = sorted((tmp_path / "wal").glob("*.wal"))[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])  # the process died in the middle of writing the last push
    host = make(tmp_path)
    assert host.journal.stats["truncated_bytes"] > 0
    assert host.d.inputs["s"].max_ts == 4 and host.d.inputs["s"].accepted == 4
    host.push("S", b'[{"ts": 9, "A": 9}]', "application/json")  # the log goes on after the cut
    host = make(tmp_path)
    assert host.d.inputs["s"].max_ts == 9 and host.d.inputs["s"].accepted == 5
    assert host.journal.stats["truncated_bytes"] == 0


@pytest.mark.parametrize("fsync", ["always", "interval", "off"])
def test_the_log_reads_back_in_order_across_segments_and_drops_what_a_checkpoint_covers(tmp_path, fsync):
    import time

    wal = WriteAheadLog(tmp_path, fsync=fsync, interval_ms=10, segment_bytes=300)
    lsns = [wal.append({"op": "x", "i": i}, bytes([i]) * 40) for i in range(12)]
    assert lsns == list(range(1, 13))
    if fsync == "interval":
        time.sleep(0.2)
        assert not wal._dirty, "the flusher synced what was appended"
    assert len(wal.segments()) == 3, "4 records of 40 bytes and their frames per 300-byte segment"
    assert [(r.lsn, r.header["i"], r.payload[:1]) for r in wal.records(5)] == [
        (i + 1, i, bytes([i])) for i in range(4, 12)
    ]
    wal.roll()
    wal.drop_before(wal.next_lsn)
    assert wal.first_lsn == 13 and list(wal.records()) == []
    wal.append({"op": "y"})
    wal.close()
    again = WriteAheadLog(tmp_path, fsync=fsync)
    assert again.next_lsn == 14 and [r.header["op"] for r in again.records()] == ["y"]
    again.close()


def test_a_damaged_record_before_the_last_is_an_error_not_a_cut(tmp_path):
    wal = WriteAheadLog(tmp_path, fsync="off", segment_bytes=200)
    for i in range(10):
        wal.append({"op": "x", "i": i}, b"p" * 50)
    segs = wal.segments()
    assert len(segs) > 2
    path = segs[0][1]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="damaged"):
        list(wal.records())


def test_checkpoint_then_tail_and_truncation(tmp_path):
    host = make(tmp_path, segment_bytes=4096)
    host.register_source("register stream S (A integer)")
    qid = host.register_query("select sum(A) from S [Range 5]")["id"]
    for t in range(1, 200):
        host.push("S", json.dumps([{"ts": t, "A": t}]).encode(), "application/json")
    segments_before = len(host.journal.wal.segments())
    assert segments_before > 1
    path = host.journal.checkpoint()
    assert path is not None and path.exists()
    assert [lsn for lsn, _ in host.journal.wal.segments()] == [host.journal.wal.next_lsn], "covered segments deleted"
    for t in range(200, 210):
        host.push("S", json.dumps([{"ts": t, "A": t}]).encode(), "application/json")
    expect = state(host)
    host = make(tmp_path)
    assert host.journal.stats["from"] == path.name and host.journal.stats["records"] == 10
    assert state(host) == expect
    snap = host.subscribe(qid, "ndjson", loop=_Loop(), snapshot=True, follow=False)[1]
    assert snap.batch.rows() == [(sum(range(203, 209)),)], "Range 5 at instant 208: ts 203..208"


def test_an_unreadable_checkpoint_falls_back_to_the_retained_log(tmp_path):
    host = make(tmp_path, retain_log=True)
    host.register_source("register stream S (A integer)")
    for t in range(1, 20):
        host.push("S", json.dumps([{"ts": t, "A": t}]).encode(), "application/json")
    path = host.journal.checkpoint()
    assert host.journal.wal.first_lsn == 1, "retained: the archive keeps every record"
    host.push("S", b'[{"ts": 30, "A": 1}]', "application/json")
    path.write_bytes(path.read_bytes()[:200])  # written by other code, or damaged
    host = make(tmp_path, retain_log=True)
    assert host.journal.stats["from"] == "log" and host.journal.stats["records"] == 21
    assert host.d.inputs["s"].max_ts == 30 and host.d.inputs["s"].accepted == 20


def test_an_unreadable_checkpoint_without_the_log_is_a_clear_error(tmp_path):
    host = make(tmp_path)
    host.register_source("register stream S (A integer)")
    host.push("S", b'[{"ts": 1, "A": 1}]', "application/json")
    path = host.journal.checkpoint()
    host.push("S", b'[{"ts": 2, "A": 1}]', "application/json")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RecoveryError, match="--retain-log"):
        make(tmp_path)


def test_system_timestamps_and_silence_advances_replay_as_they_happened(tmp_path):
    now = [1000.0]

    def host():
        return make(tmp_path, Dsms(clock=lambda: now[0], silence_timeout=5.0), silence_timeout=5.0)

    h = host()
    h.register_source("register stream Sys (A integer) with (timestamp = system)")
    h.register_source("register stream A (X integer)")
    h.register_source("register stream B (X integer)")
    qid = h.register_query("select A.X from A [Range 3], B [Range 3] where A.X = B.X")["id"]
    for k in range(8):
        now[0] += 1.5
        h.push("Sys", json.dumps([{"A": k}]).encode(), "application/json")
        h.push("A", json.dumps([{"ts": k * 10, "X": k}]).encode(), "application/json")
        if k < 2:
            h.push("B", json.dumps([{"ts": k * 10, "X": k}]).encode(), "application/json")
        h._tick()  # B falls silent: after 5 s the clock advances it to A's time
    assert any("silent" in n for n in h.d.notices)
    expect = state(h)
    sys_rows = h.d.peek("src:Sys", 10)
    now[0] += 1000  # the restart happens much later: replay must not use the time of the restart
    h2 = host()
    assert state(h2) == expect
    assert h2.d.peek("src:Sys", 10) == sys_rows
    assert h2.d.notices == h.d.notices
    assert h2.fanout.pubs[qid].through == h.fanout.pubs[qid].through


def test_a_data_dir_from_before_the_log_is_seeded_from_its_plan_file(tmp_path):
    d = Dsms(data_dir=tmp_path)
    d.execute("register stream S (A integer)")
    q = d.register_query("select * from S where A > 1", name="big")
    assert (tmp_path / "plan.json").exists() and not (tmp_path / "wal").exists()
    host = make(tmp_path)
    assert host.d.queries[q.id].name == "big"
    host.push("S", b'[{"ts": 1, "A": 5}]', "application/json")
    host = make(tmp_path)
    assert host.d.queries[q.id].name == "big" and host.d.inputs["s"].accepted == 1
    assert host.register_query("select A from S")["id"] == q.id + 1


def test_batches_round_trip_through_the_log_codec():
    b = Batch(
        [
            np.array([1, 2, 3], np.int64),
            np.array([0.5, np.nan, 2.0]),
            np.array(["x", None, ""], dtype=object),
            np.array([True, False, True]),
        ],
        [None, np.array([False, True, False]), np.array([False, True, False]), None],
        np.array([5, 5, 7], np.int64),
        np.array([1, -1, 1], np.int8),
        np.zeros(3, np.uint64),
    )
    for batch in (
        b,
        b.with_columns([b.cols[0], b.cols[1], np.array(["\ud800", "a", "b"], dtype=object), b.cols[3]], b.nulls),
    ):
        codec, data = encode_batch(batch)
        back = decode_batch(codec, data)
        assert pickle.dumps((back.cols, back.nulls, back.ts, back.sign)) == pickle.dumps(
            (batch.cols, batch.nulls, batch.ts, batch.sign)
        )
    assert encode_batch(b)[0] == "arrow"


class _Loop:
    """Enough of an event loop for a subscription that does not follow."""

    def call_soon_threadsafe(self, *a):  # pragma: no cover - not called without follow
        pass


def test_a_checkpoint_of_every_operator_family_continues_exactly(tmp_path):
    """Every query of the paper corpus (windows of each kind, joins, aggregates, set operations,
    relation-to-stream operators, subqueries, views) in one engine: a checkpoint of it, loaded,
    must go on exactly like the original."""
    from cqlstream.cql.types import BOOL
    from cqlstream.server import checkpoint
    from tests.test_corpus import BLOCKS, CORPUS

    def engine() -> Dsms:
        d = Dsms()
        d.catalog.functions.register_scalar("lookup", lambda a, t: True, BOOL, min_args=2, max_args=2)
        d.catalog.functions.register_scalar("match", lambda a, p: True, BOOL, min_args=2, max_args=2)
        return d

    d = engine()
    d.execute(CORPUS.read_text().split("\n--", 1)[0])
    for _, expect, q in BLOCKS:
        if expect is None:
            d.register_query(q.rstrip().rstrip(";"))
    assert len(d.queries) >= 25
    subs = {qid: d.subscribe(qid) for qid in d.queries}

    def feed(dd: Dsms, t: int) -> None:
        rng = random.Random(t)
        for name, inp in dd.inputs.items():
            rows = [
                tuple(rng.randint(0, 4) if a.type.kind == "int" else rng.choice(["a", "b"]) for a in inp.d.attrs)
                for _ in range(2)
            ]
            dd.push(name, rows, [t] * 2, None if inp.d.kind == "stream" else [1] * 2)
        dd.run()

    for t in range(1, 25):
        feed(d, t)
        for s in subs.values():
            s.poll()
    path = checkpoint.write(tmp_path, 7, {"dsms": d, "subs": subs}, d.catalog.functions)
    fresh = engine()
    lsn, st = checkpoint.load(path, fresh.catalog.functions)
    d2, subs2 = st["dsms"], st["subs"]
    assert lsn == 7 and d2.catalog.functions is fresh.catalog.functions
    for t in range(25, 40):
        feed(d, t)
        feed(d2, t)
    differ = [qid for qid in subs if subs[qid].poll().elements() != subs2[qid].poll().elements()]
    assert differ == []


def test_the_durability_bench_runs(tmp_path, capsys):
    from bench import durability

    out = tmp_path / "d.json"
    assert durability.main(["--pushes", "20", "--lengths", "30", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["mode"] for r in data["ingest"]} == {label for label, _ in durability.MODES}
    assert data["recovery"][0]["records"] == 30 and data["recovery"][0]["replay_s"] > 0
