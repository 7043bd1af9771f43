"""User-defined aggregates (UDAFs), registered with `FunctionRegistry.register_aggregate(name,
impl, returns)`. `impl` is any object with the methods

    init() -> state                 a fresh state for an empty group
    add(state, value) -> state      a (non-NULL) value enters the group
    remove(state, value) -> state   a value previously added leaves the group
    result(state) -> value          the aggregate's value (None for NULL)

Values are plain Python objects (int, float, str, bool). NULL arguments are never passed. A
state may be mutated in place and returned. With DISTINCT, `add`/`remove` see each distinct
value once (when it appears in / disappears from the group). Within one instant a group's adds
come before its removes, so `remove` only ever sees a value the state holds. `result` is called
at the end of every instant at which the group had events; a group's state is dropped when the
group becomes empty. UDAFs are evaluated by a per-event Python loop: the implementation is an
opaque Python object, so there is no vectorized form.
"""

from __future__ import annotations

import numpy as np

from cqlstream.cql.logical.expr import AggCall
from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.columns import column_from_values
from cqlstream.engine.aggregates.strategy import AggregateStrategy


class Udaf(AggregateStrategy):
    """A UDAF call; keeps the implementation's state object per group."""

    stateful = True

    def __init__(self, call: AggCall, ai: int, impl: object):
        super().__init__(call, ai)
        self.impl = impl
        self.distinct_arg = call.distinct
        self.states: dict[int, object] = {}

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        weight = cx.trans[self.ai] if self.call.distinct else cx.ev.sign
        return column_from_values(self._cells(cx, weight), self.dt)

    def _cells(self, cx: Cells, weight: np.ndarray) -> list[object]:
        """The UDAF's value at every cell (per-event Python loop)."""
        impl = self.impl
        states = self.states
        order, cend = cx.order, cx.cend
        vals, notnull = cx.ev.av[self.ai], cx.ev.an[self.ai]
        w = weight[order]
        # within each cell, adds before removes: a tuple may enter and leave a window at one
        # instant with its `−` first; this way a UDAF never removes a value it does not hold
        cell = np.cumsum(cend) - cend
        within = np.argsort(cell * 2 + (w < 0), kind="stable")
        o = order[within]
        gl = cx.sg.tolist()
        wl = w[within].tolist()
        vl = vals[o].tolist()
        nl = notnull[o].tolist()
        el = cend.tolist()
        res: list[object] = [None] * cx.ncells
        cur, st, k = None, None, 0
        for i in range(len(gl)):
            g = gl[i]
            if g != cur:
                if cur is not None:
                    states[cur] = st
                cur = g
                st = states[g] if g in states else impl.init()  # type: ignore[attr-defined]
            wi = wl[i]
            if wi and nl[i]:
                st = impl.add(st, vl[i]) if wi > 0 else impl.remove(st, vl[i])  # type: ignore[attr-defined]
            if el[i]:
                res[k] = impl.result(st)  # type: ignore[attr-defined]
                k += 1
        if cur is not None:
            states[cur] = st
        return res

    def forget(self, gids: list[int]) -> None:
        for g in gids:  # per dead group: frees its state
            self.states.pop(g, None)

    def remap(self, remap: np.ndarray) -> None:
        self.states = {int(remap[g]): st for g, st in self.states.items() if remap[g] >= 0}

    def nbytes(self) -> int:
        return 200 * len(self.states)
