"""The reference evaluator: CQL by definition, instant by instant (the differential-test oracle)."""

from .evaluator import evaluate, sample_keeps, splitmix64
from .io import canonical, format_result

__all__ = ["canonical", "evaluate", "format_result", "sample_keeps", "splitmix64"]
