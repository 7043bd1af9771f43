"""Join pairs of a few probes against the instances, by one broadcast comparison.

The joins' general pairing paths (`scan_pairs`, `StabIndex` in join.py) sort, group and
binary-search: ~20-60 numpy calls whatever the sizes. Linear Road's joins run once per round with
a handful of probes (a few S tuples, a few relation events) against a few hundred or thousand
instances, where those fixed calls are most of the cost. Here every probe's key is compared with
every instance's at once (a probes × instances boolean table) and validity and liveness are
tested on the equal-key cells only: ~12 numpy calls, the pairs in row-major order. Used when
probes × instances is at most `TINY_CELLS` (read at call time, so tests can force either path).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# largest probes × instances table the broadcast path builds: measured on Linear Road's replayed
# calls (bench/README.md, session 18 "joins with few rows"); above it the general paths' sorts
# cost less than the table's cells
TINY_CELLS = 1 << 15


class Pairing(NamedTuple):
    """What a pairing path (this one, `scan_pairs`, the joins' callers) pairs: probes (int64 key
    codes, valid mask, seq) against instances (key codes, valid mask, alive for lo < seq < hi).
    (A named tuple: built once per probe step, it costs what a tuple costs.)"""

    pkey: np.ndarray
    pvalid: np.ndarray
    seq: np.ndarray
    ikey: np.ndarray
    ivalid: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def tiny_pairs(q: Pairing, order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(probe positions, instance positions, key matches) of every probe with the instances of
    its (valid) key alive at its seq (lo < seq < hi). Pairs come by probe, in `order` when given
    (positions of the probes in the order wanted) else in position order, then in instance
    order. Key matches: the pairs with equal valid keys before the alive test (what the scan
    counts as candidate pairs)."""
    pkey, pvalid, seq, ikey, ivalid, lo, hi = q
    if order is not None:
        pkey, pvalid, seq = pkey.take(order), pvalid.take(order), seq.take(order)
    # only the key comparison is done on the whole table; validity and liveness are tested on
    # the (few) pairs of equal keys, in the table's row-major order
    p, at = (pkey[:, None] == ikey).nonzero()
    ok = ivalid.take(at)
    ok &= pvalid.take(p)
    matched = int(np.count_nonzero(ok))
    s = seq.take(p)
    ok &= lo.take(at) < s
    ok &= s < hi.take(at)
    sel = ok.nonzero()[0]
    p, at = p.take(sel), at.take(sel)
    if order is not None:
        p = order.take(p)
    return p, at, matched
