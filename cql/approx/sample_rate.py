"""Sampling-rate reduction (CIDR'03 §5.1.2): lower a Sample's rate to the lowest the user
tolerates, or sample a source stream where a query-wide sample_percent allows it, where the
monotonicity analysis says the result cannot grow.

Sample keeps element i iff splitmix64(i) falls below the rate (docs/semantics.md), so a lower rate
keeps a subset of the elements a higher one keeps: nested samples, deterministic, independent of
batching. New samples go only right above stream sources, so every inserted sample sees its
exact input (a derived stream is sampled where the query says SAMPLE(... TOLERATE ...)).
"""

from __future__ import annotations

from dataclasses import replace

from cqlstream.cql.approx.context import Ctx
from cqlstream.cql.approx.report import Applied, Refused
from cqlstream.cql.approx.rule import Env, Outcome
from cqlstream.cql.logical import nodes as L
from cqlstream.cql.logical.explain import node_label


def _reduce(node: L.Sample, ctx: Ctx, env: Env) -> Outcome | None:
    explicit = node.tolerate is not None
    target = node.tolerate if explicit else env.spec.sample_percent
    if target is None or target >= node.percent:
        return None
    label = node_label(node)
    reason = ctx.refusal(explicit)
    if reason:
        return Outcome(refused=Refused("sample_rate", label, reason))
    new = replace(node, percent=target)
    why = "TOLERATE clause" if explicit else f"sample_percent {env.spec.sample_percent:g}"
    if ctx.aggregate:
        why += f"; changes the values of {ctx.aggregate}"
    return Outcome(new, Applied("sample_rate", label, node_label(new), why, bool(ctx.aggregate)))


def _insert(node: L.StreamSource, ctx: Ctx, env: Env) -> Outcome | None:
    p = env.spec.sample_percent
    if p is None or p >= 100 or ctx.below_sample:
        return None
    label = node_label(node)
    reason = ctx.refusal(explicit=False)
    if reason:
        return Outcome(refused=Refused("sample_rate", label, reason))
    new = L.Sample(node, p)
    return Outcome(new, Applied("sample_rate", label, node_label(new) + f" of {node.name}", f"sample_percent {p:g}"))


def sample_rate(node: L.Plan, ctx: Ctx, env: Env) -> Outcome | None:
    if isinstance(node, L.Sample):
        return _reduce(node, ctx, env)
    if isinstance(node, L.StreamSource):
        return _insert(node, ctx, env)
    return None
