"""N-ary join of relations (MJoin, thesis §1 / Table 2.1; seed 002): exact bilinear deltas, vectorized.

Semantics of one call. All input events of the call are put in one global order: by ts, then input
index, then arrival (`seq` = position in that order). An event e of input i with sign s joins with
the instances of every other input that are *alive* at e's position (inserted before e, not yet
deleted before e, counting state carried from earlier calls) and emits s·(e ⋈ partners) at ts(e).
Summed over an instant these deltas telescope to J(t) − J(t−1) whatever order is used inside the
instant, so the result never depends on how input was split into calls.

Instances. Per input, a call works on a *table*: the carried state rows (alive at the start of the
call, seq −1) followed by the call's events. Deletes are matched to inserts by id (the k-th delete
of an id retracts the k-th insert of that id, in seq order), giving every instance an interval
(lo, hi) of seqs: alive at seq s iff lo < s < hi (hi = INF if it survives the call). A delete
ordered before its own insert (both inside one instant) makes an empty instance: dropped.

Probing. Input i's events probe the other inputs in `probe_orders[i]` (data; an adaptive component
may change it between calls). Each step uses the equi conjuncts linking the probed input j to the
inputs bound so far as a sort index over j's instances: keys are factorized to int64 codes, the
instances sorted by (key, lo, hi) and split into *chains* in which hi is also non-decreasing (one
greedy vectorized pass per chain; FIFO lifetimes — Range/Rows/Now windows, surviving instances —
need one or two). In a chain the instances alive at s with key k are one contiguous range found by
two np.searchsorted calls on (rank(k)·M + seq) composites. Instances left over after a couple of
chain rounds (lifetimes in no useful order, e.g. arbitrary relation deletes) go to a dyadic
(segment-tree) index: each alive range is cut into ≤ 2 aligned blocks per level, and a probe
looks up its block on every level. Either way candidate pairs are exactly the matches, and the
cost does not grow with the number of instants in the batch. A few probes against many instances
(a [Now] window against a relation updated every instant) skip the index: `scan_pairs` pairs them
with the instances of their keys and keeps the alive ones; in a binary join over stored relations
the carried state is first narrowed to the rows those probes can meet (state_prefilter.py). Other conjuncts are evaluated on the partial concatenated rows as
soon as their inputs are bound; conjuncts reading one input filter that input's events up front
(a tuple failing them never joins); NULL keys never match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.nodes import Plan
from cqlstream.cql.types import DataType
from cqlstream.engine import knobs as K
from cqlstream.engine.adaptive.cache_config import CACHING_KNOBS
from cqlstream.engine.adaptive.config import MJOIN_KNOBS, AdaptiveConfig
from cqlstream.engine.batch import Batch, BlankedBatch, combine_ids, concat, empty_column, placeholder
from cqlstream.engine.errors import KnobError
from cqlstream.engine.kernels import expand, expand_pairs, factorize_objects, filled, joint_dense, stable_order
from cqlstream.engine.limits import reserve
from cqlstream.engine.operators import tiny_pairs as TP
from cqlstream.engine.operators.base import BuildContext, IdSource, Operator, held_state
from cqlstream.engine.operators.join_summary import JOIN_SUMMARIES, ReservoirJoin, private_state, stores_empty
from cqlstream.engine.operators.state_prefilter import narrow_state, should_narrow
from cqlstream.engine.operators.summary_mode import DEFAULT_BYTES, SUMMARY_KNOBS, summary_line
from cqlstream.engine.operators.tiny_pairs import Pairing, tiny_pairs
from cqlstream.engine.queues import Queue

if TYPE_CHECKING:
    from cqlstream.engine.exprs import Col, Evaluator
    from cqlstream.engine.joinorder.ordering import JoinOrdering
    from cqlstream.engine.planner import EngineOptions
    from cqlstream.engine.synopses import Synopsis

INF = np.iinfo(np.int64).max
MAX_CHAIN_ROUNDS = 2  # chain passes before the remaining instances go to the dyadic index
OFFSET_SPAN = 1 << 40  # key spans combined as value − min (combine_keys), above which codes are made dense
SCAN_RATIO = 16  # probes × this < instances: pair them by a scan (scan_pairs), not an index (tests lower it)

Keyed = tuple[np.ndarray, np.ndarray]  # (int64 key codes, valid mask) per row
# one input's probe results: (the probing input, row indexes per input, seq of the probing event)
Probed = tuple[int, dict[int, np.ndarray], np.ndarray]


# ------------------------------------------------------------------ conjunct analysis


def input_layout(input_types: Sequence[Sequence[DataType]]) -> tuple[list[int], list[int]]:
    widths = [len(t) for t in input_types]
    offsets = list(np.cumsum([0] + widths[:-1]))
    return [int(o) for o in offsets], widths


def owners(e: X.Expr, offsets: Sequence[int], widths: Sequence[int]) -> frozenset[int]:
    """Indexes of the inputs whose columns `e` reads."""
    return frozenset(k for c in X.columns(e) for k, (o, w) in enumerate(zip(offsets, widths)) if o <= c < o + w)


class Equi:
    """An equality conjunct whose sides each read exactly one (different) input."""

    def __init__(self, cid: int, a: int, ea: X.Expr, b: int, eb: X.Expr) -> None:
        self.cid, self.a, self.ea, self.b, self.eb = cid, a, ea, b, eb

    def other(self, k: int) -> int:
        return self.b if k == self.a else self.a


def as_equi(cid: int, c: X.Expr, offsets: Sequence[int], widths: Sequence[int]) -> Equi | None:
    if not (isinstance(c, X.Op) and c.op == "=" and len(c.args) == 2):
        return None
    oa, ob = owners(c.args[0], offsets, widths), owners(c.args[1], offsets, widths)
    if len(oa) != 1 or len(ob) != 1 or oa == ob:
        return None
    a, b = next(iter(oa)), next(iter(ob))
    return Equi(cid, a, X.shift(c.args[0], -offsets[a]), b, X.shift(c.args[1], -offsets[b]))


def classify(
    predicate: X.Expr | None, offsets: Sequence[int], widths: Sequence[int]
) -> tuple[list[Equi], list[X.Expr], list[list[X.Expr]], list[tuple[X.Expr, frozenset[int]]]]:
    """Split a join predicate into equi conjuncts (key lookups), constant ones, conjuncts reading
    one input (shifted to that input's columns), and the rest (with the inputs they read)."""
    equi: list[Equi] = []
    const: list[X.Expr] = []
    local: list[list[X.Expr]] = [[] for _ in widths]
    theta: list[tuple[X.Expr, frozenset[int]]] = []
    for cid, c in enumerate(X.conjuncts(predicate)):
        own = owners(c, offsets, widths)
        eq = as_equi(cid, c, offsets, widths)
        if eq is not None:
            equi.append(eq)
        elif not own:
            const.append(c)
        elif len(own) == 1:
            k = next(iter(own))
            local[k].append(X.shift(c, -offsets[k]))
        else:
            theta.append((c, own))
    return equi, const, local, theta


# ------------------------------------------------------------------ per-call tables of instances


class Table:
    """One input during one call: carried state rows, then the call's events.

    `seq` per row (−1 for state rows), `ev` the live event rows, `inst`/`lo`/`hi` the instances (rows
    with their alive interval), `survivors` the rows alive at the end of the call (= the
    instances with hi = INF, in row order), `retracted` the insert rows a delete of the call
    retracts (those that do not survive).
    """

    def __init__(self, state: Batch, events: Batch, ev_seq: np.ndarray, types: Sequence[DataType]) -> None:
        self.b = concat([state, events], types) if len(events) else state
        self._instances(self.b.id, len(state), events.sign, ev_seq)

    @classmethod
    def of_ids(cls, state_ids: np.ndarray, events: Batch, ev_seq: np.ndarray) -> Table:
        """The instances of carried rows known by their ids alone (their columns are kept
        elsewhere: the stream join's LiveRows) and the call's events; `b` is not set."""
        t = cls.__new__(cls)
        ids = np.concatenate([state_ids, events.id]) if len(events) else state_ids
        t._instances(ids, len(state_ids), events.sign, ev_seq)
        return t

    def _instances(self, ids: np.ndarray, ns: int, ev_sign: np.ndarray, ev_seq: np.ndarray) -> None:
        """Rows: `ns` carried ones (inserts), then events with signs `ev_sign` at `ev_seq`."""
        self.n_state = ns
        n = len(ids)
        self.seq = seq = np.empty(n, np.int64)
        seq[:ns] = -1
        seq[ns:] = ev_seq
        self.unmatched_deletes = 0
        ev_ins = ev_sign > 0
        if ev_ins.all():
            # no deletes (state rows are all inserts): every row is an instance alive from its seq
            # through the call, and every event acts — the general path's result in a few calls
            # (most calls of Linear Road's joins carry a few events against a larger state)
            self.inst = self.survivors = np.arange(n)
            self.lo = seq
            self.hi = filled(n, INF, np.int64)
            self.ev = self.inst[ns:]
            self.retracted = self.inst[:0]
            return
        dead = np.zeros(n, bool)
        is_ins = filled(n, True, bool)
        is_ins[ns:] = ev_ins
        ins = is_ins.nonzero()[0]
        dels = (~is_ins).nonzero()[0]
        lo = self.seq[ins]
        hi = filled(len(ins), INF, np.int64)
        keep = filled(len(ins), True, bool)
        self.retracted = ins[:0]
        if len(dels):
            x, dels_o = self._match(ids, ins, dels)  # index into `ins`, matched delete rows
            self.retracted = ins.take(x)
            d = self.seq[dels_o]
            hi[x] = d
            empty = d <= lo[x]
            if empty.any():
                keep[x[empty]] = False
                # a delete ordered before its own insert (one instant): an empty instance, and
                # both events cancel exactly (nothing of another input lies between them): drop
                dead[ins[x[empty]]] = True
                dead[dels_o[empty]] = True
        self.inst = ins[keep]
        self.lo = lo[keep]
        self.hi = hi[keep]
        self.survivors = self.inst[self.hi == INF]
        self.ev = (~dead[ns:]).nonzero()[0] + ns  # the event rows that act (probe, count)

    def _match(self, ids: np.ndarray, ins: np.ndarray, dels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in `ins` of the insert each matched delete retracts, the matched delete rows):
        the k-th delete of an id retracts the k-th insert of it (both in row = seq order).
        Unmatched deletes are counted in `unmatched_deletes`.

        Windows retract in insertion order (FIFO): then the deletes' ids are exactly those of the
        first inserts, in the same order, and the k-th delete retracts the k-th insert — one
        comparison pass instead of a binary search per delete (the Range windows of the
        stream–relation joins: ~30k deletes per call)."""
        iid = ids[ins]
        did = ids[dels]
        nd = len(did)
        if nd <= len(iid) and bool((iid[:nd] == did).all()):
            return np.arange(nd), dels
        # rows are in seq order, so a stable sort by id sorts by (id, seq)
        # (ids usually arrive in increasing order: then no sort is needed, io/do = identity)
        io = None if is_sorted(iid) else iid.argsort(kind="stable")
        if io is not None:
            iid = iid[io]
        do = None if is_sorted(did) else did.argsort(kind="stable")
        dels_o = dels if do is None else dels[do]
        if do is not None:
            did = did[do]
        pos = iid.searchsorted(did, side="left")
        if len(did) > 1 and not bool((did[1:] != did[:-1]).all()):
            pos += np.arange(len(did)) - did.searchsorted(did, side="left")
        ok = pos < len(iid)
        ok[ok] = iid[pos[ok]] == did[ok]
        n_ok = int(ok.sum())
        self.unmatched_deletes = len(ok) - n_ok
        if n_ok < len(ok):
            pos, dels_o = pos[ok], dels_o[ok]
        return (pos if io is None else io[pos]), dels_o


# ------------------------------------------------------------------ keys


def key_codes(parts: list[Col]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Joint int64 codes for value arrays [(values, nulls)]: equal values ↔ equal codes.

    Returns per part (codes, valid, null): valid excludes NULL and NaN (NaN = x is false, not
    unknown, so it is not `null`)."""
    kinds = {v.dtype.kind for v, _ in parts}
    out_codes: list[np.ndarray] = []
    nan: Sequence[np.ndarray | None]
    if kinds <= {"i", "u", "b"}:
        out_codes = [v.astype(np.int64, copy=False) for v, _ in parts]
        nan = [None] * len(parts)
    elif kinds <= {"i", "u", "b", "f"}:
        fl = [v.astype(np.float64) + 0.0 for v, _ in parts]  # −0.0 → 0.0
        isnan = [np.isnan(f) for f in fl]
        nan = isnan
        out_codes = [np.where(m, 0.0, f).view(np.int64) for f, m in zip(fl, isnan)]
    else:
        allv = np.concatenate([np.asarray(v, dtype=object) for v, _ in parts]) if parts else np.zeros(0, object)
        codes = factorize_objects(allv)
        cuts = np.cumsum([len(v) for v, _ in parts])[:-1]
        out_codes = np.split(codes, cuts)
        nan = [None] * len(parts)
    res = []
    for (v, m), c, bad in zip(parts, out_codes, nan):
        null = np.zeros(len(v), bool) if m is None else m
        res.append((c, ~(null if bad is None else (null | bad)), null))
    return res


def combine_keys(inst_parts: list[Keyed], probe_parts: list[Keyed]) -> tuple[Keyed, Keyed]:
    """Combine per-conjunct codes [(codes, valid)] of both sides into one int64 key per side."""
    if len(inst_parts) == 1:
        return inst_parts[0], probe_parts[0]
    ik = np.zeros(len(inst_parts[0][0]), np.int64)
    pk = np.zeros(len(probe_parts[0][0]), np.int64)
    iv = filled(len(ik), True, bool)
    pv = filled(len(pk), True, bool)
    size = 1
    for (ic, ivc), (pc, pvc) in zip(inst_parts, probe_parts):
        (di, dp), n = _offset_codes(ic, pc, size)
        if size * n >= 2**62:
            (ik, pk), size = joint_dense(ik, pk)
        ik, pk, size = ik * n + di, pk * n + dp, size * n
        iv &= ivc
        pv &= pvc
    return (ik, iv), (pk, pv)


def _offset_codes(ic: np.ndarray, pc: np.ndarray, size: int) -> tuple[list[np.ndarray], int]:
    """Joint codes of one conjunct's two sides for combining (equal values ↔ equal codes, in
    value order like `joint_dense`, so every order built on them is the same): value − min when
    the values' span times `size` still fits, which needs no sort (Linear Road's vehicle ids,
    segments, minutes); else `joint_dense`."""
    if len(ic) and len(pc):
        lo = min(int(ic.min()), int(pc.min()))
        span = max(int(ic.max()), int(pc.max())) - lo + 1
        if span <= OFFSET_SPAN and size * span < 2**62:
            return [ic - lo, pc - lo], span
    return joint_dense(ic, pc)


# ------------------------------------------------------------------ the stabbing index


def is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


class StabIndex:
    """Instances (rows, key, lo, hi) answering: which are alive at seq s with key k (lo < s < hi).

    `m` > every seq + 2, so (rank(key)·m + seq + 1) composites sort by key then seq.
    """

    def __init__(
        self, rows: np.ndarray, key: np.ndarray, lo: np.ndarray, hi: np.ndarray, m: int, mode: str = "chains"
    ) -> None:
        """`mode`: "chains" (FIFO lifetimes found by binary search, the rest in the dyadic index)
        or "dyadic" (everything in the dyadic index): a synopsis-structure choice that never
        changes results (STREAM let power users pick a join's synopsis type the same way)."""
        self.m = m
        if len(lo) > 1 and bool((lo[1:] >= lo[:-1]).all()):
            # the usual case (rows in table order): a stable sort by key gives (key, lo) order;
            # ties of lo are carried rows only, their hi order just makes fewer chains
            order = stable_order(key)
        else:
            order = np.lexsort((hi, lo, key))
        rows, key, lo, hi = rows[order], key[order], lo[order], hi[order]
        n = len(rows)
        if n:
            new = np.empty(n, bool)
            new[0] = True
            np.not_equal(key[1:], key[:-1], out=new[1:])
            rank = new.cumsum() - 1
            self.uniq = key[new]
        else:
            rank = np.zeros(0, np.int64)
            self.uniq = np.zeros(0, np.int64)
        base = rank * m
        c_lo = base + lo + 1
        c_hi = base + np.minimum(hi, m - 3) + 1
        self.chains: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, c_lo, c_hi)
        if mode == "dyadic":
            rest = np.arange(n)
        elif is_sorted(c_hi):
            # lifetimes in FIFO order per key (windows; survivors sort last): one chain holds all
            self.chains.append((rows, c_lo, c_hi))
            rest = np.zeros(0, np.int64)
        else:
            alive_end = hi == INF
            if alive_end.any():
                self.chains.append((rows[alive_end], c_lo[alive_end], c_hi[alive_end]))
            rest = (~alive_end).nonzero()[0]
        for _ in range(MAX_CHAIN_ROUNDS if mode == "chains" else 0):
            if not len(rest):
                break
            ch = c_hi[rest]
            prev = np.maximum.accumulate(ch)
            rec = np.empty(len(ch), bool)
            rec[0] = True
            rec[1:] = ch[1:] >= prev[:-1]
            take = rest[rec]
            self.chains.append((rows[take], c_lo[take], c_hi[take]))
            rest = rest[~rec]
        # every probe seq is < m − 2, so capping hi there keeps "alive at s" and keeps the blocks
        # of surviving instances (hi = INF) inside their key's composite range
        self.levels = _dyadic(rows[rest], rank[rest], lo[rest], np.minimum(hi[rest], m - 2), m)
        self.examined = 0  # candidate pairs produced by probes

    def probe(self, key: np.ndarray, valid: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (probe position, instance row) with equal key and the instance alive at seq."""
        u = self.uniq
        if not len(u) or not len(key):
            z = np.zeros(0, np.int64)
            return z, z
        m = self.m
        if len(key) > 64:
            # binary searches run much faster on sorted needles (cache locality, numpy reuses
            # bounds): the valid probes in (key, seq, position) order, by one packed sort
            p = valid.nonzero()[0]
            if 256 * len(u) < len(p):  # very few indexed keys: drop the probes missing them before sorting
                p = p[_member(key[p], u)]
            if len(p):
                kv = key[p]
                kmin, kmax = int(kv.min()), int(kv.max())
                span = (kmax - kmin + 1) * m
                if span.bit_length() + (len(p) - 1).bit_length() <= 62:
                    comp = (kv - np.int64(kmin)) * m
                    comp += seq[p]
                    p = p[stable_order(comp, 0, span)]
                    skey = key[p]
                    r = u.searchsorted(skey)
                    rc = np.minimum(r, len(u) - 1)
                    found = u[rc] == skey
                    if not found.all():
                        p, r = p[found], r[found]
                    target = r * m + seq[p] + 1
                    return self._stab(p, target)
        # binary searches run much faster on sorted needles (cache locality, numpy reuses bounds)
        by_key = key.argsort(kind="stable") if len(key) > 64 else None
        skey = key if by_key is None else key[by_key]
        r = u.searchsorted(skey)
        rc = np.minimum(r, len(u) - 1)
        found = (valid if by_key is None else valid[by_key]) & (u[rc] == skey)
        p = found.nonzero()[0]
        target = r[p] * self.m + (seq if by_key is None else seq[by_key])[p] + 1
        if by_key is not None:
            o = target.argsort(kind="stable")
            p, target = by_key[p[o]], target[o]
        return self._stab(p, target)

    def _stab(self, p: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ps: list[np.ndarray] = []
        rs: list[np.ndarray] = []
        for rows, c_lo, c_hi in self.chains:
            start = c_hi.searchsorted(target, side="right")
            end = c_lo.searchsorted(target, side="left")
            pp, rr = expand_pairs(p, rows, start, end - start)
            self.examined += len(pp)
            ps.append(pp)
            rs.append(rr)
        if self.levels:
            r = (target - 1) // self.m  # rank of each probe (aligned with p)
            seq_p = target - 1 - r * self.m
        for level, rows, comp in self.levels:
            t = r * self.m + (seq_p >> level)
            start = comp.searchsorted(t, side="left")
            end = comp.searchsorted(t, side="right")
            rep, pos = expand(start, end - start)
            self.examined += len(pos)
            ps.append(p[rep])
            rs.append(rows[pos])
        if len(ps) <= 1:
            return (ps[0], rs[0]) if ps else (p[:0], p[:0])
        return np.concatenate(ps), np.concatenate(rs)


def _member(x: np.ndarray, sorted_u: np.ndarray) -> np.ndarray:
    """Mask of the values of `x` found in the sorted distinct values `sorted_u`."""
    if not len(sorted_u):
        return np.zeros(len(x), bool)
    r = sorted_u.searchsorted(x)
    np.minimum(r, len(sorted_u) - 1, out=r)
    return sorted_u[r] == x


def scan_pairs(q: Pairing, total: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Pairs (probe position, instance position) with equal valid keys and the instance alive at
    the probe's seq (lo < seq < hi), found without an index: the instances whose key some probe
    has are grouped by key and every probe meets its key's group. Linear in the instances plus
    the pairs examined; None when that would examine more than a few times the instances (then
    an index is cheaper; `total`: the instances to weigh that against, when `ikey` holds only
    those a probe can meet). Pairs come in (key, seq) order of the probes, then instance order."""
    pkey, pvalid, seq, ikey, ivalid, lo, hi = q
    p = pvalid.nonzero()[0]
    if not len(p) or not len(ikey):
        z = np.zeros(0, np.int64)
        return z, z
    pk = pkey[p]
    p = p[np.lexsort((seq[p], pk))]
    pk = pkey[p]
    distinct = pk[np.concatenate(([True], pk[1:] != pk[:-1]))]  # pk is sorted: no np.unique pass
    cand = (ivalid & _member(ikey, distinct)).nonzero()[0]
    ck = ikey[cand]
    o = stable_order(ck)
    cand, ck = cand[o], ck[o]
    start = ck.searchsorted(pk, side="left")
    cnt = ck.searchsorted(pk, side="right") - start
    if int(cnt.sum()) > 4 * (len(ikey) if total is None else total) + 1024:
        return None
    pp, at = expand_pairs(p, cand, start, cnt)
    s = seq[pp]
    alive = (lo[at] < s) & (s < hi[at])
    return pp[alive], at[alive]


def _tiny_scan(q: Pairing, total: int) -> tuple[np.ndarray, np.ndarray] | None:
    """`scan_pairs`' result (the same pairs in the same order: probes by (key, seq, position),
    then instance order) for a few probes, by `tiny_pairs`; None where the scan declines."""
    order = np.lexsort((q.seq, q.pkey)) if len(q.seq) > 1 else None
    p, at, matched = tiny_pairs(q, order)
    if matched > 4 * total + 1024:  # (the scan's own limit)
        return None
    return p, at


def _dyadic(
    rows: np.ndarray, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray, m: int
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Interval stabbing for lifetimes in no useful order: each alive range [lo+1, hi) of seqs is
    cut into its canonical dyadic blocks (≤ 2 per level, as in a bottom-up segment tree); a probe
    at seq s looks up block s >> L on every level L, and every instance found is alive at s.
    Returns [(level, rows, composites rank·m + block)] sorted by composite."""
    l, r = lo + 1, hi.copy()
    idx = np.arange(len(rows))
    go = l < r  # (an instance deleted right after its insert is alive at no other seq)
    idx, l, r = idx[go], l[go], r[go]
    out: list[tuple[int, np.ndarray, np.ndarray]] = []
    level = 0
    while len(idx):
        parts_i: list[np.ndarray] = []
        parts_n: list[np.ndarray] = []
        odd = (l & 1) == 1
        parts_i.append(idx[odd])
        parts_n.append(l[odd])
        l = l + odd
        odd = (r & 1) == 1
        r = r - odd
        parts_i.append(idx[odd])
        parts_n.append(r[odd])
        sel = np.concatenate(parts_i)
        if len(sel):
            comp = rank[sel] * m + np.concatenate(parts_n)
            o = comp.argsort(kind="stable")
            out.append((level, rows[sel[o]], comp[o]))
        l, r = l >> 1, r >> 1
        go = l < r
        idx, l, r = idx[go], l[go], r[go]
        level += 1
    return out


def global_seqs(batches: Sequence[Batch]) -> tuple[list[np.ndarray], int]:
    """Positions of every event in the (ts, input index, arrival) order of the call."""
    ts = np.concatenate([b.ts for b in batches])
    order = ts.argsort(kind="stable")
    seq = np.empty(len(ts), np.int64)
    seq[order] = np.arange(len(ts))
    parts, at = [], 0
    for b in batches:  # (slices, not np.split: its Python wrapper costs ~10 µs a call)
        parts.append(seq[at : at + len(b)])
        at += len(b)
    return parts, len(ts)


def gather_batch(
    width: int,
    needed: Iterable[int],
    offsets: Sequence[int],
    widths: Sequence[int],
    tables: Sequence[Table],
    idx: dict[int, np.ndarray],
    ts: np.ndarray,
) -> Batch:
    """A Batch over the concatenated columns with only `needed` (global indexes) filled in."""
    cols: list[Any] = [None] * width  # columns not needed stay None (the predicate reads none of them)
    nulls: list[np.ndarray | None] = [None] * width
    for c in needed:
        k = next(k for k, (o, w) in enumerate(zip(offsets, widths)) if o <= c < o + w)
        b, r = tables[k].b, idx[k]
        cols[c] = b.cols[c - offsets[k]][r]
        m = b.nulls[c - offsets[k]]
        nulls[c] = None if m is None else m[r]
    n = len(ts)
    return Batch(cols, nulls, ts, np.ones(n, np.int8), np.zeros(n, np.uint64))


# ------------------------------------------------------------------ column elimination


def _narrow(b: Batch, cols: Sequence[int]) -> Batch:
    """`b` with only the columns `cols`, in that order (the arrays are shared, not copied)."""
    return b.with_columns([b.cols[c] for c in cols], [b.nulls[c] for c in cols])


def renumber(e: X.Expr, at: dict[int, int]) -> X.Expr:
    """`e` with column c read at position at[c] (a column it reads that is not in `at` is a bug
    of the caller: the kept columns must hold every column a conjunct reads)."""
    return X.remap(e, lambda c: replace(c, index=at[c.index]))


# ------------------------------------------------------------------ the operator


def _set_probe_orders(op: JoinOp, value: object) -> None:
    n = op.n
    if not (
        isinstance(value, list)
        and len(value) == n
        and all(isinstance(o, list) and sorted(o) == [j for j in range(n) if j != i] for i, o in enumerate(value))
    ):
        raise KnobError(f"probe_orders must list, for each of the {n} inputs, a permutation of the others")
    op.probe_orders = [list(o) for o in value]  # results do not depend on it (module docstring)


def _set_join_order(op: JoinOp, value: object) -> None:
    from cqlstream.engine.joinorder import ordering as JO

    if value not in JO.MODES or op.ordering is None:
        raise KnobError(f"a join's join_order is one of {', '.join(JO.MODES)}, not {value!r}")
    op.join_order = str(value)
    op.probe_orders = [list(o) for o in (op.ordering.default if value == "fixed" else op.ordering.orders)]


def _set_index(op: JoinOp, value: object) -> None:
    if not isinstance(value, str) or value not in ("chains", "dyadic"):
        raise KnobError(f"a join's index is 'chains' or 'dyadic', not {value!r}")
    op.index_mode = value


JOIN_KNOBS = (
    K.Knob("probe_orders", lambda op: [list(o) for o in op.probe_orders], _set_probe_orders),
    K.Knob("index", lambda op: op.index_mode, _set_index),
    K.Knob("join_order", lambda op: op.join_order, _set_join_order),
)


class JoinOp(Operator):
    kind = "join"
    KNOBS = (*Operator.KNOBS, *JOIN_KNOBS, *MJOIN_KNOBS, *SUMMARY_KNOBS, *CACHING_KNOBS)
    reads_input_stores = True

    def __init__(
        self,
        inputs: list[Queue],
        output: Queue,
        ids: IdSource,
        predicate: X.Expr | None,
        input_types: Sequence[Sequence[DataType]],
        evaluator: Evaluator,
        options: EngineOptions | None = None,
        stores: list[Synopsis] | None = None,
    ) -> None:
        """`stores`: one shared engine.synopses.RelationStore per input, read instead of a private
        copy of that input's state (None: private state)."""
        super().__init__(inputs, output, ids, options)
        self.ev = evaluator
        self.stores = stores
        for st in stores or ():
            st.users.append(self)
        self.input_types = [list(t) for t in input_types]
        self.full_types = self.input_types  # the inputs' whole rows (input_types: the columns state keeps)
        self.kept: list[tuple[int, ...]] | None = None  # columns of each input state keeps (None: all)
        self.n = len(self.input_types)
        self.out_types = [t for ts in self.input_types for t in ts]
        self.offsets, self.widths = input_layout(self.input_types)
        self.width = sum(self.widths)
        self.predicate = predicate
        self.equi, self.const, self.local, self.theta = classify(predicate, self.offsets, self.widths)
        self.state: list[Batch] = [Batch.empty(t) for t in self.input_types]
        self.probe_orders: list[list[int]] = [self.default_order(i) for i in range(self.n)]
        self.index_mode = "chains"  # knob: "chains" | "dyadic" (StabIndex)
        self.kmon: Any = None  # k-constraint state reduction of a 2-way join (engine/kconstraints), or None
        self.join_order = "cost"  # knob: fixed | cost | rates (engine/joinorder/ordering.py)
        self.ordering: JoinOrdering | None = None  # set by from_node
        self.counters.extra.update(state_tuples=0, candidate_pairs=0, unmatched_deletes=0)
        # the adaptive machinery loads with the first join (a run without joins never needs it)
        from cqlstream.engine.adaptive.caching import ACaching
        from cqlstream.engine.adaptive.mjoin import AdaptiveProbes

        # A-Greedy over each pipeline's probe order (engine/adaptive/mjoin.py)
        self.adaptive = AdaptiveProbes(self, options.adaptive if options else AdaptiveConfig())
        # A-Caching: subresult caches on the pipelines (engine/adaptive/caching.py)
        self.caching = ACaching(self, (options.adaptive if options else AdaptiveConfig()).caching)
        self.summary, self.summary_bytes = "exact", DEFAULT_BYTES  # reservoir mode: join_summary.py
        self.sampler: ReservoirJoin | None = None
        self._released: list[object] = []

    # -------------------------------------------------------------- column elimination (seed 000 §3.3.2)
    def keep_columns(self, kept: Sequence[Iterable[int]] | None) -> None:
        """Private state keeps only the columns `kept[k]` of input k (k-Mon's column elimination):
        events are narrowed as they come in, after the input's own selections (which read the whole
        row), the equalities and residual conjuncts are rewritten onto the narrowed layout, and
        output rows carry NULL in the columns not kept, which nothing above reads
        (engine/column_reads.py). `kept` must hold every column a conjunct of another input reads;
        None keeps every column. Rows already in state lose the columns no longer kept, and must
        have every column newly kept (call it while the state is empty to widen)."""
        full = self.full_types
        keep = [tuple(range(len(t))) for t in full] if kept is None else [tuple(sorted(set(k))) for k in kept]
        old = self.kept or [tuple(range(len(t))) for t in full]
        self.state = [
            _narrow(s, [o.index(c) for c in k]) if len(s) else Batch.empty([t[c] for c in k])
            for s, o, k, t in zip(self.state, old, keep, full)
        ]
        self.kept = None if all(len(k) == len(t) for k, t in zip(keep, full)) else keep
        self.input_types = [[t[c] for c in k] for t, k in zip(full, keep)]
        self.offsets, self.widths = input_layout(self.input_types)
        self.width = sum(self.widths)
        f_off, f_w = input_layout(full)
        self.offsets_full = f_off
        equi, self.const, self.local, theta = classify(self.predicate, f_off, f_w)
        at = [{c: i for i, c in enumerate(k)} for k in keep]
        glob = {f_off[x] + c: self.offsets[x] + i for x, k in enumerate(keep) for i, c in enumerate(k)}
        by_cid = {e.cid: e for e in equi}
        for e in self.equi:  # in place: the adaptive pipelines hold these objects
            e.ea, e.eb = renumber(by_cid[e.cid].ea, at[e.a]), renumber(by_cid[e.cid].eb, at[e.b])
        self.theta = [(renumber(c, glob), own) for c, own in theta]

    def produce_only(self, cols: frozenset[int] | None) -> None:
        """Gather only the output columns `cols` (engine/column_pruning.py); the state keeps
        whole rows, so the choice can change at any call."""
        self.produced = cols

    def _narrowed(self, k: int, b: Batch) -> Batch:
        """Input k's rows with only the columns its state keeps (no copy)."""
        return b if self.kept is None else _narrow(b, self.kept[k])

    def _blanked(self, out: Batch) -> Batch:
        """Output rows with NULL in the columns state does not keep (what the join emits)."""
        if self.kept is None:
            return out
        at = [o + c for o, k in zip(self.offsets_full, self.kept) for c in k]
        cols, nulls = self._padded([out.cols[g] for g in at], [out.nulls[g] for g in at], len(out))
        return out.with_columns(cols, nulls)

    def _padded(
        self, cols: list[np.ndarray], nulls: list[np.ndarray | None], n: int
    ) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
        """Output columns from the kept ones (in order): NULL where a column is not kept."""
        assert self.kept is not None
        out_c: list[np.ndarray] = []
        out_n: list[np.ndarray | None] = []
        it = iter(zip(cols, nulls))
        for k, types in zip(self.kept, self.full_types):
            keep = set(k)
            for c, ty in enumerate(types):
                if c in keep:
                    v, m = next(it)
                    out_c.append(v)
                    out_n.append(m)
                else:
                    out_c.append(empty_column(ty, n))
                    out_n.append(np.ones(n, bool))
        return out_c, out_n

    # -------------------------------------------------------------- summary mode (join_summary.py)
    def summaries(self) -> tuple[str, ...]:
        return JOIN_SUMMARIES if self.kmon is None and stores_empty(self.stores) else ("exact",)

    def summary_changed(self) -> None:
        self.sampler = ReservoirJoin(self, self.summary_bytes) if self.summary == "reservoir" else None
        if self.sampler is not None:  # a sample is private state: stop reading the shared (empty) stores
            self._released += private_state(self)

    def released(self) -> list[object]:
        """Shared synopses a knob made this join give up (the plan forgets them)."""
        out, self._released = self._released, []
        return out

    def summary_info(self) -> dict[str, Any] | None:
        return None if self.sampler is None else self.sampler.info()

    # -------------------------------------------------------------- planning of probes
    def default_order(self, i: int) -> list[int]:
        """Inputs linked by an equi conjunct to those already bound first (lowest index on ties)."""
        bound = {i}
        order: list[int] = []
        while len(order) < self.n - 1:
            rest = [j for j in range(self.n) if j not in bound]
            linked = [j for j in rest if any(e.other(j) in bound for e in self.equi if j in (e.a, e.b))]
            j = (linked or rest)[0]
            order.append(j)
            bound.add(j)
        return order

    def _order(self, i: int) -> list[int]:
        o = list(self.probe_orders[i])
        if sorted(o) != [j for j in range(self.n) if j != i]:
            o = self.default_order(i)
        return o

    def state_bytes(self) -> int:
        return 0 if self.stores else sum(s.nbytes() for s in self.state)  # shared stores count at plan level

    # -------------------------------------------------------------- operator protocol
    @classmethod
    def from_node(cls, node: Plan, ctx: BuildContext) -> Self:
        assert isinstance(node, L.Join)
        op = cls(
            ctx.inputs,
            ctx.output,
            ctx.ids,
            node.predicate,
            [[a.type for a in i.schema] for i in node.inputs],
            ctx.ev,
            ctx.options,
            stores=ctx.stores,
        )
        from cqlstream.engine.joinorder import ordering as JO

        links = [(e.a, e.ea, e.b, e.eb) for e in op.equi]
        # cost model, before any statistics
        op.ordering = JO.initial_probe_orders(node, links, op.probe_orders, op.theta)
        op.probe_orders = [list(o) for o in op.ordering.orders]
        return op

    def snapshot(self, at: int, inputs: Callable[[], list[Batch] | None]) -> Batch | None:
        """The join of the inputs' snapshots: join result ids are a function of the input ids, so
        they match what this join emitted."""
        parts = inputs()
        if parts is None:
            return None
        fresh = JoinOp(
            [Queue(t) for t in self.full_types],
            Queue(self.out_types),
            self.ids,
            self.predicate,
            self.full_types,
            self.ev,
        )
        return self._blanked(fresh.process(parts, at))

    def snapshotable(self, inputs: Callable[[], bool]) -> bool:
        return self.sampler is None and inputs()  # a sample cannot be rebuilt from the inputs

    @classmethod
    def state_class(cls, node: Plan, kids: list[int]) -> tuple[int, list[tuple[int, str]]]:
        return held_state(node, kids, "join state")

    def release(self) -> list[object]:
        return super().release() + self.leave_stores()

    def shared_stores(self) -> list[Synopsis]:
        """Its inputs' shared stores (relation stores, window views) and what the views slice."""
        stores = self.stores or []
        return [*stores, *(b for st in stores for b in st.backing())]

    def leave_stores(self) -> list[object]:
        """Stop being a user of the shared stores; those no other operator reads are released and
        returned (the plan forgets them)."""
        freed: list[object] = []
        for st in self.stores or ():
            if self in st.users:
                st.users.remove(self)
            if not st.users:
                st.release()
                freed.append(st)
        return freed

    def _carried_state(self, bound: int) -> list[Batch]:
        """Each input's instances alive at the start of this call (as of the last instant done)."""
        if not self.stores:
            return self.state
        out = []
        for k, st in enumerate(self.stores):
            st.advance(bound)
            b = st.alive_at(self.done_through)
            for c in self.local[k]:
                if len(b):
                    b = b.take(self.ev.predicate(c, b))
            out.append(b)
        return out

    # -------------------------------------------------------------- one call
    def process(self, inputs: list[Batch], bound: int) -> Batch:
        if self.sampler is not None:
            return self.sampler.process(inputs, bound, self._process)
        return self._process(inputs, bound)

    def _process(self, inputs: list[Batch], bound: int) -> Batch:
        state = self._carried_state(bound)
        if not any(len(b) for b in inputs):
            return Batch.empty(self.out_types)
        evs, kept_at = [], []
        for k, b in enumerate(inputs):
            pos = None  # positions of the rows the input's own selections keep (None: all)
            for c in self.local[k]:
                if len(b):
                    keep = self.ev.predicate(c, b)
                    b = b.take(keep)
                    pos = keep.nonzero()[0] if pos is None else pos[keep]
            evs.append(self._narrowed(k, b))
            kept_at.append(pos)
        if self.join_order == "rates" and self.ordering is not None:
            new = self.ordering.observe([len(b) for b in evs], bound, self.probe_orders)
            self.probe_orders = new if new is not None else self.probe_orders
        if self.kmon is not None:  # exact mode: state this call may need comes back from the disk store
            state = self.kmon.before(state, evs, [self._narrowed(k, b) for k, b in enumerate(inputs)], kept_at)
        if self.stores and self.equi:
            # few events against a large stored relation: only its rows they can meet (and the
            # rows its own events delete) enter the call (engine/operators/state_prefilter.py)
            narrowed, dropped = self._narrow(state, evs)
            if any(dropped):
                pairs_before = self.counters.extra["candidate_pairs"]
                out = self._call(narrowed, evs, dropped)
                if out is not None:
                    self.counters.extra["state_tuples"] = sum(len(s) for s in state)
                    return out
                self.counters.extra["candidate_pairs"] = pairs_before  # declined: the full call counts
        out = self._call(state, evs, [0] * self.n)
        assert out is not None  # nothing dropped: the call never declines
        return out

    def _narrow(self, state: list[Batch], evs: list[Batch]) -> tuple[list[Batch], list[int]]:
        """Each input's carried state narrowed to the rows the other input's events can meet."""
        out, dropped = list(state), [0] * self.n
        e = self.equi[0]
        for j, go in enumerate(should_narrow(self.n, state, evs, SCAN_RATIO)):
            if go:
                sj, si = (e.ea, e.eb) if e.a == j else (e.eb, e.ea)
                out[j], dropped[j] = narrow_state(state[j], evs[j], evs[1 - j], sj, si, self.ev, key_codes)
        return out, dropped

    def _call(self, state: list[Batch], evs: list[Batch], dropped: list[int]) -> Batch | None:
        """One call over the given carried state; `dropped[j]`: state rows of input j left out
        as unreachable (None: the scan declined on narrowed state, run again on the full state)."""
        seqs, total = global_seqs(evs)
        m = total + 3
        tables = [Table(state[k], evs[k], seqs[k], self.input_types[k]) for k in range(self.n)]
        self._codes: dict[int, dict[int, Keyed]] = {}  # equi conjunct → input → its side's codes
        self._indexes: dict[tuple[int, tuple[int, ...]], StabIndex] = {}
        self._dropped, self._declined = dropped, False
        self._flows: dict[int, list[int]] = {}  # rows into and out of each probe step, per pipeline
        # per pipeline, its events and the result rows they made (whatever its cache served):
        # A-Caching's drift signal (engine/adaptive/caching.py)
        self._yields: dict[int, list[int]] = {}
        parts: list[Probed] = []
        run = self.caching.start_call(tables, self._const_ok())  # suppliers of caches first
        if self._const_ok():
            for i in run:
                if len(evs[i]):
                    res = self._probe_from(i, tables, m)
                    if self._declined:
                        self._codes, self._indexes = {}, {}
                        return None
                    self._yields[i] = [len(evs[i]), len(res[2]) if res is not None else 0]
                    if res is not None:
                        parts.append(res)
        for k, t in enumerate(tables):
            if not self.stores:
                self.state[k] = t.b.take(t.survivors) if len(t.survivors) != len(t.b) else t.b
            self.counters.extra["unmatched_deletes"] += t.unmatched_deletes
        self.caching.end_call(tables)  # maintains the caches, creates the entries of misses
        if self.kmon is not None:  # moves the state the constraints make unnecessary out of memory
            self.kmon.after(tables, parts)
        self.counters.extra["state_tuples"] = sum(len(s) for s in (self.state if not self.stores else state))
        # may change probe_orders for the next call (a cached pipeline's flows are left out)
        self.adaptive.observe(tables, m, self.caching.flows(self._flows))
        self._codes, self._indexes = {}, {}
        return self._assemble(parts, tables)

    def control_table(self) -> dict[str, Any]:
        t = super().control_table()
        t["counters"].update(reorders=self.adaptive.reorders, profiled=self.adaptive.profiled)
        t["adaptive"] = self.adaptive.statistics()
        if self.sampler is not None:
            t["counters"].update(self.sampler.counters())
        t["caching"] = self.caching.statistics()
        return t

    def explain_detail(self) -> list[str]:
        # the cost model's choice (where the orders started), then the adaptive orders now; two
        # inputs have one order each: nothing to choose, no ordering lines
        order = (
            [] if self.ordering is None or self.n < 3 else [self.ordering.explain(self.probe_orders, self.join_order)]
        )
        summ = [] if self.sampler is None else [summary_line(self.sampler.info())]
        return (
            order
            + self.adaptive.explain()
            + self.caching.explain()
            + ([self.kmon.summary()] if self.kmon is not None else [])
            + summ
        )

    def events(self) -> list[tuple[str, float]]:
        return (
            (self.kmon.events() if self.kmon is not None else [])
            + self.adaptive.drain_events()
            + self.caching.drain_events()
        )

    def _const_ok(self) -> bool:
        if not self.const:
            return True
        one = Batch([], [], np.zeros(1, np.int64), np.ones(1, np.int8), np.zeros(1, np.uint64))
        return all(bool(self.ev.predicate(c, one)[0]) for c in self.const)

    def _side_codes(self, e: Equi, tables: Sequence[Table]) -> dict[int, Keyed]:
        """Codes of both sides of an equi conjunct over the whole tables (cached per call)."""
        got = self._codes.get(e.cid)
        if got is None:
            va = self.ev.eval(e.ea, tables[e.a].b)
            vb = self.ev.eval(e.eb, tables[e.b].b)
            (ca, oka, _), (cb, okb, _) = key_codes([va, vb])
            got = self._codes[e.cid] = {e.a: (ca, oka), e.b: (cb, okb)}
        return got

    def _probe_from(self, i: int, tables: Sequence[Table], m: int) -> Probed | None:
        ti = tables[i]
        idx = {i: ti.ev}
        seq = ti.seq[ti.ev]
        bound = {i}
        applied: set[int] = set()
        pipe = self.caching.pipeline(i, tables, ti.ev, seq)  # cache hits set aside (engine/adaptive/caching.py)
        if pipe is not None:
            idx, seq = pipe.split(idx, seq)
        flow = self._flows[i] = [len(seq)]  # what A-Greedy's shift detector reads (adaptive/mjoin.py)
        for step, j in enumerate(self._order(i)):
            if pipe is not None and pipe.skips(step, seq):  # every event hit the cache over this step
                flow.append(len(seq))
                bound.add(j)
                idx, seq = pipe.after(step, idx, seq)
                if not len(seq) and not pipe.waiting:
                    return None
                continue
            links = [e for e in self.equi if j in (e.a, e.b) and e.other(j) in bound]
            tj = tables[j]
            if links:
                inst_parts: list[Keyed] = []
                probe_parts: list[Keyed] = []
                for e in links:
                    codes = self._side_codes(e, tables)
                    cj, okj = codes[j]
                    k = e.other(j)
                    ck, okk = codes[k]
                    inst_parts.append((cj[tj.inst], okj[tj.inst]))
                    probe_parts.append((ck[idx[k]], okk[idx[k]]))
                cache_key = (j, tuple(e.cid for e in links)) if len(links) == 1 else None
                (ikey, ivalid), (pkey, pvalid) = combine_keys(inst_parts, probe_parts)
            else:
                cache_key = (j, ())
                ikey = np.zeros(len(tj.inst), np.int64)
                ivalid = filled(len(tj.inst), True, bool)
                pkey = np.zeros(len(seq), np.int64)
                pvalid = filled(len(seq), True, bool)
            index = self._indexes.get(cache_key) if cache_key is not None else None
            scanned = None
            n_inst = len(ikey) + self._dropped[j]  # as if no unreachable state had been left out
            if index is None and SCAN_RATIO * len(seq) < n_inst:
                # few probes against many instances (a [Now] window against a relation): no index
                # over all of them, only the instances whose key some probe has, paired directly;
                # very few: by one probes × instances table, in the scan's pair order
                q = Pairing(pkey, pvalid, seq, ikey, ivalid, tj.lo, tj.hi)
                if len(seq) * len(ikey) <= TP.TINY_CELLS:
                    scanned = _tiny_scan(q, n_inst)
                if scanned is None:
                    scanned = scan_pairs(q, n_inst)
                if scanned is None and self._dropped[j]:
                    self._declined = True  # an index over narrowed state: run on the full state
                    return None
            elif (
                index is None
                and self.index_mode == "chains"
                and len(tj.survivors) == len(tj.inst)
                and len(seq) * len(ikey) <= TP.TINY_CELLS
            ):
                # a few probes against instances all alive through the call: the index would be
                # one chain in (key, row) order, its pairs by probe (in position order, past 64
                # probes in (key, seq, position) order: StabIndex.probe), then row; made by one
                # probes × instances table instead
                order = np.lexsort((seq, pkey)) if len(seq) > 64 else None
                p, at, _ = tiny_pairs(Pairing(pkey, pvalid, seq, ikey, ivalid, tj.lo, tj.hi), order)
                scanned = p, at
            if scanned is not None:
                p, at = scanned
                rows = tj.inst[at]
                self.counters.extra["candidate_pairs"] += len(p)
            else:
                if index is None:
                    index = StabIndex(tj.inst[ivalid], ikey[ivalid], tj.lo[ivalid], tj.hi[ivalid], m, self.index_mode)
                    if cache_key is not None:
                        self._indexes[cache_key] = index
                before = index.examined
                p, rows = index.probe(pkey, pvalid, seq)
                self.counters.extra["candidate_pairs"] += index.examined - before
            idx = {k: v[p] for k, v in idx.items()}
            idx[j] = rows
            seq = seq[p]
            bound.add(j)
            for t, (c, own) in enumerate(self.theta):
                if t in applied or not own <= bound or not len(seq):
                    continue
                applied.add(t)
                b = gather_batch(
                    self.width, sorted(X.columns(c)), self.offsets, self.widths, tables, idx, ti.b.ts[idx[i]]
                )
                keep = self.ev.predicate(c, b)
                idx = {k: v[keep] for k, v in idx.items()}
                seq = seq[keep]
            flow.append(len(seq))
            if pipe is not None:
                idx, seq = pipe.after(step, idx, seq)  # hits merged back, deltas handed to caches
            if not len(seq) and (pipe is None or not pipe.waiting):
                return None
        return i, idx, seq

    def _assemble(self, parts: list[Probed], tables: Sequence[Table]) -> Batch:
        if not parts:
            return Batch.empty(self.out_types)
        reserve(self, sum(len(q) for _, _, q in parts), [t.b for t in tables])  # over a memory limit: stop here
        idx = {k: np.concatenate([p[k] for _, p, _ in parts]) for k in range(self.n)}
        # each result is stamped with the ts and sign of the event (of input i) that produced it
        ts = np.concatenate([tables[i].b.ts[p[i]] for i, p, _ in parts])
        sign = np.concatenate([tables[i].b.sign[p[i]] for i, p, _ in parts])
        seq = np.concatenate([q for _, _, q in parts])
        if not is_sorted(seq):
            # in the order of the events that caused them (sorts by ts; a result's `−` follows its
            # `+`): reorder the row indexes once, before any column is gathered
            o = stable_order(seq)
            idx = {k: v[o] for k, v in idx.items()}
            ts, sign = ts[o], sign[o]
        cols: list[np.ndarray] = []
        nulls: list[np.ndarray | None] = []
        # column pruning: only the output columns read above are gathered (not with k-Mon's
        # kept columns, which blank columns themselves)
        only = self.produced if self.kept is None else None
        for k, t in enumerate(tables):
            r = idx[k]
            for c in range(self.widths[k]):
                if only is not None and self.offsets[k] + c not in only:
                    v, m = placeholder(self.input_types[k][c], len(r))
                    cols.append(v)
                    nulls.append(m)
                    continue
                cols.append(t.b.cols[c][r])
                msk = t.b.nulls[c]
                msk = None if msk is None else msk[r]
                nulls.append(msk if msk is not None and msk.any() else None)
        if self.kept is not None:
            cols, nulls = self._padded(cols, nulls, len(ts))
        oid = tables[0].b.id[idx[0]]
        for k in range(1, self.n):
            oid = combine_ids(oid, tables[k].b.id[idx[k]])
        if only is not None and len(only) < len(cols):
            blank = frozenset(range(len(cols))) - only
            return BlankedBatch(cols, nulls, ts, sign.astype(np.int8), oid, blank)
        return Batch(cols, nulls, ts, sign.astype(np.int8), oid)
