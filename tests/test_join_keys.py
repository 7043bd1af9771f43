"""Combined join keys (engine/operators/join.py `combine_keys`): the per-conjunct codes made as
value − min when the span fits (`_offset_codes`) give keys that compare exactly as the dense codes
(`joint_dense`) do — equal where they are equal, and in the same order — so every index and
every pair order built on them is unchanged; large spans and float bit patterns fall back."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cqlstream.engine.kernels import joint_dense
from cqlstream.engine.operators import join as J

SPANS = [3, 1000, 1 << 35, 1 << 62]


def _dense(ic, pc, size):
    return joint_dense(ic, pc)


def _parts(rng, n, span, floats):
    if floats:
        v = rng.choice(np.array([-2.5, -0.0, 0.0, 1.5, 3.0, 1e300, -1e300]), n)
        return (v + 0.0).view(np.int64)  # key_codes' float codes
    return rng.integers(-(span // 2), span // 2 + 1, n, dtype=np.int64)


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 3),
    spans=st.lists(st.sampled_from(SPANS), min_size=3, max_size=3),
    floats=st.lists(st.booleans(), min_size=3, max_size=3),
    ni=st.integers(0, 40),
    npr=st.integers(0, 40),
)
def test_offset_codes_compare_as_dense_codes(seed, k, spans, floats, ni, npr):
    rng = np.random.default_rng(seed)
    inst = [(_parts(rng, ni, spans[c], floats[c]), np.ones(ni, bool)) for c in range(k)]
    probe = [(_parts(rng, npr, spans[c], floats[c]), np.ones(npr, bool)) for c in range(k)]
    (ik, _), (pk, _) = J.combine_keys(inst, probe)
    real = J._offset_codes
    J._offset_codes = _dense
    try:
        (dik, _), (dpk, _) = J.combine_keys(inst, probe)
    finally:
        J._offset_codes = real
    got, want = np.concatenate([ik, pk]), np.concatenate([dik, dpk])
    # the same equalities and the same order
    assert (np.argsort(got, kind="stable") == np.argsort(want, kind="stable")).all()
    assert (np.equal.outer(got, got) == np.equal.outer(want, want)).all()
