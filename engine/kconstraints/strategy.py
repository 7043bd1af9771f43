"""The object a 2-way join calls around each call to keep its carried state small (k-Mon).

`before` brings back from the disk store the rows this call's events may need (exact mode): rows
whose join key an event of the other input has; rows whose own delete arrives are removed from the
store in memory (the join needs only the delete event to retract their results). `after` keeps
the bookkeeping of every state row (arrival rank, partner arrivals before it, met a partner or
not), feeds the monitors with the call's partner arrivals and join distances, withdraws a
constraint that a tuple violated (its rows come back from the store), then moves the rows the
constraints make unnecessary out of memory: to the store (exact) or away (approximate, No rows).
The strategy is also an attached entity: its control table and knobs sit beside the plan's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.errors import KnobError
from cqlstream.engine.kconstraints.approx import BLOCK, DropLedger
from cqlstream.engine.kconstraints.columns import ColumnChoice
from cqlstream.engine.kconstraints.config import KMonConfig
from cqlstream.engine.kconstraints.constraints import RIDS, UNDECLARED, Constraint, ManyOne
from cqlstream.engine.kconstraints.monitors import INF, Monitor
from cqlstream.engine.kconstraints.reduction import RULES, ManyOneRule, Partition, RidsRule, Rule, StateView, partition
from cqlstream.engine.kconstraints.retract import TieredStore
from cqlstream.engine.kconstraints.store import Rows, sorted_unique
from cqlstream.engine.operators.join import renumber

if TYPE_CHECKING:
    from cqlstream.cql.logical.expr import Expr
    from cqlstream.engine.operators.join import JoinOp, Probed, Table

MODES = ("exact", "approx", "off")
RETRACTION = ("memory", "disk")  # where spilled rows a partner's delete needs are kept


class KeyCount:
    """How many live rows of one input have each join key (sorted keys with counts > 0)."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def nbytes(self) -> int:
        return self.keys.nbytes + self.counts.nbytes

    def add(self, keys: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Count a call's events (+1 insert, −1 delete per key): the call's keys are grouped by
        one sort (none when they come sorted, as arrival-ordered ids do), then merged into the
        table by position (no re-sort of the table). Returns the keys whose count fell to 0 in
        this call (sorted): the only keys a structure that holds rows of live keys can lose now."""
        if not len(keys):
            return np.zeros(0, np.int64)
        return self.add_grouped(*_grouped(keys, np.asarray(delta, np.int64), np.add))

    def add_grouped(self, u: np.ndarray, d: np.ndarray) -> np.ndarray:
        """`add` with the call's keys already grouped: `u` sorted and distinct, `d` the sum of
        their deltas."""
        gone = np.zeros(0, np.int64)
        at = np.searchsorted(self.keys, u)
        old = at < len(self.keys)
        old[old] = self.keys[at[old]] == u[old]
        if old.any():
            pos = at[old]
            self.counts[pos] += d[old]
            dead = self.counts[pos] <= 0
            if dead.any():
                gone = u[old][dead]
        new = ~old & (d > 0)
        if new.any():
            self.keys, self.counts = _merged(self.keys, self.counts, at[new], u[new], d[new])
        if len(gone):
            live = self.counts > 0
            self.keys, self.counts = self.keys[live], self.counts[live]
        return gone


def _groups(keys: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Group `keys` (non-empty): the sorting order (None when they come sorted, as
    arrival-ordered ids do), where each distinct key's run starts in sorted order, and the
    distinct keys (sorted)."""
    o = None
    if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        o = np.argsort(keys)
        keys = keys[o]
    head = np.empty(len(keys), bool)
    head[0] = True
    np.not_equal(keys[1:], keys[:-1], out=head[1:])
    starts = np.flatnonzero(head)
    return o, starts, keys[starts]


def _grouped(keys: np.ndarray, values: np.ndarray, op: np.ufunc) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `keys` (sorted, non-empty) and `op` reduced over each one's `values`."""
    o, starts, u = _groups(keys)
    return u, op.reduceat(values if o is None else values[o], starts)


def _merged(
    keys: np.ndarray, counts: np.ndarray, at: np.ndarray, k: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`keys`/`counts` with `k`/`c` put in before positions `at` (from searchsorted of the sorted,
    distinct `k` into `keys`): a merge of two sorted runs, no sort."""
    n = len(keys) + len(k)
    slot = at + np.arange(len(k))  # where each new key lands in the merged table
    mine = np.ones(n, bool)
    mine[slot] = False
    out_k, out_c = np.empty(n, keys.dtype), np.empty(n, counts.dtype)
    out_k[slot], out_c[slot] = k, c
    out_k[mine], out_c[mine] = keys, counts
    return out_k, out_c


BOOK = ("rank", "born", "joined", "key", "valid", "reason")  # bookkeeping columns per state row


# KMonConfig lives in config.py (registering a join reads it without this module) and is named
# here too: tests, benchmarks and older checkpoints import it from this module.
_DEFAULT = KMonConfig()


def _sampled(ids: np.ndarray, p: float) -> np.ndarray:
    """A deterministic p-sample of tuple ids (kept as evidence in approximate mode)."""
    with np.errstate(over="ignore"):
        h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return h < np.uint64(int(p * (1 << 24)))


def _assumed(r: Rule) -> bool:
    return isinstance(r.c, RIDS) and bool(r.c.assumed)


def _keys_inserted(keys: np.ndarray, ins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A call's valid event keys sorted and distinct, per key whether an insert has it, and the
    sum of its events' signs (+1 insert, −1 delete): one sort serves the store probe before the
    call and the live-key counts after it."""
    if not len(keys):
        return keys, np.zeros(0, bool), np.zeros(0, np.int64)
    o, starts, u = _groups(keys)
    sign = np.where(ins, 1, -1).astype(np.int64)
    sign = sign if o is None else sign[o]
    return u, np.maximum.reduceat(sign, starts) > 0, np.add.reduceat(sign, starts)


def _origin(r: Rule) -> str:
    """Where a rule's constraint comes from: declared with the stream, a candidate the monitors
    look for (detected once they give it a finite k), the plan (a derived relation's key), or
    assumed between two derived relations (attach.assumed_rids)."""
    if isinstance(r.c, ManyOne) and r.c.derived:
        return "derived"
    if _assumed(r):
        return "assumed"
    return "detected" if r.monitor.declared == INF else "declared"


class KMonStrategy:
    def __init__(
        self,
        join: JoinOp,
        key_exprs: tuple[Expr, Expr],
        applied: list[tuple[int, Constraint, str | None]],
        config: KMonConfig = _DEFAULT,
        relational: tuple[bool, bool] = (False, False),
    ) -> None:
        """`applied`: (input x whose state the constraint prunes, constraint, role name or None).
        `relational[x]`: input x is a relation the plan derives (its inserts are changes computed
        per instant, not a stream's arrivals): a partner insert at the same instant as one of its
        rows counts as arriving before the row (join distance 0), since an instant's changes have
        no order between the inputs (the join's order of them, by input index, is arbitrary)."""
        self.join = join
        self.relational = relational
        self.key_exprs = self.full_key_exprs = key_exprs
        self.columns: ColumnChoice | None = None  # set by attach (keep_columns): which columns state keeps
        self.config = config
        self.rules: list[Rule] = []
        for bit, (x, c, role) in enumerate(applied):
            mon = Monitor(INF if c.k == UNDECLARED else c.k, config.W, config.c, config.p, config.detect)
            self.rules.append(RULES[type(c)](c, x, 1 << bit, mon, role))
        types = join.input_types
        self.book: list[dict[str, np.ndarray]] = [self._empty_book() for _ in range(2)]
        self.stores = [TieredStore(types[x]) for x in range(2)]
        self.ledgers = [DropLedger(), DropLedger()]
        self.next_rank = [0, 0]
        self.alive_keys = [KeyCount(), KeyCount()]  # per input: live rows (memory or store) per key
        self.inserts = [0, 0]  # insert events seen per input (arrivals)
        self._evs: list[Batch] = []
        self._raw: list[Batch] = []
        self._at: list[np.ndarray | None] = [None, None]
        self._key_cache: dict[tuple[int, int], tuple[Batch, np.ndarray, np.ndarray]] = {}
        self._groups_cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._was: list[np.ndarray] = [np.zeros(0, np.int64)] * 2  # reasons of rows restored this call
        self._deleted_in_store = [0, 0]  # per input: this call's deletes applied in the disk store
        self.withdrawals: list[str] = []  # labels of constraints withdrawn so far
        self._events: list[tuple[str, float]] = []
        self.peak = {"state": 0, "baseline": 0}
        self.parts: list[Partition | None] = [None, None]
        self.restored = 0
        self.spilled = 0

    @staticmethod
    def _empty_book() -> dict[str, np.ndarray]:
        z = np.zeros(0, np.int64)
        return {"rank": z, "born": z, "joined": np.zeros(0, bool), "key": z, "valid": np.zeros(0, bool), "reason": z}

    # ------------------------------------------------------------ column elimination
    @property
    def started(self) -> bool:
        """Whether any row has entered the state (then the columns kept can no longer grow)."""
        return any(self.next_rank)

    def keep_columns(self, choice: ColumnChoice) -> None:
        """Keep in every tier only the columns `choice` keeps (before any row entered the state)."""
        if self.started and (self.columns is None or choice.kept != self.columns.kept):
            raise KnobError(
                "the columns k-Mon's state keeps are chosen before data flows (stored rows lack the others)"
            )
        self.columns = choice
        kept = choice.kept
        self.join.keep_columns(kept)
        at = [{c: i for i, c in enumerate(k)} for k in kept]
        self.key_exprs = (renumber(self.full_key_exprs[0], at[0]), renumber(self.full_key_exprs[1], at[1]))
        for x in range(2):
            if not len(self.stores[x]):
                self.stores[x].close()
                self.stores[x] = TieredStore(self.join.input_types[x])

    def state_bytes(self) -> dict[str, int]:
        """Bytes of the join's rows k-Mon keeps: in memory (its state), in the retraction tier,
        and in the disk store's files."""
        return {
            "memory": sum(b.nbytes() for b in self.join.state),
            "tier": sum(s.tier_bytes() for s in self.stores),
            "disk": sum(s.disk_bytes() for s in self.stores),
        }

    # ------------------------------------------------------------ entity protocol
    @property
    def eid(self) -> str:
        return f"kmon:{self.join.eid or 'join'}"

    @property
    def feeds(self) -> str | None:
        return None

    def _keys(self, x: int, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        """Join keys (int64) and their validity (not NULL) of input x's rows `b` (the call's events
        are evaluated once per call)."""
        hit = self._key_cache.get((x, id(b)))
        if hit is not None and hit[0] is b:
            return hit[1], hit[2]
        if not len(b):
            return np.zeros(0, np.int64), np.zeros(0, bool)
        v, nulls = self.join.ev.eval(self.key_exprs[x], b)
        valid = np.ones(len(b), bool) if nulls is None else ~nulls
        out = np.asarray(v).astype(np.int64)
        self._key_cache[(x, id(b))] = (b, out, valid)
        return out, valid

    def _event_groups(self, y: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Input y's events of this call grouped by valid join key (`_keys_inserted`), once per
        call: the other input's store probe and y's live-key counts both use them."""
        hit = self._groups_cache.get(y)
        if hit is None:
            e = self._evs[y]
            k, ok = self._keys(y, e)
            hit = self._groups_cache[y] = _keys_inserted(k[ok], e.sign[ok] > 0)
        return hit

    def _active(self, r: Rule) -> float | None:
        """The k a rule runs with now, or None when it is not used (withdrawn or above threshold)."""
        k = r.monitor.k_u
        if k == INF or k > self.config.threshold:
            return None
        if self.config.mode == "approx" and _assumed(r):
            return None  # approximate mode drops rows on a k declared or measured, not on an assumption
        if self.config.mode == "approx" and r.evidence:
            k = r.monitor.k_e
        return k

    # ------------------------------------------------------------ before a call
    def before(
        self, state: list[Batch], evs: list[Batch], raw: list[Batch], kept_at: list[np.ndarray | None]
    ) -> list[Batch]:
        """`evs`: the call's events after the join's selections; `raw`: before them; `kept_at[x]`:
        positions in raw[x] of the events the selections kept (None: all)."""
        self._evs, self._raw, self._at = evs, raw, kept_at
        self._key_cache, self._groups_cache = {}, {}
        self._deleted_in_store = [0, 0]
        self._was = [np.zeros(len(state[x]), np.int64) for x in range(2)]
        tiered = self.config.retraction == "memory"
        for x in range(2):
            st = self.stores[x]
            if not len(st):
                continue
            if tiered:  # a partner's delete needs only the tier (rows that met a live partner)
                u, has_ins, _ = self._event_groups(1 - x)
                got = st.take_for_call(u, has_ins)
            else:
                got = st.take_matching(self._event_groups(1 - x)[0])
            if len(got):
                self.restored += len(got)
                self._merge(x, state, got)
            ex = evs[x]
            if len(ex):
                # spilled rows deleted now (left behind by the key probe) go without a disk read:
                # the join meets their deletes without the rows, which changes none of its results
                self._deleted_in_store[x] = st.drop_ids(ex.id[ex.sign < 0])
        return state

    def _merge(self, x: int, state: list[Batch], got: Rows) -> None:
        """Put restored rows back into x's state, in arrival order."""
        mine = Rows(state[x], dict(self.book[x]))
        was = np.concatenate([self._was[x], got.cols["reason"]])
        got = Rows(got.b, {**got.cols, "reason": np.zeros(len(got), np.int64)})
        allr = Rows.cat([mine, got], self.join.input_types[x])
        o = np.argsort(allr.cols["rank"], kind="stable")
        allr = allr.take(o)
        state[x] = allr.b
        self.book[x] = allr.cols
        self._was[x] = was[o]

    # ------------------------------------------------------------ after a call
    def after(self, tables: list[Table], parts: list[Probed]) -> None:
        join = self.join
        evs = self._evs
        full: list[dict[str, np.ndarray]] = []
        was: list[np.ndarray] = []
        # arrivals are counted on the raw inputs (before the join's selections): k is about the stream
        raw = self._raw
        ord_raw: list[np.ndarray] = []  # per input: raw insert ordinal of each event the join kept
        ins_ts: list[np.ndarray] = []  # per input: ts of the call's raw inserts
        ins_mask: list[np.ndarray] = []
        for x in range(2):
            b = raw[x]
            ins = b.sign > 0
            ordinal = np.cumsum(ins) - 1
            ord_raw.append(ordinal if self._at[x] is None else ordinal[self._at[x]])
            ins_ts.append(b.ts[ins])
            ins_mask.append(ins)
        partner_before = [self.inserts[1], self.inserts[0]]
        for x in range(2):
            t = tables[x]
            n_ev = len(t.b) - t.n_state
            key, valid = self._keys(x, evs[x]) if n_ev else (np.zeros(0, np.int64), np.zeros(0, bool))
            # partner arrivals before each event in the join's order (ts, then input index)
            # (at the same instant: input 0 first, or both ways for a relational input)
            at = t.b.ts[t.n_state :]
            tied = np.searchsorted(ins_ts[1 - x], at, "right") if x or self.relational[x] else None
            born = partner_before[x] + (np.searchsorted(ins_ts[1 - x], at, "left") if tied is None else tied)
            new = {
                "rank": self.next_rank[x] + np.arange(n_ev, dtype=np.int64),
                "born": born.astype(np.int64),
                "joined": np.zeros(n_ev, bool),
                "key": key,
                "valid": valid,
                "reason": np.zeros(n_ev, np.int64),
            }
            self.next_rank[x] += n_ev
            full.append({k: np.concatenate([self.book[x][k], new[k]]) for k in BOOK})
            was.append(np.concatenate([self._was[x], np.zeros(n_ev, np.int64)]))
        joined_before = [f["joined"].copy() for f in full]
        rids_d = [np.zeros(len(ins_ts[y]), np.int64) for y in range(2)]  # per raw arrival of y: max join distance
        for i, idx, _seq in parts:
            x = 1 - i
            sign = tables[i].b.sign[idx[i]]
            for side in (0, 1):
                full[side]["joined"][idx[side][tables[side].b.sign[idx[side]] > 0]] = True
            ins = sign > 0
            if not ins.any():
                continue
            rows = idx[x][ins]
            ordinal = ord_raw[i][idx[i][ins] - tables[i].n_state]
            fresh = ~joined_before[x][rows]
            if fresh.any():
                d = partner_before[x] + ordinal[fresh] + 1 - full[x]["born"][rows[fresh]]
                np.maximum.at(rids_d[i], ordinal[fresh], d)
            self._violations(x, rows, joined_before[x], was[x])
        # monitors: partner arrivals of each rule's input
        for r in self.rules:
            y = 1 - r.x
            if isinstance(r, RidsRule):
                r.monitor.observe(rids_d[y])
            elif len(raw[y]):
                k, ok = self._keys(y, raw[y])
                d = r.arrive(k[ins_mask[y] & ok])
                if d is not None:
                    r.monitor.observe(d)
        gone = [np.zeros(0, np.int64), np.zeros(0, np.int64)]  # per input: keys whose last live row went
        for x in range(2):
            self.inserts[x] += len(ins_ts[x])
            u, _, d = self._event_groups(x)
            if len(u):
                gone[x] = self.alive_keys[x].add_grouped(u, d)
        for r in self.rules:
            r.forget(self.alive_keys[r.x].keys)
        if self.config.retraction == "memory":
            for x in range(2):
                self.stores[x].evict_keys(gone[1 - x])
        # approximate mode: partner inserts meeting a dropped row's key lost results: withdraw the rules
        suspected, probes = [0, 0], [0, 0]
        if self.config.mode == "approx":
            for x in range(2):
                e = evs[1 - x]
                if not len(e) or not self.ledgers[x].dropped:
                    continue
                k, ok = self._keys(1 - x, e)
                keep = (e.sign > 0) & ok
                suspected[x], bits = self.ledgers[x].hits(k[keep])
                probes[x] = int(keep.sum())
                for r in self.rules:
                    if r.x == x and bits & r.bit:
                        r.monitor.withdraw("lost results")
        # surviving rows, then those of withdrawn rules back from the store
        restored_now: list[Rows] = [Rows(Batch.empty(join.input_types[x]), {}) for x in range(2)]
        for r in self.rules:
            for what, new_k in r.monitor.drain():
                self._report(r, what, new_k)
                if new_k == INF and self.config.mode == "exact":
                    got = self.stores[r.x].take_reason(r.bit)
                    if len(got):
                        self.restored += len(got)
                        restored_now[r.x] = Rows.cat([restored_now[r.x], got], join.input_types[r.x])
        tuples = sum(len(e) for e in evs)
        for x in range(2):
            t = tables[x]
            surv = Rows(join.state[x], {k: v[t.survivors] for k, v in full[x].items()})
            if len(restored_now[x]):
                rb = restored_now[x]
                rb = Rows(rb.b, {**rb.cols, "reason": np.zeros(len(rb), np.int64)})
                surv = Rows.cat([surv, rb], join.input_types[x])
                surv = surv.take(np.argsort(surv.cols["rank"], kind="stable"))
            # deletes applied in the store are not deletes of rows never seen (the join's counter)
            self.join.counters.extra["unmatched_deletes"] -= self._deleted_in_store[x]
            self._prune(x, surv, t.unmatched_deletes - self._deleted_in_store[x])
        for x in range(2):
            self.ledgers[x].tick(tuples, suspected[x], probes[x])
        self._evs, self._raw, self._key_cache, self._groups_cache = [], [], {}, {}  # hold no batch between calls
        self._at = [None, None]
        self._stats()

    def _violations(self, x: int, rows: np.ndarray, joined_before: np.ndarray, was: np.ndarray) -> None:
        """Rows of x matched by partner inserts: a row a rule had moved out (restored for this key),
        or a second partner under many-one, violates that rule."""
        bits = int(np.bitwise_or.reduce(was[rows])) if len(rows) else 0
        for r in self.rules:
            if r.x != x or r.monitor.withdrawn:
                continue
            if bits & r.bit or (
                isinstance(r, ManyOneRule)
                and (
                    bool(joined_before[rows].any()) or len(sorted_unique(rows)) < len(rows)  # a 2nd partner
                )
            ):
                r.monitor.withdraw()

    def _prune(self, x: int, surv: Rows, unmatched_deletes: int) -> None:
        """Move x's unnecessary rows out of memory and keep the rest as the join's state."""
        cfg = self.config
        n = len(surv)
        reason = np.zeros(n, np.int64)
        if cfg.mode != "off" and n:
            view = StateView(
                surv.cols["key"], surv.cols["valid"], surv.cols["joined"], surv.cols["born"], self.inserts[1 - x]
            )
            sample = _sampled(surv.b.id, cfg.p) if cfg.mode == "approx" else None
            for r in self.rules:
                k = self._active(r) if r.x == x else None
                if k is None:
                    continue
                m = r.blocked(view, k)
                if sample is not None and r.evidence:
                    m &= ~sample
                reason[m] |= r.bit
        blocked = reason != 0
        self.parts[x] = partition(surv.cols["joined"], blocked)
        led = self.ledgers[x]
        if cfg.mode == "approx":
            led.dropped_alive = max(0, led.dropped_alive - unmatched_deletes)
        if not blocked.any():
            self.join.state[x] = surv.b
            self.book[x] = surv.cols
            return
        out = {**surv.cols, "reason": reason}
        allr = Rows(surv.b, out)
        if cfg.mode == "approx":
            drop = blocked & ~surv.cols["joined"]
            led.drop(surv.cols["key"][drop & surv.cols["valid"]], reason[drop & surv.cols["valid"]])
            led.dropped_alive += int((drop & ~surv.cols["valid"]).sum())
            spill = blocked & ~drop
        else:
            spill = blocked
        if spill.any():
            out_rows = allr.take(np.flatnonzero(spill))
            if cfg.retraction == "memory":
                self.stores[x].put_split(out_rows, self.alive_keys[1 - x].keys)
            else:
                self.stores[x].put(out_rows)
            self.spilled += int(spill.sum())
        keep = np.flatnonzero(~blocked)
        kept = allr.take(keep)
        self.join.state[x] = kept.b
        self.book[x] = {**kept.cols, "reason": np.zeros(len(kept), np.int64)}

    # ------------------------------------------------------------ reporting
    def _report(self, r: Rule, what: str, k: float) -> None:
        lab = r.label()
        if k == INF:
            self.withdrawals.append(lab)
            self._events.append((f"withdrawn {lab}"[:40], 1.0))
        else:
            self._events.append((f"k {lab}"[:40], float(k)))

    def events(self) -> list[tuple[str, float]]:
        out, self._events = self._events, []
        return out

    def counts(self) -> dict[str, int]:
        mem = sum(len(s) for s in self.join.state)
        spilled = sum(len(s) for s in self.stores)
        dropped = sum(led.dropped_alive for led in self.ledgers)
        tier = sum(len(s.tier) for s in self.stores)
        return {"state": mem, "spilled": spilled, "dropped": dropped, "baseline": mem + spilled + dropped, "tier": tier}

    def _stats(self) -> None:
        c = self.counts()
        self.peak["state"] = max(self.peak["state"], c["state"])
        self.peak["baseline"] = max(self.peak["baseline"], c["baseline"])

    def monitor_bytes(self) -> int:
        """Memory of the k-Mon structures: monitors' value tables, Bloom filters, bookkeeping."""
        book = sum(v.nbytes for b in self.book for v in b.values())
        return (
            sum(r.nbytes() for r in self.rules)
            + sum(s.nbytes() for s in self.stores)
            + sum(led.nbytes() for led in self.ledgers)
            + sum(a.nbytes() for a in self.alive_keys)
            + book
        )

    def ratio(self) -> float | None:
        c = self.counts()
        return c["state"] / c["baseline"] if c["baseline"] else None

    def fn_blocks(self) -> list[tuple[int, int, int]]:
        """(block, suspected false negatives, partner inserts) per 4000-tuple block (approximate mode)."""
        out: dict[int, list[int]] = {}
        for led in self.ledgers:
            for b, fn, pr in led.blocks:
                o = out.setdefault(b, [0, 0])
                o[0] += fn
                o[1] += pr
        return [(b, v[0], v[1]) for b, v in sorted(out.items())]

    def summary(self) -> str:
        """One EXPLAIN line: the constraints in use and the state against the baseline."""
        labs = ", ".join(r.label() for r in self.rules)
        ratio = self.ratio()
        tail = "" if ratio is None else f" → state {100 * ratio:.0f}% of baseline"
        cols = "" if self.columns is None else f"; {self.columns.line()}"
        return f"k-constraints ({self.config.mode}): {labs}{tail}{cols}"

    def control_table(self) -> dict[str, Any]:
        c = self.counts()
        blocks = self.fn_blocks()
        last = blocks[-1] if blocks else None
        counters: dict[str, Any] = {
            "state_tuples": c["state"],
            "spilled_tuples": c["spilled"],
            "retraction_tuples": c["tier"],
            "retraction_bytes": sum(s.tier_bytes() for s in self.stores),
            "borrowed_tuples": sum(s.borrowed for s in self.stores),
            "dropped_tuples": c["dropped"],
            "baseline_tuples": c["baseline"],
            "state_ratio": round(c["state"] / c["baseline"], 6) if c["baseline"] else None,
            "kmon_bytes": self.monitor_bytes(),
            **{f"state_bytes_{k}": v for k, v in self.state_bytes().items()},
            "eliminated_columns": sum(len(self.columns.eliminated(x)) for x in range(2)) if self.columns else 0,
            "restored_tuples": self.restored,
            "store_reads": sum(s.reads for s in self.stores),
            "withdrawals": len(self.withdrawals),
            "fn_blocks": len(blocks),
            "fn_last_block": last[1] if last else 0,
            "fn_max_block": max((b[1] for b in blocks), default=0),
        }
        for x, p in enumerate(self.parts):
            if p is not None:
                counters.update({f"in{x}_yes": p.yes, f"in{x}_no": p.no, f"in{x}_unknown": p.unknown})
        return {
            "kind": "kconstraints",
            "name": self.eid,
            "join": self.join.eid,
            "counters": counters,
            "constraints": [
                {
                    "constraint": r.label(),
                    "stream": r.c.stream,
                    "column": r.c.column,
                    "origin": _origin(r),
                    "prunes_input": r.x,
                    "k_declared": None if r.monitor.declared == INF or _assumed(r) else r.monitor.declared,
                    "k_in_use": None if r.monitor.k_u == INF else r.monitor.k_u,
                    "max_distance_seen": r.monitor.max_seen,
                    "withdrawn": r.monitor.withdrawn,
                }
                for r in self.rules
            ],
            "withdrawals": list(self.withdrawals),
            "columns": self.columns.table() if self.columns is not None else [],
            "knobs": {
                "mode": self.config.mode,
                "detect": self.config.detect,
                "W": self.config.W,
                "c": self.config.c,
                "p": self.config.p,
                "threshold": None if self.config.threshold == INF else self.config.threshold,
                "retraction": self.config.retraction,
                "eliminate_columns": self.config.eliminate_columns,
            },
            "block_size": BLOCK,
        }

    def set_knob(self, knob: str, value: Any) -> None:
        cfg = self.config
        if knob == "mode":
            if value not in MODES:
                raise KnobError(f"k-constraint mode is one of {', '.join(MODES)}, not {value!r}")
            if value != "exact" and cfg.mode == "exact":
                self._restore_all()
            self.config = replace(cfg, mode=value)
            if value == "off":
                self._restore_all()
        elif knob == "retraction":
            if value not in RETRACTION:
                raise KnobError(f"retraction is one of {', '.join(RETRACTION)}, not {value!r}")
            self.config = replace(cfg, retraction=value)
            if value == "disk":  # the tier's rows go to disk with the others
                for st in self.stores:
                    st.evict(np.zeros(0, np.int64))
        elif knob == "detect":
            if not isinstance(value, bool):
                raise KnobError("detect is true or false")
            self.config = replace(cfg, detect=value)
            for r in self.rules:
                r.monitor.detect = value
        elif knob in ("W", "c", "p", "threshold"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise KnobError(f"{knob} is a non-negative number")
            num: dict[str, Any] = {knob: int(value) if knob == "W" else float(value)}
            self.config = replace(cfg, **num)
            for r in self.rules:
                r.monitor.W, r.monitor.c, r.monitor.p = self.config.W, self.config.c, self.config.p
        elif knob == "eliminate_columns":
            if not isinstance(value, bool):
                raise KnobError("eliminate_columns is true or false")
            if self.columns is not None and value != self.columns.eliminate:
                self.keep_columns(replace(self.columns, eliminate=value))  # refused once rows are stored
            self.config = replace(cfg, eliminate_columns=value)
        else:
            raise KnobError(
                f"unknown knob '{knob}' (known: mode, detect, W, c, p, threshold, retraction, eliminate_columns)"
            )

    def _restore_all(self) -> None:
        """Everything spilled comes back (leaving exact mode, or turned off)."""
        for x in range(2):
            got = self.stores[x].take_reason(-1)
            if len(got):
                state = list(self.join.state)
                self._was = [np.zeros(len(state[0]), np.int64), np.zeros(len(state[1]), np.int64)]
                self._merge(x, state, got)
                self.join.state[x] = state[x]
                self.book[x] = {**self.book[x], "reason": np.zeros(len(state[x]), np.int64)}
