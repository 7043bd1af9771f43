"""Approximate mode's ledger: No rows are dropped (as in the paper), so a wrongly low k can lose
results. The ledger remembers the dropped keys in Bloom filters and counts, per block of 4000
input tuples, the partner inserts whose key may have met a dropped row: suspected false
negatives (an upper bound: a Bloom false positive or a dropped row already out of its window
also counts)."""

from __future__ import annotations

from collections import deque

import numpy as np

from cqlstream.engine.kconstraints.bloom import Bloom

BLOCK = 4000  # input tuples per false-negative block (the paper's measure)
GENERATION = 1 << 16  # dropped keys per Bloom filter; older filters are forgotten
GENERATIONS = 4


class DropLedger:
    def __init__(self) -> None:
        self.blooms: deque[Bloom] = deque(maxlen=GENERATIONS)
        self.dropped = 0  # rows dropped so far
        self.dropped_alive = 0  # dropped rows whose own delete has not come yet (baseline memory)
        self.seen = 0  # input tuples so far
        self.block_fn = 0
        self.block_probes = 0
        self.blocks: deque[tuple[int, int, int]] = deque(maxlen=1000)  # (block, suspected fn, probes)

    def nbytes(self) -> int:
        return sum(b.nbytes() for b in self.blooms)

    def drop(self, keys: np.ndarray) -> None:
        if not len(keys):
            return
        if not self.blooms or self.blooms[-1].items >= GENERATION:
            self.blooms.append(Bloom(GENERATION))
        self.blooms[-1].add(keys)
        self.dropped += len(keys)
        self.dropped_alive += len(keys)

    def suspect(self, keys: np.ndarray) -> int:
        """Partner inserts (their keys) that may have met a dropped row."""
        if not len(keys) or not self.blooms:
            return 0
        hit = np.zeros(len(keys), bool)
        for b in self.blooms:
            hit |= b.contains(keys)
        return int(hit.sum())

    def tick(self, tuples: int, suspected: int, probes: int) -> None:
        """Account one call: `tuples` input tuples, `suspected` of `probes` partner inserts."""
        self.block_fn += suspected
        self.block_probes += probes
        before = self.seen // BLOCK
        self.seen += tuples
        for b in range(before, self.seen // BLOCK):
            self.blocks.append((b, self.block_fn, self.block_probes))
            self.block_fn = self.block_probes = 0
