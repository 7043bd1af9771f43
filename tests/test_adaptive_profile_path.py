"""The selection profiler's fast path (engine/adaptive/): the matrix view counted per block
(`matrix.counts`) equals the thesis' per-tuple update (Fig 4.5, +1 on insert, −1 on expiry); a
view counted anew from the window when a pass replaces most of it equals the incremental one;
A-Greedy's invariant check over all rows at once finds the violation the row-by-row loop finds;
and a profiling pass riding on the executor's calls gives, for every sampled tuple, the drop
bits that evaluating every conjunct on the sample alone gives, while the survivors stay the
executor's own."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cqlstream.engine.adaptive import matrix
from cqlstream.engine.adaptive.config import AdaptiveConfig
from cqlstream.engine.adaptive.conjuncts import AdaptiveOrder
from cqlstream.engine.adaptive.matrix import MatrixView
from cqlstream.engine.adaptive.policies import AGreedy, Situation
from cqlstream.engine.batch import from_rows
from cqlstream.engine.exprs import Evaluator
from tests.test_adaptive_filters import _filter


def fig_4_5(v: np.ndarray, bits: np.ndarray, order: list[int], sign: int) -> None:
    """The thesis' update of V for one profile tuple, literally (0-based positions)."""
    n = len(order)
    dc = 0
    while dc < n and not bits[order[dc]]:
        dc += 1
    for c in range(dc, n):
        if bits[order[c]]:
            for r in range(dc + 1):
                v[r][c] += sign


@st.composite
def windows(draw):
    n = draw(st.integers(1, 6))
    order = draw(st.permutations(list(range(n))))
    density = draw(st.sampled_from([0.1, 0.4, 0.8]))
    seed = draw(st.integers(0, 2**32 - 1))
    size = draw(st.integers(1, 30))
    blocks = draw(st.lists(st.integers(0, 40), min_size=1, max_size=8))
    return n, order, density, seed, size, blocks


@settings(max_examples=120, deadline=None)
@given(windows())
def test_block_counts_equal_the_per_tuple_update(w):
    """Blocks of random profile tuples (some dropped by nothing) enter a window of `size` and
    expire from it: the per-block view (incremental, or counted anew when cheaper) equals Fig
    4.5 applied tuple by tuple."""
    n, order, density, seed, size, blocks = w
    rng = np.random.default_rng(seed)
    ref = np.zeros((n, n), dtype=np.int64)
    inc, fresh = MatrixView(n), MatrixView(n)
    window = np.zeros((0, n), dtype=bool)
    for k in blocks:
        new = rng.random((k, n)) < density
        rows = np.concatenate([window, new])
        window, expired = rows[max(len(rows) - size, 0) :], rows[: max(len(rows) - size, 0)]
        for b in new:
            fig_4_5(ref, b, order, +1)
        for b in expired:
            fig_4_5(ref, b, order, -1)
        inc.update(new, expired, order)
        fresh.update(new, expired, order, window)
        assert inc.v.tolist() == ref.tolist() == fresh.v.tolist()
        assert matrix.counts(window, order).tolist() == ref.tolist()


def loop_violation(r: np.ndarray, alpha: float) -> tuple[int, int] | None:
    """A-Greedy's check row by row: the first i with r[i, i] < α × the first best later rank."""
    for i in range(len(r) - 1):
        j = i + 1 + int(np.argmax(r[i, i + 1 :]))
        if r[i, i] < alpha * r[i, j]:
            return i, j
    return None


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 7),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.5, 0.9, 1.0]),
    st.sampled_from([3, 20]),
)
def test_greedy_check_over_all_rows_equals_the_loop(n, seed, alpha, top):
    """Small integer counts (many ties) and costs: the same (i, j) or none."""
    rng = np.random.default_rng(seed)
    order = [int(k) for k in rng.permutation(n)]
    rows = rng.random((int(rng.integers(0, 40)), n)) < rng.random()
    view = MatrixView(n)
    view.rebuild(rows, order)
    costs = rng.integers(1, top, n).astype(float)
    s = Situation(view, rows, costs, order, [f"F{k}" for k in range(n)], alpha, len(rows))
    assert AGreedy(n, AdaptiveConfig()).violation(s) == loop_violation(view.ranks(costs, order), alpha)


ATOMS = ["a > 1", "b < 3", "a + b <> 4", "c is not null", "c = 1", "a >= b", "b <> 0"]
small = st.one_of(st.integers(0, 4), st.just(None))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    atoms=st.lists(st.sampled_from(ATOMS), min_size=2, max_size=5, unique=True),
    rows=st.lists(st.tuples(small, small, small), min_size=1, max_size=80),
    seed=st.integers(0, 2**32 - 1),
)
def test_pass_on_the_executor_equals_evaluating_the_sample(atoms, rows, seed):
    """A random order and sample: the survivors equal the unprofiled executor's, and the profile
    tuples equal every conjunct evaluated on the sampled tuples alone (what they were before the
    pass rode on the executor), in sample order; a conjunct's NULL counts as a drop."""
    conj, types = _filter(" and ".join(atoms), "register stream S (a int, b int, c int);")
    rng = np.random.default_rng(seed)
    ao = AdaptiveOrder(conj, AdaptiveConfig(probability=0.5))
    ao.order = [int(k) for k in rng.permutation(len(conj))]
    b = from_rows(rows, types, np.arange(len(rows)), ids=np.arange(1, len(rows) + 1))
    picked = np.sort(rng.choice(len(rows), size=int(rng.integers(1, len(rows) + 1)), replace=False))
    ev = Evaluator()
    secs, tuples = np.zeros(len(conj)), np.zeros(len(conj))
    got = ao._profiled_survivors(b, ev, picked, secs, tuples)
    assert got.elements() == ao._survivors(b, ao.order, ev).elements()
    alone = b.take(picked)
    want = np.stack([~ev.predicate(c, alone) for c in conj], axis=1)
    rows_got = np.concatenate(ao.pending) if ao.pending else np.zeros((0, len(conj)), bool)
    assert rows_got.tolist() == want[want.any(axis=1)].tolist()
    assert ao.pending_rows == len(rows_got) and ao.profiled == len(picked)
    assert tuples[ao.order[0]] == len(rows) and (tuples[ao.order[1:]] >= len(picked)).all()
