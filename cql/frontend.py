"""The front end in one call: CQL text → parsed, analyzed, optimized query, and its EXPLAIN text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cqlstream.cql import ast
from cqlstream.cql.analyzer import AnalyzedQuery, AnalyzeOptions, analyze
from cqlstream.cql.catalog import Catalog
from cqlstream.cql.errors import CqlError
from cqlstream.cql.logical.explain import explain_plan
from cqlstream.cql.logical.nodes import Attribute, Plan
from cqlstream.cql.logical.rewrites import RewriteMemo, optimize
from cqlstream.cql.parser import parse_query
from cqlstream.cql.printer import to_cql

if TYPE_CHECKING:
    from cqlstream.cql.approx.report import Report


@dataclass
class CompiledQuery:
    """A query analyzed and optimized: its analysis and its logical plan after the rewrites."""

    analyzed: AnalyzedQuery
    plan: Plan  # after rewrites (and static approximation, when approved)
    approximation: Report | None = None  # what static approximation did (cql/approx/), if asked

    @property
    def kind(self) -> str:
        return "stream" if self.plan.is_stream else "relation"

    @property
    def schema(self) -> tuple[Attribute, ...]:
        return self.plan.schema

    def explain(self) -> str:
        a = self.analyzed
        cols = ", ".join(f"{x.name} {x.type}" for x in self.schema)
        out = ["Analyzed query:", _indent(to_cql(a.normalized)), f"Result: {self.kind} ({cols})"]
        if a.notes:
            out.append("Notes:")
            out.extend(f"  - {n}" for n in dict.fromkeys(a.notes))
        out.append("Logical plan:")
        out.append(_indent(explain_plan(self.plan)))
        if self.approximation is not None:
            out.append("Approximation:")
            out.extend(f"  - {line}" for line in self.approximation.lines())
        return "\n".join(out)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def compile_query(
    query: str | ast.Query,
    catalog: Catalog,
    *,
    options: AnalyzeOptions | None = None,
    final: bool = True,
    memo: RewriteMemo | None = None,
) -> CompiledQuery:
    """Parse (if text), analyze and optimize one query. Raises CqlError only. `final=False` leaves
    out the final rewrites (`rewrites.FINAL_RULES`): static approximation runs before them.
    `memo`: the rewrites' results for nodes earlier queries had too (`rewrites.RewriteMemo`)."""
    text = query if isinstance(query, str) else None
    q = parse_query(query) if isinstance(query, str) else query
    analyzed = analyze(q, catalog, text=text, options=options)
    plan = optimize(analyzed.plan, compat=bool(options and options.stream_compat), final=final, memo=memo)
    return CompiledQuery(analyzed, plan)


def explain(query: str, catalog: Catalog, *, options: AnalyzeOptions | None = None) -> str:
    return compile_query(query, catalog, options=options).explain()


__all__ = ["CompiledQuery", "CqlError", "compile_query", "explain"]
