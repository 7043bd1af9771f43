"""`cqlstream serve --engine-threads N` (Settings.engine_threads): on 2 or more threads the server's
engine runs on the `parallel` scheduler (engine/parallel_pass.py), and the results a real uvicorn
server on 127.0.0.1 sends equal those at one thread, for queries sharing windows, joins and
aggregates fed 1, 7 and all rows per push. The flag, its environment variable, their errors and
the `scheduler` knob over HTTP are checked too."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import httpx
import pytest

from cqlstream.engine import parallel
from cqlstream.engine import parallel_pass as PP
from cqlstream.server.host import follow_engine_threads
from cqlstream.server.settings import Settings
from tests.server.conftest import ROOT
from tests.server.formats import ndjson
from tests.server.test_limits import _Reader
from tests.test_parallel_scheduler import INPUTS, QUERIES

# test_parallel_scheduler's shared plan, over its two streams (relations are pushed elsewhere)
STREAM_QUERIES = [q for q in QUERIES if " R" not in q]
END = 40


def _events(chunk: int | None) -> list[tuple[str, list[dict]]]:
    """S's and T's rows in ts order (S first within an instant), `chunk` rows per push."""
    rows = sorted(
        [(t, 0, "S", {"ts": t, "a": a, "b": b}) for t, (a, b) in INPUTS["S"]]
        + [(t, 1, "T", {"ts": t, "a": a, "b": b}) for t, (a, b) in INPUTS["T"]],
        key=lambda r: (r[0], r[1]),
    )
    step = chunk or len(rows)
    out: list[tuple[str, list[dict]]] = []
    for _, _, name, row in rows:
        if out and out[-1][0] == name and len(out[-1][1]) < step:
            out[-1][1].append(row)
        else:
            out.append((name, [row]))
    return out


def _results(server, chunk: int | None) -> tuple[list[Counter], dict]:
    with server.client() as http:
        for name in ("S", "T"):
            ddl = f"register stream {name} (a int, b int)"
            assert http.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code < 300
        qids = []
        for q in STREAM_QUERIES:
            r = http.post("/queries", json={"cql": q})
            assert r.status_code == 201, r.text
            qids.append(r.json()["id"])
        for name, rows in _events(chunk):
            assert http.post(f"/streams/{name}/tuples", json=rows).status_code == 200
        for name in ("S", "T"):
            assert http.post(f"/streams/{name}/heartbeat", json={"ts": END + 1}).status_code < 300
        out = []
        for qid in qids:
            r = http.get(f"/queries/{qid}/results", params={"format": "ndjson", "from": -1, "until": END})
            assert r.status_code == 200, r.text
            elems, _ = ndjson(r.text)
            out.append(Counter(elems))
        engine = http.get("/entities/engine").json()
    return out, engine


@pytest.mark.parametrize("chunk", [1, 7, None])
def test_results_equal_at_one_and_two_engine_threads(make_server, monkeypatch, chunk):
    monkeypatch.setattr(PP, "MIN_ROWS", 0)  # the second thread takes calls of any size
    passes = [0]
    run_pass = PP.run_pass

    def counted(*a, **kw):
        passes[0] += 1
        return run_pass(*a, **kw)

    monkeypatch.setattr(PP, "run_pass", counted)
    before = parallel.threads()
    got = {}
    for n in (1, 2):
        # no query limits: a run checking them goes in turn on the calling thread
        server = make_server(engine_threads=n, query_memory_limit=None, query_cpu_limit=None)
        assert parallel.threads() == n
        got[n], engine = _results(server, chunk)
        assert engine["knobs"]["scheduler"] == ("parallel" if n == 2 else "round-robin")
        assert engine["counters"]["engine_threads"] == n
        assert (passes[0] > 0) == (n == 2), passes  # the parallel pass ran at 2 threads only
        server.stop()
        assert parallel.threads() == before  # the server gives the process's threads back
    assert all(sum(c.values()) for c in got[1]), "every query has results"
    assert got[1] == got[2]


def _counting_passes(monkeypatch) -> list[int]:
    """[passes run, of them with a limit check] from now on."""
    counts = [0, 0]
    run_pass = PP.run_pass

    def counted(g, budget, ids, level, check=None):
        counts[0] += 1
        counts[1] += check is not None
        return run_pass(g, budget, ids, level, check)

    monkeypatch.setattr(PP, "run_pass", counted)
    return counts


def test_limit_checks_run_in_the_parallel_pass_with_the_same_results(make_server, monkeypatch):
    """With the default query limits every run checks them: at 2 threads on the parallel pass,
    level by level (engine/parallel_pass.py), with the results of 1 thread without limits."""
    monkeypatch.setattr(PP, "MIN_ROWS", 0)
    counts = _counting_passes(monkeypatch)
    server = make_server(engine_threads=2)
    got, engine = _results(server, 7)
    assert engine["knobs"]["scheduler"] == "parallel" and counts[1] > 0 and counts[1] == counts[0]
    server.stop()  # (the engine's threads are the process's: one server at a time here)
    plain = make_server(engine_threads=1, query_memory_limit=None, query_cpu_limit=None)
    assert _results(plain, 7)[0] == got


LIMITED = "select * from S [Range Unbounded], T [Range Unbounded] where S.a = T.a"


def _limited_run(server, chunk: int | None, limit: int) -> tuple[list[Counter], list[tuple], int]:
    """STREAM_QUERIES and LIMITED (its memory_limit `limit`, its results kept by the server):
    every query's results, each query's (state, reason), and LIMITED's id."""
    with server.client() as http:
        for name in ("S", "T"):
            ddl = f"register stream {name} (a int, b int)"
            assert http.post("/streams", content=ddl, headers={"content-type": "text/plain"}).status_code < 300
        qids = [http.post("/queries", json={"cql": q}).json()["id"] for q in [*STREAM_QUERIES, LIMITED]]
        r = http.patch(f"/queries/{qids[-1]}", json={"memory_limit": limit})
        assert r.status_code == 200 and r.json()["memory_limit"] == limit, r.text
        reader = _Reader(server.url, qids[-1])  # a suspended query's results end its streams
        reader.start()
        assert reader.ready.wait(10)
        for name, rows in _events(chunk):
            assert http.post(f"/streams/{name}/tuples", json=rows).status_code == 200
        for name in ("S", "T"):
            assert http.post(f"/streams/{name}/heartbeat", json={"ts": END + 1}).status_code < 300
        out, states = [], []
        for qid in qids[:-1]:
            r = http.get(f"/queries/{qid}/results", params={"format": "ndjson", "from": -1, "until": END})
            assert r.status_code == 200, r.text
            out.append(Counter(ndjson(r.text)[0]))
        reader.join(20)
        elems, events = ndjson(reader.text)
        out.append(Counter(elems))
        for qid in qids:
            q = http.get(f"/queries/{qid}").json()
            states.append((q["state"], q["suspended"]))
        assert events[-1]["detail"] == "suspended: " + str(states[-1][1])
    return out, states, qids[-1]


@pytest.mark.parametrize("chunk", [7, None])
def test_a_query_over_its_memory_limit_is_suspended_alike_at_one_and_two_threads(make_server, monkeypatch, chunk):
    """A real server at 1 thread (round robin, checking after each call) and at 2 (the parallel
    pass, checking after each level): the same query suspended for the same reason after the
    same results, every other query's results the same."""
    monkeypatch.setattr(PP, "MIN_ROWS", 0)
    counts = _counting_passes(monkeypatch)
    got = {}
    for n in (1, 2):
        server = make_server(engine_threads=n, query_cpu_limit=None)
        got[n] = _limited_run(server, chunk, 4 << 10)
        server.stop()
    out, states, qid = got[1]
    assert states[-1][0] == "suspended" and states[-1][1].startswith(f"memory: query {qid} held ")
    assert all(st == ("active", None) for st in states[:-1])
    assert all(sum(c.values()) for c in out), "every query has results (the limited one before it stopped)"
    assert got[2] == got[1]
    assert counts[1] > 0  # the 2-thread server checked in the pass


def test_the_scheduler_knob_switches_it(make_server):
    server = make_server(engine_threads=2, query_memory_limit=None, query_cpu_limit=None)
    with server.client() as http:
        for name in ("round-robin", "parallel"):
            r = http.patch("/entities/engine", json={"knobs": {"scheduler": name}})
            assert r.status_code == 200, r.text
            assert http.get("/entities/engine").json()["knobs"]["scheduler"] == name


def test_a_restart_follows_the_flag_not_the_recorded_scheduler(tmp_path, make_server):
    """A data dir records the scheduler; round robin and parallel follow --engine-threads at start,
    another scheduler chosen through the knob stays."""
    s = make_server(data_dir=str(tmp_path), engine_threads=1)
    with s.client() as http:
        assert http.get("/entities/engine").json()["knobs"]["scheduler"] == "round-robin"
        assert http.patch("/entities/engine", json={"knobs": {"scheduler": "round-robin"}}).status_code == 200
    s.stop()
    s = make_server(data_dir=str(tmp_path), engine_threads=2)
    with s.client() as http:
        assert http.get("/entities/engine").json()["knobs"]["scheduler"] == "parallel"
        assert http.patch("/entities/engine", json={"knobs": {"scheduler": "fifo"}}).status_code == 200
    s.stop()
    s = make_server(data_dir=str(tmp_path), engine_threads=2)
    with s.client() as http:
        assert http.get("/entities/engine").json()["knobs"]["scheduler"] == "fifo"


def test_follow_engine_threads_keeps_other_schedulers():
    from cqlstream.engine.dsms import Dsms
    from cqlstream.engine.scheduler import Fifo, Parallel, RoundRobin

    for sched, n, want in [
        (RoundRobin(5), 2, "parallel"),
        (Parallel(5), 1, "round-robin"),
        (Parallel(5), 3, "parallel"),
        (Fifo(5), 2, "fifo"),
    ]:
        d = Dsms(scheduler=sched, sys_stream=False)
        follow_engine_threads(d, n)
        assert d.scheduler.name == want and d.scheduler.budget == 5


def test_settings_refuse_a_bad_thread_count():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="engine_threads"):
            Settings(engine_threads=bad)  # type: ignore[arg-type]


def test_serve_flag_and_environment(spawn_server, monkeypatch):
    p = spawn_server("--engine-threads", "2")
    engine = httpx.get(p.url + "/entities/engine", timeout=10).json()
    assert engine["knobs"]["scheduler"] == "parallel" and engine["counters"]["engine_threads"] == 2
    monkeypatch.setenv("CQLSTREAM_ENGINE_THREADS", "3")
    p = spawn_server()
    engine = httpx.get(p.url + "/entities/engine", timeout=10).json()
    assert engine["knobs"]["scheduler"] == "parallel" and engine["counters"]["engine_threads"] == 3


@pytest.mark.parametrize(
    "args,env,message",
    [
        (["--engine-threads", "0"], None, "--engine-threads must be at least 1, not 0"),
        ([], "two", "$CQLSTREAM_ENGINE_THREADS must be a whole number of at least 1, not 'two'"),
        ([], "0", "$CQLSTREAM_ENGINE_THREADS must be at least 1, not 0"),
    ],
)
def test_serve_refuses_a_bad_thread_count(args, env, message, monkeypatch):
    if env is not None:
        monkeypatch.setenv("CQLSTREAM_ENGINE_THREADS", env)
    r = subprocess.run(
        [sys.executable, "-m", "cqlstream", "serve", "--port", "1", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_serve_help_names_the_flag():
    r = subprocess.run(
        [sys.executable, "-m", "cqlstream", "serve", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    text = " ".join(r.stdout.split())
    assert "--engine-threads N" in text and "CQLSTREAM_ENGINE_THREADS" in text and "'parallel' scheduler" in text
