"""The reservoir mode of the window join (`summary` = reservoir): when an input's join state
passes its share of `summary_bytes`, the join keeps a uniform random sample of that input's window
instead of all of it, and joins the samples exactly.

The sample of input k is a threshold sample over tuple ids: a tuple is in it iff it is alive in
the window and u(id) < τ_k, with u a fixed hash of the id into [0, 1). τ_k starts at 1 (every
tuple: exact) and is only ever lowered, so:

- the sample is exactly {alive tuples with u < τ_k} at every instant — each alive tuple is in it
  independently with probability τ_k (a uniform Bernoulli sample of the window);
- an insert with u ≥ τ_k is dropped and so is, later, its delete (same id, same u): an expired
  tuple leaves the sample with its delete, a dropped one never enters it;
- lowering τ_k (when the state at the end of an instant passes the cap, to the value that keeps
  the cap's worth of tuples with the least u) evicts the sampled tuples with u at or above it:
  the join gets a delete for each at that instant, retracting their result rows;
- when every dropped or evicted tuple has left the window (their deletes all seen), the sample is
  the whole window again and τ_k goes back to 1.

The join then runs unchanged over the sampled inputs, so its result at every instant is the exact
join of sub-bags of its inputs: a sub-bag of the exact join. A result row is present with
probability Π τ_k (the *sampling fraction*, reported); dividing a count by it estimates the exact
count. Each instant is run as its own call, with the eviction at its end, so results do not depend
on batching. Only a join with private state can sample (a shared relation store is other
queries' state too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch, concat, splitmix64

JOIN_SUMMARIES = ("exact", "reservoir")
_SALT = np.uint64(0x52E5_E7A1_0C0F_FEE5)
_UNIT = float(2**64)


def unit_hash(ids: np.ndarray) -> np.ndarray:
    """u(id) in [0, 1): the same for an insert and its delete."""
    return splitmix64(ids.astype(np.uint64) ^ _SALT).astype(np.float64) / _UNIT


def stores_empty(stores: list[Any] | None) -> bool:
    """Whether shared stores hold nothing yet, nor a snapshot to start from (a join registered
    while data flowed): only then can the join switch to private state without losing rows."""
    return all(len(st) == 0 and getattr(getattr(st, "reader", None), "prefix", None) is None for st in stores or ())


def private_state(join: Any) -> list[object]:
    """Make the join keep its own state instead of reading shared stores (allowed only while they
    are empty, so nothing is lost); the stores no other operator reads are released and returned."""
    freed = join.leave_stores()
    join.stores = None
    return freed


class ReservoirJoin:
    """Per input: τ, the count of live tuples outside the sample, and counters (module docstring)."""

    def __init__(self, join: Any, nbytes: int) -> None:
        self.join = join
        self.nbytes = nbytes
        n = join.n
        self.tau = [1.0] * n
        self.outside = [0] * n  # tuples alive in the window but not in the sample
        self.evicted = [0] * n
        self.dropped = [0] * n  # inserts dropped on arrival

    def cap(self) -> int:
        return self.nbytes // self.join.n

    def fraction(self) -> float:
        """The probability that a row of the exact join is in the result now: Π τ_k."""
        return float(np.prod(self.tau))

    def process(self, inputs: list[Batch], bound: int, exact: Callable[[list[Batch], int], Batch]) -> Batch:
        """Run `exact` (the join's own call) instant by instant over the sampled inputs, evicting
        at the end of each instant where a side passes its cap."""
        j = self.join
        ins = [self._local(k, b) for k, b in enumerate(inputs)]
        instants: list[int] = np.unique(np.concatenate([b.ts for b in ins])).tolist()
        outs = []
        for t in instants:
            part = []
            for k, b in enumerate(ins):
                lo, hi = np.searchsorted(b.ts, [t, t + 1])
                part.append(self._sample(k, b.take(slice(lo, hi))))
            outs.append(exact(part, int(t)))
            evict = [self._evict(k, int(t)) for k in range(j.n)]
            if any(len(e) for e in evict):
                outs.append(exact(evict, int(t)))
        if not outs:
            return exact([b.take(slice(0, 0)) for b in inputs], bound)
        return concat(outs, j.out_types)

    def _local(self, k: int, b: Batch) -> Batch:
        """The input's tuples that pass its own conjuncts (the only ones the join keeps)."""
        for c in self.join.local[k]:
            if len(b):
                b = b.take(self.join.ev.predicate(c, b))
        return b

    def _sample(self, k: int, b: Batch) -> Batch:
        if self.tau[k] >= 1.0 or not len(b):
            return b
        keep = unit_hash(b.id) < self.tau[k]
        out = ~keep
        ins = b.sign > 0
        self.dropped[k] += int((out & ins).sum())
        self.outside[k] += int((out & ins).sum()) - int((out & ~ins).sum())
        if self.outside[k] <= 0:  # every tuple left out has left the window: exact again
            self.outside[k], self.tau[k] = 0, 1.0
        return b.take(np.flatnonzero(keep))

    def _evict(self, k: int, t: int) -> Batch:
        """Deletes, at instant t, of the sampled tuples above the lowered τ (none under the cap)."""
        st = self.join.state[k]
        size = st.nbytes()
        if size <= self.cap() or not len(st):
            return st.take(slice(0, 0))
        keep = max(0, int(len(st) * self.cap() / size))
        u = unit_hash(st.id)
        order = np.argsort(u, kind="stable")
        self.tau[k] = float(u[order[keep]])  # the least u left out: every kept u is below it
        gone = st.take(np.sort(order[keep:]))
        gone.sign = -np.ones(len(gone), np.int8)
        gone.ts = np.full(len(gone), t, np.int64)
        self.evicted[k] += len(gone)
        self.outside[k] += len(gone)
        return gone

    def counters(self) -> dict[str, Any]:
        held = [len(s) for s in self.join.state]
        return {
            "summary_sample_fraction": round(self.fraction(), 9),
            "summary_tau": [round(x, 9) for x in self.tau],
            "summary_window_fraction": [round(h / (h + o), 9) if h + o else 1.0 for h, o in zip(held, self.outside)],
            "summary_evicted": list(self.evicted),
            "summary_dropped": list(self.dropped),
        }

    def info(self) -> dict[str, Any]:
        c = self.counters()
        return {
            "summary": "reservoir",
            "state": f"a uniform sample of each input's window within {self.nbytes} B",
            "sample_fraction": c["summary_sample_fraction"],
            "window_fraction": c["summary_window_fraction"],
            "bound": "sub-bag of the exact join; a result row is present with probability sample_fraction",
        }
