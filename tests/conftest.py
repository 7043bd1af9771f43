"""Make the source checkout importable when pytest runs without an installed package."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

# Hypothesis tests check results, never speed: its default 200 ms deadline per example turns a
# loaded machine into failures (CI shares its two cores), so no test of this suite has one.
from hypothesis import settings  # noqa: E402

settings.register_profile("cqlstream", deadline=None)
settings.load_profile("cqlstream")
