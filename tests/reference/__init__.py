"""The reference evaluator: CQL by definition, instant by instant (the differential-test oracle)."""
from .evaluator import evaluate, sample_keeps, splitmix64
from .io import canonical, format_result

__all__ = ["evaluate", "format_result", "canonical", "sample_keeps", "splitmix64"]
