"""Column trimming: a window keeps only the columns its consumer reads.

A window stores every column of its stream and every operator above it copies them: in
`select I.Vid, P.Seg from S [Now] as I, S [Range 30] as P where I.Vid = P.Vid` over a 15-column
S each window holds and each join result carries 15 columns where 2 are read. A projection is per
tuple, so it commutes with every window kind: the window over the projected stream holds the
projected tuples, with the same timestamps, counts and (for `Rows`/`Partition By`) the same last
tuples — a partition window keeps its key columns. Two shapes are rewritten:

- a projection (through selections) over a window: the window moves above a projection onto the
  columns the projection and the selections read;
- a projection (through selections) over a join: each input that is a window gets a projection
  onto the columns read above and by the join predicate, below that window.

Only plain column references are moved below a window (no expression is evaluated earlier or on
other tuples than before). The rewrite is per query, and queries over one window or join share it
only when their subplans are equal: two queries reading different columns of one window would each
get a window (and a join) of their own. So a window is narrowed only where that pays for losing
such sharing — when its stream is wide and most of it is unread: at least MIN_DROPPED columns
dropped and at most half of them kept.
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.logical import expr as X
from cqlstream.cql.logical import nodes as L

MIN_DROPPED = 4  # columns a narrowing must drop (and keep at most half of the window's)


def narrow_windows(node: L.Plan) -> L.Plan | None:
    if not isinstance(node, L.Project):
        return None
    filters, base = [], node.input
    while isinstance(base, L.Filter):
        filters.append(base)
        base = base.input
    read = set().union(*(X.columns(e) for e in node.exprs), *(X.columns(f.predicate) for f in filters))
    if isinstance(base, L.Window):
        keep = _needed(base, read)
        if keep is None:
            return None
        where = {old: new for new, old in enumerate(keep)}
        return _rebuild(node, filters, _narrowed(base, keep), where)
    if isinstance(base, L.Join):
        narrowed = _join(base, read)
        return None if narrowed is None else _rebuild(node, filters, *narrowed)
    return None


def _rebuild(node: L.Project, filters: list[L.Filter], base: L.Plan, where: dict[int, int]) -> L.Plan:
    """The projection and its filters over the narrowed `base`, column positions renumbered."""
    out = base
    for f in reversed(filters):
        out = L.Filter(out, _renumber(f.predicate, where))
    return replace(node, input=out, exprs=tuple(_renumber(e, where) for e in node.exprs))


def _needed(window: L.Window, read: set[int]) -> list[int] | None:
    """The columns of `window` to keep (read ones, partition keys, at least one), or None when
    narrowing would not drop enough of them."""
    keep = set(read)
    if isinstance(window.spec, L.PartitionSpec):
        keep |= set(window.spec.keys)
    if not keep:
        keep = {0}
    width = len(window.schema)
    return sorted(keep) if width - len(keep) >= MIN_DROPPED and 2 * len(keep) <= width else None


def _narrowed(window: L.Window, keep: list[int]) -> L.Window:
    """`window` over a projection of its stream onto `keep` (positions renumbered in that order)."""
    src = window.input.schema
    proj = L.Project(
        window.input,
        tuple(X.ColRef(i, src[i].type, src[i].name) for i in keep),
        tuple(src[i].name for i in keep),
        tuple(src[i].qualifier for i in keep),
    )
    spec = window.spec
    if isinstance(spec, L.PartitionSpec):
        spec = replace(spec, keys=tuple(keep.index(k) for k in spec.keys))
    return replace(window, input=proj, spec=spec)


def _renumber(e: X.Expr, where: dict[int, int]) -> X.Expr:
    return X.remap(e, lambda c: replace(c, index=where[c.index]))


def _join(join: L.Join, read: set[int]) -> tuple[L.Plan, dict[int, int]] | None:
    """The join with its window inputs narrowed to the columns in `read` or its predicate, and
    where each kept column moved; None when no input loses a column."""
    if join.predicate is not None:
        read = read | X.columns(join.predicate)
    where: dict[int, int] = {}
    inputs: list[L.Plan] = []
    changed, at = False, 0
    for off, inp in zip(join.offsets(), join.inputs_):
        width = len(inp.schema)
        keep = _needed(inp, {c - off for c in read if off <= c < off + width}) if isinstance(inp, L.Window) else None
        if isinstance(inp, L.Window) and keep is not None:
            inp, changed = _narrowed(inp, keep), True
        else:
            keep = list(range(width))
        for new, old in enumerate(keep):
            where[off + old] = at + new
        inputs.append(inp)
        at += len(keep)
    if not changed:
        return None
    pred = None if join.predicate is None else _renumber(join.predicate, where)
    return L.Join(tuple(inputs), pred), where
