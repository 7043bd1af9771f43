"""A-Caching (thesis §5.4–5.6): subresult caches on the pipelines of an N-ary join (MJoin).

Candidates. In pipeline i (input i's events probing the others in `probe_orders[i]`) a
candidate cache covers a prefix of s probes, the *segment*. Its key is the probing tuple's side
of the equi conjuncts linking i to the segment; its value for key u is σ_{K=u} of the segment
join (combos of segment tuples, stored by id: cache_store.py). A candidate is eligible when the
segment satisfies the prefix invariant (each segment input's own pipeline starts with the other
segment inputs, so the regular processing of an update to any segment window computes exactly
the new segment-join tuples), no non-equi conjunct links the segment to an outside input, and
the key is numeric.

One call (engine/operators/join.py calls `start_call`, `pipeline`, `end_call`). Pipelines run so
that every *supplier* (a segment input of a used cache) runs before the cache's pipeline. A
supplier l hands over, after its first s−1 steps, the combos its inserts formed (`Delta`, with
their alive interval: from the insert's seq to the first delete of a component). In pipeline i,
events whose key is present are *hits*: the combos stored at the start of the call that are still
alive at the event's seq, plus this call's new combos alive then; they skip the segment's steps.
The other events probe as usual; the first event of each new key creates its entry at the end of
the call (its results alive at the end, plus the combos formed after it). At the end of the call
every used cache is maintained: combos that lost a component leave, new combos join present keys.
A cache is therefore incomplete but never wrong, at every batch size; entries are not dropped on
updates, only when memory runs out (oldest first) or the cache is dropped.

Costs (thesis §5.5.1) are in the units of the A-Greedy join profiler: a step costs 1 per probing
row plus 1 per row it produces. Per probing row of pipeline i, a cache over s steps saves the
segment's work, pays a lookup, a row cost per cached row returned and, on a miss, the segment and
the entry's creation; maintenance costs `update_cost` per combo added or removed (supplied by
the segment inputs' pipelines). Miss probability is measured while a cache is used, and estimated
by a Bloom filter over windows of W_d keys while it is profiled (thesis §5.5.3). States are
Used/Profiled/Unused (Fig 5.9); at each re-optimization interval the unused candidates are
profiled again and, after W observations, the selection runs (at most one cache per pipeline:
prefixes overlap) if some net benefit moved by more than the threshold; memory goes to chosen
caches by net benefit per byte (§5.6). A used cache whose net benefit turns negative is dropped
at once; a cache whose pipeline order breaks its segment or prefix invariant is dropped too.

Back-off (`backoff` > 1, engine/adaptive/backoff.py): a selection that keeps the caches as they
were (none paying included) doubles the stretch of the interval before candidates are profiled
again, up to `backoff`; a selection that changes them, a used cache dropped for a negative net,
or the join's own rows per probe step drifting (backoff.FlowDrift, per pipeline without a used
cache) resets it, so the next profiling starts as soon as the base interval has passed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine.adaptive import cache_config as CC
from cqlstream.engine.adaptive import cache_share as SH
from cqlstream.engine.adaptive.backoff import Backoff, FlowDrift
from cqlstream.engine.adaptive.cache_config import CachingConfig
from cqlstream.engine.adaptive.cache_store import SegmentCache, first_per_key, key_hash, match_keys
from cqlstream.engine.adaptive.config import OFF
from cqlstream.engine.adaptive.step_costs import StepCosts

if TYPE_CHECKING:
    import logging

    from cqlstream.cql.logical import expr as X
    from cqlstream.engine.operators.join import Equi, JoinOp, Table


def _log() -> logging.Logger:
    """The adaptive machinery's logger (logging is imported when a change is logged, not at start)."""
    import logging

    return logging.getLogger("cqlstream.adaptive")


INF = np.iinfo(np.int64).max
_clock = time.thread_time  # CPU time of this thread: measured costs do not count other processes' turns
USED, PROFILED, UNUSED = "used", "profiled", "unused"


# ------------------------------------------------------------------ stable key codes


def stable_codes(values: np.ndarray, nulls: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(n, 2) int64 codes equal across calls iff the values are SQL-equal (an int equals the
    integral float of the same value), and the valid mask (NULL and NaN never match); None for
    non-numeric values (no cache on such keys)."""
    kind = values.dtype.kind
    n = len(values)
    out = np.zeros((n, 2), np.int64)
    valid = np.ones(n, bool) if nulls is None else ~nulls
    if kind in "iub":
        out[:, 1] = values.astype(np.int64, copy=False)
        return out, valid
    if kind != "f":
        return None
    f = values.astype(np.float64) + 0.0  # −0.0 → 0.0
    nan = np.isnan(f)
    integral = ~nan & (f == np.floor(f)) & (np.abs(f) < 2.0**62)
    out[:, 0] = np.where(integral, 0, 1)
    out[:, 1] = np.where(integral, np.where(integral, f, 0.0).astype(np.int64), np.where(nan, 0.0, f).view(np.int64))
    return out, valid & ~nan


def _bloom_fraction(codes: np.ndarray, alpha: int) -> float:
    """Bits set / keys in a Bloom filter of α·n bits over n key rows: the fraction of distinct
    keys, i.e. the miss probability of a cache filled by them (thesis §5.5.3)."""
    n = len(codes)
    if not n:
        return 0.0
    h = np.zeros(n, np.uint64)
    for c in range(codes.shape[1]):
        h = (h ^ codes[:, c].view(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(29)
    bits = np.zeros(max(alpha * n, 1), bool)
    bits[(h % np.uint64(len(bits))).astype(np.int64)] = True
    return float(bits.sum()) / n


# ------------------------------------------------------------------ candidates


class Candidate:
    """A cache over the first `len(seg)` probes of pipeline i, with its statistics. `partners`
    (Y, later windows of the pipeline) non-empty: a globally consistent cache (thesis §5.7),
    holding the segment's combos that have a partner in Y (and possibly some that lost it)."""

    def __init__(
        self,
        i: int,
        seg: tuple[int, ...],
        keys: list[Equi],
        window: int,
        partners: tuple[int, ...] = (),
        version: list[int] | None = None,
    ) -> None:
        # its join's state version, bumped by every change of this candidate's state: ACaching's
        # views of the used candidates are recomputed only then (they were rebuilt in every call)
        self.version = version if version is not None else [0]
        self.i, self.seg, self.keys = i, seg, keys
        self.partners = partners
        # the store's columns: the segment inputs in input order (not probe order), so that the
        # candidates of other pipelines over the same windows and key share it (cache_share.py)
        self.cols = tuple(sorted(seg))
        # the windows whose pipelines supply new combos (X ∪ Y: the prefix invariant holds there)
        self.union = tuple(sorted(seg + partners))
        self.share = SH.share_key(keys, seg, partners)
        self._state = PROFILED
        self.store: SegmentCache | None = None
        self.miss_obs: deque[float] = deque(maxlen=window)
        self.window_keys: list[np.ndarray] = []
        # the keys of the last W profiled windows: a cache keeps its entries across windows, so
        # its miss rate is the share of new keys over that whole span, not per window
        self.span_keys: deque[np.ndarray] = deque(maxlen=window)
        self.span_miss: float | None = None
        self.window_rows = 0
        self.probes = self.hits = 0  # in the current observation window (used)
        self.total_probes = self.total_hits = self.created = self.maintained = 0
        self.ok = True  # false when a key turned out not numeric
        self.benefit = self.cost = self.net = 0.0
        self.bytes_wanted = 0.0
        self.net_at_selection: float | None = None
        self.pinned = False  # forced: kept whatever its statistics, until dropped or invalid
        # measured time (costs = "time"): this cache's work per join call while used, as
        # (probing rows of its pipeline, seconds); the work of the current call; calls whose
        # probing events all hit, of the calls with probing events
        self.work_obs: deque[tuple[float, float]] = deque(maxlen=64)
        self.call_work = 0.0
        self.call_rows = 0
        self.calls_all_hit = self.calls_probed = 0
        self.calls_partial = 0  # calls where some probing events hit and others missed
        # its own record while used, one entry per join call with probing events: (hits, calls
        # where every event hit, its work); the last W such calls give its measured net
        self.call_hits = self.call_misses = 0
        self.own_obs: deque[tuple[float, float, float]] = deque(maxlen=window)

    @property
    def state(self) -> str:
        """USED, PROFILED or UNUSED (thesis Fig 5.9)."""
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        if value != self._state:
            self._state = value
            self.version[0] += 1

    @property
    def name(self) -> str:
        return f"{self.i}:{list(self.seg)}" + (f"⋉{list(self.partners)}" if self.partners else "")

    def miss(self) -> float | None:
        if self.state != USED and self.span_miss is not None:
            return self.span_miss
        return float(np.mean(self.miss_obs)) if self.miss_obs else None

    def as_dict(self) -> dict[str, Any]:
        s = self.store
        return {
            "pipeline": self.i,
            "segment": list(self.seg),
            "partners": list(self.partners),
            "state": self.state,
            "miss_probability": None if self.miss() is None else round(float(self.miss() or 0.0), 6),
            "observations": len(self.miss_obs),
            "benefit": round(self.benefit, 6),
            "cost": round(self.cost, 6),
            "net": round(self.net, 6),
            "entries": len(s) if s is not None else 0,
            "rows": s.rows if s is not None else 0,
            "bytes": s.nbytes() if s is not None else 0,
            "capacity": s.capacity if s is not None else 0,
            # the store's runs (cache_store.py) and the combos they hold, dead ones not yet
            # dropped included
            "runs": len(s.runs) if s is not None else 0,
            "rows_held": s.physical_rows() if s is not None else 0,
            "hits": self.total_hits,
            "probes": self.total_probes,
            "calls_partial_hit": self.calls_partial,
            "work_seconds_per_call": round(float(np.mean([w for _r, w in self.work_obs])), 9)
            if self.work_obs
            else None,
        }


class Delta:
    """Segment-join combos formed by this call's inserts: key rows (and their hashes, computed
    once here for every later match), ids per segment input, rows per segment input, and the
    alive interval (lo, hi)."""

    def __init__(
        self, key: np.ndarray, valid: np.ndarray, ids: np.ndarray, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        keep = valid & (lo < hi)
        self.key, self.ids, self.rows = key[keep], ids[keep], rows[keep]
        self.lo, self.hi = lo[keep], hi[keep]
        self.h = key_hash(self.key)


def _cat_delta(parts: list[Delta], n_key: int, n_seg: int) -> Delta:
    if not parts:
        z = np.zeros(0, np.int64)
        return Delta(np.zeros((0, n_key), np.int64), np.zeros(0, bool), np.zeros((0, n_seg), np.uint64),
                     np.zeros((0, n_seg), np.int64), z, z)  # fmt: skip
    if len(parts) == 1:
        return parts[0]
    d = parts[0]
    out = Delta.__new__(Delta)
    out.key = np.concatenate([p.key for p in parts])
    out.ids = np.concatenate([p.ids for p in parts])
    out.rows = np.concatenate([p.rows for p in parts])
    out.lo = np.concatenate([p.lo for p in parts])
    out.hi = np.concatenate([p.hi for p in parts])
    out.h = np.concatenate([p.h for p in parts])
    del d
    return out


# ------------------------------------------------------------------ the controller of one join


class ACaching:
    """Candidates, statistics, selection and the per-call cache work of one join."""

    EVENTS = 100

    def __init__(self, op: JoinOp, config: CachingConfig) -> None:
        self.op = op
        self.config = config
        self.cands: dict[tuple[int, tuple[int, ...]] | tuple[int, tuple[int, ...], tuple[int, ...]], Candidate] = {}
        self.events: deque[tuple[str, float]] = deque(maxlen=self.EVENTS)
        self.log: deque[dict[str, Any]] = deque(maxlen=20)
        self.selections = 0
        self.last_used: list[str] = []
        n = op.n
        # per pipeline: probing rows, and per step rows in/out, over the last W observations
        self.step_obs: list[deque[np.ndarray]] = [deque(maxlen=config.window) for _ in range(n)]
        self.acc = [np.zeros(2 * n + 1) for _ in range(n)]  # [rows0, in_0, out_0, in_1, out_1, ...]
        self._probing = [0.0] * n  # decayed probing rows per pipeline (rates): Python floats, n is small
        self.events_seen = 0
        self.last_tick_events = 0
        self.last_tick_time = time.monotonic()
        self.phase = PROFILED  # profiling after a tick, until the selection runs
        self.backoff = Backoff(config.backoff)  # stretch of the interval while selections change nothing
        # per pipeline: its result rows per event, its steps' rows in / out (drift signals)
        self.drift = [(FlowDrift(), FlowDrift()) for _ in range(n)]
        # measured time (costs = "time"): the steps' runs (step_costs.py); the pipeline's calls
        # and probing rows; the caches' work per join call (rows, seconds) pooled over all used
        # caches; the profiler's own time
        self.step_costs = StepCosts(n)  # each step run's rows, candidate pairs and seconds
        self.pipe_calls = [0.0] * n  # Python floats: updated in every pipeline call, n is small
        self.pipe_rows = [0.0] * n
        self.join_calls = 0
        self.work_obs: deque[tuple[float, float]] = deque(maxlen=256)
        self.profile_seconds = 0.0
        self.cache_seconds = 0.0
        self._current_memo: tuple[tuple[tuple[int, ...], ...], list[Candidate]] | None = None
        # the used candidates, their stores and the pipelines they involve, as of a state version
        # (bumped by the candidates' state changes and by `_use`/`_drop` once a store is set)
        self.version = [0]
        self._used_memo: tuple[int, list[Candidate], list[Candidate], frozenset[int]] = (-1, [], [], frozenset())
        self._profiled_memo: tuple[int, int, frozenset[int]] = (-1, -1, frozenset())
        # per call
        self.live = False
        self.deltas: dict[tuple[int, tuple[int, ...]], list[Delta]] = {}
        # entries to create at the end of the call: (cache, keys, their hashes, combo keys,
        # combo ids, combo key hashes)
        self.pending: list[tuple[Candidate, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.lookups: dict[int, tuple[Candidate, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._codes: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._unique: dict[int, bool] = {}

    def codes(self, e: Equi, who: int, tables: Sequence[Table]) -> tuple[np.ndarray, np.ndarray] | None:
        """Stable key codes and validity of input `who`'s side of equi conjunct e over its whole
        table in this call (None: not numeric), computed once per call."""
        k = (e.cid, who)
        if k not in self._codes:
            expr: X.Expr = e.ea if who == e.a else e.eb
            self._codes[k] = stable_codes(*self.op.ev.eval(expr, tables[who].b))
        return self._codes[k]

    def unique_ids(self, tables: Sequence[Table], k: int) -> bool:
        """Input k's ids identify its tuples in this call (memoized per call)."""
        got = self._unique.get(k)
        if got is None:
            got = self._unique[k] = _unique_ids(tables[k])
        return got

    # ------------------------------------------------------------ switches
    @property
    def active(self) -> bool:
        return self.config.enabled and self.op.n >= 3 and self.op.adaptive.config.policy != OFF

    def configure(self, config: CachingConfig) -> None:
        was = self.config
        self.config = config
        if config.backoff != was.backoff:
            self.backoff = Backoff(config.backoff)
        if not config.enabled or config.memory != was.memory:
            for c in self.cands.values():
                if c.state == USED:
                    self._drop(c, "caching off" if not config.enabled else "memory changed", unused=False)
            self.phase = PROFILED

    def _used_view(self) -> tuple[int, list[Candidate], list[Candidate], frozenset[int]]:
        """(state version, used candidates, one per store, the pipelines they involve), recomputed
        only when some candidate's state changed (a new candidate is never used)."""
        memo = self._used_memo
        if memo[0] != self.version[0]:
            used = [c for c in self.cands.values() if c.state == USED]
            seen: set[int] = set()
            stores = []
            for c in used:
                if c.store is not None and id(c.store) not in seen:
                    seen.add(id(c.store))
                    stores.append(c)
            pipes = frozenset(k for c in used for k in (c.i, *c.union))
            memo = self._used_memo = (self.version[0], used, stores, pipes)
        return memo

    def used(self) -> list[Candidate]:
        return list(self._used_view()[1])

    def stores(self) -> list[Candidate]:
        """One used candidate per store (the first of those sharing it): who supplies and
        maintains it."""
        return list(self._used_view()[2])

    @property
    def probing(self) -> np.ndarray:
        return np.array(self._probing)

    def sharing(self, c: Candidate) -> list[Candidate]:
        """The used candidates probing c's store (c included), in pipeline order."""
        if c.store is None:
            return [c]
        return sorted((d for d in self.used() if d.store is c.store), key=lambda d: d.i)

    @staticmethod
    def delta_key(c: Candidate) -> tuple[Any, ...]:
        """Where a call's new combos for c's store are gathered: one list per shared cache."""
        return c.share

    def group_net(self, c: Candidate) -> float:
        """Net benefit of the cache c belongs to: its pipelines' benefits summed, its cost
        once (the largest of its members' estimates: the maintenance is the same store's)."""
        members = self.sharing(c)
        return sum(d.benefit for d in members) - max(d.cost for d in members)

    def force(self, i: int, s: int, capacity: int | None = None, partners: Sequence[int] = ()) -> Candidate:
        """Use the cache over the first s probes of pipeline i now (empty; `partners`: the
        windows Y of a globally consistent cache): tests and benchmarks (fixed cache sets).
        Raises ValueError when the candidate is not eligible."""
        seg = tuple(self.op._order(i)[:s])
        c = self._candidate(i, seg, tuple(sorted(partners)))
        if c is None or not self._eligible(c):
            raise ValueError(f"no eligible cache over {list(seg)} in pipeline {i}")
        if not self._fits(c, [d for d in self.used() if d.i != c.i]):
            raise ValueError(f"the cache over {list(seg)} in pipeline {i} conflicts with a used cache")
        if c.state != USED:
            self._use(c, capacity if capacity is not None else self.config.memory, "forced")
        c.pinned = True
        return c

    def drop(self, i: int) -> None:
        """Drop the used cache of pipeline i (if any)."""
        for c in self.used():
            if c.i == i:
                self._drop(c, "dropped by hand", unused=True)

    # ------------------------------------------------------------ candidates
    def _candidate(self, i: int, seg: tuple[int, ...], partners: tuple[int, ...] = ()) -> Candidate | None:
        key = (i, seg, partners) if partners else (i, seg)
        c = self.cands.get(key)
        if c is None:
            keys = SH.key_order([e for e in self.op.equi if i in (e.a, e.b) and e.other(i) in seg], seg)
            if not keys:
                return None
            c = self.cands[key] = Candidate(i, seg, keys, self.config.window, partners, self.version)
        return c

    def _consistent(self, orders: tuple[tuple[int, ...], ...], room: int) -> list[Candidate]:
        """Up to `room` globally consistent candidates (thesis §5.7's cap): X a prefix of a
        pipeline whose windows fail the prefix invariant, Y the fewest later windows of the
        pipeline completing X to a set that satisfies it; the longest X first (all but one of
        the pipeline's windows, then all but two, ...), within a length in pipeline order."""
        if room <= 0:
            return []
        by: dict[int, Sequence[int]] = dict(enumerate(orders))
        out: list[Candidate] = []
        for s in range(self.op.n - 2, 0, -1):
            for i, order in enumerate(orders):
                seg = order[:s]
                if len(out) >= room:
                    return out
                if SH.prefix_ok(by, frozenset(seg)):
                    continue
                u = SH.smallest_consistent_union(by, frozenset(seg), among=order[s:])  # Y: later windows
                if u is None:
                    continue
                c = self._candidate(i, seg, tuple(sorted(u - frozenset(seg))))
                if c is not None and self._eligible(c):
                    out.append(c)
        return out

    def _current(self) -> list[Candidate]:
        """The eligible candidates of the current orders (recomputed only when an order changed)."""
        raw = tuple(map(tuple, self.op.probe_orders))  # _order(i) is a function of probe_orders[i]
        if self._current_memo is None or self._current_memo[0] != raw:
            orders = tuple(tuple(self.op._order(i)) for i in range(self.op.n))
            out = []
            for i in range(self.op.n):
                for s in range(1, len(orders[i]) + 1):
                    c = self._candidate(i, orders[i][:s])
                    if c is not None and self._eligible(c):
                        out.append(c)
            out += self._consistent(orders, self.config.candidates_cap - len(out))
            self._current_memo = (raw, out)
        return [c for c in self._current_memo[1] if c.ok]

    def _eligible(self, c: Candidate) -> bool:
        if not c.ok:
            return False
        seg, union = set(c.seg), set(c.union)
        for _t, own in self.op.theta:
            if (own & seg and not own <= seg) or (own & union and not own <= union):
                return False
        order = self.op._order(c.i)
        if c.partners and not set(c.partners) <= set(order[len(c.seg) :]):
            return False
        return all(set(self.op._order(k)[: len(union) - 1]) == union - {k} for k in union)

    # ------------------------------------------------------------ one call
    def start_call(self, tables: Sequence[Table], const_ok: bool) -> list[int]:
        """Check the used caches against the current orders and this call's data; returns the
        order in which the pipelines run (suppliers first)."""
        self.live = self.active
        self.deltas, self.pending, self.lookups = {}, [], {}
        self._codes, self._unique = {}, {}
        used = self.used()
        if not self.live or not const_ok:
            for c in used:
                self._drop(c, "caching inactive", unused=False)
            self.live = False
            return list(range(self.op.n))
        if not used:  # the common case: nothing to check, supply or order
            self.join_calls += 1
            return list(range(self.op.n))
        for c in used:
            order = self.op._order(c.i)
            if tuple(order[: len(c.seg)]) != c.seg or not self._eligible(c):
                self._drop(c, "probe order changed", unused=False)
            elif not all(self.unique_ids(tables, k) for k in c.seg):
                assert c.store is not None
                c.store.clear()  # ids do not identify tuples in this call: start over, still correct
        for c in self.used():
            if not self._fits(c, [d for d in self.used() if d is not c]):
                self._drop(c, "a segment input's cache covers it", unused=False)
        self.join_calls += 1
        for c in self.stores():
            if len(c.union) == 1:
                t0 = _clock()
                (k,) = c.seg
                t = tables[k]
                supply(self, tables, c, k, {k: t.inst[t.lo >= 0]}, None)
                c.call_work += _clock() - t0
        length = {c.i: len(c.union) for c in self.used()}
        return sorted(range(self.op.n), key=lambda i: length.get(i, 0))

    @staticmethod
    def _fits(c: Candidate, others: list[Candidate]) -> bool:
        """Suppliers run before the pipelines they supply (pipelines run in order of their
        cache's X ∪ Y size) and supply after their own cache's hits are merged: a supplying
        input's own cache spans fewer windows than the X ∪ Y it supplies."""
        for d in others:
            if d.i == c.i:
                return False
            if len(c.union) > 1 and d.i in c.union and len(d.union) >= len(c.union):
                return False
            if len(d.union) > 1 and c.i in d.union and len(c.union) >= len(d.union):
                return False
        return True

    def pipeline(self, i: int, tables: Sequence[Table], ev: np.ndarray, seq: np.ndarray) -> PipelineCall | None:
        """The cache work of pipeline i in this call; None when there is none: no used cache
        involves the pipeline and it is not profiled in this call (its events are only counted)."""
        if not self.live:
            return None
        if i not in self._used_view()[3] and not self._profiling(i):
            self.record(i, len(ev))
            self.pipe_calls[i] += 1
            self.pipe_rows[i] += len(ev)
            return None
        return PipelineCall(self, i, tables, ev, seq)

    def _profiling(self, i: int) -> bool:
        """Pipeline i is profiled in this call: one call in `profile_every`, while some candidate
        of the pipeline is Profiled (its keys feed the Bloom filter, its steps are timed)."""
        if self.join_calls % max(self.config.profile_every, 1):
            return False
        if not self.cands:
            return True
        v, n, pipes = self._profiled_memo
        if v != self.version[0] or n != len(self.cands):
            pipes = frozenset(c.i for c in self.cands.values() if c.state == PROFILED)
            self._profiled_memo = (self.version[0], len(self.cands), pipes)
        return i in pipes

    def end_call(self, tables: Sequence[Table]) -> None:
        if not self.live:
            return
        for c in self.stores():  # a shared store is maintained once
            assert c.store is not None
            t0 = _clock()
            delta = _cat_delta(self.deltas.get(self.delta_key(c), []), 2 * len(c.keys), len(c.seg))
            removed = 0
            for pos, k in enumerate(c.cols):
                t = tables[k]
                gone = t.b.id[t.inst[(t.lo < 0) & (t.hi < INF)]]
                if len(gone) and c.store.rows:
                    removed += c.store.invalidate(pos, np.sort(gone).astype(np.uint64, copy=False))
            end = delta.hi == INF
            added = c.store.maintain(delta.key[end], delta.ids[end], delta.h[end], distinct=bool(c.partners))
            c.maintained += removed + added
            c.call_work += _clock() - t0
        for c, keys, kh, combo_key, combo_ids, ch in self.pending:
            if c.state == USED and c.store is not None:
                t0 = _clock()
                c.created += c.store.create(keys, combo_key, combo_ids, kh, ch)
                c.call_work += _clock() - t0
        for c in self.used():
            obs = (float(c.call_rows), c.call_work)
            c.work_obs.append(obs)
            self.work_obs.append(obs)
            self.cache_seconds += c.call_work
            if c.call_hits or c.call_misses:
                c.own_obs.append((float(c.call_hits), float(c.call_misses == 0), c.call_work))
                if self.config.costs == "time":
                    self._measured_net(c)
            c.call_work, c.call_rows = 0.0, 0
            c.call_hits = c.call_misses = 0
        self.pending = []
        self.deltas = {}
        self._codes, self._unique = {}, {}
        if self.backoff.on:
            self._watch_drift()
        self._maybe_reoptimize()

    def _watch_drift(self) -> None:
        """Reset the back-off when the join's own counts of this call moved against their
        smoothed values: a pipeline's result rows per event (the same whatever its cache serves),
        or the rows per probe step of a pipeline without a used cache (a cached one's move with
        the hit rate)."""
        flows = self.flows(self.op._flows)
        for i, y in self.op._yields.items():
            if self.drift[i][0].moved(y, [i]) or self.drift[i][1].moved(flows.get(i), self.op._order(i)):
                self.backoff.reset(self.events_seen, f"rows of pipeline {i} moved")
                return

    # ------------------------------------------------------------ statistics and selection
    def record(self, i: int, probing: int) -> None:
        d = 0.999 ** max(probing, 1)
        pr = self._probing
        for k in range(len(pr)):
            pr[k] *= d
        pr[i] += probing
        self.events_seen += probing

    def observe_keys(self, c: Candidate, keys: np.ndarray, valid: np.ndarray, probes: int, hits: int) -> None:
        c.probes += probes
        c.hits += hits
        c.total_probes += probes
        c.total_hits += hits
        if c.state == PROFILED:
            c.window_keys.append(keys[valid])
        c.window_rows += probes
        if c.window_rows >= self.config.distinct_window:
            if c.state == USED:
                c.miss_obs.append(1.0 - c.hits / max(c.probes, 1))
            elif c.state == PROFILED:
                ks = np.concatenate(c.window_keys) if c.window_keys else np.zeros((0, 2 * len(c.keys)), np.int64)
                c.miss_obs.append(_bloom_fraction(ks, self.config.bloom_bits) if len(ks) else 1.0)
                # one Bloom filter over the span, once per window (amortized over its keys)
                c.span_keys.append(ks)
                span = np.concatenate(list(c.span_keys))
                c.span_miss = _bloom_fraction(span, self.config.bloom_bits) if len(span) else 1.0
            c.window_keys, c.window_rows, c.probes, c.hits = [], 0, 0, 0
            if self.acc[c.i][0] > 0:
                self.step_obs[c.i].append(self.acc[c.i].copy())
                self.acc[c.i][:] = 0
            self._estimate(c)

    def _ratios(self, i: int) -> np.ndarray | None:
        obs = list(self.step_obs[i]) + ([self.acc[i]] if self.acc[i][0] > 0 else [])
        if not obs:
            return None
        tot = np.sum(obs, axis=0)
        return tot[1:] / max(tot[0], 1.0)

    def observe_step(self, i: int, step: int, rows0: int, rows: int, pairs: int, seconds: float, misses: bool) -> None:
        """One run of step `step` of pipeline i: the pipeline's probing rows behind it in this
        call, the rows into the step, the candidate pairs it met and its time (`misses`: run on a
        used cache's misses only). A step is a nested loop when no equality links its input to
        the inputs bound before it (its pairs are rows × window, each tested by a condition)."""
        order = self.op._order(i)
        bound = {i, *order[:step]}
        j = order[step]
        nested = not any(j in (e.a, e.b) and e.other(j) in bound for e in self.op.equi)
        self.step_costs.observe(i, step, rows0, rows, pairs, seconds, misses, nested)

    @staticmethod
    def _fit(obs: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
        """Least-squares seconds = a + b·rows over (rows, seconds) observations (a, b ≥ 0)."""
        if len(obs) < 3:
            return None
        x, y = np.array(obs).T
        vx = float(x.var())
        if vx <= 1e-9:  # one row count: the split is unknown, charge it per row
            mx = float(x.mean())
            return (0.0, float(y.mean()) / mx) if mx > 0 else (float(y.mean()), 0.0)
        b = max(float(((x - x.mean()) * (y - y.mean())).mean()) / vx, 0.0)
        return max(float(y.mean()) - b * float(x.mean()), 0.0), b

    def _estimate_time(self, c: Candidate) -> None:
        """Benefit and cost in seconds per join call (costs = "time"): the segment's step work
        it saves, priced by the join's fitted step model (step_costs.py: a step's constant when
        every probing event of the call hits, its rows and candidate pairs per probing row for
        each hit), against the cache's measured work."""
        cfg = self.config
        r = self._ratios(c.i)
        m = c.miss()
        if r is None or m is None or not self.pipe_calls[c.i]:
            return
        s = len(c.seg)
        calls = max(self.join_calls, 1)
        f = self.pipe_calls[c.i] / calls  # pipeline calls per join call
        n = self.pipe_rows[c.i] / self.pipe_calls[c.i]  # probing rows per pipeline call
        if c.state == USED and c.calls_probed >= cfg.window:
            p_all = c.calls_all_hit / c.calls_probed
        else:
            p_all = (1.0 - m) ** n
        saved = 0.0
        for k in range(s):
            per = self.step_costs.per_row(c.i, k)
            price = self.step_costs.price(c.i, k)
            if per is None or price is None:
                return
            (rows, pairs), (a, b_row, b_pair) = per, price
            saved += a * p_all + (b_row * rows + b_pair * pairs) * n * (1.0 - m)
        if c.state == USED and len(c.work_obs) >= 4:
            cost = float(np.mean([w for _r, w in c.work_obs]))
        else:
            fit = self._fit(self.work_obs) if len(self.work_obs) >= 8 else None
            a, b = fit if fit is not None else (cfg.prior_call_seconds, cfg.prior_row_seconds)
            cost = a + b * n * f
        if not (c.state == USED and self._measured_net(c)):
            c.benefit = f * saved
            c.cost = cost
            c.net = c.benefit - c.cost
        out = float(r[2 * s - 1])
        entries = max(m, 0.01) * cfg.distinct_window * cfg.window
        c.bytes_wanted = entries * (16 * len(c.keys) + out * 8 * (2 * len(c.keys) + s))
        st = c.store
        if st is not None and st.evicted:
            c.bytes_wanted = max(c.bytes_wanted, 2.0 * st.nbytes())

    def _measured_net(self, c: Candidate) -> bool:
        """A used cache's benefit and cost from its own record over its last W join calls with
        probing events (False, nothing set: fewer than W such calls since it was put in use).

        The saved work is priced per hit from what its segment's steps do on its own misses now:
        their rows and candidate pairs per missed event (the windows as they are now, the keys
        probing now), at the join's fitted step prices (step_costs.py), plus a step's constant
        in calls where every event hit (the steps were skipped); the hits are counted, not
        estimated from a miss rate. The cost is the cache's measured work (lookups, merges,
        supply, maintenance, entry creation) in the same calls. Nothing is extrapolated from the
        runs profiled before the cache was used: while the join's windows fill, a segment's
        work per event grows, and the fan-out measured then understates it (on the costly-probe
        bench 0.85 S rows per T event before use against 1.6–5 on the misses after). A hit is
        priced as a miss: where the missed keys meet more segment rows than the held ones the
        saving is overstated (there ~2× at 100 tuples per push), where fewer, understated."""
        if len(c.own_obs) < self.config.window:
            return False
        saved_row = skip = 0.0
        for k in range(len(c.seg)):
            per = self.step_costs.miss_per_row(c.i, k)
            price = self.step_costs.price(c.i, k)
            if per is None or price is None:
                return False
            (rows, pairs), (a, b_row, b_pair) = per, price
            saved_row += b_row * rows + b_pair * pairs
            skip += a
        hits, all_hit, work = np.mean(np.array(c.own_obs), axis=0)
        c.benefit = float(hits) * saved_row + float(all_hit) * skip
        c.cost = float(work)
        c.net = c.benefit - c.cost
        return True

    def _estimate(self, c: Candidate) -> None:
        cfg = self.config
        if cfg.costs == "time":
            self._estimate_time(c)
            return
        r = self._ratios(c.i)
        m = c.miss()
        if r is None or m is None:
            return
        probing = self.probing
        total = max(float(probing.sum()), 1e-9)
        rate = probing[c.i] / total
        s = len(c.seg)
        seg_work = float(r[: 2 * s].sum())
        out = float(r[2 * s - 1])
        per_row = seg_work - cfg.probe_cost - (1 - m) * out * cfg.hit_row_cost - m * (seg_work + out * cfg.update_cost)
        supply = 0.0
        u = len(c.union)  # X ∪ Y's pipelines supply the new combos, after their first u − 1 steps
        for k in c.union:
            rk = self._ratios(k)
            frac = probing[k] / total
            supply += frac * (1.0 if u == 1 or rk is None else float(rk[2 * (u - 2) + 1]))
        c.benefit = rate * per_row
        c.cost = 2 * cfg.update_cost * supply
        c.net = c.benefit - c.cost
        entries = max(m, 0.01) * cfg.distinct_window * cfg.window
        c.bytes_wanted = entries * (16 * len(c.keys) + out * 8 * (2 * len(c.keys) + s))
        st = c.store
        if st is not None and st.evicted:  # a used cache that ran out: ask for twice what it holds
            c.bytes_wanted = max(c.bytes_wanted, 2.0 * st.nbytes())

    def _maybe_reoptimize(self) -> None:
        cfg = self.config
        now = time.monotonic()
        # the back-off stretches the wait before candidates are profiled again, not the profiling
        k = self.backoff.stretch if self.phase == UNUSED else 1
        tick = (cfg.interval_tuples > 0 and self.events_seen - self.last_tick_events >= k * cfg.interval_tuples) or (
            cfg.interval_seconds > 0 and now - self.last_tick_time >= k * cfg.interval_seconds
        )
        current = self._current()  # also creates the candidates of a changed order (profiled at once)
        # refinement (a): a used cache that stopped paying goes at once. Read as: once its own
        # statistics are full (W miss-rate windows since it was put in use and, with measured
        # costs, W join calls of its own record, `_measured_net`), the first call whose net is
        # negative drops it. Before that its net is the selection's estimate, not a measurement
        # of it: the store is cold and the windows may still fill. A shared cache goes when its
        # group's summed net is negative.
        for c in self.used():
            net = self.group_net(c) if len(self.sharing(c)) > 1 else c.net
            own = len(c.own_obs) >= cfg.window if cfg.costs == "time" else True
            if not c.pinned and net < 0 and len(c.miss_obs) >= cfg.window and own:
                self._drop(c, f"net benefit {net:.3g} < 0", unused=True)
                self.backoff.reset(self.events_seen, "a used cache stopped paying")
        if self.phase == PROFILED:
            profiled = [c for c in current if c.state == PROFILED]
            ready = all(len(c.miss_obs) >= cfg.window for c in profiled)
            if ready or tick:
                self._select(current)
                self.phase = UNUSED
                tick = False
                self.last_tick_events, self.last_tick_time = self.events_seen, now
        if tick:
            for c in current:
                if c.state == UNUSED:
                    c.state = PROFILED
                    c.miss_obs.clear()
            self.phase = PROFILED
            self.last_tick_events, self.last_tick_time = self.events_seen, now

    def _select(self, current: list[Candidate]) -> None:
        for c in current:
            self._estimate(c)
        known = [c for c in current if c.miss() is not None]
        moved = any(
            c.net_at_selection is None
            or abs(c.net - c.net_at_selection) > self.config.threshold * abs(c.net_at_selection)
            for c in known
        )
        if not moved and self.selections:
            for c in current:
                if c.state == PROFILED:
                    c.state = UNUSED
            self.backoff.quiet(self.events_seen)
            return
        self.selections += 1
        chosen = self._choose(known)
        # memory by net benefit per byte (thesis §5.6); a shared cache is granted once
        left = self.config.memory
        grant: dict[int, int] = {}
        by_share: dict[Any, int] = {}
        for c in sorted(chosen.values(), key=lambda c: -c.net / max(c.bytes_wanted, 1.0)):
            if c.share in by_share:
                grant[c.i] = by_share[c.share]
                continue
            g = int(min(left, max(c.bytes_wanted, 1024.0)))
            if g > 0:
                grant[c.i] = by_share[c.share] = g
                left -= g
        for c in list(self.cands.values()):
            c.net_at_selection = c.net
            want = chosen.get(c.i) is c and c.i in grant
            if want and c.state == USED and c.pinned:
                pass  # a forced cache keeps the memory it was given
            elif want and c.state == USED:
                assert c.store is not None
                c.store.capacity = grant[c.i]
            elif want:
                unit = "s per call" if self.config.costs == "time" else "per tuple"
                self._use(c, grant[c.i], f"net benefit {c.net:.3g} {unit}")
            elif c.state == USED and c.pinned:
                pass
            elif c.state == USED:
                self._drop(c, "not selected", unused=True)
            else:
                c.state = UNUSED
        names = [c.name for c in self.used()]
        if names != self.last_used:  # the log keeps changes only
            self.log.append({"selection": self.selections, "used": names})
            self.last_used = names
            self.backoff.reset(self.events_seen, "the selection changed the caches")
        else:
            self.backoff.quiet(self.events_seen)
        self.events.append(("cache_selection", float(self.selections)))

    def _choose(self, known: list[Candidate]) -> dict[int, Candidate]:
        """The caches to use, at most one per pipeline, compatible (`_fits`). Nothing shared:
        each pipeline's best cache by net benefit (its candidates are nested prefixes, so this is
        Theorem 5.5.1's optimum), taken in order of net benefit while they fit. Some window set
        and key candidates of two or more pipelines: Theorem 5.5.3's greedy over caches, each
        worth its members' summed benefit less its cost once (cache_share.py); globally
        consistent candidates in the list (at most `candidates_cap` candidates then): the
        exhaustive search over its subsets."""
        groups: dict[Any, list[Candidate]] = {}
        for c in known:
            groups.setdefault(c.share, []).append(c)
        chosen: dict[int, Candidate] = {}
        if all(len(g) == 1 for g in groups.values()) and not any(c.partners for c in known):
            for c in sorted((c for c in known if c.net > 0), key=lambda c: -c.net):
                if c.i not in chosen and self._fits(c, list(chosen.values())):
                    chosen[c.i] = c
            return chosen
        options = [SH.Option(key, max(c.cost for c in g), [(c, c.benefit) for c in g]) for key, g in groups.items()]
        fits = lambda c, taken: all(d.i != c.i for d in taken) and self._fits(c, taken)  # noqa: E731
        # globally consistent candidates among them: exhaustive over the capped list (§5.7)
        pick = SH.exhaustive if any(c.partners for c in known) else SH.greedy
        picked, _value = pick(options, fits)
        for _o, members in picked:
            for c in members:
                chosen[c.i] = c
        return chosen

    def _use(self, c: Candidate, capacity: int, reason: str) -> None:
        for d in self.used():
            if d.i == c.i:
                self._drop(d, "replaced", unused=True)
        c.state = USED
        peer = next((d for d in self.used() if d is not c and d.share == c.share and d.store is not None), None)
        if peer is not None:  # one cache with the pipelines already using it: its store, filled
            assert peer.store is not None
            c.store = peer.store
            c.store.capacity = max(c.store.capacity, capacity)
        else:
            c.store = SegmentCache(2 * len(c.keys), len(c.seg), capacity)
        self.version[0] += 1  # the views of the used candidates hold their stores: recompute them
        c.miss_obs.clear()
        c.work_obs.clear()
        c.call_work, c.call_rows, c.calls_all_hit, c.calls_probed = 0.0, 0, 0, 0
        c.call_hits = c.call_misses = 0
        c.own_obs.clear()
        self.events.append(("cache_used", float(c.i)))
        self.log.append({"cache": c.name, "to": USED, "reason": reason})
        _log().info("cache %s used: %s", c.name, reason)

    def _drop(self, c: Candidate, reason: str, unused: bool) -> None:
        c.pinned = False
        c.state = UNUSED if unused else PROFILED
        c.store = None
        self.version[0] += 1
        c.miss_obs.clear()
        self.events.append(("cache_dropped", float(c.i)))
        self.log.append({"cache": c.name, "to": c.state, "reason": reason})
        _log().info("cache %s dropped: %s", c.name, reason)

    # ------------------------------------------------------------ what it shows
    def statistics(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "enabled": cfg.enabled,
            "active": self.active,
            "memory": cfg.memory,
            "memory_used": sum(c.store.nbytes() for c in self.used() if c.store is not None),
            "interval_seconds": cfg.interval_seconds,
            "interval_tuples": cfg.interval_tuples,
            "backoff": self.backoff.statistics(),
            "selections": self.selections,
            "costs": cfg.costs,
            "profile_seconds": round(self.profile_seconds, 6),
            "cache_seconds": round(self.cache_seconds, 6),
            "candidates": [self._row(c) for c in self.cands.values() if c.state != UNUSED or c.store is not None]
            + [self._row(c) for c in self.cands.values() if c.state == UNUSED and c.store is None],
            "log": list(self.log)[-10:],
        }

    def _row(self, c: Candidate) -> dict[str, Any]:
        """A candidate's control-table row: its statistics, and the pipelines probing its store
        (more than one: a shared cache, thesis Def 5.5.1)."""
        return {**c.as_dict(), "shared_by": [d.i for d in self.sharing(c)] if c.state == USED else []}

    def explain(self) -> list[str]:
        if not self.active:
            return []
        used = self.used()
        parts = []
        for c in used:
            peers = [d.i for d in self.sharing(c) if d is not c]
            shared = (
                f", shared with pipeline{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}" if peers else ""
            )
            partners = f"⋉{list(c.partners)}" if c.partners else ""  # globally consistent: X ⋉ Y
            parts.append(
                f"{c.i}: {list(c.seg)}{partners} ({len(c.store) if c.store else 0} entries, hit "
                f"{c.total_hits / max(c.total_probes, 1):.2f}{shared})"
            )
        bo = self.backoff
        back = f", back-off x{bo.stretch} of {bo.cap}" if bo.on else ""
        return [
            f"caches (a-caching, {self.selections} selections{back}): " + ("; ".join(parts) if parts else "none used")
        ]

    def flows(self, flows: dict[int, list[int]]) -> dict[int, list[int]]:
        """The rows per probe step that A-Greedy's shift detector reads, less those of the
        pipelines using a cache: their hits skip the segment's steps and join the rows after it,
        so the counts there move with the hit rate, not with the data (a forced cache's pipeline
        was re-ordered, and its cache dropped, on such a false shift)."""
        if not self.live:
            return flows
        own = {c.i for c in self.used()}
        return {i: f for i, f in flows.items() if i not in own} if own else flows

    def drain_events(self) -> list[tuple[str, float]]:
        out = list(self.events)
        self.events.clear()
        return out


def _unique_ids(t: Table) -> bool:
    ids = t.b.id[t.inst]
    if len(ids) < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return True
    return len(np.unique(ids)) == len(ids)


# ------------------------------------------------------------------ one pipeline in one call


class PipelineCall:
    """The cache work of pipeline i in one call: hits set aside before the first probe, misses'
    entries noted and hits merged back after the segment, deltas handed to the caches this
    pipeline supplies, step counts for the statistics."""

    def __init__(self, ac: ACaching, i: int, tables: Sequence[Table], ev: np.ndarray, seq: np.ndarray) -> None:
        t0 = _clock()
        self.ac, self.i, self.tables = ac, i, tables
        self.rows_in = len(seq)
        self.skipped = False
        ac.record(i, len(ev))
        ac.pipe_calls[i] += 1
        ac.pipe_rows[i] += len(ev)
        self.own: Candidate | None = next((c for c in ac.used() if c.i == i), None)
        # caches this pipeline supplies: (candidate, the step after which its combos are complete)
        # (one per store: the pipelines sharing a cache are supplied once)
        self.supplies = [(c, len(c.union) - 2) for c in ac.stores() if i in c.union and len(c.union) > 1]
        self.hits: tuple[dict[int, np.ndarray], np.ndarray] | None = None
        self.miss_rows = ev
        self.miss_keys: np.ndarray | None = None
        if self.own is not None:
            self.own.call_rows += len(ev)
        # profiled candidates of this pipeline see the probing keys of one call in `profile_every`
        profiled = (
            [c for c in ac._current() if c.i == i] if ac.join_calls % max(ac.config.profile_every, 1) == 0 else []
        )
        for c in profiled:
            if c.state == PROFILED and c is not self.own and c.ok:
                got = self._keys(c, ev)
                if got is None:
                    c.ok = False
                else:
                    ac.observe_keys(c, got[0], got[1], len(ev), 0)
        self.mark = _clock()  # the steps' times are measured from here
        self.pairs_mark = ac.op.counters.extra.get("candidate_pairs", 0)  # and their candidate pairs
        self.rows0 = 0  # probing rows that run the steps (the misses, under a used cache)
        self.n_ev = len(ev)
        ac.profile_seconds += self.mark - t0

    def _keys(self, c: Candidate, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Probe keys of input i's rows for candidate c."""
        return side_keys(self.ac.op, self.tables, c, {self.i: rows}, probing=True)

    # ------------------------------------------------------------ before the first probe
    def split(self, idx: dict[int, np.ndarray], seq: np.ndarray) -> tuple[dict[int, np.ndarray], np.ndarray]:
        c = self.own
        if c is None or c.store is None or not len(seq):
            return idx, seq
        t0 = _clock()
        try:
            return self._split(c, idx, seq)
        finally:
            self.mark = _clock()
            c.call_work += self.mark - t0

    def _split(
        self, c: Candidate, idx: dict[int, np.ndarray], seq: np.ndarray
    ) -> tuple[dict[int, np.ndarray], np.ndarray]:
        assert c.store is not None
        ev = idx[self.i]
        got = self._keys(c, ev)
        if got is None:
            c.ok = False
            self.ac._drop(c, "key not numeric", unused=True)
            self.own = None
            return idx, seq
        keys, valid = got
        h = key_hash(keys)  # once: the lookup, this call's fresh combos and the new entries use it
        if not all(self.ac.unique_ids(self.tables, k) for k in c.seg):
            present = np.zeros(len(ev), bool)
            q = pairs = np.zeros(0, np.int64)
            c.store.clear()
        else:
            present, q, pairs = c.store.lookup(keys, h)
            present &= valid
        # stored combos: resolve ids to this call's state rows, keep those alive at the probe's seq
        stored = self._stored(c, q[present[q]] if len(q) else q, pairs[present[q]] if len(q) else pairs, seq)
        if stored is None:  # a cached tuple left the state unseen (never expected): start over, all miss
            c.store.clear()
            present[:] = False
            stored = (np.zeros(0, np.int64), np.zeros((0, len(c.seg)), np.int64))
        hq, hrows = stored
        hit = present
        self.ac.observe_keys(c, keys, valid, len(ev), int(hit.sum()))
        # this call's new combos (supplied before this pipeline ran) alive at the probe's seq
        d = _cat_delta(self.ac.deltas.get(self.ac.delta_key(c), []), 2 * len(c.keys), len(c.seg))
        hq2, hrows2 = self._fresh(keys, h, hit, d, seq)
        qq = np.concatenate([hq, hq2])
        rows = np.concatenate([hrows, hrows2])
        if c.partners:  # a combo stored and fresh again (another partner): once
            qq, rows = distinct_pairs(qq, rows, len(hq))
        self.hits = ({self.i: ev[qq], **{k: rows[:, pos] for pos, k in enumerate(c.cols)}}, seq[qq])
        miss = ~hit
        self.miss_rows = ev[miss]
        self.miss_keys = keys[miss]
        self.miss_hash = h[miss]
        self.miss_valid = valid[miss]
        self.miss_seq = seq[miss]
        self.delta = d
        out = {self.i: ev[miss]}
        self.rows_in = int(miss.sum())
        c.call_hits += len(ev) - self.rows_in
        c.call_misses += self.rows_in
        c.calls_probed += 1
        c.calls_all_hit += int(not self.rows_in)
        c.calls_partial += int(0 < self.rows_in < len(ev))
        return out, seq[miss]

    def _stored(
        self, c: Candidate, q: np.ndarray, combos: np.ndarray, seq: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Hits from stored combos (probe q[j] with the combo of ids combos[j]; None if some
        cached id is not in this call's state)."""
        rows = np.zeros((len(q), len(c.seg)), np.int64)
        alive = np.ones(len(q), bool)
        for pos, k in enumerate(c.cols):
            t = self.tables[k]
            state_ids = t.b.id[: t.n_state]
            want = combos[:, pos]
            if not len(want):
                continue
            if len(state_ids) < 2 or bool(
                (state_ids[1:] >= state_ids[:-1]).all()
            ):  # windows keep arrival order: no sort needed
                at = np.searchsorted(state_ids, want)
                if not (at < len(state_ids)).all():
                    return None
                r = at
            else:
                order = np.argsort(state_ids, kind="stable")
                at = np.searchsorted(state_ids[order], want)
                if not (at < len(order)).all():
                    return None
                r = order[at]
            if not (state_ids[r] == want).all():
                return None
            rows[:, pos] = r
            alive &= _hi_of_rows(t, r) > seq[q]
        return q[alive], rows[alive]

    def _fresh(
        self, keys: np.ndarray, h: np.ndarray, hit: np.ndarray, d: Delta, seq: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Hits from this call's new combos: those of the hit's key alive at its seq."""
        hq = np.flatnonzero(hit)
        if not len(d.lo) or not len(hq):
            return np.zeros(0, np.int64), np.zeros((0, d.rows.shape[1]), np.int64)
        rep, di = match_keys(h[hq], keys[hq], d.h, d.key)
        q = hq[rep]
        s = seq[q]
        ok = (d.lo[di] < s) & (s < d.hi[di])
        return q[ok], d.rows[di[ok]]

    # ------------------------------------------------------------ after each step
    def skips(self, step: int, seq: np.ndarray) -> bool:
        """True when the step can be skipped: every event hit the cache covering it."""
        self.skipped = self.own is not None and self.hits is not None and step < len(self.own.seg) and not len(seq)
        return self.skipped

    def after(self, step: int, idx: dict[int, np.ndarray], seq: np.ndarray) -> tuple[dict[int, np.ndarray], np.ndarray]:
        n_in = self.rows_in
        now = _clock()
        pairs = self.ac.op.counters.extra.get("candidate_pairs", 0)
        if step == 0:
            self.rows0 = n_in
        # the probing rows behind this step's rows: the misses inside the own cache's segment,
        # every probing row after it (the hits are merged back)
        own = self.own is not None and self.hits is not None and step < len(self.own.seg)
        base = self.rows0 if own else self.n_ev
        if not self.skipped and base:
            met = max(int(pairs - self.pairs_mark), 0)
            self.ac.observe_step(self.i, step, base, n_in, met, now - self.mark, own)
        self.pairs_mark = pairs
        self.skipped = False
        acc = self.ac.acc[self.i]
        if step == 0:
            acc[0] += n_in
        acc[1 + 2 * step] += n_in
        acc[2 + 2 * step] += len(seq)
        self.rows_in = len(seq)
        c = self.own
        if c is not None and self.hits is not None and step == len(c.seg) - 1:
            self._note_misses(c, idx, seq)
            hidx, hseq = self.hits
            idx = {k: np.concatenate([idx.get(k, np.zeros(0, np.int64)), hidx[k]]) for k in hidx}
            seq = np.concatenate([seq, hseq])
            self.hits = None
            t = _clock()
            c.call_work += t - now
            now = t
        for d, at in self.supplies:
            if at == step:
                supply(self.ac, self.tables, d, self.i, idx, seq)
                t = _clock()
                d.call_work += t - now
                now = t
        self.mark = now
        return idx, seq

    @property
    def waiting(self) -> bool:
        """Hits set aside, to be merged after the segment: an empty miss set does not end the pipeline."""
        return self.hits is not None

    def _note_misses(self, c: Candidate, idx: dict[int, np.ndarray], seq: np.ndarray) -> None:
        """Entries to create at the end of the call: the first missed event of each new key,
        with its results alive at the end and the combos formed after it."""
        assert self.miss_keys is not None
        ok = self.miss_valid
        if not ok.any():
            return
        mk, mrows, mseq, mh = self.miss_keys[ok], self.miss_rows[ok], self.miss_seq[ok], self.miss_hash[ok]
        first = first_per_key(mh)
        keys, krow, kseq, kh = mk[first], mrows[first], mseq[first], mh[first]
        # results of the chosen events, alive at the end of the call
        sel = np.isin(idx[self.i], krow)
        rows = {k: idx.get(k, np.zeros(0, np.int64))[sel] for k in c.seg}
        alive = np.ones(int(sel.sum()), bool)
        for k in c.seg:
            alive &= _hi_of_rows(self.tables[k], rows[k]) == INF
        rows = {k: v[alive] for k, v in rows.items()}
        # their keys: the probing event's key (equal to the combo's by the equi conjuncts)
        ko = np.argsort(krow)
        which = ko[np.searchsorted(krow[ko], idx[self.i][sel][alive])]
        ck = keys[which] if len(which) else np.zeros((0, keys.shape[1]), np.int64)
        cid = (
            np.stack([self.tables[k].b.id[rows[k]] for k in c.cols], axis=1).astype(np.uint64)
            if len(which)
            else np.zeros((0, len(c.seg)), np.uint64)
        )
        ch = kh[which] if len(which) else np.zeros(0, np.uint64)
        d = self.delta
        if len(d.lo):
            late = np.flatnonzero(d.hi == INF)
            # each late combo matches at most one new key (the keys are distinct)
            dj, ki = match_keys(d.h[late], d.key[late], kh, keys)
            dj = late[dj]
            after = d.lo[dj] > kseq[ki]
            dj = dj[after]
            ck = np.concatenate([ck, d.key[dj]])
            cid = np.concatenate([cid, d.ids[dj]])
            ch = np.concatenate([ch, d.h[dj]])
        if c.partners and len(cid):  # a combo with several partners, or found both ways: once
            _u, first = np.unique(np.column_stack([ck, cid.view(np.int64)]), axis=0, return_index=True)
            ck, cid, ch = ck[first], cid[first], ch[first]
        self.ac.pending.append((c, keys, kh, ck, cid, ch))


def side_keys(
    op: JoinOp, tables: Sequence[Table], c: Candidate, rows: dict[int, np.ndarray], probing: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Key rows of candidate c: the probing input's side of each key conjunct (`probing`), or
    the segment's side (for segment combos, given their rows per segment input). Each side's
    codes are computed once per call over its whole table (`ACaching.codes`) and gathered."""
    n = len(next(iter(rows.values())))
    out = np.zeros((n, 2 * len(c.keys)), np.int64)
    valid = np.ones(n, bool)
    for k, e in enumerate(c.keys):
        mine = (e.a == c.i) == probing
        who = e.a if mine else e.b
        if not n:
            continue
        got = op.caching.codes(e, who, tables)
        if got is None:
            return None
        r = rows[who]
        out[:, 2 * k : 2 * k + 2] = got[0][r]
        valid &= got[1][r]
    return out, valid


def supply(
    ac: ACaching, tables: Sequence[Table], c: Candidate, i: int, idx: dict[int, np.ndarray], seq: np.ndarray | None
) -> None:
    """Pipeline i's new segment combos for cache c: its inserts' results after the segment's
    other inputs (seq None: the new instances of a one-input segment, i being that input)."""
    t = tables[i]
    if seq is None:
        r = idx[i]
        lo = _lo_of_rows(t, r)
        keep = np.ones(len(r), bool)
    else:
        keep = t.b.sign[idx[i]] > 0
        lo = seq[keep]
    if not len(lo):
        return
    # X ∪ Y combos projected on X (a globally consistent cache keeps X's parts, alive while X's
    # components are; their partners may leave, the invariant allows it)
    rows = {k: idx[k][keep] for k in c.seg}
    got = side_keys(ac.op, tables, c, rows, probing=False)
    if got is None:
        c.ok = False
        return
    ids = np.stack([tables[k].b.id[rows[k]] for k in c.cols], axis=1).astype(np.uint64)
    hi = np.full(len(lo), INF, np.int64)
    for k in c.seg:
        hi = np.minimum(hi, _hi_of_rows(tables[k], rows[k]))
    rws = np.stack([rows[k] for k in c.cols], axis=1)
    ac.deltas.setdefault(ac.delta_key(c), []).append(Delta(got[0], got[1], ids, rws, lo, hi))


def distinct_pairs(q: np.ndarray, rows: np.ndarray, n_stored: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The (probe, combo) pairs once each: a globally consistent cache's X-combo can come back
    once per partner, or both from the store and from this call's new combos. The first
    `n_stored` pairs (from the store, which keeps each combo once) are distinct already: only
    the new combos' pairs are checked, against each other and the stored pairs of their probes."""
    if len(q) == n_stored:
        return q, rows
    near = np.flatnonzero(np.isin(q[:n_stored], q[n_stored:]))
    both = np.concatenate([near, np.arange(n_stored, len(q))])
    _u, first = np.unique(np.column_stack([q[both], rows[both]]), axis=0, return_index=True)
    fresh = both[first[first >= len(near)]]
    keep = np.concatenate([np.arange(n_stored), np.sort(fresh)])
    return q[keep], rows[keep]


def _hi_of_rows(t: Table, rows: np.ndarray) -> np.ndarray:
    """Each row's instance end (the seq of its delete, INF if alive at the end of the call)."""
    pos = np.searchsorted(t.inst, rows)
    return t.hi[pos]


def _lo_of_rows(t: Table, rows: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(t.inst, rows)
    return t.lo[pos]


# ------------------------------------------------------------------ knobs


CACHING_KNOBS = CC.CACHING_KNOBS  # defined with the config: the join's class lists them without loading this module
