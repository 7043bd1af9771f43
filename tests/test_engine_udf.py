"""User-defined scalar functions in the engine, vectorized and row-at-a-time, vs the reference."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from cqlstream.cql.types import FLOAT, INT, VARCHAR
from tests.engine_harness import assert_same
from tests.test_differential import DDL, stream_events


def setup(functions):
    # row-at-a-time: receives Python values (None for NULL), may return None
    functions.register_scalar(
        "clamp", lambda x, hi: None if x is None or hi is None else min(x, hi), INT, min_args=2, max_args=2
    )
    functions.register_scalar("label", lambda x: None if x is None else f"v{x}", VARCHAR, min_args=1, max_args=1)
    # vectorized: receives numpy arrays (NULL slots hold arbitrary values; the result is NULL there)
    functions.register_scalar(
        "half", lambda x: np.asarray(x, float) / 2, FLOAT, min_args=1, max_args=1, vectorized=True
    )


def reference_setup(functions):
    """The reference calls every UDF per row: a row version of the vectorized `half`."""
    setup(functions)
    functions.register_scalar("half", lambda x: None if x is None else x / 2, FLOAT, min_args=1, max_args=1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=stream_events())
def test_scalar_udfs_in_select_and_where(s):
    q = "select clamp(x.a, 2), label(x.b), half(x.a) from S [Rows 3] as x where clamp(x.b, 1) = 1"
    assert_same(DDL, q, {"S": s}, functions_setup=setup, reference_functions_setup=reference_setup)
