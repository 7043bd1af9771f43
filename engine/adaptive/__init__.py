"""Adaptive query processing (StreaMon, thesis ch. 3): an executor that runs the current plan, a
profiler that watches the data, a re-optimizer that changes the plan when the statistics say so.

Modules: `config` (settings and their defaults), `profile` (sampling, the profile window, the
per-conjunct cost meter), `matrix` (the matrix view of conditional drop counts), `policies`
(A-Greedy and its Sweep, Independent, LocalSwaps variants), `conjuncts` (the adaptive order of a
selection's conjuncts, used by the select operator), `chain` (Chain scheduling's progress chart).
A plan change never changes a result: conjuncts commute, and schedulers only order work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cqlstream.engine.adaptive import config as _config

if TYPE_CHECKING:
    from cqlstream.engine.operators.base import Operator


def set_policy(operators: Iterable[Operator], value: object) -> None:
    """Switch every adapting selection among `operators` to policy `value` (a knob value)."""
    name = _config.policy_name(value)
    for op in operators:
        if any(k.name == "adaptive" for k in op.KNOBS):
            op.set_knob("adaptive", name)
