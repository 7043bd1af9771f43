"""Online monitors of k-constraints (the paper's W, c, p scheme), vectorized over a call's arrivals.

A monitor holds `k_u`, the adherence parameter in use (∞ = not used). Each arrival brings one
observed distance (clustering, scrambling or join distance; 0 when it says nothing):
- increase: a distance above `k_u` sets `k_u = ∞` at once (the constraint is withdrawn);
- decrease (only when `detect` is on): when the largest distance over a block of `W` arrivals is
  `k' < k_u`, `k_u = k'` (a declared k is the start value; an undeclared one starts at ∞);
- `k_e = c · k_u` is how far evidence is kept to see an increase; `p` is the share of tuples kept
  as a sample beyond `k_e` (approximate mode).
`CAAux` and `OARecord` are the per-value structures the CA and OA monitors (and rules) read.
"""

from __future__ import annotations

import numpy as np

INF = float("inf")


class Monitor:
    """The k in use for one constraint, with its changes as events."""

    def __init__(self, k: float, W: int = 1000, c: float = 1.0, p: float = 0.01, detect: bool = False) -> None:
        self.k_u = float(k)
        self.declared = float(k)
        self.W, self.c, self.p, self.detect = int(W), float(c), float(p), detect
        self.block_max = 0.0
        self.block_n = 0
        self.arrivals = 0
        self.max_seen = 0.0
        self.events: list[tuple[str, float]] = []  # (what, new k) since the last drain

    @property
    def k_e(self) -> float:
        return self.c * self.k_u

    @property
    def withdrawn(self) -> bool:
        return self.k_u == INF

    def withdraw(self, why: str = "violated", seen: float = 0.0) -> None:
        """k_u = ∞; the next decrease waits for W arrivals from here (with `seen`, the distance that
        broke the constraint, counted in them) so that it is not judged on evidence cut at the old k."""
        if self.k_u != INF:
            self.k_u = INF
            self.events.append((why, INF))
            self.block_max, self.block_n = seen, 0

    def observe(self, d: np.ndarray) -> None:
        """One distance per arrival, in arrival order."""
        n = len(d)
        if not n:
            return
        self.arrivals += n
        self.max_seen = max(self.max_seen, float(d.max()))
        start = 0
        while start < n:
            take = n - start if not self.detect else min(n - start, self.W - self.block_n)
            part = d[start : start + take]
            if self.k_u != INF and len(part) and float(part.max()) > self.k_u:
                over = int(np.argmax(part > self.k_u))  # the block restarts after the first violation
                self.withdraw(seen=float(part[over]))
                start += over + 1
                continue
            if self.detect:
                self.block_max = max(self.block_max, float(part.max()) if len(part) else 0.0)
                self.block_n += take
                if self.block_n >= self.W:
                    if self.block_max < self.k_u:
                        self.k_u = self.block_max
                        self.events.append(("lowered", self.k_u))
                    self.block_max, self.block_n = 0.0, 0
            start += take

    def drain(self) -> list[tuple[str, float]]:
        out, self.events = self.events, []
        return out


class CAAux:
    """CA-Aux of one stream column: per value seen, the position of its first arrival and its count.

    With positions 0.. of the stream's arrivals and N arrivals so far, a new tuple with value v would
    be `N − first(v) − count(v)` non-v tuples after v's first one: v is *closed* under CA(k) when that
    exceeds k (no future tuple has it)."""

    def __init__(self) -> None:
        self.vals = np.zeros(0, np.int64)  # sorted
        self.first = np.zeros(0, np.int64)
        self.count = np.zeros(0, np.int64)
        self.n = 0

    def nbytes(self) -> int:
        return self.vals.nbytes + self.first.nbytes + self.count.nbytes

    def arrive(self, v: np.ndarray) -> np.ndarray:
        """Add arrivals (values in arrival order); returns each one's clustering distance to its
        value's first arrival (the largest distance the pair can show)."""
        m = len(v)
        if not m:
            return np.zeros(0, np.int64)
        pos = self.n + np.arange(m, dtype=np.int64)
        # one stable sort groups the call's values; position order is kept within a value
        order = np.argsort(v, kind="stable")
        vs = v[order]
        head = np.empty(m, bool)
        head[0] = True
        np.not_equal(vs[1:], vs[:-1], out=head[1:])
        starts = np.flatnonzero(head)
        u = vs[starts]
        run = np.cumsum(head) - 1  # the value's index in u, per sorted arrival
        inv = np.empty(m, np.int64)
        inv[order] = run
        occ = np.empty(m, np.int64)  # occurrence index of each arrival among equal values of the call
        occ[order] = np.arange(m) - starts[run]
        first_here = pos[order[starts]]
        add = np.diff(np.append(starts, m))
        at = np.searchsorted(self.vals, u)
        if len(self.vals):
            j = np.minimum(at, len(self.vals) - 1)
            old = self.vals[j] == u
            first_u = np.where(old, self.first[j], first_here)
            count_u = np.where(old, self.count[j], 0)
        else:
            old = np.zeros(len(u), bool)
            first_u, count_u = first_here, np.zeros(len(u), np.int64)
        before = count_u[inv] + occ  # arrivals of the value before this one
        d = np.where(before > 0, pos - first_u[inv] - before, 0)
        # merge the call's counts into the table (two sorted runs: by position, no sort)
        if old.any():
            self.count[at[old]] += add[old]
        new = ~old
        if new.any():
            slot = at[new] + np.arange(int(new.sum()))
            mine = np.ones(len(self.vals) + len(slot), bool)
            mine[slot] = False
            for name, fresh in (("vals", u[new]), ("first", first_here[new]), ("count", add[new])):
                col = np.empty(len(mine), np.int64)
                col[slot], col[mine] = fresh, getattr(self, name)
                setattr(self, name, col)
        self.n += m
        return d

    def gap(self, keys: np.ndarray) -> np.ndarray:
        """For each key: how far a next arrival of it would be from its first one (−1: never seen)."""
        if not len(self.vals):
            return np.full(len(keys), -1, np.int64)
        at = np.minimum(np.searchsorted(self.vals, keys), len(self.vals) - 1)
        seen = self.vals[at] == keys
        return np.where(seen, self.n - self.first[at] - self.count[at], -1)

    def forget_older(self, horizon: float, needed: np.ndarray) -> None:
        """Drop values closed for more than `horizon` arrivals that no row still needs (`needed`:
        sorted, distinct keys of the partner rows alive); a value coming back after that is not
        seen as a violation by this structure."""
        if horizon == INF or not len(self.vals):
            return
        keep = (self.n - self.first - self.count) <= horizon
        if keep.all():
            return
        if len(needed):  # only the values closed that long are looked up (needed is sorted)
            old = np.flatnonzero(~keep)
            at = np.minimum(np.searchsorted(needed, self.vals[old]), len(needed) - 1)
            keep[old] = needed[at] == self.vals[old]
        if not keep.all():
            self.vals, self.first, self.count = self.vals[keep], self.first[keep], self.count[keep]


class OARecord:
    """The running maximum of one stream column as the positions where it rose (strictly increasing
    values). OA(k) ⇒ no future value below the maximum of all arrivals but the last k (`lo`)."""

    def __init__(self, cap: int = 1_000_000) -> None:
        self.pos = np.zeros(0, np.int64)
        self.val = np.zeros(0, np.int64)
        self.n = 0
        self.cap = cap  # how far back the record reaches while k is ∞

    def nbytes(self) -> int:
        return self.pos.nbytes + self.val.nbytes

    def arrive(self, v: np.ndarray) -> np.ndarray:
        """Add arrivals; returns each one's scrambling distance to the earliest earlier larger value."""
        m = len(v)
        if not m:
            return np.zeros(0, np.int64)
        pos = self.n + np.arange(m, dtype=np.int64)
        prev = self.val[-1] if len(self.val) else np.iinfo(np.int64).min
        run = np.maximum.accumulate(np.concatenate([[prev], v]))[1:]
        rise = run > np.concatenate([[prev], run[:-1]])
        rec_pos = np.concatenate([self.pos, pos[rise]])
        rec_val = np.concatenate([self.val, v[rise]])
        i = np.searchsorted(rec_val, v, side="right")  # the earliest record entry above v
        ok = i < len(rec_val)
        d = np.zeros(m, np.int64)
        j = np.minimum(i, len(rec_val) - 1)
        ok &= rec_pos[j] < pos
        d[ok] = pos[ok] - rec_pos[j[ok]]
        self.pos, self.val = rec_pos, rec_val
        self.n += m
        return d

    def lo(self, k: float) -> int | None:
        """The smallest value a future arrival can have under OA(k) (None: no bound yet)."""
        if k == INF:
            return None
        last = self.n - 1 - int(k)  # arrivals at positions ≤ last are k + 1 or more before any future one
        i = int(np.searchsorted(self.pos, last, side="right")) - 1
        return int(self.val[i]) if i >= 0 else None

    def forget_older(self, k: float) -> None:
        """Keep the entries needed for lo(k) and for distances up to k (or `cap` while k is ∞)."""
        reach = self.cap if k == INF else int(min(k, self.cap))
        last = self.n - 1 - reach
        i = int(np.searchsorted(self.pos, last, side="right")) - 1
        if i > 0:
            self.pos, self.val = self.pos[i:], self.val[i:]
