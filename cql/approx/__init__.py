"""Static approximation at registration (CIDR'03 §5.1): with the user's approval, shrink windows
and lower or insert sampling rates within the tolerances the query states, only where that cannot
make the result grow, and push a Sample through a foreign-key join without biasing it.

`approximate(plan, spec, keys)` is the entry point (static.py); one rule per module
(window_reduction, sample_rate, sample_join); `context` holds the monotonicity analysis that
decides where a rule may act; `report` what the registration reply and EXPLAIN show.
"""

from cqlstream.cql.approx.report import Applied, Refused, Report
from cqlstream.cql.approx.spec import ApproxSpec
from cqlstream.cql.approx.static import approximate, approximate_query

__all__ = ["Applied", "ApproxSpec", "Refused", "Report", "approximate", "approximate_query"]
