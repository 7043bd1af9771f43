"""When an integer sum cannot leave the int64 range: its float shadow is not computed.

sum/avg of an integer argument carry the exact sum as a wrapping int64 plus the same sum as a
compensated float (the *shadow*, additive.py's `Sum.shadow`), whose only use is to tell a sum
outside int64 (NULL, or avg's float) from one inside. The shadow costs the compensated
segmented sums of `exact_sum` (two cumulative sums and a dozen passes per batch).

Every total a cell reads is a signed sum of at most E argument values (E: the events the
operator has seen, all batches), each of magnitude at most M (the largest |value| seen). While
E · M < 2^62 no total can be outside int64, so the int64 totals are exact and the shadow is not
needed: it is skipped, and its carried (hi, lo) state left as it is. The first batch that breaks
the bound rebuilds the carried shadow of every group from its int64 total (exact up to then:
hi = the float nearest, lo = the rest, both exact since |total| < 2^62), and from then on the
shadow is computed as before. Outputs are identical either way: with no total outside int64,
sum reads the int64 total and avg divides it as a float, which is what the shadow path gives.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cqlstream.engine.aggregates.group_state import GroupState
from cqlstream.engine.aggregates.quantities import Quantity

LIMIT = 1 << 62


class SumBound:
    """The shadows (floating sums of integer arguments) of one aggregate and the bound E · M."""

    def __init__(self, shadows: list[Quantity]) -> None:
        self.shadows = shadows
        self.events = 0  # E
        self.maxabs = 0  # M, over the shadows' arguments
        self.safe = bool(shadows)  # the bound has held for every batch so far

    def skip(
        self, n: int, av: list[np.ndarray], an: list[np.ndarray], nulls_in: list[bool], state: GroupState
    ) -> frozenset[Quantity]:
        """The shadows this batch (n events, argument values `av`, not-NULL masks `an`) need not
        compute; when the batch breaks the bound, the carried shadows are rebuilt first."""
        if not self.safe:
            return frozenset()
        self.events += n
        for ai in {q.ai for q in self.shadows}:
            v = av[ai][an[ai]] if nulls_in[ai] else av[ai]
            if len(v):
                self.maxabs = max(self.maxabs, -int(v.min()), int(v.max()))
        if self.events * self.maxabs < LIMIT:
            return frozenset(self.shadows)
        self.safe = False
        for q in self.shadows:
            tot = state.totals[replace(q, floating=False)]
            hi = tot.astype(np.float64)
            state.fsum_hi[q][:] = hi
            state.fsum_lo[q][:] = (tot - hi.astype(np.int64)).astype(np.float64)
        return frozenset()
