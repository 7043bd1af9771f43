"""The `allocator` overload policy (engine/approx/allocator_policy.py) on a hand-driven timeline:
the precision-maximizing allocator picks the rates (weights decide who loses precision first),
it is re-run incrementally as the load, the queries and their weights change, and when the load
falls every query is exact again with the engine's knobs as they were."""

from __future__ import annotations

import copy

from cqlstream.engine.approx.allocator_policy import AllocatorPolicy
from tests.test_overload_control import Hand, controlled, rates, sampling_knobs

Q = "select a, Sum(b) from S [Range 5] group by a"


def _tick(d, hand) -> dict[int, float]:
    hand.t += 1.0
    d.tick()
    return rates(d)


def test_allocator_timeline():
    hand = Hand()
    d = controlled(hand, queue_memory_limit=1000, interval=1.0, settle=1, calm=1, policy="allocator")
    qs = [d.register_query(Q, weight=w, share=False).id for w in (1, 2, 4)]
    before = sampling_knobs(d)
    hand.bytes = 1100
    seen = [_tick(d, hand) for _ in range(3)]
    pol = d.approx.policy()
    assert isinstance(pol, AllocatorPolicy) and set(pol.weights) == set(qs)
    for r in seen:
        assert r[qs[0]] <= r[qs[1]] <= r[qs[2]], r
        assert sum(r.values()) < 3.0
    # the allocator gives the kept input to the heaviest query first: it is still exact
    assert seen[-1][qs[2]] == 1.0 and seen[-1][qs[0]] < 1.0
    # a query comes, heavier than all: the allocator learns of it incrementally and keeps it exact
    runs = pol.reruns
    q8 = d.register_query(Q, weight=8, share=False).id
    r = _tick(d, hand)
    assert q8 in pol.weights and pol.reruns > runs and r[q8] == 1.0 and r[qs[0]] < 1.0
    # a re-run after a small change costs less than a search from nothing
    again = copy.deepcopy(pol.alloc)
    e0 = again.evaluations
    again.solve()
    scratch = again.evaluations - e0
    e0 = pol.alloc.evaluations
    pol.alloc.set_budget(pol.alloc.budget - 1)
    assert pol.alloc.evaluations - e0 < scratch
    # a query goes: the allocator forgets it
    d.deregister(q8)
    last = _tick(d, hand)
    assert q8 not in pol.weights
    # the lightest query becomes the heaviest: once the load falls, it comes back first
    d.set_weight(qs[0], 16.0)
    hand.bytes = 10
    r = _tick(d, hand)
    assert pol.weights[qs[0]] == 16.0
    first_up = [q for q in qs if r[q] > last[q]]
    assert first_up == [qs[0]], (last, r)
    for _ in range(200):
        r = _tick(d, hand)
        if all(v == 1.0 for v in r.values()):
            break
    assert all(v == 1.0 for v in r.values()) and sampling_knobs(d) == before
