"""Exact mode's disk store: join state judged unnecessary is written here instead of being dropped,
and comes back whenever an event might need it, so results never change.

Rows are kept in segments (one pickle file each, rows in id order) with their bookkeeping columns.
Each segment has a Bloom filter over its join keys (or the keys themselves, delta-coded, when that
is smaller: dense keys, as arrival-ordered ids are), so most probes are answered "not here" without
touching the disk; a segment is read only when a probe key may be in it. Before the Bloom filter,
the segment's exact key range rules out the probes outside it: a call's probe keys number in the
hundreds or thousands, so at the filter's ≈ 1% false-positive rate nearly every segment would
otherwise be read on every call, while join keys drift with time and the ranges of old segments
rarely overlap a call's. Tuple ids are kept exactly (engine/kconstraints/idset.py, ≈ 1 byte per
row): the delete of a spilled row (its window expiring it) only marks it gone, with no disk read;
the join sees that delete without its row, which changes nothing in its results since a delete's
results come from the delete event itself. A segment read for a probe gets its key filter rebuilt
from the rows left (rows gone by id leave their keys in it until then). Segments are rewritten
smaller once under a quarter of their rows are left, and merged when there are many of them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cqlstream.engine.batch import Batch, concat
from cqlstream.engine.kconstraints.bloom import Bloom
from cqlstream.engine.kconstraints.idset import IdSet

MAX_SEGMENTS = 32  # merge all segments into one beyond this


@dataclass
class Rows:
    """Join-state rows with their k-Mon bookkeeping, column-aligned."""

    b: Batch
    cols: dict[str, np.ndarray] = field(default_factory=dict)  # rank, born, joined, key, valid, reason

    def __len__(self) -> int:
        return len(self.b)

    def take(self, sel: np.ndarray) -> Rows:
        return Rows(self.b.take(sel), {k: v[sel] for k, v in self.cols.items()})

    @staticmethod
    def cat(parts: list[Rows], types: Any) -> Rows:
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        return Rows(
            concat([p.b for p in parts], types), {k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols}
        )


@dataclass
class Segment:
    """One file of spilled rows with what a probe checks before reading it: key filter, key range,
    ids, live rows."""

    path: str
    n: int  # rows still in the segment
    keys: Bloom | IdSet  # the join keys: exact when their gaps fit a byte (smaller than the filter)
    ids: IdSet  # the rows' ids, exact (row i of the file has the i-th smallest id)
    reasons: int  # OR of the rows' reason bits
    alive: np.ndarray  # per stored row: not taken back yet (rows taken are only marked, until half are gone)
    key_range: tuple[int, int]  # smallest and largest valid join key written (lo > hi: none)
    filter_n: int = -1  # live rows when `keys` was built (rows gone since leave their keys in it)

    def __post_init__(self) -> None:
        if self.filter_n < 0:
            self.filter_n = self.n

    def may_hold(self, keys: np.ndarray) -> bool:
        """Whether a row with one of `keys` (sorted, distinct) may be here: the exact key range,
        then the exact keys or the Bloom filter."""
        lo = np.searchsorted(keys, self.key_range[0], "left")
        hi = np.searchsorted(keys, self.key_range[1], "right")
        if hi <= lo:
            return False
        if isinstance(self.keys, IdSet):
            return bool(len(self.keys.positions(keys[lo:hi])))
        return bool(self.keys.contains(keys[lo:hi]).any())

    def live_positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions of the live rows whose id is in `ids` (sorted int64)."""
        pos = self.ids.positions(ids)
        return pos[self.alive[pos]]


def sorted_unique(v: np.ndarray) -> np.ndarray:
    """`v` (int64, or uint64 ids seen as int64) sorted and distinct; a call's keys and ids often
    are already (arrival-ordered ids, window expiries), which one comparison pass finds."""
    v = v.view(np.int64) if v.dtype == np.uint64 else v
    if len(v) < 2 or bool(np.all(v[1:] > v[:-1])):
        return v
    v = np.sort(v)  # a plain sort and a mask: np.unique costs more per call on small arrays
    keep = np.empty(len(v), bool)
    keep[0] = True
    np.not_equal(v[1:], v[:-1], out=keep[1:])
    return v[keep]


def in_sorted(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Whether each value is in `sorted_keys` (sorted, distinct): one binary search per value,
    no sort of both as np.isin does."""
    if not len(sorted_keys) or not len(values):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[at] == values


def _overlapping(probes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range [lo, hi]: whether one of `probes` (sorted) falls in it (one search for all
    segments instead of a Python call per segment)."""
    return np.searchsorted(probes, hi, "right") > np.searchsorted(probes, lo, "left")


def _key_filter(rows: Rows) -> tuple[Bloom | IdSet, tuple[int, int]]:
    """The key filter of a segment's rows (exact keys when their gaps fit a byte, as dense keys'
    do: smaller than the Bloom filter) and their exact range."""
    keys = rows.cols["key"][rows.cols["valid"]]
    exact = IdSet(sorted_unique(keys))
    kb: Bloom | IdSet = exact
    if exact.gaps.itemsize > 1:
        kb = Bloom(len(keys))
        kb.add(keys)
    return kb, ((int(keys.min()), int(keys.max())) if len(keys) else (1, 0))


class SpillStore:
    """The spilled rows of one join input."""

    def __init__(self, types: Any, directory: str | None = None) -> None:
        self.types = types
        self.dir = tempfile.mkdtemp(prefix="kmon-", dir=directory)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True)
        self.segments: list[Segment] = []
        self.counter = 0
        self.reads = 0  # segment reads (disk accesses)
        self.writes = 0

    def __len__(self) -> int:
        return sum(s.n for s in self.segments)

    def nbytes(self) -> int:
        """Memory the store holds (its Bloom filters and row marks), not the disk it uses."""
        return sum(s.keys.nbytes() + s.ids.nbytes() + s.alive.nbytes + 16 for s in self.segments)

    def disk_bytes(self) -> int:
        """Bytes of the segment files on disk (rows with their bookkeeping, pickled)."""
        return sum(os.path.getsize(s.path) for s in self.segments)

    def close(self) -> None:
        self._cleanup()
        self.segments = []

    # ------------------------------------------------------------ writing and reading segments
    def _write(self, rows: Rows) -> Segment:
        ids = rows.b.id.view(np.int64)
        if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            o = np.argsort(ids, kind="stable")
            rows, ids = rows.take(o), ids[o]
        self.counter += 1
        path = os.path.join(self.dir, f"seg{self.counter}.pkl")
        with open(path, "wb") as f:
            pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.writes += 1
        kb, rng = _key_filter(rows)
        bits = int(np.bitwise_or.reduce(rows.cols["reason"])) if len(rows) else 0
        return Segment(path, len(rows), kb, IdSet(ids), bits, np.ones(len(rows), bool), rng)

    def _read(self, seg: Segment) -> Rows:
        """The segment's rows still in it."""
        self.reads += 1
        with open(seg.path, "rb") as f:
            rows: Rows = pickle.load(f)
        return rows if seg.n == len(seg.alive) else rows.take(np.flatnonzero(seg.alive))

    def put(self, rows: Rows) -> None:
        if not len(rows):
            return
        self.segments.append(self._write(rows))
        if len(self.segments) > MAX_SEGMENTS:
            # size-tiered: the smaller half of the segments become one
            small = sorted(self.segments, key=lambda g: g.n)[: MAX_SEGMENTS // 2]
            merged = self._take_all(lambda r: np.ones(len(r), bool), small)
            self.segments.append(self._write(merged))

    def _take_all(self, select: Any, segments: list[Segment] | None = None) -> Rows:
        """Remove and return the rows `select(rows)` marks, over `segments` (default: all)."""
        out: list[Rows] = []
        keep: list[Segment] = []
        for seg in self.segments:
            if segments is not None and not any(seg is s for s in segments):
                keep.append(seg)
                continue
            rows = self._read(seg)
            m = select(rows)
            if not m.any():
                if seg.n < seg.filter_n:  # rows went since the key filter was built: rebuild it
                    seg.keys, seg.key_range = _key_filter(rows)
                    seg.filter_n = seg.n
                keep.append(seg)
                continue
            out.append(rows.take(np.flatnonzero(m)))
            rest = np.flatnonzero(~m)
            if not len(rest):
                os.unlink(seg.path)
            elif 4 * len(rest) < len(seg.alive):  # under a quarter left: rewrite the segment smaller
                os.unlink(seg.path)
                keep.append(self._write(rows.take(rest)))
            else:  # mark the rows taken; the file stays
                pos = np.flatnonzero(seg.alive)
                seg.alive[pos[m]] = False
                seg.n = seg.filter_n = len(rest)
                seg.keys, seg.key_range = _key_filter(rows.take(rest))
                keep.append(seg)
        self.segments = keep
        return Rows.cat(out, self.types) if out else Rows(Batch.empty(self.types), {})

    # ------------------------------------------------------------ what comes back
    def take_matching(self, keys: np.ndarray, ids: np.ndarray | None = None) -> Rows:
        """Remove and return the rows whose key is in `keys` or whose id is in `ids`."""
        ui = sorted_unique(ids) if ids is not None and len(ids) else np.zeros(0, np.int64)
        if not self.segments or (not len(keys) and not len(ui)):
            return Rows(Batch.empty(self.types), {})
        uk = sorted_unique(keys)
        segs = self.segments
        near = np.zeros(len(segs), bool)
        if len(uk):  # the exact key ranges first, for all segments at once
            near = _overlapping(uk, *np.array([s.key_range for s in segs], np.int64).reshape(-1, 2).T)
        if len(ui):
            near |= _overlapping(ui, *np.array([(s.ids.first, s.ids.last) for s in segs], np.int64).reshape(-1, 2).T)
        hit = [
            s
            for s, go in zip(segs, near.tolist())
            if go and (s.may_hold(uk) or (len(ui) > 0 and len(s.live_positions(ui)) > 0))
        ]
        if not hit:
            return Rows(Batch.empty(self.types), {})
        return self._take_all(
            lambda r: (in_sorted(r.cols["key"], uk) & r.cols["valid"]) | in_sorted(r.b.id.view(np.int64), ui), hit
        )

    def drop_ids(self, ids: np.ndarray) -> int:
        """Remove the rows whose id is in `ids` without reading them (their deletes came): they are
        marked gone in memory; a segment with no row left is deleted. Returns how many went."""
        if not self.segments or not len(ids):
            return 0
        ui = sorted_unique(ids)
        near = _overlapping(
            ui, *np.array([(s.ids.first, s.ids.last) for s in self.segments], np.int64).reshape(-1, 2).T
        )
        if not near.any():
            return 0
        gone = 0
        keep: list[Segment] = []
        for seg, go in zip(self.segments, near.tolist()):
            if not go:
                keep.append(seg)
                continue
            pos = seg.live_positions(ui)
            if len(pos):
                seg.alive[pos] = False
                seg.n -= len(pos)
                gone += len(pos)
            if seg.n:
                keep.append(seg)
            else:
                os.unlink(seg.path)
        self.segments = keep
        return gone

    def take_reason(self, bit: int) -> Rows:
        """Remove and return the rows a (withdrawn) rule put here."""
        hit = [s for s in self.segments if s.reasons & bit]
        if not hit:
            return Rows(Batch.empty(self.types), {})
        return self._take_all(lambda r: (r.cols["reason"] & bit) != 0, hit)

    # ------------------------------------------------------------ pickling (engine snapshots)
    def __getstate__(self) -> dict[str, Any]:
        rows = [self._read(s) for s in self.segments]
        return {"types": self.types, "rows": rows, "reads": self.reads, "writes": self.writes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["types"])  # type: ignore[misc]
        for r in state["rows"]:
            self.segments.append(self._write(r))
        self.reads, self.writes = state["reads"], state["writes"]
