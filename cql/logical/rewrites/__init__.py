"""Rule-based rewrites of logical plans, one rule per module, applied bottom-up to a fixpoint.

Each rule is a function `rule(node) -> node | None` that looks only at the node and its inputs
and returns a replacement, or None when it does not apply. Every rule preserves CQL semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cqlstream.cql.logical.nodes import Plan, with_inputs
from cqlstream.cql.logical.rewrites.having_in_aggregate import having_in_aggregate
from cqlstream.cql.logical.rewrites.istream_unbounded import istream_unbounded
from cqlstream.cql.logical.rewrites.narrow_windows import narrow_windows
from cqlstream.cql.logical.rewrites.push_selections import push_selections
from cqlstream.cql.logical.rewrites.range_distinct import range_distinct
from cqlstream.cql.logical.rewrites.remove_projections import remove_projections
from cqlstream.cql.logical.rewrites.rstream_now import rstream_now
from cqlstream.cql.logical.rewrites.static_unbounded_to_now import static_unbounded_to_now
from cqlstream.cql.logical.rewrites.stream_join import stream_join

Rule = Callable[[Plan], Plan | None]  # a rewrite of one node, or None when it does not apply
RULES: tuple[Rule, ...] = (
    push_selections,
    remove_projections,
    istream_unbounded,
    static_unbounded_to_now,
    rstream_now,
    narrow_windows,
)
# STREAM 0.6 emits no Istream/Rstream output at the last instant; removing those operators
# would change that, so compat mode keeps them.
COMPAT_RULES: tuple[Rule, ...] = (
    push_selections,
    remove_projections,
    static_unbounded_to_now,
    narrow_windows,
)
# Rules choosing an operator shape that static approximation (cql/approx/) does not analyse: they
# run after the rules above and, when a query is approximated, after its approximation (both modes).
# Bottom-up, so a selection is already inside its aggregate when the stream_join rule probes it.
FINAL_RULES: tuple[Rule, ...] = (having_in_aggregate, range_distinct, stream_join)


class RewriteMemo:
    """What `optimize`'s passes made of plan nodes, kept between its calls (a Dsms keeps one).

    A view inlined into several queries is the same node object in each (Linear Road's 3 queries
    read CommonInputStr's views many times: 1,819 pass visits per registration, ~990 with a memo):
    its rewriting in the first query serves the others. Keyed by the node's identity (the node is
    kept alive with its entry), and by the rules, as a pass's `done`; a rule sees only its node and
    that node's inputs, so an earlier call's result for the very same node is this call's. At most
    `limit` entries: a fuller memo is emptied (a long-lived engine registers query after query,
    and the entries keep their plans alive; Linear Road's script makes ~1,000). Not copied: a
    pickled or copied memo starts empty (its keys are identities of this process's nodes)."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._by_rules: dict[tuple[Rule, ...], dict[int, tuple[Plan, Plan]]] = {}
        self._size = 0

    def table(self, rules: Sequence[Rule]) -> dict[int, tuple[Plan, Plan]]:
        """The entries of `rules` (id(node) → (node, what the pass made of it))."""
        if self._size > self.limit:
            self._by_rules.clear()
            self._size = 0
        return self._by_rules.setdefault(tuple(rules), {})

    def note(self, added: int) -> None:
        self._size += added

    def __getstate__(self) -> dict[str, object]:
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, object]) -> None:
        limit = state.get("limit")
        self.__init__(limit if isinstance(limit, int) else 10_000)  # type: ignore[misc]


def optimize(
    plan: Plan,
    rules: Sequence[Rule] | None = None,
    max_passes: int = 50,
    *,
    compat: bool = False,
    final: bool = True,
    memo: RewriteMemo | None = None,
) -> Plan:
    """Apply `rules` bottom-up until nothing changes; by default all rules (or the compat-safe
    ones), then, unless `final` is False, the FINAL_RULES. `memo`: what earlier calls' passes made
    of nodes met again (`RewriteMemo`)."""
    if rules is None:
        plan = optimize(plan, COMPAT_RULES if compat else RULES, max_passes, memo=memo)
        return optimize(plan, FINAL_RULES, max_passes, memo=memo) if final else plan
    done: dict[Plan, Plan] = {}  # node → what a pass made of it, for this call's rules
    seen = memo.table(rules) if memo is not None else None
    before = len(seen) if seen is not None else 0
    try:
        for _ in range(max_passes):
            new = _pass(plan, rules, done, seen)
            if new == plan:
                return new
            plan = new
        return plan
    finally:
        if memo is not None and seen is not None:
            memo.note(len(seen) - before)


def _pass(
    node: Plan, rules: Sequence[Rule], done: dict[Plan, Plan], seen: dict[int, tuple[Plan, Plan]] | None = None
) -> Plan:
    """One bottom-up pass. A rule sees only its node (and that node's inputs), so what a pass makes
    of a node depends on the node alone: `done` keeps it, and a subtree met again — unchanged by
    the previous pass, or the same view inlined at several places (Linear Road's queries read
    CommonInputStr's views many times) — is not walked again (plan nodes keep their hash). `seen`
    (a RewriteMemo's table) does the same across calls, by the node's identity."""
    out = done.get(node)
    if out is not None:
        return out
    if seen is not None:
        hit = seen.get(id(node))
        if hit is not None and hit[0] is node:  # the very node (an id is only unique while its node lives)
            done[node] = hit[1]
            return hit[1]
    kids = tuple(_pass(i, rules, done, seen) for i in node.inputs)
    new = with_inputs(node, kids) if kids != node.inputs else node
    for rule in rules:
        out = rule(new)
        if out is not None:
            break
    else:
        out = new
    done[node] = out
    if seen is not None:
        seen[id(node)] = (node, out)
    return out
