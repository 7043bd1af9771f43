"""Where a query's sampling rate is applied in the shared plan (load shedding at source queues,
sampling at operators), and the registry of overload policies that choose whose precision goes.

A query's rate r is realized in two places: each source it reads sheds arrivals at the largest rate
any of its readers needs (Dsms.push_batch, a hash of the arrival number), and the lowest operators
that only this query uses (its *frontier*, where every input is a stream) sample their input at
r / (that source rate), with an independent hash of instance ids (Operator._shed). The two hashes are independent, so the rates
multiply and the query sees its input sampled at r, while shared operators below the frontier keep
what the other queries need. A query with no operator of its own is sampled only at its sources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle
    from cqlstream.engine.planner import PNode


@dataclass(frozen=True)
class Candidate:
    """A query as an overload policy sees it: its weight, its step on the ladder, and the rate
    there and one step either way (`down` None: at the bottom; `up` None: exact)."""

    query_id: int
    weight: float
    rate: float
    down: float | None
    up: float | None


# a policy: (candidates, "degrade" | "restore") → the query id to move one step, or None
Policy = Callable[[list[Candidate], str], "int | None"]


def weighted(cands: list[Candidate], move: str) -> int | None:
    """Least precision lost per unit of load saved. Sampling at p leaves an estimate's relative
    variance (1 − p)/p, so a step p → q costs 1/q − 1/p of precision and saves load p − q, a ratio
    of 1/(p·q); weighed by the query's weight, the cheapest step is taken first (restoring: the
    dearest comes back first). Equal weights and rates: the lower query id moves first."""
    if move == "degrade":
        steps = [(c.weight / (c.rate * c.down), c.query_id) for c in cands if c.down is not None]
        return min(steps)[1] if steps else None
    steps = [(-c.weight / (c.rate * c.up), c.query_id) for c in cands if c.up is not None]
    return min(steps)[1] if steps else None


def uniform(cands: list[Candidate], move: str) -> int | None:
    """Every query alike, whatever its weight: the least degraded moves down first, the most
    degraded comes back first (a baseline to compare `weighted` with)."""
    if move == "degrade":
        steps = [(-c.rate, c.query_id) for c in cands if c.down is not None]
    else:
        steps = [(c.rate, c.query_id) for c in cands if c.up is not None]
    return min(steps)[1] if steps else None


def _allocator() -> Policy:
    from cqlstream.engine.approx.allocator_policy import AllocatorPolicy

    return AllocatorPolicy()


# stateless policies by name, and policies keeping state across calls by name → a factory (each
# controller gets its own instance: engine/approx/allocator_policy.py)
POLICIES: dict[str, Policy] = {"weighted": weighted, "uniform": uniform}
STATEFUL: dict[str, Callable[[], Policy]] = {"allocator": _allocator}


def register_policy(name: str, policy: Policy) -> None:
    """Plug in another way of choosing whose precision goes."""
    POLICIES[name] = policy


def policy_names() -> list[str]:
    return sorted(set(POLICIES) | set(STATEFUL))


def make_policy(name: str) -> Policy:
    """The policy called `name` (a new instance of a stateful one)."""
    return POLICIES[name] if name in POLICIES else STATEFUL[name]()


# ---------------------------------------------------------------- placement
def _exclusive(pn: PNode, qid: int) -> bool:
    return pn.op is not None and pn.users == {qid}


def _sheddable(pn: PNode) -> bool:
    """Sampling at an operator is safe under a changing rate only when its inputs are streams
    (inserts only): over a relation, a delete could pass at a higher rate whose insert was dropped
    at a lower one. Operators computed by a grouped selection take no rate of their own."""
    # imported here: the CLI lists the policies (`--help`) without loading the engine and numpy
    from cqlstream.engine.operators.base import SAMPLING_RATE

    return pn.op is not None and SAMPLING_RATE in type(pn.op).KNOBS and all(k.is_stream for k in pn.inputs)


def frontier(pn: PNode | None, qid: int) -> list[Any] | None:
    """The lowest operators computing only query `qid` under `pn`, where sampling can be applied;
    None when `pn` is not the query's own."""
    if pn is None or not _exclusive(pn, qid):
        return None
    below: list[Any] = []
    for k in pn.inputs:
        f = frontier(k, qid)
        if f is None:
            return [pn.op] if _sheddable(pn) else None
        below.extend(f)
    if not below:  # a leaf operator of its own (no inputs)
        return [pn.op] if _sheddable(pn) else None
    return below


def sources_under(pn: PNode | None) -> Iterator[PNode]:
    """The source nodes (no operator) a node reads, each once."""
    seen: set[int] = set()
    todo = [pn]
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if n.op is None:
            yield n
        todo.extend(n.inputs)


@dataclass(frozen=True)
class Placement:
    """Rates to set: `sources` maps a stream input's lower-case name to its rate, `operators` maps
    id(operator) to (operator, rate); `effective` is each query's resulting sampling rate."""

    sources: dict[str, float]
    operators: dict[int, tuple[Any, float]]
    effective: dict[int, float]


def place(d: Dsms, rates: dict[int, float]) -> Placement:
    """Realize each active query's rate (`rates`, 1.0 when absent) in the plan."""
    by_queue = {id(inp.queue): (name, inp) for name, inp in d.inputs.items() if inp.d.kind == "stream"}
    active: list[QueryHandle] = [h for h in d.queries.values() if h.pnode is not None]
    src_of: dict[int, list[str]] = {}
    sources: dict[str, float] = {}
    for h in active:
        names = [by_queue[id(s.queue)][0] for s in sources_under(h.pnode) if id(s.queue) in by_queue]
        src_of[h.id] = names
    readers: dict[str, list[int]] = {}
    for qid, names in src_of.items():
        for n in names:
            readers.setdefault(n, []).append(qid)
    for n, qids in readers.items():
        sources[n] = max(rates.get(q, 1.0) for q in qids)
    operators: dict[int, tuple[Any, float]] = {}
    effective: dict[int, float] = {}
    for h in active:
        r = rates.get(h.id, 1.0)
        top = max((sources[n] for n in src_of[h.id]), default=1.0)
        ops = frontier(h.pnode, h.id) if r < top else None
        if ops:
            for op in ops:
                operators[id(op)] = (op, r / top)
            effective[h.id] = r
        else:
            effective[h.id] = top
    return Placement(sources, operators, effective)
