"""The server's clock tick (`serve --tick`): results flow as soon as an instant is final, whatever
the tick; a small tick closes system-timestamped instants promptly; a tick that moves no source's
time runs nothing; the flag's bounds; results do not depend on the tick."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from cqlstream.client import Client
from cqlstream.engine.dsms import Dsms
from cqlstream.server.host import EngineHost
from cqlstream.server.settings import TICK_MAX, TICK_MIN, Settings

from .conftest import ROOT


def _first_result_after(url: str, qid: int, send) -> tuple[float, object]:
    """(seconds from `send()` to the first result element at a subscriber, that element)."""
    got: list[tuple[float, object]] = []
    ready = threading.Event()

    def read() -> None:
        with Client(url, timeout=10) as sub:
            it = sub.subscribe(qid)
            ready.set()
            for e in it:
                got.append((time.monotonic(), e))
                return

    th = threading.Thread(target=read, daemon=True)
    th.start()
    assert ready.wait(10)
    time.sleep(0.2)  # the subscription is attached once its response has started
    t0 = time.monotonic()
    send()
    th.join(10)
    assert got, "no result arrived"
    return got[0][0] - t0, got[0][1]


def test_event_time_results_do_not_wait_for_the_tick(make_server):
    """With a 30 s clock tick (its first tick comes 30 s after the start), a heartbeat that makes an
    instant final delivers its results at once (bounded loosely: the machine may be loaded)."""
    srv = make_server(tick_interval=30.0)
    with Client(srv.url, timeout=10) as c:
        c.register_stream("register stream S (a int)")
        qid = c.register_query("select a from S where a > 1")["id"]
        c.push("S", [{"ts": 1, "a": 5}])  # instant 1 is not final yet: nothing to see
        took, e = _first_result_after(srv.url, qid, lambda: c.heartbeat("S", 2))
        assert (e.ts, e.row) == (1, (5,))
        assert took < 3, f"the heartbeat's result took {took:.3f} s"
        took, e = _first_result_after(srv.url, qid, lambda: c.push("S", [{"ts": 3, "a": 7}], heartbeat=4))
        assert (e.ts, e.row) == (3, (7,)) and took < 3, took


def test_a_small_tick_closes_system_timestamped_instants_promptly(spawn_server):
    """`serve --tick 0.002`: a system-timestamped row's instant is final a few ms after it arrived
    (the default 100 ms tick would take 50 ms on average); median of a few pushes, bounded loosely."""
    srv = spawn_server("--tick", "0.002")
    with Client(srv.url, timeout=10) as c:
        c.register_stream("register stream C (u int) with (timestamp = system, unit = millisecond)")
        qid = c.register_query("select u from C")["id"]
        took = []
        for i in range(7):
            t, e = _first_result_after(srv.url, qid, lambda i=i: c.push("C", [{"u": i}]))
            assert e.row == (i,)
            took.append(t)
        took.sort()
        assert took[len(took) // 2] < 0.04, took


def test_a_tick_that_moves_no_time_runs_nothing():
    """A system-timestamped stream in seconds under a 1 ms tick: the engine runs when the second
    changes, not every millisecond."""
    clock = [1000.25]
    d = Dsms(clock=lambda: clock[0])
    host = EngineHost(Settings(tick_interval=0.001), d)
    host.register_source("register stream C (u int) with (timestamp = system, unit = second)")
    host._clock_step()
    runs = host.runs
    for _ in range(500):
        clock[0] += 0.001  # 0.5 s of 1 ms ticks: still within second 1000
        host._clock_step()
    assert host.runs == runs
    clock[0] = 1001.0
    host._clock_step()
    assert host.runs == runs + 1


def _published(tick_steps: int) -> list[tuple[int, int, tuple]]:
    """Every (ts, sign, row) a system-timestamped query publishes for the same arrivals when the
    clock ticks `tick_steps` times per millisecond of arrivals (the tick's granularity)."""
    clock = [0.0]
    host = EngineHost(Settings(), Dsms(clock=lambda: clock[0]))
    host.register_source("register stream C (u int) with (timestamp = system, unit = millisecond)")
    h = host.register_query("select u, count(*) from C [Range 3] group by u")
    sub = host.d.subscribe(h["id"])
    out: list[tuple[int, int, tuple]] = []
    for ms in range(40):
        for j in range(tick_steps):
            clock[0] = (50_000 + ms + (j + 0.5) / tick_steps) / 1000  # never near a millisecond's edge
            if j == 0 and ms % 3 != 2:  # some milliseconds have no arrival: only the clock moves them on
                host.push("C", f'{{"u": {ms % 4}}}\n{{"u": 1}}\n'.encode(), "application/x-ndjson")
            host._clock_step()
        b = sub.poll()
        out += list(zip(b.ts.tolist(), b.sign.tolist(), b.rows()))
    return out


def test_results_do_not_depend_on_the_tick():
    """The same arrivals publish the same elements at the same instants, ticked 1 or 4 times per
    millisecond (ticks that move no time are skipped)."""
    coarse, fine = _published(1), _published(4)
    assert coarse and coarse == fine


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "between"), ("0.0001", "between"), (str(TICK_MAX * 2), "between"), ("fast", "not a number of seconds")],
)
def test_the_tick_flag_is_checked(value, message):
    run = subprocess.run(
        [sys.executable, "-m", "cqlstream", "serve", "--tick", value],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "--tick" in run.stderr and message in run.stderr, run.stderr


def test_the_tick_setting_is_checked():
    with pytest.raises(ValueError, match="tick_interval"):
        Settings(tick_interval=0)
    assert Settings(tick_interval=TICK_MIN).tick_interval == TICK_MIN


def test_serve_help_documents_the_tick():
    run = subprocess.run(
        [sys.executable, "-m", "cqlstream", "serve", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "--tick" in run.stdout and "0.001" in run.stdout
