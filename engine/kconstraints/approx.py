"""Approximate mode's ledger: No rows are dropped (as in the paper), so a wrongly low k can lose
results. The ledger keeps the join keys of the rows it dropped (not the rows: 8 bytes each, plus
the bits of the rules that dropped them) for the last few generations of drops. A partner insert
whose key is among them may have lost results: it counts as a suspected false negative in its
4000-tuple block, and the rules that dropped those rows are withdrawn at once (the paper's
monitors alone would see the increase only through their p-sample, much later)."""

from __future__ import annotations

from collections import deque

import numpy as np

BLOCK = 4000  # input tuples per false-negative block (the paper's measure)
GENERATION = 1 << 16  # dropped keys per generation; the oldest generation is forgotten
GENERATIONS = 4


class DropLedger:
    def __init__(self) -> None:
        self.gens: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=GENERATIONS)  # (sorted keys, rule bits)
        self._open: list[tuple[np.ndarray, np.ndarray]] = []
        self._open_n = 0
        self.dropped = 0  # rows dropped so far
        self.dropped_alive = 0  # dropped rows whose own delete has not come yet (baseline memory)
        self.seen = 0  # input tuples so far
        self.block_fn = 0
        self.block_probes = 0
        self.blocks: deque[tuple[int, int, int]] = deque(maxlen=1000)  # (block, suspected fn, probes)

    def nbytes(self) -> int:
        return sum(k.nbytes + b.nbytes for k, b in self.gens) + sum(k.nbytes + b.nbytes for k, b in self._open)

    def drop(self, keys: np.ndarray, bits: np.ndarray) -> None:
        if not len(keys):
            return
        self._open.append((keys, bits))
        self._open_n += len(keys)
        self.dropped += len(keys)
        self.dropped_alive += len(keys)
        if self._open_n >= GENERATION:
            self._seal()

    def _seal(self) -> None:
        if self._open:
            k = np.concatenate([x for x, _ in self._open])
            b = np.concatenate([y for _, y in self._open])
            o = np.argsort(k, kind="stable")
            self.gens.append((k[o], b[o]))
            self._open, self._open_n = [], 0

    def hits(self, keys: np.ndarray) -> tuple[int, int]:
        """Partner inserts (their keys) that meet a dropped row's key: how many, and the OR of the
        bits of the rules that dropped those rows."""
        self._seal()
        if not len(keys) or not self.gens:
            return 0, 0
        hit = np.zeros(len(keys), bool)
        bits = 0
        for k, b in self.gens:
            lo = np.searchsorted(k, keys, side="left")
            hi = np.searchsorted(k, keys, side="right")
            h = hi > lo
            hit |= h
            if h.any():
                # every dropped row with a hit key (a range per key)
                rows = np.concatenate([np.arange(a, z) for a, z in zip(lo[h].tolist(), hi[h].tolist())])
                bits |= int(np.bitwise_or.reduce(b[rows]))
        return int(hit.sum()), bits

    def tick(self, tuples: int, suspected: int, probes: int) -> None:
        """Account one call: `tuples` input tuples, `suspected` of `probes` partner inserts."""
        self.block_fn += suspected
        self.block_probes += probes
        before = self.seen // BLOCK
        self.seen += tuples
        for blk in range(before, self.seen // BLOCK):
            self.blocks.append((blk, self.block_fn, self.block_probes))
            self.block_fn = self.block_probes = 0
