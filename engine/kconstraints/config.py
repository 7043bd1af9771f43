"""What k-Mon does with a join's constraints (`KMonConfig`): kept apart from strategy.py so that
registering a join reads the configuration without importing the strategy machinery (~20 ms),
which loads only when a constraint applies to some join."""

from __future__ import annotations

from dataclasses import dataclass

from cqlstream.engine.kconstraints.monitors import INF


@dataclass(frozen=True)
class KMonConfig:
    """`mode`: exact (spill, results unchanged), approx (drop No rows, the paper's mode) or off.
    `detect`: monitors may lower k from observed arrivals (W, c, p as in the paper). `threshold`:
    constraints whose k is above it are not used. `retraction`: spilled rows that met a partner
    still alive go to disk with the others (the paper's memory figures), or stay in memory for
    that partner's delete (engine/kconstraints/retract.py: less time, more memory).
    `eliminate_columns`: the state (memory, retraction tier, disk store) keeps only the columns the
    join and the plan above read (engine/kconstraints/columns.py); False keeps whole rows."""

    mode: str = "exact"
    detect: bool = False
    W: int = 1000
    c: float = 1.0
    p: float = 0.01
    threshold: float = INF
    retraction: str = "disk"
    eliminate_columns: bool = True
