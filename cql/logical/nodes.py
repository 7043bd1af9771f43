"""Logical plan nodes: frozen, typed, deriving their schema and checking invariants on construction.

Relational operators plus the CQL stream↔relation operators (Window, RelToStream). Equal subplans
compare and hash equal, which is what plan sharing keys on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import Field, dataclass, field
from functools import cached_property
from typing import Any, ClassVar, TypeVar

from cqlstream.cql.logical.expr import AggCall, Expr, columns
from cqlstream.cql.types import BOOL, DataType


@dataclass(frozen=True)
class Attribute:
    """A column of a plan's output: name, type and (for display/resolution) the source alias."""

    name: str
    type: DataType
    qualifier: str | None = field(default=None, compare=False)

    def display(self) -> str:
        return f"{self.qualifier}.{self.name}" if self.qualifier else self.name


class PlanError(Exception):
    """An invariant of a plan node was violated (a front-end bug, not a user error)."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise PlanError(msg)


class Plan:
    """Base: `inputs`, `schema`, `is_stream`; `monotonic` means the relation only ever grows."""

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return ()

    @property
    def schema(self) -> tuple[Attribute, ...]:
        raise NotImplementedError(type(self).__name__)

    @property
    def is_stream(self) -> bool:
        raise NotImplementedError(type(self).__name__)

    # Every concrete node is a frozen dataclass; declaring so lets `dataclasses.replace` take a Plan.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached hash (cached_hash): str hashes differ between processes, so a
        plan restored from a checkpoint computes its own."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def monotonic(self) -> bool:
        return all(i.monotonic for i in self.inputs)

    def _check_expr(self, e: Expr, width: int, what: str) -> None:
        bad = [i for i in columns(e) if not 0 <= i < width]
        _check(not bad, f"{type(self).__name__}: {what} reads column(s) {bad} outside 0..{width - 1}")


def _relations(node: Plan, inputs: Iterable[Plan]) -> None:
    for i in inputs:
        _check(not i.is_stream, f"{type(node).__name__} needs relations; input {type(i).__name__} is a stream")


# ------------------------------------------------------------------ sources


@dataclass(frozen=True)
class StreamSource(Plan):
    """A registered stream read by the plan: a leaf, timestamps in `time_unit`."""

    name: str
    attrs: tuple[Attribute, ...]
    time_unit: str = "second"

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.attrs

    is_stream = True

    @property
    def monotonic(self) -> bool:
        return True


@dataclass(frozen=True)
class RelationSource(Plan):
    """A registered relation read by the plan: a leaf (`static`: it never changes)."""

    name: str
    attrs: tuple[Attribute, ...]
    static: bool = False

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.attrs

    is_stream = False

    @property
    def monotonic(self) -> bool:
        return self.static


# ------------------------------------------------------------------ stream → relation


@dataclass(frozen=True)
class RangeSpec:
    """Time-based window in the stream's units: size None = Unbounded, 0 = Now; optional slide."""

    size: int | None
    slide: int | None = None

    @property
    def time_based(self) -> bool:
        return True

    def sql(self) -> str:
        if self.size is None:
            return "RANGE UNBOUNDED"
        if self.size == 0 and self.slide is None:
            return "NOW"
        return f"RANGE {self.size}" + (f" SLIDE {self.slide}" if self.slide else "")


@dataclass(frozen=True)
class RowsSpec:
    """Tuple-based window: the last `size` tuples (None = Unbounded); optional slide."""

    size: int | None
    slide: int | None = None

    @property
    def time_based(self) -> bool:
        return self.size is None  # Rows Unbounded holds every tuple: as a time window

    def sql(self) -> str:
        if self.size is None:
            return "ROWS UNBOUNDED"
        return f"ROWS {self.size}" + (f" SLIDE {self.slide}" if self.slide else "")


@dataclass(frozen=True)
class PartitionSpec:
    """The last `rows` tuples per distinct value of the key columns."""

    keys: tuple[int, ...]
    rows: int

    @property
    def time_based(self) -> bool:
        return False

    def sql(self) -> str:
        return f"PARTITION BY {', '.join('#%d' % k for k in self.keys)} ROWS {self.rows}"


WindowSpec = RangeSpec | RowsSpec | PartitionSpec


@dataclass(frozen=True)
class Window(Plan):
    """Stream → relation. `default` marks the implicit Unbounded window (display and CQL defaults);
    `tolerate` is the smallest size (stream units, or rows) the query's TOLERATE clause accepts
    under static approximation (cql/approx/); it does not change what the node computes."""

    input: Plan
    spec: WindowSpec
    default: bool = field(default=False, compare=False)
    tolerate: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check(self.input.is_stream, "Window needs a stream input")
        if isinstance(self.spec, PartitionSpec):
            for k in self.spec.keys:
                _check(0 <= k < len(self.input.schema), "partition key out of range")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.input.schema

    is_stream = False

    @property
    def unbounded(self) -> bool:
        return getattr(self.spec, "size", 0) is None

    @property
    def monotonic(self) -> bool:
        return self.unbounded and self.input.monotonic


@dataclass(frozen=True)
class Sample(Plan):
    """Keep each stream element with probability percent/100 (before any window); `tolerate` is
    the lowest percentage the query's TOLERATE clause accepts (cql/approx/)."""

    input: Plan
    percent: float
    tolerate: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check(self.input.is_stream, "Sample needs a stream input")
        _check(0 < self.percent <= 100, "sample percentage must be in (0, 100]")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.input.schema

    is_stream = True


# ------------------------------------------------------------------ relation → relation (and stateless stream ops)


@dataclass(frozen=True)
class Filter(Plan):
    """Selection; valid on relations and (stateless) on streams."""

    input: Plan
    predicate: Expr

    def __post_init__(self) -> None:
        _check(self.predicate.type in (BOOL,) or self.predicate.type.kind == "null", "Filter predicate must be boolean")
        self._check_expr(self.predicate, len(self.input.schema), "predicate")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.input.schema

    @property
    def is_stream(self) -> bool:
        return self.input.is_stream


@dataclass(frozen=True)
class Project(Plan):
    """Generalized projection (expressions); valid on relations and on streams."""

    input: Plan
    exprs: tuple[Expr, ...]
    names: tuple[str, ...]
    qualifiers: tuple[str | None, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        _check(len(self.exprs) == len(self.names), "Project needs a name per expression")
        for e in self.exprs:
            self._check_expr(e, len(self.input.schema), "expression")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    @cached_property
    def schema(self) -> tuple[Attribute, ...]:
        quals = self.qualifiers or (None,) * len(self.names)
        return tuple(Attribute(n, e.type, q) for n, e, q in zip(self.names, self.exprs, quals))

    @property
    def is_stream(self) -> bool:
        return self.input.is_stream


@dataclass(frozen=True)
class Join(Plan):
    """N-ary join (MJoin) of relations; output is the concatenation of input schemas."""

    inputs_: tuple[Plan, ...]
    predicate: Expr | None = None

    def __post_init__(self) -> None:
        _check(len(self.inputs_) >= 2, "Join needs at least two inputs")
        _relations(self, self.inputs_)
        if self.predicate is not None:
            self._check_expr(self.predicate, len(self.schema), "predicate")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return self.inputs_

    @cached_property
    def schema(self) -> tuple[Attribute, ...]:
        return tuple(a for i in self.inputs_ for a in i.schema)

    is_stream = False

    def offsets(self) -> list[int]:
        out, off = [], 0
        for i in self.inputs_:
            out.append(off)
            off += len(i.schema)
        return out


@dataclass(frozen=True)
class Aggregate(Plan):
    """Group by `keys` and compute `aggs`; output = keys then aggregates. No keys: one row always.

    `probe`: a stream whose instants are the only ones at which the output relation is read (set
    by cql/logical/probe_aggregates.py for an aggregate only a stream–relation join reads
    with that stream): the output is then exact at those instants (and at the end of every call),
    and a group's changes between two of them are emitted as one net change, at the last of them.
    The probe is a second input; only its timestamps are read.

    `having`: a predicate over the output row (set by cql/logical/rewrites/having_in_aggregate.py
    for a selection over a grouped aggregate): only the rows it holds for are emitted, so the output
    is the selection of the aggregate's, the same elements in the same order."""

    input: Plan
    keys: tuple[Expr, ...]
    aggs: tuple[AggCall, ...]
    names: tuple[str, ...]
    probe: Plan | None = None
    having: Expr | None = None

    def __post_init__(self) -> None:
        _relations(self, (self.input,))
        _check(self.probe is None or self.probe.is_stream, "Aggregate: the probe must be a stream")
        _check(len(self.names) == len(self.keys) + len(self.aggs), "Aggregate needs a name per output")
        w = len(self.input.schema)
        for k in self.keys:
            self._check_expr(k, w, "group key")
        for a in self.aggs:
            if a.arg is not None:
                self._check_expr(a.arg, w, "aggregate argument")
        if self.having is not None:
            self._check_expr(self.having, len(self.keys) + len(self.aggs), "having predicate")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,) if self.probe is None else (self.input, self.probe)

    @cached_property
    def schema(self) -> tuple[Attribute, ...]:
        types = [k.type for k in self.keys] + [a.type for a in self.aggs]
        return tuple(Attribute(n, t) for n, t in zip(self.names, types))

    is_stream = False

    @property
    def monotonic(self) -> bool:
        return False


@dataclass(frozen=True)
class Distinct(Plan):
    """One row per distinct value of the input relation.

    `probe`: as `Aggregate.probe` (set by cql/logical/probe_aggregates.py for a DISTINCT only a
    probed aggregate reads): a value's changes between two probe instants are one net change.

    `window` set (a Range window without slide): the physical choice of cql/logical/rewrites/
    range_distinct.py. The input is then the window's stream, read directly: a value is in the
    relation while its latest arrival is in the window, so the operator keeps each value's
    last-seen instant instead of the window's tuples (`relation_input` gives the relation as the
    plan that would compute it)."""

    input: Plan
    probe: Plan | None = None
    window: RangeSpec | None = None

    def __post_init__(self) -> None:
        if self.window is None:
            _relations(self, (self.input,))
        else:
            w = self.window
            _check(
                w.size is not None and w.slide is None, "Distinct: a window read by lifetimes is a Range without slide"
            )
            _check(self.input.is_stream, "Distinct: the input read as a window must be a stream")
        _check(self.probe is None or self.probe.is_stream, "Distinct: the probe must be a stream")

    @property
    def relation_input(self) -> Plan:
        """The relation the DISTINCT reads: the input itself, or the window over the stream input."""
        return self.input if self.window is None else Window(self.input, self.window)

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,) if self.probe is None else (self.input, self.probe)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.input.schema

    is_stream = False


@dataclass(frozen=True)
class SetOp(Plan):
    """union / except / intersect; `all` (CQL's default) keeps bag multiplicities, False (DISTINCT) yields a set."""

    op: str
    all: bool
    left: Plan
    right: Plan

    def __post_init__(self) -> None:
        _relations(self, (self.left, self.right))
        _check(self.op in ("union", "except", "intersect"), f"unknown set operation {self.op}")
        _check(len(self.left.schema) == len(self.right.schema), "set operation inputs differ in width")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.left.schema

    is_stream = False

    @property
    def monotonic(self) -> bool:
        return self.op != "except" and super().monotonic


@dataclass(frozen=True)
class SemiJoin(Plan):
    """Left tuples with (anti: without) a right match; predicate over left ++ right columns.

    `null_aware` gives NOT IN its SQL meaning: no left row qualifies when the right side holds a
    NULL in a compared column.
    """

    left: Plan
    right: Plan
    predicate: Expr
    anti: bool = False
    null_aware: bool = False

    def __post_init__(self) -> None:
        _relations(self, (self.left, self.right))
        self._check_expr(self.predicate, len(self.left.schema) + len(self.right.schema), "predicate")

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.left, self.right)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.left.schema

    is_stream = False

    @property
    def monotonic(self) -> bool:
        return not self.anti and super().monotonic


# ------------------------------------------------------------------ relation → stream


@dataclass(frozen=True)
class RelToStream(Plan):
    """Istream / Dstream / Rstream (thesis §2.1.2)."""

    op: str
    input: Plan

    def __post_init__(self) -> None:
        _check(self.op in ("istream", "dstream", "rstream"), f"unknown relation-to-stream op {self.op}")
        _relations(self, (self.input,))

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return (self.input,)

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.input.schema

    is_stream = True

    @property
    def monotonic(self) -> bool:
        return True


@dataclass(frozen=True)
class StreamJoin(Plan):
    """`Rstream(S [Now] ⋈ X)` as one stream-valued node (cql/logical/rewrites/stream_join.py):
    `inputs_` are the binary join's inputs with the `[Now]` window at position `now` replaced by
    its stream S; the other input X is a relation. At every instant t it emits S's tuples of t
    joined with X as of the end of t — what the Rstream of the join emits — and X's changes only
    maintain X's state instead of being joined. The schema (and the predicate's columns) are the
    join's: S's columns at position `now`, X's at the other.

    `window` set (a Range window without slide): the physical choice of the band join
    (engine/operators/band_join.py). X is then `inputs_[1 - now] [window]`, and that input is the
    window's stream, read directly: each of its tuples is in X for the instants its lifetime
    covers, so the join needs no window and no delete events (`relation_input` gives X as the
    plan that would compute it).

    `order` set (X not arrival-ordered: an aggregate, a join, DISTINCT ...): each instant's output
    is sorted by the value of these expressions over the node's rows — the plan's final output
    columns, through the projections above the node — as Rstream sorts the unfused plan's rows
    (cql/logical/instant_order.py); None: the join's own order (X arrival-ordered)."""

    inputs_: tuple[Plan, ...]
    now: int
    predicate: Expr | None = None
    window: RangeSpec | None = None
    order: tuple[Expr, ...] | None = None

    def __post_init__(self) -> None:
        _check(len(self.inputs_) == 2 and self.now in (0, 1), "StreamJoin joins a stream with one relation")
        _check(self.inputs_[self.now].is_stream, "StreamJoin: the [Now] side must be a stream")
        if self.window is None:
            _relations(self, (self.inputs_[1 - self.now],))
        else:
            w = self.window
            _check(w.size is not None and w.slide is None, "StreamJoin: a band side needs a Range window without slide")
            _check(self.inputs_[1 - self.now].is_stream, "StreamJoin: a band side must be a stream")
        if self.predicate is not None:
            self._check_expr(self.predicate, len(self.schema), "predicate")
        for e in self.order or ():
            self._check_expr(e, len(self.schema), "order")

    @property
    def relation_input(self) -> Plan:
        """X, the relation S is joined with: the input itself, or for a band join the window
        over the stream input."""
        x = self.inputs_[1 - self.now]
        return x if self.window is None else Window(x, self.window)

    @property
    def inputs(self) -> tuple[Plan, ...]:
        return self.inputs_

    @cached_property
    def schema(self) -> tuple[Attribute, ...]:
        return tuple(a for i in self.inputs_ for a in i.schema)

    is_stream = True

    @property
    def monotonic(self) -> bool:
        return True


def with_inputs(node: Plan, new: tuple[Plan, ...]) -> Plan:
    """The same node over new inputs (rewrite rules use this to rebuild trees)."""
    from dataclasses import replace

    if isinstance(node, (Join, StreamJoin)):
        return replace(node, inputs_=tuple(new))
    if isinstance(node, (SetOp, SemiJoin)):
        return replace(node, left=new[0], right=new[1])
    if isinstance(node, (Aggregate, Distinct)) and node.probe is not None:
        return replace(node, input=new[0], probe=new[1])
    rebuild = getattr(node, "replace_inputs", None)  # a node defined outside this module
    if rebuild is not None:
        return rebuild(new)
    if node.inputs:
        return replace(node, input=new[0])
    return node


def walk(node: Plan) -> Iterator[Plan]:
    """Pre-order traversal. With a stack, not nested generators: those passed each node up through
    one generator per level, and Linear Road's views inlined into its queries are deep."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.inputs))


P = TypeVar("P", bound=type[Plan])


def cached_hash(cls: P) -> P:
    """Make a frozen dataclass node remember its hash. The generated `__hash__` hashes every field,
    so hashing a plan hashes its whole tree; the planner keys its nodes by plan (a dict lookup per
    node of every query it builds), which made registering deep plans quadratic (Linear Road's
    views inlined into its queries: 190k recursive hash calls, a third of registration). A node
    is immutable, so its hash never changes; it is kept in the instance and left out of pickles
    (Plan.__getstate__)."""
    compute = cls.__hash__

    def __hash__(self: Plan) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = compute(self)
            object.__setattr__(self, "_hash", h)
        return h

    cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]
    return cls


# every node class of this module (a node class defined elsewhere applies the decorator itself)
for _cls in Plan.__subclasses__():
    cached_hash(_cls)
