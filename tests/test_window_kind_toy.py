"""Adding a window kind through the documented path (docs/architecture.md, "adding a window
kind"): one `WindowKind` class (configuration) registered in engine/operators/window_kinds.py's
registry, whose `logic()` makes its runtime, and a logical `Window` node carrying its spec. A
kind whose lifetimes are known on arrival subclasses `TimeWindow` and gets `TimeWindowLogic`;
any other brings its own `WindowLogic` subclass (its buffers, `process`, `contents`). CQL text
would also need a grammar/analyzer entry that produces the spec; this test builds the logical
node directly instead (the registry, planner, operator, snapshots and bounded-memory verdict are
the engine path a grammar entry leads to)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from cqlstream.cql.frontend import compile_query
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.boundedness import verdict
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.operators import window_kinds as W
from cqlstream.engine.operators.base import BOUNDED, RATE
from cqlstream.engine.operators.window_logic import TimeWindowLogic, WindowLogic, emit


@dataclasses.dataclass(frozen=True)
class TumbleSpec:
    """Toy: TUMBLE N holds, at instant t, the elements with τ in [⌊t/N⌋·N, t]."""

    size: int

    @property
    def time_based(self) -> bool:
        return True

    def sql(self) -> str:
        return f"TUMBLE {self.size}"


class TumbleWindow(W.TimeWindow):
    """An element enters at its own instant and leaves at the next multiple of N."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, TumbleSpec)

    def lifetimes(self, ts):
        return ts, (ts // self.spec.size + 1) * self.spec.size

    def state_class(self):
        return RATE, True


@dataclasses.dataclass(frozen=True)
class TumbleRowsSpec:
    """Toy: TUMBLE ROWS N holds the elements of the latest group of N (element j is in group
    j // N; a group leaves when the next one begins)."""

    size: int

    @property
    def time_based(self) -> bool:
        return False

    def sql(self) -> str:
        return f"TUMBLE ROWS {self.size}"


class TumbleRowsLogic(WindowLogic):
    """The runtime: `buf` holds the current group; `count` the elements seen."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.count = 0

    def process(self, b: Batch, bound: int) -> Batch:
        n = self.size
        comb = b if self.buf is None else concat([self.buf, b])
        first = self.count - (0 if self.buf is None else len(self.buf))  # global index of comb[0]
        self.count += len(b)
        nxt = (np.arange(first, self.count) // n + 1) * n  # first element of the next group
        leave = nxt < self.count
        out = emit(b, comb.take(leave), comb.ts[nxt[leave] - first])
        self.buf = comb.take(~leave)
        return out


class TumbleRowsWindow(W.WindowKind):
    """The configuration: which specs it computes, its runtime, its memory class."""

    @classmethod
    def matches(cls, spec):
        return isinstance(spec, TumbleRowsSpec)

    def logic(self) -> WindowLogic:
        return TumbleRowsLogic(self.spec.size)

    def state_class(self):
        return BOUNDED, True


@pytest.fixture
def tumble():
    W.register(TumbleWindow)
    W.register(TumbleRowsWindow)
    yield
    W.KINDS.remove(TumbleWindow)
    W.KINDS.remove(TumbleRowsWindow)


def _window_node(d: Dsms, spec) -> L.Window:
    """The logical plan of `SELECT * FROM S [NOW]` with its window's spec replaced by `spec`."""
    plan = compile_query("SELECT * FROM S [NOW]", d.catalog).plan
    node = plan
    while not isinstance(node, L.Window):
        node = node.inputs[0]
    return dataclasses.replace(node, spec=spec)


def _states(batch, until: int) -> dict[int, Counter]:
    """The relation at every instant 0..until from its delta elements."""
    state, out = Counter(), {}
    els = sorted(batch.elements(), key=lambda e: e[0])
    i = 0
    for t in range(until + 1):
        while i < len(els) and els[i][0] <= t:
            state[els[i][2]] += els[i][1]
            i += 1
        out[t] = +state
    return out


def test_toy_window_kind_runs_through_the_planner(tumble):
    d = Dsms()
    d.execute("REGISTER STREAM S (a INT)")
    node = _window_node(d, TumbleSpec(3))
    assert isinstance(W.kind_of(node.spec), TumbleWindow)
    assert isinstance(W.kind_of(node.spec).logic(), TimeWindowLogic)  # lifetimes → the time-window runtime
    pn = d.plan.build(node, user="toy")
    out = pn.queue.reader()
    ts = [0, 1, 2, 3, 4, 7, 8, 9]
    d.push("S", [(t,) for t in ts[:5]], ts=ts[:5])
    d.run()
    # a second consumer registered while data flows starts from the window's snapshot
    snap = d.plan.snapshot(pn)
    assert snap is not None
    at = snap[1]
    assert sorted(r for _, _, r in snap[0].elements()) == [(t,) for t in ts[:5] if at // 3 * 3 <= t <= at]
    d.push("S", [(t,) for t in ts[5:]], ts=ts[5:])
    d.end()
    got = _states(out.take(np.iinfo(np.int64).max), 9)
    want = {t: Counter({(x,): 1 for x in ts if t // 3 * 3 <= x <= t}) for t in range(10)}
    assert got == want
    assert verdict(node) == (None, "bounded for a bounded arrival rate: the result relation, window [TUMBLE 3]")


def test_toy_window_kind_with_its_own_logic(tumble):
    d = Dsms()
    d.execute("REGISTER STREAM S (a INT)")
    node = _window_node(d, TumbleRowsSpec(2))
    kind = W.kind_of(node.spec)
    assert isinstance(kind, TumbleRowsWindow) and isinstance(kind.logic(), TumbleRowsLogic)
    pn = d.plan.build(node, user="toy")
    out = pn.queue.reader()
    ts = [0, 1, 1, 2, 4, 4, 4, 6, 9]
    rows = list(range(len(ts)))  # element j carries a = j

    def want(t):  # the elements of the group of the last one with ts ≤ t
        seen = sum(x <= t for x in ts)
        return Counter({(j,): 1 for j in rows[:seen] if j // 2 == (seen - 1) // 2})

    d.push("S", [(j,) for j in rows[:4]], ts=ts[:4])
    d.run()
    # a second consumer registered while data flows starts from the window's contents
    snap = d.plan.snapshot(pn)
    assert snap is not None
    assert Counter(r for _, _, r in snap[0].elements()) == want(snap[1])
    d.push("S", [(j,) for j in rows[4:]], ts=ts[4:])
    d.end()
    got = _states(out.take(np.iinfo(np.int64).max), 9)
    assert got == {t: want(t) for t in range(10)}
    assert verdict(node) == (True, "bounded")


def test_unregistered_spec_has_no_window_kind():
    with pytest.raises(TypeError, match="no window kind"):
        W.kind_of(TumbleSpec(3))
