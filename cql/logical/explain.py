"""EXPLAIN: logical plans print themselves as an indented tree, one operator per line."""

from __future__ import annotations

from collections.abc import Iterable

from cqlstream.cql.logical import nodes as L


def _cols(attrs: Iterable[L.Attribute]) -> str:
    return ", ".join(f"{a.name} {a.type}" for a in attrs)


def _window(n: L.Window) -> str:
    spec = n.spec
    if isinstance(spec, L.PartitionSpec):
        keys = ", ".join(n.input.schema[k].display() for k in spec.keys)
        text = f"PARTITION BY {keys} ROWS {spec.rows}"
    else:
        text = spec.sql()
    return f"WINDOW [{text}]" + (" (default)" if n.default else "")


_PROBED = " (net changes at the instants of input 2)"  # an operator read only at a probe's instants


def node_label(n: L.Plan) -> str:
    match n:
        case L.StreamSource():
            unit = "" if n.time_unit == "second" else f" unit={n.time_unit}"
            return f"STREAM {n.name} ({_cols(n.attrs)}){unit}"
        case L.RelationSource():
            return f"{'STATIC ' if n.static else ''}RELATION {n.name} ({_cols(n.attrs)})"
        case L.Window():
            return _window(n)
        case L.Sample():
            return f"SAMPLE {n.percent:g}%"
        case L.Filter():
            return f"FILTER {n.predicate.sql()}"
        case L.Project():
            items = [
                e.sql() if e.sql() == name or e.sql().endswith("." + name) else f"{e.sql()} AS {name}"
                for e, name in zip(n.exprs, n.names)
            ]
            return "PROJECT " + ", ".join(items)
        case L.Join():
            return "JOIN" + (f" ON {n.predicate.sql()}" if n.predicate is not None else " (cross product)")
        case L.Aggregate():
            keys = ", ".join(k.sql() for k in n.keys)
            aggs = ", ".join(a.sql() for a in n.aggs)
            having = f" HAVING {n.having.sql()}" if n.having is not None else ""
            text = "AGGREGATE" + (f" GROUP BY {keys}" if keys else "") + (f": {aggs}" if aggs else "") + having
            return text + _PROBED * (n.probe is not None)
        case L.Distinct():
            read = "" if n.window is None else f"; input read as [{n.window.sql()}] by last-seen instants"
            return "DISTINCT" + read + _PROBED * (n.probe is not None)
        case L.SetOp():
            return n.op.upper() + ("" if n.all else " DISTINCT")
        case L.SemiJoin():
            kind = "ANTIJOIN" if n.anti else "SEMIJOIN"
            return f"{kind}{' (null-aware)' if n.null_aware else ''} ON {n.predicate.sql()}"
        case L.RelToStream():
            return n.op.upper()
        case L.StreamJoin():
            on = f" ON {n.predicate.sql()}" if n.predicate is not None else " (cross product)"
            band = (
                "" if n.window is None else f"; input {2 - n.now} read as [{n.window.sql()}] by lifetimes (band join)"
            )
            return f"RSTREAM JOIN [NOW] of input {n.now + 1}" + on + band
    label = getattr(n, "explain_label", None)  # a node defined outside cql/logical (an engine's own)
    return label() if label is not None else type(n).__name__.upper()


def explain_plan(plan: L.Plan) -> str:
    """The plan as a tree; each line ends with the kind of its output (stream or relation)."""
    lines: list[str] = []

    def visit(n: L.Plan, prefix: str, child_prefix: str) -> None:
        kind = "stream" if n.is_stream else "relation"
        lines.append(f"{prefix}{node_label(n)}  → {kind}")
        kids = n.inputs
        for i, k in enumerate(kids):
            last = i == len(kids) - 1
            visit(k, child_prefix + ("└─ " if last else "├─ "), child_prefix + ("   " if last else "│  "))

    visit(plan, "", "")
    return "\n".join(lines)


def explain_partitioning(plan: L.Plan) -> str:
    """The plan's partitioning verdict as one EXPLAIN line (cql/logical/partitioning.py)."""
    from cqlstream.cql.logical.partitioning import partitioning  # it labels nodes with this module

    return "Partitioning: " + partitioning(plan).describe()
