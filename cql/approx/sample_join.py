"""Pushing a Sample through a join without biasing it (CIDR'03 §5.1.2, after Chaudhuri, Motwani
and Narasayya, "On random sampling over joins").

A sample of a join's result keeps each result row independently with probability p. Sampling an
input instead keeps or drops together every result row that input tuple takes part in, so in
general the rows are correlated and the sample is not a uniform one; sampling both inputs at √p
is correlated as well. The exception is a foreign-key join: when every other input is a static
relation joined on one of its declared keys, each stream element meets at most one tuple of each,
so each result row has its own element, and sampling the stream at p is a uniform p-sample of the
join. The rule moves `SAMPLE p` from the join's Istream output onto that stream in that case and
refuses otherwise (the refusal says which input breaks the condition).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.approx.context import Ctx
from cqlstream.cql.approx.report import Applied, Refused
from cqlstream.cql.approx.rule import Env, Outcome
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import node_label
from cqlstream.cql.logical.expr import ColRef, Expr, Op, conjuncts


def _chain(n: L.Plan) -> tuple[list[L.Plan], L.Plan]:
    """The Filter/Project operators above the first other node, and that node."""
    chain: list[L.Plan] = []
    while isinstance(n, (L.Filter, L.Project)):
        chain.append(n)
        n = n.input
    return chain, n


def _rebuild(chain: list[L.Plan], base: L.Plan) -> L.Plan:
    for n in reversed(chain):
        base = replace(n, input=base)
    return base


def _stream_side(n: L.Plan, op: str) -> bool:
    """An input through which each stream element reaches the output stream once: an Unbounded
    window under Istream, a Now window under Rstream (what the rewrites make of a static join)."""
    if not isinstance(n, L.Window) or not isinstance(n.spec, L.RangeSpec):
        return False
    return n.spec.size is None if op == "istream" else (n.spec.size == 0 and n.spec.slide is None)


def _relation(n: L.Plan) -> L.RelationSource | None:
    while isinstance(n, L.Filter):
        n = n.input
    return n if isinstance(n, L.RelationSource) else None


def _equated(pred: Expr | None, fact: range, other: range) -> set[int]:
    """Columns of `other` (0-based within it) equated by the join predicate to a column of `fact`."""
    out = set()
    for c in conjuncts(pred):
        if isinstance(c, Op) and c.op == "=" and all(isinstance(a, ColRef) for a in c.args):
            a, b = (x.index for x in c.args if isinstance(x, ColRef))
            for x, y in ((a, b), (b, a)):
                if x in fact and y in other:
                    out.add(y - other.start)
    return out


def _fk_violation(join: L.Join, fact: int, env: Env, op: str) -> str | None:
    """Why the join is not a foreign-key join from input `fact` (None: it is)."""
    offs = join.offsets() + [len(join.schema)]
    span = range(offs[fact], offs[fact + 1])
    for i, inp in enumerate(join.inputs_):
        if i == fact:
            continue
        rel = _relation(inp)
        if rel is None:
            return f"input {i + 1} ({node_label(inp)}) is not a stored relation"
        if op == "istream" and not rel.static:
            return f"RELATION {rel.name} changes: a stream element can meet a new tuple of it later and appear twice"
        eq = _equated(join.predicate, span, range(offs[i], offs[i + 1]))
        names = {rel.attrs[k].name.lower() for k in eq}
        if not any(key and {k.lower() for k in key} <= names for key in env.keys(rel.name)):
            return (
                f"RELATION {rel.name} is not joined on a declared key: a stream element can meet several of "
                "its tuples, whose result rows a sample of the stream keeps or drops together"
            )
    return None


def sample_join(node: L.Plan, ctx: Ctx, env: Env) -> Outcome | None:
    r2s = node.input if isinstance(node, L.Sample) else None
    if not (isinstance(r2s, L.RelToStream) and r2s.op in ("istream", "rstream")):
        return None
    chain, join = _chain(r2s.input)
    if not isinstance(join, L.Join):
        return None
    assert isinstance(node, L.Sample)
    label = f"{node_label(node)} over {node_label(join)}"
    streams = [i for i, inp in enumerate(join.inputs_) if _stream_side(inp, r2s.op)]
    if len(streams) != 1:
        why = (
            f"{node_label(join)} reads {len(streams)} streams each element of which reaches {r2s.op.upper()} once: "
            "sampling one input keeps or drops all of an element's join partners together, and sampling every "
            "input is correlated too"
        )
        return Outcome(refused=Refused("sample_join", label, why))
    (fact,) = streams
    bad = _fk_violation(join, fact, env, r2s.op)
    if bad:
        return Outcome(refused=Refused("sample_join", label, f"{node_label(join)}: {bad}"))
    window = join.inputs_[fact]
    assert isinstance(window, L.Window)
    sampled = replace(window, input=L.Sample(window.input, node.percent, tolerate=node.tolerate))
    inputs = tuple(sampled if i == fact else x for i, x in enumerate(join.inputs_))
    new = replace(r2s, input=_rebuild(chain, replace(join, inputs_=inputs)))
    _, base = _chain(window.input)
    where = node_label(base) if isinstance(base, L.StreamSource) else "the stream side"
    why = "foreign-key join: each result row has its own stream element, so the sample stays uniform"
    return Outcome(new, Applied("sample_join", label, f"{node_label(node)} on {where}", why))
