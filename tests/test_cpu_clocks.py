"""Operators' CPU clocks (engine/planner.py `EngineOptions.cpu_clocks`, `Operator.cpu_clock`).

Every operator call reads the thread's CPU clock twice for `Counters.cpu` (CPU limits, control
tables); a read is a system call (~6 µs on the benchmark machine's VM, ~35 ms of a Linear Road
run). A script run reads neither, so `cqlstream run` builds its operators without the clock. These
tests count the clock reads: none for a Dsms built with `cpu_clocks=False` (FilterHubs and every
other operator of the plan included) and for `run_script`, two per call otherwise and whenever a
CPU limit is set; results are the same either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import cqlstream.engine.operators.base as base
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators.filterhub import FilterHub
from cqlstream.io.script_runner import run_script
from tests.engine_harness import _merge_events, feed

DDL = "register stream S (a int, b int); register stream T (a int, b int);"
QUERIES = [
    "select b, count(*) from S [Range 3] group by b",
    "istream(select S.a, T.b from S [Rows 4], T [Range 2] where S.a = T.a)",
    "select distinct a from T [Range 5]",
    "select * from S where a = 1",  # three selections on one column's constants: a FilterHub
    "select * from S where a = 2",
    "select * from S where a = 0",
]
INPUTS = {"S": [(k // 6, (k % 3, k)) for k in range(300)], "T": [(k // 4, (k % 3, -k)) for k in range(200)]}


class _Clock:
    """Counts the reads of the CPU clock made by operator calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        real = base.time.thread_time

        def thread_time() -> float:
            self.reads += 1
            return real()

        monkeypatch.setattr(base.time, "thread_time", thread_time)


def _run(monkeypatch: pytest.MonkeyPatch, **options: object) -> tuple[Dsms, list[list[tuple]], int]:
    d = Dsms(**options)  # type: ignore[arg-type]
    d.execute(DDL)
    subs = [d.subscribe(d.register_query(q).id) for q in QUERIES]
    clock = _Clock(monkeypatch)
    out: list[list[tuple]] = [[] for _ in subs]

    def poll(_: int) -> None:
        for rows, s in zip(out, subs):
            b = s.poll()
            rows.extend(zip(b.ts.tolist(), b.sign.tolist(), b.id.tolist(), *(c.tolist() for c in b.cols)))

    feed(d, _merge_events(INPUTS), step=37, after=poll)
    return d, out, clock.reads


def test_no_cpu_clock_read_without_cpu_clocks_and_the_same_results(monkeypatch: pytest.MonkeyPatch):
    on, on_rows, on_reads = _run(monkeypatch)
    off, off_rows, off_reads = _run(monkeypatch, cpu_clocks=False)
    assert any(isinstance(op, FilterHub) for op in off.plan.operators)
    calls = sum(op.counters.calls for op in off.plan.operators)
    assert calls > 0 and off_reads == 0
    assert all(not op.cpu_clock and op.counters.cpu == 0.0 for op in off.plan.operators)
    assert on_reads == 2 * sum(op.counters.calls for op in on.plan.operators)
    assert all(op.cpu_clock for op in on.plan.operators)
    assert off_rows == on_rows and any(off_rows)


def test_a_cpu_limit_keeps_the_clocks(monkeypatch: pytest.MonkeyPatch):
    d, _, reads = _run(monkeypatch, cpu_clocks=False, query_cpu_limit=60.0)
    assert reads == 2 * sum(op.counters.calls for op in d.plan.operators) > 0


def test_a_script_run_reads_no_cpu_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "s.dat").write_text("i,i,i\n" + "".join(f"{i // 10 + 1},{i % 5},{i % 7}\n" for i in range(300)))
    (tmp_path / "run.cql").write_text(
        "table : register stream S (A integer, B integer);\nsource : s.dat\n"
        "query : select B, Sum(A) from S [Rows 50] group by B;\ndest : out\n"
        "query : select * from S where A = 1;\ndest : out1\n"
        "query : select * from S where A = 2;\ndest : out2\n"
    )
    clock = _Clock(monkeypatch)
    counts = run_script(tmp_path / "run.cql", out_dir=tmp_path / "o", threads=1)
    assert counts[str(tmp_path / "o" / "out")] > 0
    assert clock.reads == 0
