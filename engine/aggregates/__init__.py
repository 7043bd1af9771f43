"""Aggregate strategies and the shared machinery of the Aggregate operator.

One strategy class per aggregate family (additive.py: count/sum/avg, ALL or DISTINCT;
extremes.py: min/max; udaf.py: user-defined aggregates), looked up by function name in
registry.py. They read what the operator computes once per batch (cells.py): additive running
totals (quantities.py, exact_sum.py), per-group multisets of argument values (multiset.py), over
the typed per-group state (group_state.py) and group-key interning (keys.py).
"""
