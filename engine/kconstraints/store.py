"""Exact mode's disk store: join state judged unnecessary is written here instead of being dropped,
and comes back whenever an event might need it, so results never change.

Rows are kept in segments (one pickle file each) with their bookkeeping columns. Each segment has
a Bloom filter over its join keys and one over its tuple ids, so most events are answered "not
here" without touching the disk; a segment is read only when a probe key or a deleted id may be
in it. Segments are merged when there are many of them.
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
    path: str
    n: int  # rows still in the segment
    keys: Bloom
    ids: Bloom
    reasons: int  # OR of the rows' reason bits
    alive: np.ndarray  # per stored row: not taken back yet (rows taken are only marked, until half are gone)


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
        return sum(s.keys.nbytes() + s.ids.nbytes() + s.alive.nbytes for s in self.segments)

    def close(self) -> None:
        self._cleanup()
        self.segments = []

    # ------------------------------------------------------------ writing and reading segments
    def _write(self, rows: Rows) -> Segment:
        self.counter += 1
        path = os.path.join(self.dir, f"seg{self.counter}.pkl")
        with open(path, "wb") as f:
            pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
        self.writes += 1
        kb, ib = Bloom(len(rows)), Bloom(len(rows))
        kb.add(rows.cols["key"][rows.cols["valid"]])
        ib.add(rows.b.id.view(np.int64))
        bits = int(np.bitwise_or.reduce(rows.cols["reason"])) if len(rows) else 0
        return Segment(path, len(rows), kb, ib, bits, np.ones(len(rows), bool))

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
                keep.append(seg)
                continue
            out.append(rows.take(np.flatnonzero(m)))
            rest = np.flatnonzero(~m)
            if not len(rest):
                os.unlink(seg.path)
            elif 2 * len(rest) < len(seg.alive):  # under half left: rewrite the segment smaller
                os.unlink(seg.path)
                keep.append(self._write(rows.take(rest)))
            else:  # mark the rows taken; the file stays
                pos = np.flatnonzero(seg.alive)
                seg.alive[pos[m]] = False
                seg.n = len(rest)
                keep.append(seg)
        self.segments = keep
        return Rows.cat(out, self.types) if out else Rows(Batch.empty(self.types), {})

    # ------------------------------------------------------------ what comes back
    def take_matching(self, keys: np.ndarray, ids: np.ndarray) -> Rows:
        """Remove and return the rows whose key is in `keys` or whose id is in `ids`."""
        if not self.segments or (not len(keys) and not len(ids)):
            return Rows(Batch.empty(self.types), {})
        ids64 = ids.view(np.int64)
        hit = [s for s in self.segments if s.keys.contains(keys).any() or s.ids.contains(ids64).any()]
        if not hit:
            return Rows(Batch.empty(self.types), {})
        uk, ui = np.unique(keys), np.unique(ids64)
        return self._take_all(
            lambda r: (np.isin(r.cols["key"], uk) & r.cols["valid"]) | np.isin(r.b.id.view(np.int64), ui), hit
        )

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
