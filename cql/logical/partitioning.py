"""Partitioning analysis: the key on which all of a plan's state partitions, or why there is none.

A query partitions on a key when running it separately on the rows of each key value (or of each
hash bucket of key values) and taking the union of the answers gives the whole query's answer. Each
stateful operator constrains the key to a subset of its own columns: a group-by to its keys, an
equi-join to the keys common to all its inputs, a `Partition By` window to its keys, Distinct,
Istream/Dstream and bag set operations to the row itself. Stateless operators (selections,
projections, time windows, whose tuples live independently of each other) accept any key. The key
is what every constraint allows, traced down to the columns of each source.

When no key fits, the analysis says why (a `Rows` window over the whole stream needs a global order;
a join without an equi-join key common to all inputs; a global aggregate; two operators keyed on
columns that differ) and, where it applies, the part below that still partitions (the prefix) and
what must then run on one node (the tail), e.g. per-key partial aggregates and a final merge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import node_label
from cqlstream.cql.logical.expr import ColRef, Expr, Op, conjuncts

Atom = tuple[int, int]  # (index of a source leaf in pre-order, column of that source)

# aggregates whose per-partition partial results merge into the global one
MERGEABLE = {"sum", "count", "min", "max", "avg"}


@dataclass(frozen=True)
class SourceKey:
    """The key columns of one source read by the plan (positions in its schema, in key order)."""

    source: str
    columns: tuple[int, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class Partitioning:
    """The verdict: `key` (one display name per key column, e.g. `S.k = T.k`) and each source's
    key columns when the plan partitions; `any` when it holds no keyed state (any key will do);
    otherwise `reason`, and `prefix`/`tail` when part of the plan still partitions."""

    key: tuple[str, ...] = ()
    sources: tuple[SourceKey, ...] = ()
    any: bool = False
    reason: str = ""
    prefix: str = ""
    tail: str = ""
    broadcast: tuple[str, ...] = ()  # relations read whole by every partition (joined with the streams)

    @property
    def partitioned(self) -> bool:
        return self.any or bool(self.key)

    def describe(self) -> str:
        """One line: `by S.k = T.k`, `on any key (no keyed state)`, or `none: <reason>` (+ split)."""
        copies = f" ({', '.join(self.broadcast)} broadcast to every partition)" if self.broadcast else ""
        if self.any:
            return "on any key" + (copies or " (no keyed state)")
        if self.key:
            return "by " + ", ".join(self.key) + copies
        text = f"none: {self.reason}"
        if self.prefix:
            text += f"; partitionable prefix: {self.prefix}; global tail: {self.tail}"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "partitioned": self.partitioned,
            "key": list(self.key) if self.key else None,
            "any": self.any,
            "sources": {s.source: list(s.names) for s in self.sources},
            "reason": self.reason or None,
            "prefix": self.prefix or None,
            "tail": self.tail or None,
            **({"broadcast": list(self.broadcast)} if self.broadcast else {}),
        }


class _NoKey(Exception):
    """Raised at the lowest node where no key fits."""

    def __init__(self, node: L.Plan, reason: str, prefix: str = "", tail: str = "") -> None:
        super().__init__(reason)
        self.node, self.reason, self.prefix, self.tail = node, reason, prefix, tail


@dataclass
class _Info:
    """Per node: each output column's source atom (None: computed), and the atoms the key may use
    (None: unconstrained so far)."""

    cols: list[Atom | None]
    allowed: frozenset[Atom] | None = None
    stateful: bool = False  # some operator below holds keyed state
    broadcast: bool = False  # computed from broadcast relations only: the same in every partition


@dataclass
class _Analysis:
    """The partitioning analysis of one plan: its leaves and which source columns are equated
    (union-find)."""

    leaves: list[L.Plan] = field(default_factory=list)
    parent: dict[Atom, Atom] = field(default_factory=dict)
    broadcast: frozenset[str] = frozenset()  # names (lower case) of relations every partition reads whole

    # ---------------------------------------------------------- union-find over source columns
    def find(self, a: Atom) -> Atom:
        while self.parent.get(a, a) != a:
            a = self.parent[a]
        return a

    def union(self, a: Atom, b: Atom) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def classes(self, atoms: frozenset[Atom]) -> frozenset[Atom]:
        return frozenset(self.find(a) for a in atoms)

    def leaf_of(self, a: Atom) -> L.Plan:
        return self.leaves[a[0]]

    def name(self, a: Atom) -> str:
        leaf = self.leaf_of(a)
        return f"{getattr(leaf, 'name', '?')}.{leaf.schema[a[1]].name}"

    def class_name(self, rep: Atom) -> str:
        members = sorted({self.name(a) for a in self.parent.keys() | {rep} if self.find(a) == rep})
        return " = ".join(members)

    def describe(self, allowed: frozenset[Atom]) -> str:
        return ", ".join(sorted(self.class_name(r) for r in self.classes(allowed)))

    # ---------------------------------------------------------- the walk
    def visit(self, n: L.Plan) -> _Info:
        kids = [self.visit(i) for i in n.inputs]
        rule = RULES.get(type(n))
        if rule is None:
            raise _NoKey(n, f"{type(n).__name__} is not analysed for partitioning")
        if any(k.broadcast for k in kids) and not isinstance(n, (L.Join, L.StreamJoin, L.SemiJoin)):
            if not all(k.broadcast for k in kids) or not isinstance(n, _PER_TUPLE):
                raise _NoKey(
                    n, f"{node_label(n)} reads a broadcast relation: only a join may combine one with the streams"
                )
            return dataclasses.replace(rule(self, n, kids), broadcast=True)
        return rule(self, n, kids)

    def constrain(self, n: L.Plan, kids: list[_Info], own: frozenset[Atom], what: str) -> frozenset[Atom]:
        """Intersect the inputs' allowed atoms with `own` (by class); no common class: _NoKey."""
        result = self.classes(own)
        for k in kids:
            if k.allowed is not None:
                below = self.classes(k.allowed)
                if not result & below:
                    raise _NoKey(
                        n,
                        f"{what} ({self.describe(own) or 'no source column'}) share no column with the key "
                        f"below ({self.describe(below)})",
                        prefix=f"the inputs, by {self.describe(below)}",
                        tail=node_label(n) + " and above, repartitioned",
                    )
                result &= below
        if not result:
            raise _NoKey(n, f"{what} are not source columns")
        return result


def _atoms(cols: list[Atom | None], idx: list[int]) -> frozenset[Atom]:
    return frozenset(a for i in idx if (a := cols[i]) is not None)


def _source(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    leaf = len(an.leaves)
    an.leaves.append(n)
    if isinstance(n, L.RelationSource) and n.name.lower() in an.broadcast:
        return _Info([None] * len(n.schema), broadcast=True)  # no key: every partition has all of it
    return _Info([(leaf, c) for c in range(len(n.schema))])


def _passthrough(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    return kids[0]


def _project(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.Project)
    k = kids[0]
    cols = [k.cols[e.index] if isinstance(e, ColRef) else None for e in n.exprs]
    return _Info(cols, k.allowed, k.stateful)


def _window(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.Window)
    k, spec = kids[0], n.spec
    if isinstance(spec, L.PartitionSpec):
        own = _atoms(k.cols, list(spec.keys))
        return _Info(k.cols, an.constrain(n, kids, own, "the Partition By keys"), True)
    if isinstance(spec, L.RowsSpec) and spec.size is not None:
        raise _NoKey(
            n,
            f"a {spec.sql().title()} window over the whole stream needs the stream's global order",
            prefix="",
            tail=node_label(n) + " and above",
        )
    return k  # time windows: each tuple's lifetime is its own


def _row_keyed(what: str) -> Callable[[_Analysis, L.Plan, list[_Info]], _Info]:
    """Operators whose state is keyed by the whole row (Distinct, Istream, Dstream)."""

    def rule(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
        k = kids[0]
        own = _atoms(k.cols, list(range(len(k.cols))))
        return _Info(k.cols, an.constrain(n, kids, own, what), True)

    return rule


def _rel_to_stream(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.RelToStream)
    if n.op == "rstream" or not kids[0].stateful:
        return kids[0]  # Rstream restates each instant's relation; over no keyed state each row is its own
    return _row_keyed(f"the rows {n.op.title()} compares")(an, n, kids)


def _aggregate(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.Aggregate)
    k = kids[0]
    funcs = sorted({a.func.lower() for a in n.aggs})
    unmergeable = sorted({a.sql() for a in n.aggs if a.func.lower() not in MERGEABLE or a.distinct})
    if not n.keys:
        below = f"by {an.describe(k.allowed)}" if k.allowed is not None else "on any key"
        if not unmergeable:
            tail = f"a final merge of per-partition partial {', '.join(funcs)}"
        else:
            tail = f"{node_label(n)} over every row ({', '.join(unmergeable)} not mergeable from partials)"
        raise _NoKey(n, "a global aggregate (no group-by) needs every row", prefix=f"the input, {below}", tail=tail)
    key_cols = [e.index for e in n.keys if isinstance(e, ColRef)]
    own = _atoms(k.cols, key_cols)
    merge = f"a final merge of per-partition partial {', '.join(funcs) or 'groups'} by the group-by keys"
    if not own and not unmergeable:  # keys computed from columns: partials per partition of the input
        below = f"by {an.describe(k.allowed)}" if k.allowed is not None else "on any key"
        raise _NoKey(n, "the group-by keys are not source columns", prefix=f"the input, {below}", tail=merge)
    try:
        allowed = an.constrain(n, kids, own, "the group-by keys")
    except _NoKey as e:
        if e.prefix and not unmergeable:
            e.tail = merge
        raise
    cols: list[Atom | None] = [k.cols[e.index] if isinstance(e, ColRef) else None for e in n.keys]
    return _Info(cols + [None] * len(n.aggs), allowed, True)


def _equalities(pred: Expr | None) -> list[tuple[int, int]]:
    """(i, j) for each conjunct `#i = #j` of a predicate."""
    out = []
    for c in conjuncts(pred):
        if isinstance(c, Op) and c.op == "=":
            a, b = c.args
            if isinstance(a, ColRef) and isinstance(b, ColRef):
                out.append((a.index, b.index))
    return out


def _join_like(an: _Analysis, n: L.Plan, kids: list[_Info], pred: Expr | None, what: str) -> _Info:
    cols = [a for k in kids for a in k.cols]
    for i, j in _equalities(pred):
        a, b = cols[i], cols[j]
        if a is not None and b is not None:
            an.union(a, b)
    keyed = [k for k in kids if not k.broadcast]
    if not keyed:
        return _Info(cols, None, broadcast=True)
    if len(keyed) < len(kids):  # a partition joins its rows with all of each broadcast relation
        if len(keyed) == 1:
            return _Info(cols, keyed[0].allowed, True)
        kids = keyed
    # a key every input carries: a class with a column of each input
    per_input = [an.classes(frozenset(a for a in k.cols if a is not None)) for k in kids]
    common = frozenset.intersection(*per_input) if per_input else frozenset()
    if not common:
        raise _NoKey(
            n,
            f"{what} has no equi-join key common to all its inputs",
            prefix="each input separately" if any(k.allowed is not None for k in kids) else "",
            tail=node_label(n) + " and above",
        )
    return _Info(cols, an.constrain(n, kids, common, "the join keys"), True)


def _join(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.Join)
    return _join_like(an, n, kids, n.predicate, "the join")


def _stream_join(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    # Rstream(S [Now] ⋈ X): a [Now] window and Rstream keep the key of what they read
    assert isinstance(n, L.StreamJoin)
    return _join_like(an, n, kids, n.predicate, "the join")


def _semijoin(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.SemiJoin)
    if kids[0].broadcast and not kids[1].broadcast:
        raise _NoKey(n, "a semijoin of a broadcast relation by a stream needs every row of the stream")
    info = _join_like(an, n, kids, n.predicate, "the semijoin")
    return _Info(info.cols[: len(kids[0].cols)], info.allowed, True)


def _setop(an: _Analysis, n: L.Plan, kids: list[_Info]) -> _Info:
    assert isinstance(n, L.SetOp)
    left, right = kids
    for a, b in zip(left.cols, right.cols):
        if a is not None and b is not None:
            an.union(a, b)  # a row's column i hashes alike from either side
    if n.op == "union" and n.all:
        allowed = None
        for k in kids:
            if k.allowed is not None:
                allowed = an.constrain(n, kids, k.allowed, "the union's inputs' keys")
        return _Info(left.cols, allowed, left.stateful or right.stateful)
    own = frozenset(a for a in left.cols if a is not None)
    return _Info(left.cols, an.constrain(n, kids, own, f"the rows {n.op.upper()} compares"), True)


_PER_TUPLE = (L.Filter, L.Project, L.Sample, L.Window)  # over a broadcast relation: broadcast still

RULES: dict[type, Callable[[_Analysis, L.Plan, list[_Info]], _Info]] = {
    L.StreamSource: _source,
    L.RelationSource: _source,
    L.Window: _window,
    L.Sample: _passthrough,
    L.Filter: _passthrough,
    L.Project: _project,
    L.Join: _join,
    L.StreamJoin: _stream_join,
    L.Aggregate: _aggregate,
    L.Distinct: _row_keyed("the rows Distinct compares"),
    L.SetOp: _setop,
    L.SemiJoin: _semijoin,
    L.RelToStream: _rel_to_stream,
}


def partitioning(plan: L.Plan, broadcast: frozenset[str] = frozenset()) -> Partitioning:
    """The partitioning verdict of a logical plan (see the module docstring). `broadcast`: names of
    relations every partition would read whole (static ones, copied to each); they need no key."""
    an = _Analysis(broadcast=frozenset(b.lower() for b in broadcast))
    try:
        top = an.visit(plan)
    except _NoKey as e:
        return Partitioning(reason=e.reason, prefix=e.prefix, tail=e.tail)
    if top.broadcast:
        return Partitioning(reason="the query reads broadcast relations only: every partition would repeat it")
    copies = tuple(
        sorted({getattr(x, "name", "?") for x in an.leaves if getattr(x, "name", "").lower() in an.broadcast})
    )
    if top.allowed is None:
        return Partitioning(any=True, broadcast=copies)
    reps = sorted(an.classes(top.allowed), key=an.class_name)
    sources: list[SourceKey] = []
    seen: dict[str, tuple[int, ...]] = {}
    for leaf_i, leaf in enumerate(an.leaves):
        name = getattr(leaf, "name", "?")
        if name.lower() in an.broadcast:
            continue
        cols: list[int] = []
        for rep in reps:
            mine = sorted(a[1] for a in list(an.parent) + [rep] if a[0] == leaf_i and an.find(a) == rep)
            if not mine:
                return Partitioning(reason=f"the key {an.class_name(rep)} is not a column of {name}")
            cols.append(mine[0])
        key = tuple(cols)
        if name.lower() in seen:
            if seen[name.lower()] != key:
                return Partitioning(reason=f"{name} is read twice, keyed on different columns")
            continue
        seen[name.lower()] = key
        sources.append(SourceKey(name, key, tuple(leaf.schema[c].name for c in key)))
    return Partitioning(key=tuple(an.class_name(r) for r in reps), sources=tuple(sources), broadcast=copies)
