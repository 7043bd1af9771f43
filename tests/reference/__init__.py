"""The reference evaluator: CQL by definition, instant by instant (the differential-test oracle)."""

from .evaluator import evaluate, evaluate_all, sample_keeps, splitmix64
from .io import canonical, format_result

__all__ = ["canonical", "evaluate", "evaluate_all", "format_result", "sample_keeps", "splitmix64"]
