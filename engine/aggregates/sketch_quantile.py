"""Approximate quantile aggregates (`approx_median(x)`, `approx_p90(x)`, …) over KLL sketches,
in bounded memory per group instead of every value of the window.

A KLL sketch cannot delete, and a window's values leave it. But a window over a stream deletes
its tuples in the order they arrived (per group as well), so a group's values are kept as a
queue of *panes*: each pane a KLL sketch of a run of consecutive inserts. Inserts fill the newest
pane; a pane is closed after max(k, n/PANES) inserts (n: the group's live count when it was
opened), so a group holds about PANES panes however large its window. A delete takes one live
item from the oldest pane; a pane whose items have all left is dropped whole. The answer merges
the panes' weighted items, the oldest pane's weights scaled by its live share (its expired items
are the earliest of the pane, and the scaling treats them as a uniform part of it).

Error: the KLL rank error (about 1.7/k per pane, less after merging) plus, in the worst case,
the oldest pane's expired share — at most max(k, n/PANES) items of n, so about 1/PANES of rank
for a large window and nothing when values do not trend with time within a pane. Memory: about
PANES · 3k values per group (insert-only input: the panes grow geometrically, O(k log n)).
Deletes are assumed to come in arrival order, as every window over a stream gives them; over a
relation with arbitrary deletes the sketch removes the oldest values instead of the deleted ones.
Results do not depend on batching: panes are filled cell by cell (one group at one instant), and
each pane's random compaction offsets come from a seed of its own (its ordinal in the group).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cqlstream.cql.functions import APPROX_QUANTILES
from cqlstream.cql.logical.expr import AggCall
from cqlstream.engine.aggregates.cells import Cells
from cqlstream.engine.aggregates.strategy import AggregateStrategy
from cqlstream.engine.summaries.quantiles import KLL

K_DEFAULT = 200
PANES = 16


class Pane:
    __slots__ = ("inserted", "kll", "live", "size")

    def __init__(self, size: int, k: int, seed: int) -> None:
        self.kll = KLL(k, seed=seed)
        self.size, self.inserted, self.live = size, 0, 0


class PaneQuantiles:
    """One group's values as a queue of KLL panes (module docstring)."""

    def __init__(self, k: int = K_DEFAULT, panes: int = PANES) -> None:
        self.k, self.panes_target = k, panes
        self.panes: deque[Pane] = deque()
        self.n = 0
        self.opened = 0

    def add(self, values: np.ndarray) -> None:
        i = 0
        while i < len(values):
            p = self.panes[-1] if self.panes else None
            if p is None or p.inserted >= p.size:
                p = Pane(max(self.k, self.n // self.panes_target), self.k, self.opened)
                self.opened += 1
                self.panes.append(p)
            take = min(len(values) - i, p.size - p.inserted)
            p.kll.update(values[i : i + take])
            p.inserted += take
            p.live += take
            self.n += take
            i += take

    def remove(self, m: int) -> None:
        """The m oldest live values leave."""
        m = min(m, self.n)
        self.n -= m
        while m > 0:
            p = self.panes[0]
            d = min(m, p.live)
            p.live -= d
            m -= d
            if p.live == 0:
                self.panes.popleft()

    def quantile(self, q: float) -> float | None:
        if self.n <= 0:
            return None
        vals, ws = [], []
        for p in self.panes:
            scale = p.live / p.inserted
            for h, lv in enumerate(p.kll.levels):
                if len(lv):
                    vals.append(lv)
                    ws.append(np.full(len(lv), float(1 << h) * scale))
        v = np.concatenate(vals)
        w = np.concatenate(ws)
        o = np.argsort(v, kind="stable")
        cw = np.cumsum(w[o])
        i = int(np.searchsorted(cw, q * cw[-1], side="left"))
        return float(v[o][min(i, len(v) - 1)])

    def nbytes(self) -> int:
        return sum(p.kll.nbytes() for p in self.panes) + 64 * len(self.panes)


class ApproxQuantile(AggregateStrategy):
    """approx_<q>(x): per group a PaneQuantiles; NULL arguments are skipped, an empty group gives
    NULL. Plain Python per cell, numpy within it."""

    stateful = True

    def __init__(self, call: AggCall, ai: int, k: int = K_DEFAULT) -> None:
        super().__init__(call, ai)
        self.q = APPROX_QUANTILES[call.func.lower()]
        self.k = k
        self.groups: dict[int, PaneQuantiles] = {}

    def values(self, cx: Cells) -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros(cx.ncells, np.float64)
        null = np.ones(cx.ncells, bool)
        vals = cx.ev.av[self.ai].astype(np.float64)[cx.order]
        w = cx.ev.sign[cx.order]
        ok = cx.ev.an[self.ai][cx.order]
        start = 0
        for c, end in enumerate(cx.ce.tolist()):
            g = int(cx.sg[end])
            sl = slice(start, end + 1)
            st = self.groups.get(g)
            if st is None:
                st = self.groups[g] = PaneQuantiles(self.k)
            ws, vs, oks = w[sl], vals[sl], ok[sl]
            st.add(vs[(ws > 0) & oks])  # adds before removes: a value never leaves before it came
            st.remove(int(((ws < 0) & oks).sum()))
            r = st.quantile(self.q)
            if r is not None:
                out[c], null[c] = r, False
            start = end + 1
        return out.astype(self.dt), null

    def forget(self, gids: list[int]) -> None:
        for g in gids:
            self.groups.pop(g, None)

    def remap(self, remap: np.ndarray) -> None:
        self.groups = {int(remap[g]): st for g, st in self.groups.items() if remap[g] >= 0}

    def nbytes(self) -> int:
        return sum(st.nbytes() for st in self.groups.values())
