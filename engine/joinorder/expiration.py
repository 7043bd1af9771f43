"""A small model of the paper's multi-way join algorithms with eager and lazy expiration: windows
as lists of (ts, attr) tuples, optionally split into hash buckets, and COMPUTEJOIN's nested loops
with or without the timestamp checks `k.ts − T_j ≤ u.ts ≤ k.ts`.

Without the checks, lazy processing (re-execute every τ, expire every τ) joins a new tuple with
tuples that had already expired when it arrived, and with tuples that arrived after it — the
paper's naive lazy algorithm returns 8 rows for its Tables 2–3, of which only 2 are correct. With
the checks the result is the same under any expiration schedule. The engine needs no such checks:
its join sees each window tuple's insert and delete as events and probes the instances alive at
each event's position (engine/operators/join.py). This module is a reference model (tests and the
multi-join benchmark), tuple at a time on purpose: the algorithm's cost is its comparisons.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

Tuple = tuple[int, int]  # (ts, attr)


@dataclass
class SlidingWindow:
    """One time-based window of size T: tuples in arrival order, in `buckets` FIFO hash buckets
    (attr mod buckets; 1 bucket = a plain window scanned by nested loops)."""

    size: int
    buckets: int = 1
    lists: list[deque[Tuple]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lists = [deque() for _ in range(self.buckets)]

    def insert(self, t: Tuple) -> None:
        self.lists[t[1] % self.buckets].append(t)

    def expire(self, now: int) -> int:
        """Drop the tuples no new tuple at or after `now` can join (ts < now − T); every bucket is
        visited. Returns the number of bucket visits (the cost the paper attributes to expiration)."""
        limit = now - self.size
        for b in self.lists:
            while b and b[0][0] < limit:
                b.popleft()
        return len(self.lists)

    def bucket(self, attr: int) -> deque[Tuple]:
        return self.lists[attr % self.buckets]

    def __len__(self) -> int:
        return sum(len(b) for b in self.lists)


@dataclass
class Counter:
    """Work of COMPUTEJOIN: `comparisons` (window tuples examined, what the cost model counts)
    and `probes` (scans of a window or bucket, one per partial result of the loops above)."""

    comparisons: int = 0
    probes: int = 0


def compute_join(
    k: Tuple,
    origin: int,
    order: Sequence[int],
    windows: Sequence[SlidingWindow],
    checked: bool = True,
    counter: Counter | None = None,
) -> list[tuple[Tuple, ...]]:
    """COMPUTEJOIN / COMPUTEHASHJOIN: the composite tuples (in input order) new tuple `k` of window
    `origin` makes with the other windows, probed in `order` (equality on attr): nested loops, each
    scanning the window (or k's bucket of it) once per partial result of the loops above.
    `checked`: with the timestamp checks (the paper's algorithm); False: the naive lazy loops."""
    kts, key = k
    n = len(order)
    scans = [windows[j].bucket(key) for j in order]
    lows = [kts - windows[j].size if checked else -(2**62) for j in order]
    highs = kts if checked else 2**62
    out: list[tuple[Tuple, ...]] = []
    visits = [0, 0]  # comparisons, probes
    parts: list[Tuple] = [k] * (n + 1)

    def loop(d: int) -> None:
        scan, lo = scans[d], lows[d]
        visits[0] += len(scan)
        visits[1] += 1
        for u in scan:
            if u[1] == key and lo <= u[0] <= highs:
                parts[d + 1] = u
                if d + 1 == n:
                    out.append(tuple(parts))
                else:
                    loop(d + 1)

    if n:
        loop(0)
    if counter is not None:
        counter.comparisons += visits[0]
        counter.probes += visits[1]
    if not out:
        return out
    pos = [origin, *order]  # composite tuples are in probe order: put them in input order
    if pos == sorted(pos):
        return out
    to_input = itemgetter(*sorted(range(len(pos)), key=lambda x: pos[x]))
    return [to_input(p) for p in out]


def lazy_run(
    windows: Sequence[SlidingWindow],
    batches: Sequence[Sequence[Tuple]],
    now: int,
    tau: int,
    orders: Sequence[Sequence[int]],
    checked: bool = True,
) -> list[tuple[Tuple, ...]]:
    """One lazy re-execution at `now`: for each window i, its tuples new in (now − τ, now] (already
    inserted) join the others in `orders[i]`; expiration has run relative to now − τ (the oldest
    new tuple), as lazy expiration must."""
    for w in windows:
        w.expire(now - tau)
    out: list[tuple[Tuple, ...]] = []
    for i, batch in enumerate(batches):
        for k in batch:
            if now - tau < k[0] <= now:
                out.extend(compute_join(k, i, orders[i], windows, checked))
    return out


def eager_run(
    windows: Sequence[SlidingWindow],
    arrivals: Sequence[tuple[int, Tuple]],
    orders: Sequence[Sequence[int]],
    counter: Counter | None = None,
) -> list[tuple[Tuple, ...]]:
    """The eager algorithm: each arrival (window index, tuple), in ts order, expires every window
    relative to its timestamp, is inserted and joins the others in its window's order."""
    out: list[tuple[Tuple, ...]] = []
    for i, k in arrivals:
        for w in windows:
            w.expire(k[0])
        windows[i].insert(k)
        out.extend(compute_join(k, i, orders[i], windows, True, counter))
    return out
