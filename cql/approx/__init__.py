"""Static approximation at registration (CIDR'03 §5.1): with the user's approval, shrink windows
and lower or insert sampling rates within the tolerances the query states, only where that cannot
make the result grow, and push a Sample through a foreign-key join without biasing it.

`approximate(plan, spec, keys)` is the entry point (static.py); one rule per module
(window_reduction, sample_rate, sample_join); `context` holds the monotonicity analysis that
decides where a rule may act; `report` what the registration reply and EXPLAIN show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cqlstream.cql.approx.report import Applied, Refused, Report
from cqlstream.cql.approx.spec import ApproxSpec

if TYPE_CHECKING:
    from cqlstream.cql.approx.static import approximate, approximate_query


def __getattr__(name: str) -> Any:
    # the rules load on first use: every registration parses an ApproxSpec, few approximate
    if name in ("approximate", "approximate_query"):
        from cqlstream.cql.approx import static

        return getattr(static, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Applied", "ApproxSpec", "Refused", "Report", "approximate", "approximate_query"]
