"""The band join: `Rstream(S [Now] ⋈ S' [Range N])` with the window's stream read directly (a
`StreamJoin` whose `window` is set; chosen by cql/logical/rewrites/stream_join.py).

A Range N window's element is alive for a span of instants known from its timestamp alone:
a tuple of S' at τ is in X(t) for t in [τ, τ + life), life = N under STREAM 0.6's bounds
(compat, (t−N, t]) and N + 1 under the paper's ([t−N, t]); Now is life 1 in both
(`window_kinds.range_life`). So an S tuple at t joins exactly the S' tuples with equal keys and
t − life < τ ≤ t: no window operator, no insert and delete events, no table pairing them.

One call. X = the carried S' tuples (those still alive at the call's first instant, arrival
order) followed by the call's S' tuples; ts is non-decreasing along X. X's rows with a valid key
(NULL and NaN keys never match) are sorted by key, stably, so each key's rows stay in arrival
order, which is ts order; a row's composite (rank of its key, rank of its ts among X's
distinct instants) is then non-decreasing, and each S tuple's partners are one range of that
order, found by two binary searches: [(k, first rank ≥ t − life + 1), (k, first rank > t)).
The pairs come out in (S row, X row) order; conjuncts reading both sides are evaluated on them
(only the columns they read are gathered), conjuncts reading one side filter its tuples first.

Output order within an instant is the stream–relation join's (stream_join.py), which is the
Rstream of the general join's: with S the first input, an instant's pairs whose X tuple arrived
before that instant come first, by (S row, X row), then those whose X tuple arrived at it, by
(X row, S row); with S second all are by (S row, X row). Only the instants holding a pair of
the second kind are re-sorted. Compat: nothing at the last input instant, like Rstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.types import DataType
from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.kernels import expand_pairs, filled, run_lengths, run_starts, stable_order
from cqlstream.engine.limits import reserve
from cqlstream.engine.operators.base import IdSource
from cqlstream.engine.operators.live_rows import LiveRows
from cqlstream.engine.operators.stream_join import StreamJoinOp, _distinct_sorted, _ranks
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Evaluator
    from cqlstream.engine.planner import EngineOptions


# X rows from which S is sorted by key before the binary searches: below, X's sorted keys stay in
# cache and scattered searches cost less than sorting S (Linear Road's accnot join: ~60 X rows
# against ~10k S tuples a call; the self-join: ~30k against ~25k)
SORTED_NEEDLES = 1 << 14
DIRECT_TS_SPAN = 1 << 31  # X's ts spans below which the band is found on ts − first ts, not ts ranks


class BandJoinOp(StreamJoinOp):
    """Evaluates a `StreamJoin` node with a band side: input `now` is S, the other the stream S'
    whose tuples are alive in X for `life` instants from their timestamp; `state` holds the S'
    tuples that can still be alive at a later instant (arrival order). `same`: both inputs are the
    same stream (Linear Road's `SegChangeStr`), so when the one-side conjuncts of both sides are
    equal the call's S tuples are X's new rows, and X's sort by key gives S's order too."""

    kind = "band join"

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        predicate: X.Expr | None,
        input_types: Sequence[Sequence[DataType]],
        ev: Evaluator,
        now: int,
        life: int,
        same: bool = False,
        compat: bool = False,
        options: EngineOptions | None = None,
    ) -> None:
        super().__init__(inputs, output, ids, predicate, input_types, ev, now, compat, options)
        assert life >= 1
        self.life = life
        self.same = same and self.local[0] == self.local[1]  # a self-join (class docstring)
        self.tuples: Batch = Batch.empty(self.input_types[self.rel])  # `state`: arrival order
        # the columns of S' the pairing reads (equi keys, two-side conjuncts): only these are
        # put together from the carried and the new tuples; the output takes the others from
        # each part for its pairs alone (LR's self-join: 2 of 15 columns, ~31k rows a call)
        sides = [e.ea if e.a == self.rel else e.eb for e in self.equi]
        lo = self.offsets[self.rel]
        self.x_need = frozenset(c for e in sides for c in X.columns(e)) | frozenset(
            c - lo for c in self.theta_cols if lo <= c < lo + self.widths[self.rel]
        )

    @property
    def state(self) -> Batch:
        """The S' tuples that can still be alive at a later instant (arrival order)."""
        return self.tuples

    def state_bytes(self) -> int:
        return self.tuples.nbytes()

    def _restore_rows(self, rows: Batch) -> None:
        self.tuples = rows
        self.held = LiveRows(self.input_types[self.rel])

    def complete_from(self, cf: float) -> float:
        """Exact once every tuple alive in X arrived after `cf`: what the window's own bound is."""
        return cf + self.life - 1

    def process(self, inputs: list[Batch], bound: int) -> Batch:
        s = self._filtered(self.now, inputs[self.now])
        xn = self._filtered(self.rel, inputs[self.rel])
        xs = self.tuples
        x = self._x_view(xs, xn)
        # what can be alive at the instant `bound` or later: τ + life > bound
        cut = int(x.ts.searchsorted(bound - self.life, side="right"))
        self.tuples = _kept(xs, xn, cut, self.input_types[self.rel])
        self.counters.extra["state_tuples"] = len(self.tuples)
        if not len(s) or not len(x) or not self._const_ok():
            return Batch.empty(self.out_types)
        own = len(x) - len(xn) if self.same and _same_rows(s, xn) else None
        # a self-join pairs every S tuple with itself; when the conjuncts reading both sides
        # reject every such pair (Linear Road's `I.Seg <> P.Seg`), they are never made
        skip = own is not None and self.theta_pred is not None and not self._self_pairs_pass(s)
        p, rows = self._band_pairs(s, x, own, skip)
        if self.theta_pred is not None and len(p):
            keep = self.ev.predicate(self.theta_pred, self._gather(s, x, p, rows, self.theta_cols))
            at = keep.nonzero()[0]  # (positions: numpy's mask indexing is ~5× slower at this size)
            p, rows = p.take(at), rows.take(at)
        if len(p) and self.compat and self._final(bound):
            keep = s.ts[p] < bound  # STREAM 0.6: no Rstream output at the last instant
            p, rows = p[keep], rows[keep]
        if not len(p):
            return Batch.empty(self.out_types)
        if self.now == 0:
            p, rows = _late_last(p, rows, s.ts, x.ts)
        reserve(self, len(p), [s, xn if len(xn) else xs])  # over a memory limit: stop here
        out = self._gather(s, x, p, rows, parts=(xs, xn))
        out.id = self.ids.take(len(p))
        return out

    def _x_view(self, xs: Batch, xn: Batch) -> Batch:
        """X = the carried tuples then the new ones, as the pairing reads it: ts and the columns
        in `x_need` put together, the other columns empty (never read: the output gathers them
        from the parts); sign and id are not needed."""
        if not len(xn) or not len(xs):
            return xn if len(xn) else xs
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        for c in range(self.widths[self.rel]):
            if c not in self.x_need:
                cols.append(xs.cols[c][:0])
                nulls.append(None)
                continue
            cols.append(np.concatenate([xs.cols[c], xn.cols[c]]))
            both = xs.nulls[c] is None and xn.nulls[c] is None
            nulls.append(None if both else np.concatenate([xs.null_mask(c), xn.null_mask(c)]))
        ts = np.concatenate([xs.ts, xn.ts])
        return Batch(cols, nulls, ts, np.zeros(0, np.int8), np.zeros(0, np.uint64))

    def _self_pairs_pass(self, s: Batch) -> bool:
        """Whether the conjuncts reading both sides hold for some S tuple paired with itself (a
        self-join: both sides of the joined row are the tuple's own columns; no gather)."""
        n = len(s)
        assert self.theta_pred is not None
        row = Batch(s.cols + s.cols, s.nulls + s.nulls, s.ts, np.ones(n, np.int8), np.zeros(n, np.uint64))
        return bool(self.ev.predicate(self.theta_pred, row).any())

    def _band_pairs(self, s: Batch, x: Batch, own: int | None, skip: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(S row, X row) of every S tuple at t with each X tuple of an equal valid key and
        t − life < τ ≤ t, in (S row, X row) order. `own`: S's tuples are X's rows from `own` on
        (a self-join: the same stream under the same one-side conjuncts on both sides); `skip`:
        leave out each S tuple's pair with itself (X row `own` + its row)."""
        xk, xv, sk, sv = self._keys(s, x)
        # a tuple's place in time: its ts − the first ts when X's ts span is small (no ranks
        # to compute), else the rank of its ts among X's distinct instants (`uts`)
        tmin, tmax = int(x.ts[0]), int(x.ts[-1])
        uts: np.ndarray | None = None
        if tmax - tmin < DIRECT_TS_SPAN and len(x) * (tmax - tmin + 2) < 2**62:
            nr = tmax - tmin + 2
            xrank = x.ts - tmin
        else:
            uts = _distinct_sorted(x.ts)
            nr = len(uts) + 1
            xrank = _ranks(x.ts, uts)
        valid = xv.nonzero()[0] if not xv.all() else None
        if valid is not None:
            xk, xrank = xk[valid], xrank[valid]
        order = stable_order(xk) if self.equi else np.arange(len(xk))  # (a packed sort: ~8× argsort)
        ks = xk[order]
        first = run_starts(ks)
        keys = ks.take(first.nonzero()[0])  # ~1 key in 5 rows: positions beat the mask
        krank = first.cumsum() - 1
        comp = krank * nr + xrank[order]
        # each S tuple's key rank, whether X holds its key at all, and its band in `comp`; over
        # a large X the searches run over S in (key, ts) order (binary searches for sorted
        # needles are ~3x faster than for scattered ones: each starts where the previous one
        # ended) and their results are put back in S's order
        if own is not None:  # S in (key, ts) order is X's order restricted to S's rows
            rows = order if valid is None else valid[order]
            mine = (rows >= own).nonzero()[0]  # (positions: numpy's mask indexing is ~8× slower)
            so, pos = rows.take(mine) - own, krank.take(mine)
            hit = filled(len(so), True, bool)
        else:
            so = sv.nonzero()[0]
            if self.equi and len(comp) >= SORTED_NEEDLES:
                so = so[stable_order(sk[so])]
            sks = sk[so]
            pos = keys.searchsorted(sks)
            hit = pos < len(keys)
            hin = hit.nonzero()[0]
            hit[hin] = keys[pos.take(hin)] == sks.take(hin)
            if not hit.all():  # only the S tuples whose key X holds search on
                at = hit.nonzero()[0]
                so, pos = so.take(at), pos.take(at)
        if uts is None:  # the band's ends as ts − tmin, kept inside [0, nr − 1] (X's span and one past)
            t = s.ts.take(so) - tmin
            lo_r = np.clip(t - (self.life - 1), 0, nr - 1)
            hi_r = np.clip(t + 1, 0, nr - 1)
        else:
            lo_r, hi_r = self._ts_bounds(s.ts, uts, so)
        base = pos.astype(np.int64) * nr
        lo = np.zeros(len(sk), np.int64)
        hi = np.zeros(len(sk), np.int64)
        if own is not None:  # the band ends at the row itself or later: step back from it
            lo[so] = _band_start(comp, base + lo_r, mine)
        else:
            lo[so] = comp.searchsorted(base + lo_r)
        if own is not None:  # an S row's band ends where the run of its own (key, ts) ends
            starts = run_starts(comp)
            ends = np.append(starts.nonzero()[0][1:], len(comp))
            hi[so] = ends[(starts.cumsum() - 1).take(mine)]
        else:
            hi[so] = comp.searchsorted(base + hi_r)
        counts = hi - lo  # (0 for the S tuples left out)
        self.counters.extra["candidate_pairs"] += int(counts.sum())
        if skip:  # a self-join (own is set): each S tuple's band holds itself, at `mine` in `order`
            p, at = _pairs_but_self(so, mine, lo, counts)
            return p, (order.take(at) if valid is None else valid[order.take(at)])
        if 4 * len(so) < len(s):  # few S tuples search: expand only theirs, in S's order
            sel = np.sort(so)
            p, rows = expand_pairs(sel, order, lo.take(sel), counts.take(sel))
        else:
            p, rows = expand_pairs(np.arange(len(s)), order, lo, counts)
        return p, (rows if valid is None else valid[rows])

    def _ts_bounds(self, ts: np.ndarray, uts: np.ndarray, so: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per S tuple `so` at t, the ranks in `uts` (X's distinct instants) of its band: the
        first at or after t − life + 1, and the first after t. Looked up per distinct instant of
        S, or per tuple when only a few of S's tuples search."""
        if 4 * len(so) < len(ts):
            t = ts.take(so)
            return uts.searchsorted(t - (self.life - 1), side="left"), uts.searchsorted(t, side="right")
        firsts = run_starts(ts).nonzero()[0]
        sizes = run_lengths(firsts, len(ts))
        t = ts[firsts]
        lo = uts.searchsorted(t - (self.life - 1), side="left")
        hi = uts.searchsorted(t, side="right")
        return lo.repeat(sizes).take(so), hi.repeat(sizes).take(so)


def _kept(xs: Batch, xn: Batch, cut: int, types: Sequence[DataType]) -> Batch:
    """The X tuples from position `cut` of (carried `xs`, then new `xn`) on: the state a call
    keeps, as copies of just those rows (never views keeping a whole input batch alive)."""
    ns = len(xs)
    if cut >= ns:
        return xn.copy_range(cut - ns, len(xn)) if cut > ns else xn
    if not len(xn):
        return xs.copy_range(cut, ns) if cut else xs
    return concat([xs.slice(cut, ns), xn], types)  # (concat copies)


def _band_start(comp: np.ndarray, needle: np.ndarray, at: np.ndarray) -> np.ndarray:
    """np.searchsorted(comp, needle) where comp[at] ≥ needle (the S tuple's own row in a
    self-join): the answer is `at` unless the row before it is in the band too, which one gather
    checks; only those rows (a vehicle's earlier reports in the window) search."""
    prev = comp.take(np.maximum(at - 1, 0))
    back = ((prev >= needle) & (at > 0)).nonzero()[0]
    if not len(back):
        return at
    got = at.copy()
    got[back] = comp.searchsorted(needle.take(back))
    return got


def _pairs_but_self(
    so: np.ndarray, mine: np.ndarray, lo: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(S row, position in the key order) of every pair of a self-join's bands but each S row's
    pair with itself: S row so[i] has its band [lo, lo + counts) and itself at mine[i]; the band
    is expanded with that one position skipped, in (S row, position) order."""
    cnt = np.zeros(len(counts), np.int64)
    cnt[so] = counts.take(so) - 1
    me = np.zeros(len(counts), np.int64)
    me[so] = mine
    p = (cnt > 0).nonzero()[0]
    if not len(p):
        return p, p
    c = cnt.take(p)
    first = c.cumsum()
    first -= c
    pos = (lo.take(p) - first).repeat(c)
    pos += np.arange(int(first[-1] + c[-1]))
    pos += pos >= (me.take(p)).repeat(c)  # past the row itself
    return p.repeat(c), pos


def _late_last(p: np.ndarray, rows: np.ndarray, s_ts: np.ndarray, x_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """With S first: within each instant, the pairs whose X tuple arrived at that instant go
    after the others, by (X row, S row); the others keep their (S row, X row) order. Pairs are
    in instant order, so only the instants holding such a pair are re-sorted, in place."""
    t = s_ts[p]
    late = x_ts[rows] == t
    if not late.any():
        return p, rows
    # (the instants holding a late pair by a sort, not np.unique, whose first call imports numpy.ma)
    lt = np.sort(t[late])
    touched = np.isin(t, _distinct_sorted(lt))
    idx = touched.nonzero()[0]
    sp, sr, sl = p[idx], rows[idx], late[idx]
    major = np.where(sl, sr, sp)
    minor = np.where(sl, sp, sr)
    o = np.lexsort((minor, major, sl, t[idx]))
    p, rows = p.copy(), rows.copy()
    p[idx], rows[idx] = sp[o], sr[o]
    return p, rows


def _same_rows(s: Batch, xn: Batch) -> bool:
    """Whether the two inputs' tuples of a call are the same elements (checked, not assumed: the
    plan says both read one stream)."""
    return len(s) == len(xn) and (s.id is xn.id or bool((s.id == xn.id).all()))
