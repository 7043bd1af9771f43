"""The static-approximation driver: one top-down walk of the plan, trying every rule at every
node in its monotonicity context (context.py) and collecting what each did or declined.

Top-down, so a rule at a node sees the rewrites above it: a Sample inserted or reduced there makes
the positions below it unsafe (context: SAMPLE keeps by arrival position), and a window turned
count-based does the same, before the walk reaches them.
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.approx.context import Ctx, child_ctx
from cqlstream.cql.approx.report import Applied, Refused, Report
from cqlstream.cql.approx.rule import Env, Keys, Rule, no_keys
from cqlstream.cql.approx.sample_join import sample_join
from cqlstream.cql.approx.sample_rate import sample_rate
from cqlstream.cql.approx.spec import ApproxSpec
from cqlstream.cql.approx.window_reduction import window_reduction
from cqlstream.cql.catalog import Catalog, SourceDef
from cqlstream.cql.frontend import CompiledQuery
from cqlstream.cql.logical.nodes import Plan, with_inputs
from cqlstream.cql.logical.rewrites import FINAL_RULES, optimize

# In order at each node: push a Sample down first, so the rate rules then see where it landed.
RULES: tuple[Rule, ...] = (sample_join, window_reduction, sample_rate)


def approximate(
    plan: Plan, spec: ApproxSpec, keys: Keys = no_keys, rules: tuple[Rule, ...] = RULES
) -> tuple[Plan, Report]:
    """The plan static approximation gives under `spec` (the same plan in exact mode), and the report."""
    if not spec.static:
        return plan, Report(spec)
    env = Env(spec, keys)
    applied: list[Applied] = []
    refused: list[Refused] = []

    def visit(node: Plan, ctx: Ctx) -> Plan:
        for rule in rules:
            out = rule(node, ctx, env)
            if out is None:
                continue
            if out.applied:
                applied.append(out.applied)
            if out.refused:
                refused.append(out.refused)
            if out.node is not None:
                node = out.node
        kids = tuple(visit(k, child_ctx(node, i, ctx)) for i, k in enumerate(node.inputs))
        return with_inputs(node, kids) if kids != node.inputs else node

    new = visit(plan, Ctx())
    return new, Report(spec, tuple(applied), tuple(refused))


def approximate_query(compiled: CompiledQuery, spec: ApproxSpec, catalog: Catalog) -> CompiledQuery:
    """A compiled query (compiled with `final=False`) with static approximation applied under
    `spec` (keys from `catalog`), then the final rewrites (`rewrites.FINAL_RULES`)."""

    def keys(name: str) -> tuple[tuple[str, ...], ...]:
        d = catalog.get(name)
        return d.keys if isinstance(d, SourceDef) else ()

    plan, report = approximate(compiled.plan, spec, keys)
    return replace(compiled, plan=optimize(plan, FINAL_RULES), approximation=report)
