"""Precision of approximate query plans: each operator maps the memory it is given to its own
(false-positive, false-negative) rates, and a plan's precision is composed bottom-up from its
operators' rates and its inputs' (exact base streams are (0, 0)).

Rates, as expected values over time: `fp` is the probability that an output tuple is incorrect;
`fn` the probability that a correct output tuple is missing. The composition assumes errors of
different inputs are independent. A query's precision is 1 − (fp + fn) / 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

LN2_SQ = math.log(2.0) ** 2


@dataclass(frozen=True)
class Rates:
    """(fp, fn) of a stream or of an operator given exact inputs."""

    fp: float = 0.0
    fn: float = 0.0

    @property
    def precision(self) -> float:
        return 1.0 - (self.fp + self.fn) / 2.0


EXACT = Rates()


# ---------------------------------------------------------------- operator resource functions
# Each maps the bytes an operator is given to its own Rates; `need` is what exact state costs.
def window_keep(mem: float, need: float) -> float:
    """Fraction of a window synopsis kept in `mem` bytes out of the `need` of the whole window."""
    return 1.0 if need <= 0 else min(1.0, max(0.0, mem / need))


def join_window_rates(mem_left: float, need_left: float, mem_right: float, need_right: float) -> Rates:
    """A windowed join whose two synopses keep fractions kl, kr: an output pair is produced when
    its later tuple finds the earlier one stored, each side being the earlier half the time."""
    kl, kr = window_keep(mem_left, need_left), window_keep(mem_right, need_right)
    return Rates(0.0, 1.0 - (kl + kr) / 2.0)


def bloom_fp_rate(mem_bytes: float, n_items: float, k: int | None = None) -> float:
    """The standard Bloom-filter false-positive rate (1 − e^(−kn/m))^k for m = 8·mem bits and n
    items; k defaults to the optimal round(m/n · ln 2) (at least 1)."""
    m = 8.0 * mem_bytes
    if n_items <= 0:
        return 0.0
    if m < 1:
        return 1.0
    if k is None:
        k = max(1, round(m / n_items * math.log(2.0)))
    return (1.0 - math.exp(-k * n_items / m)) ** k


def counting_bloom_fp_rate(mem_bytes: float, n_items: float, k: int | None = None) -> float:
    """The same rate for a counting Bloom filter of one-byte counters (engine/summaries/
    counting_bloom.py, the right side of except / intersect, which takes deletes): m = mem
    counters, so a byte buys an eighth of what it buys a plain filter."""
    return bloom_fp_rate(mem_bytes / 8.0, n_items, k)


def bloom_bytes_for(fp: float, n_items: float) -> int:
    """Bytes a Bloom filter of optimal k needs for false-positive rate `fp` over `n_items`."""
    if n_items <= 0 or fp >= 1:
        return 0
    return math.ceil(-n_items * math.log(fp) / LN2_SQ / 8.0)


def sample_rates(rate: float) -> Rates:
    """A Bernoulli sample keeping `rate` of its input misses the rest."""
    return Rates(0.0, 1.0 - min(1.0, max(0.0, rate)))


# ---------------------------------------------------------------- composition
@dataclass(frozen=True)
class Node:
    """One operator of a plan (a DAG: shared subplans are one node).

    kind: 'source' | 'select' | 'join' | 'union' | 'distinct' | 'except' | 'intersect' | 'sample'.
    rate: expected correct output tuples per unit time (for weighting unions).
    overlap: except / intersect — fraction of the left input's correct tuples also in the right.
    need: bytes of exact state (0: a stateless operator, never given memory).
    items: distinct values kept (Bloom-filter operators) — sets the false-positive formula.
    """

    name: str
    kind: str
    inputs: tuple[str, ...] = ()
    rate: float = 1.0
    overlap: float = 0.0
    need: float = 0.0
    items: float = 0.0
    need_right: float = 0.0  # joins: the right synopsis' need (`need` is the left one's)


def own_rates(n: Node, mem: float) -> Rates:
    """The operator's own (fp, fn) given `mem` bytes (exact at `need` or more)."""
    return _OWN[n.kind](n, mem)


def _exact(n: Node, mem: float) -> Rates:
    return EXACT


def _own_join(n: Node, mem: float) -> Rates:
    total = n.need + n.need_right
    if total <= 0 or mem >= total:
        return EXACT
    share = mem * n.need / total  # the memory split in proportion to each side's need
    return join_window_rates(share, n.need, mem - share, n.need_right)


def _own_bloom(n: Node, mem: float) -> Rates:
    """Distinct / except: a Bloom false positive drops a correct tuple. Intersect: it admits a
    left tuple with no right partner (a fraction 1 − overlap of the left input). Distinct runs on
    a plain filter (insert-only input); except and intersect on a counting one (their right input
    takes deletes)."""
    if mem >= n.need:
        return EXACT
    f = bloom_fp_rate(mem, n.items) if n.kind == "distinct" else counting_bloom_fp_rate(mem, n.items)
    if n.kind == "intersect":
        false = (1.0 - n.overlap) * f
        kept = n.overlap
        return Rates(false / (false + kept) if false + kept > 0 else 0.0, 0.0)
    return Rates(0.0, f)


def _own_sample(n: Node, mem: float) -> Rates:
    return sample_rates(1.0 if n.need <= 0 else mem / n.need)


_OWN: dict[str, Callable[[Node, float], Rates]] = {
    "source": _exact,
    "select": _exact,
    "union": _exact,
    "join": _own_join,
    "distinct": _own_bloom,
    "except": _own_bloom,
    "intersect": _own_bloom,
    "sample": _own_sample,
}


def chain(inp: Rates, op: Rates) -> Rates:
    """A unary operator of own rates `op` applied to a stream of rates `inp`."""
    return Rates(1.0 - (1.0 - inp.fp) * (1.0 - op.fp), 1.0 - (1.0 - inp.fn) * (1.0 - op.fn))


def _through_join(l: Rates, r: Rates, own: Rates) -> Rates:
    """An output pair is correct iff both its tuples are; it is produced iff both are present."""
    return chain(Rates(1 - (1 - l.fp) * (1 - r.fp), 1 - (1 - l.fn) * (1 - r.fn)), own)


def _produced(rate: float, r: Rates) -> float:
    """Tuples a stream of correct rate `rate` and rates `r` actually carries."""
    return rate * (1.0 - r.fn) / (1.0 - r.fp) if r.fp < 1 else math.inf


def _through_union(ins: list[tuple[float, Rates]]) -> Rates:
    prod = [(_produced(rate, r), rate, r) for rate, r in ins]
    total_p = sum(p for p, _, _ in prod)
    total_c = sum(c for _, c, _ in prod)
    fp = sum(p * r.fp for p, _, r in prod) / total_p if total_p > 0 else 0.0
    fn = sum(c * r.fn for _, c, r in prod) / total_c if total_c > 0 else 0.0
    return Rates(fp, fn)


def _through_except(n: Node, l: Rates, r: Rates, own: Rates) -> Rates:
    """L − R with a fraction q of L's correct tuples in R: a tuple R misses stays (a false
    positive); a false R tuple or the operator's own false match removes a correct one."""
    q = n.overlap
    kept = (1 - q) * (1 - l.fn) * (1 - r.fp * q) * (1 - own.fn)
    false = _produced(1.0, l) * l.fp + q * (1 - l.fn) * r.fn
    fp = false / (false + kept) if false + kept > 0 else 0.0
    fn = 1.0 - kept / (1 - q) if q < 1 else 0.0
    return Rates(fp, fn)


def _through_intersect(n: Node, l: Rates, r: Rates, own: Rates) -> Rates:
    """L ∩ R: a correct tuple needs both sides present; a false tuple needs a false side."""
    base = _through_join(l, r, EXACT)
    return chain(base, own)


Compose = Callable[["Plan", Node, list[Rates], Rates], Rates]


def _compose_unary(plan: Plan, n: Node, ins: list[Rates], own: Rates) -> Rates:
    return chain(ins[0] if ins else EXACT, own)


def _compose_union(plan: Plan, n: Node, ins: list[Rates], own: Rates) -> Rates:
    return chain(_through_union([(plan.nodes[i].rate, r) for i, r in zip(n.inputs, ins)]), own)


_COMPOSE: dict[str, Compose] = {
    "join": lambda plan, n, ins, own: _through_join(ins[0], ins[1], own),
    "union": _compose_union,
    "except": lambda plan, n, ins, own: _through_except(n, ins[0], ins[1], own),
    "intersect": lambda plan, n, ins, own: _through_intersect(n, ins[0], ins[1], own),
}


@dataclass
class Plan:
    """Nodes by name (a DAG) and, per query, its root node."""

    nodes: dict[str, Node] = field(default_factory=dict)

    def add(self, n: Node) -> Node:
        self.nodes[n.name] = n
        return n

    def stateful(self) -> list[str]:
        """Operators that take memory, in a fixed order."""
        return sorted(k for k, n in self.nodes.items() if n.need + n.need_right > 0)

    def rates(self, alloc: Mapping[str, float], root: str, memo: dict[str, Rates] | None = None) -> Rates:
        """The (fp, fn) of node `root`'s output under allocation `alloc` (bytes per operator)."""
        memo = {} if memo is None else memo
        got = memo.get(root)
        if got is not None:
            return got
        n = self.nodes[root]
        ins = [self.rates(alloc, i, memo) for i in n.inputs]
        own = own_rates(n, alloc.get(root, 0.0))
        out = _COMPOSE.get(n.kind, _compose_unary)(self, n, ins, own)
        memo[root] = out
        return out
