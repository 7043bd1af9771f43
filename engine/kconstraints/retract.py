"""Spilled rows kept in memory for retraction only (exact mode's knob `retraction = memory`).

A spilled row that met a partner (a Yes row) is needed again when one of those partners is deleted
(its window expiring it, or a relation deleting it): the join retracts the pair's result and needs
the row's values to do so. With every spilled row on disk, each such delete read the row back,
merged it into the state and wrote it out again: under CA and OAP, whose spilled children are Yes
rows with parents still in the window, that was most of k-Mon's cost. So a spilled Yes row whose
key still has live partner rows stays in memory, in a tier of plain columns: its values, id and
timestamp, and of its bookkeeping only the join key, arrival rank and the rule bits that moved it
out (it met a partner and its key is valid, by construction; its partner count at arrival no
longer matters, since a blocked row stays blocked as partners arrive). A partner's delete borrows
the tier's rows of its key for the call, with no disk access. Once no partner row of its key is
left, no delete can need the row, and it goes to disk with the others; only a partner insert of
its key (which the constraints said would not come) brings it back from there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch
from cqlstream.engine.kconstraints.store import Rows, SpillStore, in_sorted, sorted_unique

TIER_COLS = ("rank", "key", "reason")  # bookkeeping the tier keeps per row


class TieredStore(SpillStore):
    """The disk store of one join input with the retraction tier in front of it."""

    def __init__(self, types: Any, directory: str | None = None) -> None:
        super().__init__(types, directory)
        self.tier = self._empty()
        self.borrowed = 0  # rows lent to calls for a partner's delete (no disk access)

    def _empty(self) -> Rows:
        return Rows(Batch.empty(self.types), {k: np.zeros(0, np.int64) for k in TIER_COLS})

    def __len__(self) -> int:
        return super().__len__() + len(self.tier)

    def on_disk(self) -> int:
        return super().__len__()

    def tier_bytes(self) -> int:
        return self.tier.b.nbytes() + sum(v.nbytes for v in self.tier.cols.values())

    # ------------------------------------------------------------ the tier's rows in and out
    def _full(self, rows: Rows) -> Rows:
        """Tier rows with the join's whole bookkeeping again (met a partner, valid key)."""
        n = len(rows)
        return Rows(
            rows.b,
            {
                "rank": rows.cols["rank"],
                "born": np.zeros(n, np.int64),
                "joined": np.ones(n, bool),
                "key": rows.cols["key"],
                "valid": np.ones(n, bool),
                "reason": rows.cols["reason"],
            },
        )

    def _tier_take(self, m: np.ndarray) -> Rows:
        """Remove the tier rows `m` marks and return them with the whole bookkeeping."""
        if not m.any():
            return Rows(Batch.empty(self.types), {})
        got = self.tier.take(np.flatnonzero(m))
        self.tier = self.tier.take(np.flatnonzero(~m))
        return self._full(got)

    def put_split(self, rows: Rows, live_partner_keys: np.ndarray) -> None:
        """Spill `rows`: those that met a partner whose key has live partner rows to the tier, the
        rest to disk."""
        c = rows.cols
        m = c["joined"] & c["valid"] & in_sorted(c["key"], live_partner_keys)
        if m.any():
            t = rows.take(np.flatnonzero(m))
            self.tier = Rows.cat([self.tier, Rows(t.b, {k: t.cols[k] for k in TIER_COLS})], self.types)
        if not m.all():
            self.put(rows.take(np.flatnonzero(~m)))

    def evict(self, live_partner_keys: np.ndarray) -> int:
        """Move to disk the tier rows no partner delete can need any more (no live partner row
        of their key). Returns how many moved."""
        if not len(self.tier):
            return 0
        return self._evict_where(~in_sorted(self.tier.cols["key"], live_partner_keys))

    def evict_keys(self, gone_partner_keys: np.ndarray) -> int:
        """`evict` told only the partner keys whose last live row went in this call (sorted): a
        tier row's key had live partner rows when it came in, so these are the only keys whose
        rows can have become unneeded since the last call. Returns how many moved."""
        if not len(self.tier) or not len(gone_partner_keys):
            return 0
        return self._evict_where(in_sorted(self.tier.cols["key"], gone_partner_keys))

    def _evict_where(self, gone: np.ndarray) -> int:
        if gone.any():
            self.put(self._tier_take(gone))
        return int(gone.sum())

    def borrow(self, keys: np.ndarray) -> Rows:
        """The tier's rows of `keys` (a call's partner deletes), taken out for the call; pruning
        after it moves them out again."""
        if not len(self.tier) or not len(keys):
            return Rows(Batch.empty(self.types), {})
        got = self._tier_take(in_sorted(self.tier.cols["key"], sorted_unique(keys)))
        self.borrowed += len(got)
        return got

    def take_for_call(self, keys: np.ndarray, inserted: np.ndarray) -> Rows:
        """What a call's partner events need, in one pass over the tier: `keys` (sorted, distinct)
        are their valid join keys, `inserted` marks the keys an insert has. The tier's rows of
        every key come out (a delete needs them for the retraction, an insert to join), those of
        delete-only keys counted as borrowed; the disk is probed for the inserted keys only."""
        got = [SpillStore.take_matching(self, keys[inserted])]
        if len(self.tier) and len(keys):
            tk = self.tier.cols["key"]
            at = np.minimum(np.searchsorted(keys, tk), len(keys) - 1)
            m = keys[at] == tk
            if m.any():
                self.borrowed += int((m & ~inserted[at]).sum())
                got.append(self._tier_take(m))
        return Rows.cat([g for g in got if len(g)], self.types) if any(len(g) for g in got) else got[0]

    # ------------------------------------------------------------ the disk store's calls, tier too
    def take_matching(self, keys: np.ndarray, ids: np.ndarray | None = None) -> Rows:
        got = [super().take_matching(keys, ids)]
        if len(self.tier):
            m = in_sorted(self.tier.cols["key"], sorted_unique(keys))
            if ids is not None and len(ids):
                m |= in_sorted(self.tier.b.id.view(np.int64), sorted_unique(ids))
            got.append(self._tier_take(m))
        return Rows.cat([g for g in got if len(g)], self.types) if any(len(g) for g in got) else got[0]

    def drop_ids(self, ids: np.ndarray) -> int:
        gone = 0
        ids = sorted_unique(ids) if len(ids) else ids
        if len(self.tier) and len(ids):
            m = in_sorted(self.tier.b.id.view(np.int64), ids)
            if m.any():
                self.tier = self.tier.take(np.flatnonzero(~m))
                gone = int(m.sum())
        return gone + super().drop_ids(ids)

    def take_reason(self, bit: int) -> Rows:
        got = [super().take_reason(bit)]
        if len(self.tier):
            got.append(self._tier_take((self.tier.cols["reason"] & bit) != 0))
        return Rows.cat([g for g in got if len(g)], self.types) if any(len(g) for g in got) else got[0]

    # ------------------------------------------------------------ pickling (engine snapshots)
    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "tier": self.tier, "borrowed": self.borrowed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.tier, self.borrowed = state["tier"], state["borrowed"]
