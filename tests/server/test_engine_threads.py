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


def test_limit_checks_run_in_turn_with_the_same_results(make_server, monkeypatch):
    """With the default query limits every run checks them after each call: round robin on the
    calling thread, whatever the thread count (engine/scheduler.py Parallel)."""
    passes = [0]
    run_pass = PP.run_pass
    monkeypatch.setattr(PP, "run_pass", lambda *a, **kw: (passes.__setitem__(0, passes[0] + 1), run_pass(*a, **kw))[1])
    server = make_server(engine_threads=2)
    got, engine = _results(server, 7)
    assert engine["knobs"]["scheduler"] == "parallel" and passes[0] == 0
    server.stop()  # (the engine's threads are the process's: one server at a time here)
    plain = make_server(engine_threads=1, query_memory_limit=None, query_cpu_limit=None)
    assert _results(plain, 7)[0] == got


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
