"""CIDR §2.2: a stream joined only with static relations needs no window state.

Istream(π σ (S [Range Unbounded] ⋈ R1 ⋈ ... ⋈ Rk)) with every Ri static equals
Rstream(π σ (S [Now] ⋈ R1 ⋈ ... ⋈ Rk)): the new join results at t are exactly those of S's
tuples with τ = t, because the relations never change.
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import nodes as L


def _static(p: L.Plan) -> bool:
    return not any(isinstance(n, L.Window) for n in L.walk(p)) and p.monotonic and not p.is_stream


def static_unbounded_to_now(node: L.Plan) -> L.Plan | None:
    if not (isinstance(node, L.RelToStream) and node.op == "istream"):
        return None
    chain, base = [], node.input
    while isinstance(base, (L.Filter, L.Project)):
        chain.append(base)
        base = base.input
    if not isinstance(base, L.Join):
        return None
    windows = [i for i in base.inputs_ if isinstance(i, L.Window) and i.unbounded and isinstance(i.spec, L.RangeSpec)]
    others = [i for i in base.inputs_ if not any(i is w for w in windows)]
    if len(windows) != 1 or not others or not all(_static(o) for o in others):
        return None
    w = windows[0]
    now = L.Window(w.input, L.RangeSpec(0))
    out: L.Plan = replace(base, inputs_=tuple(now if i is w else i for i in base.inputs_))
    for n in reversed(chain):
        out = replace(n, input=out)
    return L.RelToStream("rstream", out)
