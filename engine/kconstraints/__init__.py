"""k-Mon: k-constraints on stream arrivals (many-one joins, RIDS, clustered and ordered arrival) used
to keep a 2-way stream join's state small (docs/k-constraints.md).

Modules: constraints (plain data), monitors (k estimation from arrivals), reduction (the Yes / No /
Unknown partition and the rules that block future matches), bloom and store (exact mode: a disk
store behind Bloom filters), approx (the approximate mode's drop ledger), strategy (what a join
calls around each call) and attach (binding declared constraints to a query's joins)."""
